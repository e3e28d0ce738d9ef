#!/usr/bin/env python3
"""Writes the hostile seeds of the fuzz corpora; the hand-made seeds of
fuzz/corpus stay as they are. Run from anywhere: python3 fuzz/make_seeds.py

  fuzz/corpus/         safetensors files (fuzz_safetensors)
  fuzz/corpus_index/   model.safetensors.index.json files (fuzz_index)
  fuzz/corpus_config/  config.json files (fuzz_config)
  fuzz/corpus_state/   state files of fuzz_state's model (fuzz_state)
"""
import json
import math
import os
import struct
import zlib

ROOT = os.path.dirname(os.path.abspath(__file__))
DEEP = 100000  # deep enough to overflow a recursive DOM walk: a 200 KB header


def write(corpus, name, data):
    os.makedirs(os.path.join(ROOT, corpus), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(ROOT, corpus, name), "wb") as f:
        f.write(data)


def nested(depth, inner="1"):
    return "[" * depth + inner + "]" * depth


def safetensors(header, data=b""):
    if not isinstance(header, str):
        header = json.dumps(header)
    header = header.encode()
    return struct.pack("<Q", len(header)) + header + data


def entry(dtype="F32", shape="[1]", offsets="[0, 4]"):
    return '{"dtype": %s, "shape": %s, "data_offsets": %s}' % (dtype, shape, offsets)


# ---- safetensors
S = "corpus"
write(S, "nested_dtype", safetensors('{"w": %s}' % entry(dtype=nested(DEEP)), b"\0" * 4))
write(S, "nested_shape", safetensors('{"w": %s}' % entry(shape=nested(DEEP)), b"\0" * 4))
write(S, "nested_offsets", safetensors('{"w": %s}' % entry(offsets=nested(DEEP)), b"\0" * 4))
write(S, "nested_metadata", safetensors('{"__metadata__": {"a": %s}}' % nested(DEEP)))
many = {"t%05d" % i: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
        for i in range(4000)}
write(S, "large_header", safetensors(many, b"\0" * 16000))
write(S, "duplicate_name", safetensors(
    '{"w": %s, "w": %s}' % (entry(), entry(offsets="[4, 8]")), b"\0" * 8))
write(S, "leading_space", safetensors(' {"w": %s}' % entry(), b"\0" * 4))
write(S, "gap", safetensors('{"a": %s, "b": %s}' % (entry(), entry(offsets="[8, 12]")), b"\0" * 12))
write(S, "trailing_bytes", safetensors('{"w": %s}' % entry(), b"\0" * 12))
write(S, "long_name", safetensors('{"\\u001b[31m\\n%s": %s}' % ("n" * 5000, entry(dtype='"I8"'))))
tiny = {}  # the fuzz target's model (d 4, 1 head, 1 layer, vocab 8, ffn 4), all finite but one
shapes = [("embed_tokens.weight", [8, 4]), ("layers.0.retention_layer_norm.weight", [4])]
shapes += [("layers.0.retention.%s_proj.weight" % p, [4, 4]) for p in "qkvgo"]
shapes = [(n.replace("o_proj", "out_proj"), s) for n, s in shapes]
shapes += [("layers.0.final_layer_norm.weight", [4]), ("layers.0.ffn.fc1.weight", [4, 4]),
           ("layers.0.ffn.gate.weight", [4, 4]), ("layers.0.ffn.fc2.weight", [4, 4]),
           ("layer_norm.weight", [4]), ("output_projection.weight", [8, 4])]
data = b""
for name, shape in shapes:
    n = math.prod(shape)
    values = [0.01] * n
    if name == "layers.0.ffn.fc2.weight":
        values[3] = float("nan")
    tiny[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * n]}
    data += struct.pack("<%df" % n, *values)
write(S, "tiny_model_nan", safetensors(tiny, data))

