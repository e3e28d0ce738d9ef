#!/usr/bin/env python3
"""Writes a llama-architecture GGUF with random weights, for running llama.cpp beside retnet on
the same bytes (benchmarks/llama_cpp_side_by_side.py). Only NumPy is needed.

    python3 benchmarks/gguf_writer.py OUT.gguf --type q4 --dim 2048 --layers 24 --heads 8 \\
        --ff 7808 --vocab 32000

Types and their bytes per weight, the same blocks as retnet's (docs/FORMATS.md): f32 (4), bf16
(2), q8 (GGML Q8_0: binary16 scale + 32 int8 codes, 1.0625), q4 (GGML Q4_0: binary16 scale + 16
bytes of 4-bit codes, 0.5625). Norm weights are f32 and 1, as GGML requires. The vocabulary is
SentencePiece-style ("llama" model): <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF> that
llama.cpp's byte fallback looks up, then placeholders "t<i>" up to --vocab.

The layout follows the GGUF specification (ggml-org/ggml docs/gguf.md), version 3: header, key-value
metadata, tensor infos (dimensions innermost first, offsets from the data section), then the
tensors, each aligned to 32 bytes. Weight values only need to be finite and of a plausible scale
(a decode step's speed does not depend on them): each tensor repeats one random block, which
keeps writing a 5 GB file to disk speed.
"""
import argparse
import struct
import sys

import numpy as np

ALIGNMENT = 32
GGML_TYPE = {"f32": 0, "q4": 2, "q8": 8, "bf16": 30}
BLOCK_BYTES = {"f32": 4, "bf16": 2, "q8": 34, "q4": 18}  # per value (f32, bf16) or per 32 values
FILE_TYPE = {"f32": 0, "q4": 2, "q8": 7, "bf16": 32}  # general.file_type (llama_ftype)

# GGUF metadata value types
U32, I32, F32, STRING, ARRAY = 4, 5, 6, 8, 9


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_string(key) + struct.pack("<I", vtype)
    if vtype == U32:
        return out + struct.pack("<I", value)
    if vtype == F32:
        return out + struct.pack("<f", value)
    if vtype == STRING:
        return out + gguf_string(value)
    raise ValueError(vtype)


def kv_array(key, etype, values):
    out = gguf_string(key) + struct.pack("<IIQ", ARRAY, etype, len(values))
    if etype == STRING:
        return out + b"".join(gguf_string(v) for v in values)
    if etype == F32:
        return out + np.asarray(values, "<f4").tobytes()
    if etype == I32:
        return out + np.asarray(values, "<i4").tobytes()
    raise ValueError(etype)


def metadata(args):
    d = args.dim
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    if args.vocab < len(tokens) + 1:
        sys.exit(f"gguf_writer: --vocab {args.vocab} is below the {len(tokens) + 1} tokens it needs")
    tokens += [f"t{i}" for i in range(args.vocab - len(tokens))]
    token_type = [2, 3, 3] + [6] * 256 + [1] * (args.vocab - 259)  # unknown, control, byte, normal
    scores = [0.0] * 259 + [-float(i) for i in range(args.vocab - 259)]
    arch = "llama"
    return [
        kv("general.architecture", STRING, arch),
        kv("general.name", STRING, f"synthetic llama d{d} L{args.layers} ff{args.ff} {args.type}"),
        kv("general.file_type", U32, FILE_TYPE[args.type]),
        kv("general.alignment", U32, ALIGNMENT),
        kv(f"{arch}.context_length", U32, args.context),
        kv(f"{arch}.embedding_length", U32, d),
        kv(f"{arch}.block_count", U32, args.layers),
        kv(f"{arch}.feed_forward_length", U32, args.ff),
        kv(f"{arch}.attention.head_count", U32, args.heads),
        kv(f"{arch}.attention.head_count_kv", U32, args.heads),
        kv(f"{arch}.rope.dimension_count", U32, d // args.heads),
        kv(f"{arch}.attention.layer_norm_rms_epsilon", F32, 1e-6),
        kv(f"{arch}.vocab_size", U32, args.vocab),
        kv("tokenizer.ggml.model", STRING, "llama"),
        kv_array("tokenizer.ggml.tokens", STRING, tokens),
        kv_array("tokenizer.ggml.scores", F32, scores),
        kv_array("tokenizer.ggml.token_type", I32, token_type),
        kv("tokenizer.ggml.unknown_token_id", U32, 0),
        kv("tokenizer.ggml.bos_token_id", U32, 1),
        kv("tokenizer.ggml.eos_token_id", U32, 2),
    ]


def tensor_list(args):
    """(name, [rows, columns] or [n], weight type); GGUF stores the dimensions reversed."""
    d, ff, v = args.dim, args.ff, args.vocab
    out = [("token_embd.weight", [v, d], args.type)]
    for i in range(args.layers):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", [d], "f32"),
                (p + "attn_q.weight", [d, d], args.type),
                (p + "attn_k.weight", [d, d], args.type),
                (p + "attn_v.weight", [d, d], args.type),
                (p + "attn_output.weight", [d, d], args.type),
                (p + "ffn_norm.weight", [d], "f32"),
                (p + "ffn_gate.weight", [ff, d], args.type),
                (p + "ffn_up.weight", [ff, d], args.type),
                (p + "ffn_down.weight", [d, ff], args.type)]
    out += [("output_norm.weight", [d], "f32"), ("output.weight", [v, d], args.type)]
    return out


