#!/usr/bin/python3
"""PyTorch's rate for the GEMM and the Linear layer that `qsync bench gemm|layer --device cuda`
times, on the same GPU, for side-by-side figures in the same device call.

Usage: torch_gemm_bench.py [--size 8192 | --shape MxNxK] [--parts gemm,layer]
                           [--precisions fp32,tf32,bf16,fp16,fp8] [--reps 9] [--warmup 2]
                           [--inner 0] [--device cuda[:N]]
Prints one JSON document on stdout (a table on stderr). Exits 1 with a message where PyTorch
sees no CUDA device (e.g. Debian's CPU-only torch), 2 on bad arguments, 3 when a result fails
its correctness check (then the figures are printed but must not be used).

Shapes as qsync's: X (M,K), W (N,K) (nn.Linear's layout), Y = X·Wᵀ (M,N), dY (M,N); FP32
masters uniform in [-1, 1). TFLOP/s count 2·M·N·K per GEMM (gemm) and 6·M·N·K per layer run.

Timing (the same method as qsync's GPU path): per case one first run (and a correctness check of
that run against an FP32 product on the first 256 rows or columns), then the runs per sample:
--inner, or enough for ~25 ms from one synchronised run; --warmup untimed batches; then --reps
samples, precisions interleaved: torch.cuda.synchronize(), clock, `inner` runs,
torch.cuda.synchronize(), clock, divided by `inner`. Median (min, max) per run; ratios are the
bf16 case's median over the case's, same part, same call.

gemm — Y = X·Wᵀ, operands converted before timing (not timed):
  fp32  torch.mm(x, w.t()), FP32 in and out, torch.backends.cuda.matmul.allow_tf32 = False
        (fp32_precision = "ieee" where PyTorch has that newer switch: >= 2.9)
  tf32  the same with allow_tf32 = True (fp32_precision = "tf32")
  bf16, fp16  torch.mm on BF16/FP16 copies: BF16/FP16 output (PyTorch's usual); the
        "/f32out" variants ask torch.mm for an FP32 output (out_dtype, PyTorch >= 2.8 or so;
        skipped where this PyTorch has none) — qsync's GEMMs always output FP32
  fp8   torch._scaled_mm(xq, wq.t(), scale_a=, scale_b=, out_dtype=): E4M3 × E4M3, per-tensor
        FP32 dequantization scales on the device, xq row-major, wq.t() column-major as cuBLASLt's
        FP8 kernels require; out_dtype BF16 ("fp8") or FP32 ("fp8/f32out", qsync's output)
layer — one training use of a Linear (no bias) from the FP32 masters, timed as one unit:
  fp32, tf32  F.linear forward + autograd backward (dX, dW) in FP32 (tf32 as above), no casts
  bf16, fp16  the same under torch.autocast(cuda, dtype): autocast's casts of X and W to the
        16-bit type (round to nearest even, every run: the cast cache lives one autocast region),
        the forward GEMM (16-bit Y), dY cast to 16 bits (round to nearest even; qsync rounds dY
        stochastically), the two backward GEMMs (16-bit outputs) and autograd's casts of dX and
        dW back to FP32 (the masters' dtype). fp16 without a GradScaler (no loss scaling).
  fp8   no autograd, written out with torch._scaled_mm: quantize X and W from their FP32 masters
        (amax = max|t| by torch.linalg.vector_norm(t, inf); scale = fmax / amax, exact rather than
        qsync's power of two; t·scale cast to E4M3, round to nearest even; no clamp needed: |t·scale|
        ≤ fmax up to one rounding, which the cast rounds to fmax), the forward (E4M3 × E4M3),
        quantize dY the same way to E5M2 (round to nearest even: PyTorch has no stochastic-
        rounding cast, qsync's dY rounding is stochastic), the transposed copies _scaled_mm's
        row-major × column-major rule needs (Wᵀ for backward-data, dYᵀ and Xᵀ for backward-
        weights: the same three copies qsync's backend makes), backward-data dX = dY·W (E5M2 ×
        E4M3) and backward-weights dW = dYᵀ·X (E5M2 × E4M3). out_dtype BF16 ("fp8": BF16 Y, dX
        and dW, then dX and dW cast to FP32 as autocast's layer does) or FP32 ("fp8/f32out":
        every output FP32, qsync's). Eager PyTorch: every quantization is three kernels (norm,
        multiply, cast), not fused.
Not included on either side: bias, optimizer, loss scaling, delayed (amax-history) scaling.

--device cpu --allow-cpu runs the fp32 and bf16 paths on the CPU to test this script's logic
only (its numbers mean nothing; tf32 and fp8 are then skipped).
"""
import argparse
import json
import math
import sys
import time

