#!/usr/bin/env python3
"""Minimal safetensors reader/writer for PyTorch (struct + json + torch, no `safetensors` package).

Loads qsync checkpoints into PyTorch:

    from safetensors_torch import load_file, save_file, load_metadata
    state = load_file("ckpt/model.safetensors")   # dict[str, torch.Tensor]
    model.load_state_dict(state)

Format: 8-byte little-endian header length N, N bytes of JSON
{"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [begin, end]}},
padded with spaces to a multiple of 8, then the tensors' bytes (row-major, little-endian).
Command line: `python3 safetensors_torch.py FILE` lists the tensors of FILE.
"""
import json
import struct
import sys

import torch

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
           "U8": torch.uint8, "BOOL": torch.bool}
for _name, _attr in (("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")):
    if hasattr(torch, _attr):  # PyTorch >= 2.1
        _DTYPES[_name] = getattr(torch, _attr)
_NAMES = {v: k for k, v in _DTYPES.items()}


def _read(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError(f"{path}: header length {n} exceeds the file size")
    return json.loads(raw[8:8 + n].decode("utf-8")), memoryview(raw)[8 + n:]


def load_metadata(path):
    """The "__metadata__" dict (str -> str) of a file, {} if it has none."""
    return _read(path)[0].get("__metadata__", {})


def load_file(path):
    """All tensors of a file as a dict name -> CPU torch.Tensor (in data-offset order)."""
    header, data = _read(path)
    header.pop("__metadata__", None)
    out = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        buf = bytearray(data[begin:end])
        t = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def save_file(tensors, path, metadata=None):
    """Write dict name -> tensor (in dict order) and optional str -> str metadata to path."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        blob = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


if __name__ == "__main__":
    for k, v in load_file(sys.argv[1]).items():
        print(k, tuple(v.shape), v.dtype)
