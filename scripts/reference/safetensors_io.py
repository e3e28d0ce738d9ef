"""The one safetensors reader and writer of the Python scripts (NumPy only). The C++ library
has its own reader, include/retnet/io/safetensors.hpp.

Format: u64 little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}
with an optional "__metadata__" entry, then the tensor bytes; offsets are relative to the end
of the header, which is padded with spaces to a multiple of 8 bytes.
"""
import json
import os
import struct

import numpy as np

_STORED = {"F16": "<f2", "F32": "<f4", "F64": "<f8"}


def encode(array, dtype):
    """The bytes of `array` stored as dtype (F16, BF16, F32, F64). F16, F32 and F64 round the
    array's own values; BF16 rounds their float32 value to nearest even on its top 16 bits."""
    if dtype == "BF16":
        bits = np.asarray(array).astype(np.float32).view(np.uint32).astype(np.uint64)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
    return np.ascontiguousarray(array).astype(_STORED[dtype]).tobytes()


def decode(raw, dtype, shape, as_type=np.float64):
    """The values of a tensor's bytes as an array of as_type (every stored value converts
    exactly to float64; to float32 too unless stored as F64)."""
    if dtype == "BF16":  # the top half of a float32
        values = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        values = np.frombuffer(raw, _STORED[dtype])
    return values.astype(as_type).reshape(shape)


def header_bytes(entries, metadata=None):
    """The length prefix and padded JSON header for entries [(name, dtype, shape, nbytes)],
    stored one after another in that order; metadata ({str: str}) goes last when given."""
    header, offset = {}, 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def write_safetensors(path, tensors, dtype, metadata=None, dtypes=None):
    """Writes {name: array} in that order, stored as dtype, or as dtypes[name] where given."""
    entries, blobs = [], []
    for name, array in tensors.items():
        stored = (dtypes or {}).get(name, dtype)
        raw = encode(array, stored)
        entries.append((name, stored, np.shape(array), len(raw)))
        blobs.append(raw)
    with open(path, "wb") as f:
        f.write(header_bytes(entries, metadata) + b"".join(blobs))


def read_safetensors(path, as_type=np.float64):
    """{name: array of as_type} for every tensor of the file (stored as F16, BF16, F32, F64)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = decode(raw[8 + n + begin:8 + n + end], info["dtype"], info["shape"], as_type)
    return out


def read_model_folder(model_dir, as_type=np.float64):
    """Every tensor of a model folder: model.safetensors, or the shards that
    model.safetensors.index.json names."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
        else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(read_safetensors(os.path.join(model_dir, f), as_type))
    return out
