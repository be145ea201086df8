#!/usr/bin/env python3
"""Generate tests/fixtures/st_from_python.safetensors with tools/safetensors_torch.py.

Run with a Python that has torch (Debian: /usr/bin/python3 tools/gen_st_fixture.py).
Values are simple closed forms that tests/test_safetensors.c recomputes. The int8 tensor
comes first so that the following tensors start at unaligned offsets (6 bytes), as files
from other writers may.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_torch import load_file, save_file  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                   "st_from_python.safetensors")

tensors = {
    "q": torch.tensor([[-128, -1, 0], [1, 2, 127]], dtype=torch.int8),
    "weight": torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5 - 1.0,
    "bias_bf16": torch.tensor([1.5, -2.0, 0.25, 3.0], dtype=torch.bfloat16),
    "half": torch.tensor([[0.5, -1.0], [65504.0, 1.0 / 1024]], dtype=torch.float16),
    "steps": torch.tensor(123456789012, dtype=torch.int64),
    "idx": torch.arange(-2, 3, dtype=torch.int32),
    "u": torch.tensor([0, 1, 254, 255], dtype=torch.uint8),
    "empty": torch.zeros(0, 3, dtype=torch.float32),
}
save_file(tensors, OUT, metadata={"format": "pt", "qsync_test": "from-python"})
back = load_file(OUT)
assert list(back) == list(tensors)
for k, v in tensors.items():
    assert back[k].dtype == v.dtype and back[k].shape == v.shape and torch.equal(back[k], v), k
print("wrote", os.path.normpath(OUT), os.path.getsize(OUT), "bytes")
