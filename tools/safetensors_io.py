"""Reading and writing safetensors files with NumPy, for the Python tools (tools/train.py,
benchmarks/compare_pytorch.py). The C++ library has its own reader (io/safetensors.hpp).

Format: u64 little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
then the tensor bytes; offsets are relative to the end of the header.
"""
import json
import struct

import numpy as np
import torch

_NUMPY_TYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64}


def load_safetensors(path):
    """Every tensor of the file as a float32 torch tensor (F16, BF16, F32, F64 stored)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if info["dtype"] == "BF16":  # the high half of a float32
            arr = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(buf, _NUMPY_TYPES[info["dtype"]])
        out[name] = torch.from_numpy(arr.astype(np.float32).reshape(info["shape"]))
    return out


def save_safetensors(path, tensors, dtype="F32"):
    """Writes {name: tensor} stored as dtype ("F16" or "F32"), header padded to 8 bytes."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().to(torch.float32).cpu().numpy().astype(_NUMPY_TYPES[dtype]))
        data = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