def nbytes(shape, wtype):
    count = int(np.prod(shape))
    if wtype in ("q8", "q4"):
        if shape[-1] % 32:
            sys.exit(f"gguf_writer: rows of {shape[-1]} are not whole blocks of 32 ({wtype})")
        return count // 32 * BLOCK_BYTES[wtype]
    return count * BLOCK_BYTES[wtype]


def random_block(wtype, size, rng):
    """`size` bytes (a whole number of values or blocks) of finite weights of scale ~0.02."""
    if wtype == "f32":
        return (rng.standard_normal(size // 4, dtype=np.float32) * np.float32(0.02)).tobytes()
    if wtype == "bf16":
        w = rng.standard_normal(size // 2, dtype=np.float32) * np.float32(0.02)
        return (w.view(np.uint32) >> 16).astype("<u2").tobytes()
    blocks = size // BLOCK_BYTES[wtype]
    scale = np.full((blocks, 1), 0.02 / (127 if wtype == "q8" else 8), "<f2").view(np.uint8)
    codes = rng.integers(0, 256, (blocks, BLOCK_BYTES[wtype] - 2), dtype=np.uint8)
    return np.concatenate([scale, codes], axis=1).tobytes()


def write(args):
    rng = np.random.default_rng(args.seed)
    tensors = tensor_list(args)
    infos, offset = [], 0
    for name, shape, wtype in tensors:
        infos.append(gguf_string(name) + struct.pack("<I", len(shape))
                     + struct.pack(f"<{len(shape)}Q", *reversed(shape))
                     + struct.pack("<IQ", GGML_TYPE[wtype], offset))
        offset += -(-nbytes(shape, wtype) // ALIGNMENT) * ALIGNMENT
    meta = metadata(args)
    head = struct.pack("<4sIQQ", b"GGUF", 3, len(tensors), len(meta)) + b"".join(meta) + b"".join(infos)
    head += b"\0" * (-len(head) % ALIGNMENT)
    blocks = {}
    with open(args.out, "wb") as f:
        f.write(head)
        for name, shape, wtype in tensors:
            size = nbytes(shape, wtype)
            if len(shape) == 1:
                f.write(np.ones(shape, "<f4").tobytes())
            else:
                row_bytes = nbytes(shape[-1:], wtype)
                key = (wtype, row_bytes)
                if key not in blocks:
                    blocks[key] = random_block(wtype, row_bytes * max(1, (1 << 24) // row_bytes), rng)
                block = blocks[key]
                written = 0
                while written < size:
                    piece = block[:size - written]
                    f.write(piece)
                    written += len(piece)
            f.write(b"\0" * (-size % ALIGNMENT))
    return offset + len(head)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--type", choices=sorted(GGML_TYPE), required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--ff", type=int, required=True, help="feed-forward width (multiple of 32 for q8/q4)")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.dim % args.heads:
        ap.error("--dim must be a multiple of --heads")
    total = write(args)
    print(f"{args.out}: {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
