#!/usr/bin/env python3
"""GPU time per training step, per kernel and per kernel class, from two kernel traces.

bench/cuda/kernel_trace.c writes one trace per process. Two runs of the same job that differ
only in their step count give the per-step cost of every kernel with set-up, warm-up and CUDA
graph capture cancelled:  per_step = (total(long) - total(short)) / (steps_long - steps_short).

  python3 bench/kernel_diff.py SHORT.json N1 LONG.json N2 [--top K] [--json OUT]

Prints the per-step total (the sum of kernel durations: GPU-busy time of a one-stream job),
the classes below and the K largest kernels; --json writes the same as one object.
"""
import argparse
import json
import re
import sys

# Kernel classes by mangled name, first match wins (qsync's own kernels are named k_<what>;
# cuDNN's convolutions, cuBLASLt's GEMMs and PyTorch's ATen kernels have their own markers).
CLASSES = [
    ("conv", r"xmma_(fprop|dgrad|wgrad)|implicit_convolve|convolve|cudnn::|conv2d|_conv_|fprop|dgrad|wgrad"),
    ("gemm", r"gemm|nvjet|cutlass|cublas"),
    ("batchnorm", r"k_bn_|batch_norm|batchnorm|bn_fw|bn_bw|welford"),
    ("optimizer", r"k_sgd|k_adam|k_optim|multi_tensor|sgd|adam|foreach"),
    ("cast", r"k_cast|k_quant|to_bf16|convert|_to_copy|copy_kernel"),
    ("elementwise", r"elementwise|k_add|k_relu|vectorized|unrolled|threshold|k_fill|k_scale"),
    ("reduce", r"reduce|k_column_sums|k_sum|softmax|xent|nll|log_softmax"),
    ("pool", r"pool"),
    ("transpose", r"transpose|krsc|nchw|nhwc|layout"),
    ("memcpy/memset", r"^\[mem"),
]


def kernel_class(name):
    low = name.lower()
    for cls, pat in CLASSES:
        if re.search(pat, low):
            return cls
    return "other"


def load(path):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("format") != "qsync-kernel-trace":
        sys.exit(f"kernel_diff: {path} is not a qsync kernel trace")
    if doc.get("dropped") or doc.get("overflow"):
        print(f"kernel_diff: warning: {path} dropped records or names", file=sys.stderr)
    return {k["name"]: (k["count"], k["total_ns"]) for k in doc["kernels"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("short")
    ap.add_argument("n1", type=int)
    ap.add_argument("long")
    ap.add_argument("n2", type=int)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    if a.n2 <= a.n1:
        sys.exit("kernel_diff: the second trace must have more steps than the first")
    s, l = load(a.short), load(a.long)
    steps = a.n2 - a.n1
    rows = []
    for name in set(s) | set(l):
        c1, t1 = s.get(name, (0, 0))
        c2, t2 = l.get(name, (0, 0))
        ms = (t2 - t1) / steps / 1e6
        calls = (c2 - c1) / steps
        if calls > 0 or ms > 0:
            rows.append({"name": name, "class": kernel_class(name), "ms": ms, "calls": calls})
    rows.sort(key=lambda r: -r["ms"])
    classes = {}
    for r in rows:
        c = classes.setdefault(r["class"], {"ms": 0.0, "calls": 0.0})
        c["ms"] += r["ms"]
        c["calls"] += r["calls"]
    total = sum(r["ms"] for r in rows)
    calls = sum(r["calls"] for r in rows)
    print(f"{a.label} GPU time per step {total:.3f} ms in {calls:.0f} kernels/copies")
    for cls, c in sorted(classes.items(), key=lambda kv: -kv[1]["ms"]):
        print(f"  {cls:14s} {c['ms']:8.3f} ms  {c['calls']:7.1f} calls")
    for r in rows[: a.top]:
        print(f"  {r['ms']:8.3f} ms {r['calls']:6.1f}x  [{r['class']}] {r['name'][:110]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"label": a.label, "ms_per_step": total, "calls_per_step": calls, "classes": classes,
                       "kernels": rows}, f, indent=1)


if __name__ == "__main__":
    main()
