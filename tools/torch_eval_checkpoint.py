#!/usr/bin/python3
"""Load a qsync checkpoint into its PyTorch twin and evaluate it on Fashion-MNIST's test split.

    torch_eval_checkpoint.py CKPT_DIR_OR_MODEL_FILE [--data-dir DIR] [--subset N]
                             [--compare-logits FILE]

The weights are read with tools/safetensors_torch.py, the model is rebuilt from the
checkpoint's "arch" and "config" metadata with tools/torch_models.py, and the images are
normalised exactly as qsync's loader does ((p/255 - 0.2860) / 0.3530, NCHW for PyTorch).
Prints one JSON object: accuracy, loss, samples and, with --compare-logits (a file written by
`qsync eval --logits-out`), the largest absolute logit difference and the number of samples
whose predicted class differs.
"""
import argparse
import gzip
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import safetensors_torch  # noqa: E402
import torch_models  # noqa: E402

FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530


def read_idx(path):
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    data = torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8)
    return data.reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--subset", type=int, default=0)
    ap.add_argument("--compare-logits")
    a = ap.parse_args()
    path = a.checkpoint
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    meta = safetensors_torch.load_metadata(path)
    model = torch_models.build_from_config(meta["arch"], meta["config"])
    model.load_state_dict(safetensors_torch.load_file(path), strict=True)
    model.eval()
    images = read_idx(os.path.join(a.data_dir, "t10k-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(a.data_dir, "t10k-labels-idx1-ubyte.gz")).long()
    if a.subset:
        images, labels = images[:a.subset], labels[:a.subset]
    x = ((images.float() / 255.0 - FMNIST_MEAN) / FMNIST_STD).unsqueeze(1)
    with torch.no_grad():
        logits = torch.cat([model(x[i:i + 500]) for i in range(0, len(x), 500)])
    out = {"accuracy": (logits.argmax(1) == labels).float().mean().item(),
           "loss": torch.nn.functional.cross_entropy(logits, labels).item(),
           "samples": len(labels), "arch": meta["arch"], "config": meta["config"]}
    if a.compare_logits:
        theirs = safetensors_torch.load_file(a.compare_logits)["logits"]
        out["max_abs_logit_diff"] = (theirs - logits).abs().max().item()
        out["max_abs_logit"] = logits.abs().max().item()
        out["prediction_mismatches"] = int((theirs.argmax(1) != logits.argmax(1)).sum().item())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