# ---- index
I = "corpus_index"
write(I, "valid", json.dumps({"metadata": {"total_size": 8}, "weight_map": {
    "embed_tokens.weight": "model-00001-of-00002.safetensors",
    "layer_norm.weight": "model-00002-of-00002.safetensors"}}))
write(I, "nested_weight_map", '{"weight_map": %s}' % nested(DEEP))
write(I, "nested_entry", '{"weight_map": {"embed_tokens.weight": %s}}' % nested(DEEP))
write(I, "nested_metadata", '{"metadata": %s, "weight_map": {"a": "b"}}' % nested(DEEP, "{}"))
write(I, "duplicate", '{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}')
write(I, "path_out", '{"weight_map": {"a": "../x.safetensors", "b": "/etc/passwd"}}')
write(I, "large", json.dumps({"weight_map": {"t%05d" % i: "s%d.safetensors" % (i % 7)
                                             for i in range(5000)}}))
write(I, "not_object", '["a.safetensors"]')

# ---- config
C = "corpus_config"
good = {"vocab_size": 97, "decoder_embed_dim": 64, "decoder_value_embed_dim": 128,
        "decoder_retention_heads": 4, "decoder_ffn_embed_dim": 96, "decoder_layers": 2}
write(C, "valid", json.dumps(good))
write(C, "valid_all_keys", json.dumps(dict(good, activation_fn="swish", norm_type="layernorm",
                                           layernorm_eps=1e-5, no_scale_embedding=False,
                                           layernorm_embedding=True, tie_word_embeddings=True,
                                           use_glu=False, subln=True, recurrent_chunk_size=16)))
text = json.dumps(good)
write(C, "nested_value", text[:1] + '"extra": %s, ' % nested(DEEP) + text[1:])
write(C, "duplicate_key", text[:1] + '"decoder_layers": 2000, ' + text[1:])
write(C, "huge_sizes", json.dumps(dict(good, decoder_layers=2000, vocab_size=2**62,
                                       decoder_ffn_embed_dim=18446744073709551615)))
write(C, "long_string", json.dumps(dict(good, activation_fn="relu\n\x1b[2J" + "z" * 5000)))

# ---- state (fuzz_state.cpp's model: 2 layers, 2 heads, dk 4, 5 columns, float)
T = "corpus_state"
FP = 0x0123456789abcdef


def state(batch=1, positions=None, values=None, version=3, fingerprint=FP, dims=(2, 2, 4, 5),
          scalar=4, declared_batch=None, checksum=True):
    layers, heads, dk, cols = dims
    positions = positions if positions is not None else [3] * batch
    count = layers * batch * heads * dk * cols
    values = values if values is not None else [0.25 * (i % 7) for i in range(count)]
    out = b"RETNETST" + struct.pack("<IIQ", version, scalar, fingerprint)
    out += struct.pack("<5Q", layers, declared_batch or batch, heads, dk, cols)
    out += struct.pack("<%dq" % len(positions), *positions)
    out += struct.pack("<%df" % len(values), *values)
    if checksum:  # CRC-32 of every byte before it (the same polynomial as zlib's)
        out += struct.pack("<I", zlib.crc32(out))
    return out


write(T, "valid_batch1", state())
write(T, "valid_batch3", state(batch=3, positions=[0, 5, 1 << 40]))
write(T, "batch_2_20", state(declared_batch=1 << 20, positions=[0] * 1024, values=[]))
write(T, "position_int64_max", state(positions=[2**63 - 1]))
write(T, "negative_position", state(positions=[-1]))
write(T, "trailing", state() + b"extra")
write(T, "nan_value", state(values=[float("nan")] + [0.0] * 79))
write(T, "other_model", state(fingerprint=12345))
write(T, "version1", state(version=1, checksum=False))
write(T, "version2", state(version=2, checksum=False))
write(T, "truncated", state()[:100])
write(T, "bad_checksum", state()[:-1] + b"\0")
write(T, "no_checksum", state(checksum=False))
