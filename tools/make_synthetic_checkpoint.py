#!/usr/bin/env python3
"""Writes a model folder with the exact shape of fla-hub/retnet-1.3B-100B and random weights:
fla's config keys, d 2048, 24 layers, 8 heads, dk 256, dv 512, I 2816 (intermediate_size null),
vocab 32000, untied, BF16, the MLP fused as fla-hub's uploads store it (gate_proj [2I, d]), in
two shards with model.safetensors.index.json. About 2.7 GB; write it outside the repository:

    /usr/bin/python3 tools/make_synthetic_checkpoint.py /tmp/retnet-1.3B-synthetic

Options: --layers N (fewer layers for a quick check), --seed S. Weights ~ N(0, 0.02) (fla's
initializer_range), norm weights 1. Only NumPy is needed; tensors are generated and written one
at a time, so memory stays near the largest tensor.
"""
import argparse
import json
import os
import struct

import numpy as np


def bf16_bytes(a):
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()


def tensor_list(cfg):
    d, h, v, layers = cfg["hidden_size"], cfg["num_heads"], cfg["vocab_size"], cfg["num_hidden_layers"]
    key_dim, value_dim = int(d * cfg["expand_k"]), int(d * cfg["expand_v"])
    inter = 256 * ((int(d * cfg["hidden_ratio"] * 2 / 3) + 255) // 256)
    out = [("model.embeddings.weight", (v, d))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "attn_norm.weight", (d,)),
                (p + "attn.q_proj.weight", (key_dim, d)),
                (p + "attn.k_proj.weight", (key_dim, d)),
                (p + "attn.v_proj.weight", (value_dim, d)),
                (p + "attn.g_proj.weight", (value_dim, d)),
                (p + "attn.g_norm_swish_gate.weight", (value_dim // h,)),
                (p + "attn.o_proj.weight", (d, value_dim)),
                (p + "mlp_norm.weight", (d,)),
                (p + "mlp.gate_proj.weight", (2 * inter, d)),
                (p + "mlp.down_proj.weight", (d, inter))]
    out += [("model.norm.weight", (d,)), ("lm_head.weight", (v, d))]
    return out


def write_shard(path, tensors, rng):
    header, offset = {}, 0
    for name, shape in tensors:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape in tensors:
            if len(shape) == 1:
                f.write(bf16_bytes(np.ones(shape, np.float32)))
                continue
            rows_per_block = max(1, (1 << 24) // shape[1])
            for r in range(0, shape[0], rows_per_block):
                rows = min(rows_per_block, shape[0] - r)
                block = rng.standard_normal((rows, shape[1]), dtype=np.float32) * np.float32(0.02)
                f.write(bf16_bytes(block))
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cfg = {"model_type": "retnet", "architectures": ["RetNetForCausalLM"], "attn_mode": "chunk",
           "hidden_size": 2048, "num_hidden_layers": a.layers, "num_heads": 8, "num_kv_heads": None,
           "expand_k": 1, "expand_v": 2, "hidden_ratio": 2, "intermediate_size": None,
           "hidden_act": "swish", "feature_map": None, "use_short_conv": False, "conv_size": 4,
           "use_output_gate": True, "elementwise_affine": True, "norm_eps": 1e-6,
           "rms_norm_eps": 1e-6, "attn": None, "fuse_norm": True, "fuse_cross_entropy": True,
           "tie_word_embeddings": False, "vocab_size": 32000, "max_position_embeddings": 2048,
           "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "use_cache": True,
           "torch_dtype": "bfloat16"}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tensors = tensor_list(cfg)
    total = sum(2 * int(np.prod(s)) for _, s in tensors)
    # Two shards of about equal size, in tensor order (as save_pretrained cuts them).
    half, acc, cut = total / 2, 0, len(tensors)
    for i, (_, s) in enumerate(tensors):
        acc += 2 * int(np.prod(s))
        if acc >= half:
            cut = i + 1
            break
    rng = np.random.default_rng(a.seed)
    weight_map = {}
    for k, part in enumerate((tensors[:cut], tensors[cut:])):
        file = f"model-{k + 1:05d}-of-00002.safetensors"
        write_shard(os.path.join(a.out, file), part, rng)
        weight_map.update({name: file for name, _ in part})
        print(f"{file}: {len(part)} tensors")
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    params = sum(int(np.prod(s)) for _, s in tensors)
    print(f"{a.out}: {params / 1e9:.3f} B parameters, {total / 1e9:.2f} GB BF16, "
          f"{4 * params / 1e9:.2f} GB as float32")


if __name__ == "__main__":
    main()