ME = "torch_gemm_bench.py"
BATCH_MS = 25.0   # target length of one timed batch when --inner is 0
MAX_INNER = 10000
CHECK_ROWS = 256  # rows / columns compared against an FP32 product
CHECK_LIMIT = 0.25  # relative Frobenius error above which a case counts as wrong (fp8 is ~0.04-0.1)


def die(msg, code=1):
    print("%s: %s" % (ME, msg), file=sys.stderr)
    sys.exit(code)


def parse_args():
    ap = argparse.ArgumentParser(description="PyTorch GEMM / Linear layer rates per precision (see the docstring)")
    ap.add_argument("--size", type=int, default=0, help="square N x N x N (default 8192 when --shape is not given)")
    ap.add_argument("--shape", default="", help="MxNxK: Y (M,N), K the inner dimension")
    ap.add_argument("--parts", default="gemm,layer", help="gemm, layer or both")
    ap.add_argument("--precisions", default="fp32,tf32,bf16,fp16,fp8")
    ap.add_argument("--reps", type=int, default=9, help="timed samples per case (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed batches per case first")
    ap.add_argument("--inner", type=int, default=0, help="runs per sample (0: ~25 ms worth)")
    ap.add_argument("--device", default="cuda", help="cuda or cuda:N")
    ap.add_argument("--allow-cpu", action="store_true", help="let --device cpu test this script (meaningless numbers)")
    a = ap.parse_args()
    if a.size and a.shape:
        die("give --size or --shape, not both", 2)
    if a.shape:
        try:
            m, n, k = (int(v) for v in a.shape.lower().split("x"))
        except ValueError:
            die("--shape must be MxNxK, e.g. 8192x8192x8192 (got '%s')" % a.shape, 2)
    else:
        m = n = k = a.size or 8192
    if min(m, n, k) < 1:
        die("--size/--shape: every dimension must be >= 1", 2)
    a.M, a.N, a.K = m, n, k
    a.parts = [p for p in a.parts.split(",") if p]
    a.precs = [p for p in a.precisions.split(",") if p]
    for p in a.parts:
        if p not in ("gemm", "layer"):
            die("--parts: unknown part '%s' (gemm, layer)" % p, 2)
    for p in a.precs:
        if p not in ("fp32", "tf32", "bf16", "fp16", "fp8"):
            die("--precisions: unknown precision '%s' (fp32, tf32, bf16, fp16, fp8; int8 is not measured)" % p, 2)
    if not 1 <= a.reps <= 101 or a.warmup < 0 or not 0 <= a.inner <= MAX_INNER:
        die("--reps must be 1..101, --warmup >= 0, --inner 0..%d" % MAX_INNER, 2)
    return a


def open_device(a, torch):
    if a.device == "cpu":
        if not a.allow_cpu:
            die("--device cpu only with --allow-cpu (a test of this script; the figures mean nothing)", 2)
        return torch.device("cpu")
    if not (a.device == "cuda" or a.device.startswith("cuda:")):
        die("--device must be cuda or cuda:N (got '%s')" % a.device, 2)
    if not torch.cuda.is_available():
        die("no CUDA device: this PyTorch %s (built with CUDA %s) sees none — run it on the GPU machine "
            "(a CPU-only build such as Debian's python3-torch cannot measure GPU rates)"
            % (torch.__version__, torch.version.cuda or "none"))
    dev = torch.device(a.device)
    idx = dev.index if dev.index is not None else 0
    if idx >= torch.cuda.device_count():
        die("%s: no such device (PyTorch sees %d CUDA device(s))" % (a.device, torch.cuda.device_count()))
    torch.cuda.set_device(idx)
    return torch.device("cuda", idx)


