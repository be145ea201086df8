#!/usr/bin/python3
"""PyTorch FP32 (and optionally BF16-autocast) training throughput of a built-in model's
PyTorch twin (tools/torch_models.py), for side-by-side comparison with `qsync train`.

Runs SGD(momentum 0.9, nesterov, weight decay 5e-4) steps on random data of the model's input
shape at the given batch size, and prints one JSON object with images/s per timing window.
Usage: torch_train_bench.py --model cnn [--width 0] [--batch 128] [--steps 30] [--windows 5]
                            [--threads N] [--bf16] [--in 28x28x1] [--device cuda] [--channels-last]
On a GPU (--device cuda) every window ends with a device synchronisation; --bf16 is then CUDA
autocast (eager AMP), as PyTorch's usual mixed-precision training.
Transformers (gpt*, bert*): --in 1x1xT (T tokens), --classes V (gpt: the vocabulary), random
token ids, AdamW (lr 1e-4, weight decay 0.1), the mean cross-entropy over every position (gpt) or
sample (bert); --layers/--heads as qsync's; --sdpa runs attention through
F.scaled_dot_product_attention (fused kernels) instead of the node-by-node twin.
--kernels N (CUDA): after the timing windows, profile N more steps with torch.profiler and add
"kernels": the GPU time per step of each kernel class (conv, gemm, batchnorm, elementwise, reduce,
optimizer, other; classes by kernel name), and of every kernel together, in ms.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch_models  # noqa: E402


# Kernel classes by name, first match wins (cuDNN/CUTLASS convolution kernels, cuBLAS GEMMs, ...).
KERNEL_CLASSES = [
    ("optimizer", ("multi_tensor", "foreach", "sgd", "adam")),
    ("batchnorm", ("batch_norm", "bn_", "batchnorm")),
    ("conv", ("conv", "dgrad", "wgrad", "fprop", "cudnn", "implicit", "nhwckrsc", "xmma")),
    ("gemm", ("gemm", "sm90_", "cutlass", "cublas")),
    ("reduce", ("reduce",)),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "copy", "fill")),
]


def kernel_class(name):
    low = name.lower()
    for cls, keys in KERNEL_CLASSES:
        if any(k in low for k in keys):
            return cls
    return "other"


def kernel_breakdown(step, sync, steps):
    """GPU ms per step of each kernel class over `steps` profiled steps (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        sync()
    per = {}
    top = {}
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = ev.time_range.elapsed_us()
        cls = kernel_class(ev.name)
        per[cls] = per.get(cls, 0.0) + us
        top[ev.name] = top.get(ev.name, 0.0) + us
    out = {k: round(v / 1000.0 / steps, 4) for k, v in sorted(per.items())}
    out["all"] = round(sum(per.values()) / 1000.0 / steps, 4)
    out["top"] = [[n[:120], round(v / 1000.0 / steps, 4)] for n, v in sorted(top.items(), key=lambda t: -t[1])[:30]]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--width", type=int, default=0)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20, help="steps per timing window")
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="0 = PyTorch's default")
    ap.add_argument("--bf16", action="store_true", help="BF16 autocast")
    ap.add_argument("--in", dest="shape", default="28x28x1")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--channels-last", action="store_true", help="NHWC activations and weights")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--heads", type=int, default=0)
    ap.add_argument("--sdpa", action="store_true", help="transformers: fused scaled_dot_product_attention")
    ap.add_argument("--kernels", type=int, default=0, help="CUDA: profile N steps, GPU time per kernel class")
    a = ap.parse_args()
    dev = torch.device(a.device)
    mf = torch.channels_last if a.channels_last else torch.contiguous_format
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    h, w, c = (int(v) for v in a.shape.split("x"))
    torch.manual_seed(0)
    lossf = torch.nn.CrossEntropyLoss()
    text = a.model.startswith(("gpt", "bert"))
    if text:
        if a.sdpa and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            sys.exit("torch_train_bench.py: --sdpa needs PyTorch 2.0 or later (this is %s)" % torch.__version__)
        torch_models.USE_SDPA = a.sdpa
        model = torch_models.build(a.model, h, w, c, a.classes, width=a.width, layers=a.layers,
                                   heads=a.heads).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
        vocab = a.classes if a.model.startswith("gpt") else 256
        x = torch.randint(1, vocab, (a.batch, c), device=dev)
        y = torch.randint(0, a.classes, (a.batch, c) if a.model.startswith("gpt") else (a.batch,), device=dev)
    else:
        model = torch_models.build(a.model, h, w, c, a.classes, width=a.width).to(dev, memory_format=mf)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
        x = torch.randn(a.batch, c, h, w, device=dev).to(memory_format=mf)
        y = torch.randint(0, a.classes, (a.batch,), device=dev)
    model.train()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.bf16):
            out = model(x)
            loss = lossf(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        loss.backward()
        opt.step()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(3):
        step()
    sync()
    rates = []
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        sync()
        rates.append(a.steps * a.batch / (time.perf_counter() - t0))
    rates_sorted = sorted(rates)
    kernels = kernel_breakdown(step, sync, a.kernels) if a.kernels > 0 and dev.type == "cuda" else None
    print(json.dumps({"kernels": kernels,"framework": "pytorch", "torch": torch.__version__, "model": a.model, "width": a.width,
                      "batch": a.batch, "threads": torch.get_num_threads(), "bf16": a.bf16, "device": a.device,
                      "channels_last": a.channels_last, "input": a.shape, "sdpa": a.sdpa,
                      "images_per_s": rates, "median_images_per_s": rates_sorted[len(rates) // 2]}))


if __name__ == "__main__":
    main()