class Case:
    """One timed case: prep() before every batch (untimed), run() once per run; run() returns
    (tensor, reference function) pairs for the correctness check."""

    def __init__(self, part, name, precision, out_dtype, includes, flops, prep, run, check):
        self.part, self.name, self.precision, self.out_dtype = part, name, precision, out_dtype
        self.includes, self.flops, self.prep, self.run, self.check = includes, flops, prep, run, check


def main():
    a = parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        die("PyTorch is not importable here (%s)" % e)
    dev = open_device(a, torch)
    cuda = dev.type == "cuda"
    M, N, K = a.M, a.N, a.K

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    # TF32 for FP32 matmuls: the fp32_precision API where it exists (PyTorch >= 2.9 deprecates
    # allow_tf32, and mixing the two APIs can raise), allow_tf32 before it; only ever set here.
    mm_cfg = torch.backends.cuda.matmul
    try:  # (old cuBLASModule.__getattr__ raises AssertionError for unknown names, not AttributeError)
        tf32_api = "fp32_precision" if isinstance(getattr(mm_cfg, "fp32_precision"), str) else "allow_tf32"
    except (AttributeError, AssertionError, RuntimeError):
        tf32_api = "allow_tf32"

    def set_tf32(on):
        if tf32_api == "fp32_precision":
            mm_cfg.fp32_precision = "tf32" if on else "ieee"
        else:
            mm_cfg.allow_tf32 = on

    # ---- masters and converted operands
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    x = torch.rand(M, K, device=dev, generator=g) * 2 - 1
    w = torch.rand(N, K, device=dev, generator=g) * 2 - 1
    dy = torch.rand(M, N, device=dev, generator=g) * 2 - 1
    xl = x.clone().requires_grad_(True)  # autograd leaves for the layer
    wl = w.clone().requires_grad_(True)
    skipped = []

    def skip(part, name, why):
        skipped.append({"part": part, "case": name, "reason": why})

    # FP8 availability: dtypes (PyTorch >= 2.1), _scaled_mm, compute capability >= 8.9
    fp8_why = None
    e4m3 = getattr(torch, "float8_e4m3fn", None)
    e5m2 = getattr(torch, "float8_e5m2", None)
    scaled_mm = getattr(torch, "_scaled_mm", None)
    if e4m3 is None or e5m2 is None:
        fp8_why = "this PyTorch (%s) has no float8 dtypes (PyTorch >= 2.1 has them)" % torch.__version__
    elif scaled_mm is None:
        fp8_why = "this PyTorch (%s) has no torch._scaled_mm" % torch.__version__
    elif not cuda:
        fp8_why = "torch._scaled_mm is timed on CUDA only"
    elif torch.cuda.get_device_capability(dev) < (8, 9):
        fp8_why = "FP8 GEMMs need compute capability 8.9 or newer (this GPU: %d.%d)" % torch.cuda.get_device_capability(dev)
    elif M % 16 or N % 16 or K % 16:
        fp8_why = "torch._scaled_mm needs every dimension a multiple of 16 (M=%d N=%d K=%d)" % (M, N, K)

    def smm(A, B, sa, sb, out_dtype):
        """A (row-major) · B (column-major) · sa · sb; the old API (2.1-2.3) returns (out, amax)."""
        r = scaled_mm(A, B, scale_a=sa, scale_b=sb, out_dtype=out_dtype)
        return r[0] if isinstance(r, tuple) else r

    def to_fp8(t, dt, fmax):
        """(t·s cast to dt, 1/s) with s = fmax / max|t| (per tensor, on the device: no host sync)."""
        amax = torch.linalg.vector_norm(t, float("inf")).float().clamp(min=1e-12)
        s = fmax / amax
        return (t * s).to(dt), s.reciprocal()

    def mm_f32out(A, B):
        return torch.mm(A, B, out_dtype=torch.float32)

    def mm_f32out_ok(dt):
        """Whether torch.mm takes out_dtype=float32 for dt operands here (PyTorch 2.8+ on CUDA)."""
        if not cuda:
            return "torch.mm(out_dtype=) is CUDA-only"
        try:
            t = torch.ones(16, 16, device=dev, dtype=dt)
            mm_f32out(t, t.t())
            sync()
            return None
        except (TypeError, RuntimeError) as e:
            return "torch.mm has no FP32 output for %s operands in this PyTorch (%s): %s" % (
                str(dt).replace("torch.", ""), torch.__version__, str(e).splitlines()[0][:160])

    rows = min(CHECK_ROWS, M)
    cols_n = min(CHECK_ROWS, N)

    def ref_mm(A, B):
        set_tf32(False)
        return torch.mm(A.float(), B.float())

    # correctness references on slices, FP32 (tf32 off): Y[:r], dX[:r], dW[:c]
    def ref_y():
        return ref_mm(x[:rows], w.t())

    def ref_dx():
        return ref_mm(dy[:rows], w)

    def ref_dw():
        return ref_mm(dy[:, :cols_n].t(), x)

    cases = []
    f_gemm, f_layer = 2.0 * M * N * K, 6.0 * M * N * K
    tf32_why = None if cuda else "tf32 is a CUDA math mode"
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}

    # ---- gemm
    if "gemm" in a.parts:
        for p in a.precs:
            if p in ("fp32", "tf32"):
                if p == "tf32" and tf32_why:
                    skip("gemm", p, tf32_why)
                    continue
                on = p == "tf32"
                inc = "torch.mm(x, w.t()): FP32 in and out, TF32 %s" % ("on" if on else "off")
                cases.append(Case("gemm", p, p, "fp32", inc, f_gemm, lambda on=on: set_tf32(on),
                                  lambda: [(torch.mm(x, w.t()), ref_y, True)], None))
            elif p in half:
                dt = half[p]
                xh, wh = x.to(dt), w.to(dt)
                inc = "torch.mm(x, w.t()) on %s copies made before timing, %s output" % (p, p)
                cases.append(Case("gemm", p, p, p, inc, f_gemm, lambda: set_tf32(False),
                                  lambda xh=xh, wh=wh: [(torch.mm(xh, wh.t()), ref_y, True)], None))
                why = mm_f32out_ok(dt)
                if why:
                    skip("gemm", p + "/f32out", why)
                else:
                    inc = "torch.mm(x, w.t(), out_dtype=float32) on %s copies made before timing" % p
                    cases.append(Case("gemm", p + "/f32out", p, "fp32", inc, f_gemm, lambda: set_tf32(False),
                                      lambda xh=xh, wh=wh: [(mm_f32out(xh, wh.t()), ref_y, True)], None))
            elif p == "fp8":
                if fp8_why:
                    skip("gemm", p, fp8_why)
                    continue
                xq, sx = to_fp8(x, e4m3, 448.0)
                wq, sw = to_fp8(w, e4m3, 448.0)
                for od, nm in ((torch.bfloat16, "fp8"), (torch.float32, "fp8/f32out")):
                    inc = ("torch._scaled_mm(xq, wq.t(), scale_a, scale_b, out_dtype=%s): E4M3 x E4M3, per-tensor "
                           "scales, quantized before timing" % str(od).replace("torch.", ""))
                    cases.append(Case("gemm", nm, "fp8", "bf16" if od == torch.bfloat16 else "fp32", inc, f_gemm,
                                      lambda: set_tf32(False),
                                      lambda od=od: [(smm(xq, wq.t(), sx, sw, od), ref_y, True)], None))

    # ---- layer
    if "layer" in a.parts:
        def autograd_layer(ac_dtype):
            def run():
                xl.grad = None
                wl.grad = None
                if ac_dtype is not None:
                    with torch.autocast(device_type=dev.type, dtype=ac_dtype):
                        y = F.linear(xl, wl)
                else:
                    y = F.linear(xl, wl)
                y.backward(dy.to(y.dtype))
                return [(y, ref_y, True), (xl.grad, ref_dx, True), (wl.grad, ref_dw, False)]
            return run

        def fp8_layer(od):
            def run():
                xq, sx = to_fp8(x, e4m3, 448.0)
                wq, sw = to_fp8(w, e4m3, 448.0)
                y = smm(xq, wq.t(), sx, sw, od)                      # (M,K)·(K,N) col-major
                dyq, sdy = to_fp8(dy, e5m2, 57344.0)
                dx = smm(dyq, wq.t().contiguous().t(), sdy, sw, od)  # (M,N)·(N,K) col-major
                dw = smm(dyq.t().contiguous(), xq.t().contiguous().t(), sdy, sx, od)  # (N,M)·(M,K) col-major
                if od != torch.float32:
                    dx, dw = dx.float(), dw.float()
                return [(y, ref_y, True), (dx, ref_dx, True), (dw, ref_dw, False)]
            return run

        for p in a.precs:
            if p in ("fp32", "tf32"):
                if p == "tf32" and tf32_why:
                    skip("layer", p, tf32_why)
                    continue
                on = p == "tf32"
                inc = ("F.linear(x, w) + autograd backward (dX, dW), FP32 throughout, TF32 %s, no casts"
                       % ("on" if on else "off"))
                cases.append(Case("layer", p, p, "fp32", inc, f_layer, lambda on=on: set_tf32(on), autograd_layer(None),
                                  None))
            elif p in half:
                if p == "fp16" and not cuda:
                    skip("layer", p, "fp16 autocast is CUDA-only in this script's CPU test mode")
                    continue
                inc = ("torch.autocast(%s): casts of X, W (RNE) to %s every run, forward (%s Y), dY cast to %s (RNE), "
                       "backward-data and backward-weights (%s outputs), dX and dW cast back to FP32 by autograd"
                       % (p, p, p, p, p))
                cases.append(Case("layer", p, p, p, inc, f_layer, lambda: set_tf32(False), autograd_layer(half[p]),
                                  None))
            elif p == "fp8":
                if fp8_why:
                    skip("layer", p, fp8_why)
                    continue
                for od, nm in ((torch.bfloat16, "fp8"), (torch.float32, "fp8/f32out")):
                    inc = ("quantize X, W (E4M3) and dY (E5M2) from FP32 masters, amax per tensor, RNE; forward, "
                           "backward-data, backward-weights through torch._scaled_mm with out_dtype=%s; the "
                           "transposed copies Wt, dYt, Xt; %s"
                           % (str(od).replace("torch.", ""),
                              "dX, dW cast to FP32" if od != torch.float32 else "FP32 outputs"))
                    cases.append(Case("layer", nm, "fp8", "bf16" if od == torch.bfloat16 else "fp32", inc, f_layer,
                                      lambda: set_tf32(False), fp8_layer(od), None))

    # ---- first runs and correctness checks (a failing case is skipped with its error)
    live, bad = [], []
    for c in cases:
        try:
            c.prep()
            outs = c.run()
            sync()
            errs = []
            for t, ref, by_rows in outs:
                got = (t[:rows] if by_rows else t[:cols_n]).float()
                r = ref()
                errs.append(float(torch.linalg.vector_norm(got - r) / torch.linalg.vector_norm(r).clamp(min=1e-30)))
            c.check = max(errs)
            if not math.isfinite(c.check) or c.check > CHECK_LIMIT:
                bad.append("%s %s: relative error %.3g against FP32 (limit %g)" % (c.part, c.name, c.check, CHECK_LIMIT))
            live.append(c)
        except (RuntimeError, TypeError, ValueError) as e:
            skip(c.part, c.name, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300]))
    sync()

    # ---- timing (qsync's GPU method)
    inner = []
    for c in live:
        if a.inner:
            inner.append(a.inner)
            continue
        c.prep()
        sync()
        t0 = time.perf_counter()
        c.run()
        sync()
        one = (time.perf_counter() - t0) * 1e3
        inner.append(int(min(MAX_INNER, max(1, math.ceil(BATCH_MS / max(one, 1e-3))))))
    for _ in range(a.warmup):
        for c, n in zip(live, inner):
            c.prep()
            for _ in range(n):
                c.run()
    times = [[] for _ in live]
    for _ in range(a.reps):
        for i, c in enumerate(live):
            c.prep()
            sync()
            t0 = time.perf_counter()
            for _ in range(inner[i]):
                c.run()
            sync()
            times[i].append((time.perf_counter() - t0) * 1e3 / inner[i])
    set_tf32(False)

    def median(v):
        s = sorted(v)
        h = len(s) // 2
        return s[h] if len(s) % 2 else 0.5 * (s[h - 1] + s[h])

    results = []
    for i, c in enumerate(live):
        med = median(times[i])
        results.append({"part": c.part, "case": c.name, "precision": c.precision, "out_dtype": c.out_dtype,
                        "median_ms": med, "min_ms": min(times[i]), "max_ms": max(times[i]),
                        "runs_per_sample": inner[i], "flops": c.flops, "tflops": c.flops / (med * 1e9),
                        "rel_err_vs_fp32": c.check, "includes": c.includes})
    for part in ("gemm", "layer"):
        ref = [r for r in results if r["part"] == part and r["case"] == "bf16"]
        for r in results:
            if ref and r["part"] == part:
                r["speedup_vs_bf16"] = ref[0]["median_ms"] / r["median_ms"]

    doc = {"framework": "pytorch", "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": str(dev), "device_name": torch.cuda.get_device_name(dev) if cuda else "cpu",
           "capability": "%d.%d" % torch.cuda.get_device_capability(dev) if cuda else None,
           "M": M, "N": N, "K": K, "reps": a.reps, "warmup": a.warmup,
           "timing": ("per case: one first run (checked against FP32 on %d rows/columns), runs per sample fixed "
                      "(--inner or ~%g ms), --warmup untimed batches, then --reps samples interleaved across cases: "
                      "torch.cuda.synchronize, clock, runs, torch.cuda.synchronize, clock, divided by the runs; "
                      "median (min, max) per run" % (CHECK_ROWS, BATCH_MS)),
           "flops": "gemm 2*M*N*K per run, layer 6*M*N*K per run",
           "tf32_switch": "torch.backends.cuda.matmul." + tf32_api,
           "results": results, "skipped": skipped}
    print(json.dumps(doc, indent=1))
    print("PyTorch %s on %s (%s), M=%d N=%d K=%d" % (torch.__version__, doc["device"], doc["device_name"], M, N, K),
          file=sys.stderr)
    for r in results:
        vs = "  x%.3f vs bf16" % r["speedup_vs_bf16"] if "speedup_vs_bf16" in r else ""
        print("  %-5s %-11s %9.4f ms (min %.4f, max %.4f; %d runs/sample) %8.1f TFLOP/s%s  err %.2g" % (
            r["part"], r["case"], r["median_ms"], r["min_ms"], r["max_ms"], r["runs_per_sample"], r["tflops"], vs,
            r["rel_err_vs_fp32"]), file=sys.stderr)
    for s in skipped:
        print("  %-5s %-11s n/a: %s" % (s["part"], s["case"], s["reason"]), file=sys.stderr)
    if bad:
        die("results failed their correctness check (figures above are not usable):\n  " + "\n  ".join(bad), 3)


if __name__ == "__main__":
    main()
