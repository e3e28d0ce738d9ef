#!/usr/bin/env python3
"""Makes the NumPy-reference fixtures of the checkpoint families' variants in tests/data/families
(run from the repository root, with Debian's NumPy):

    /usr/bin/python3 tools/make_family_fixtures.py

These are NOT made by the projects' own code. The issue asked for fixtures made by running fla's
and syncdoth's unchanged PyTorch model code on CPU; that is not possible on the project's
machines: Debian has python3-torch (1.13) but neither `transformers` nor `einops`, which both
projects import at module level, and PyPI cannot be reached. So this script is an independent
float64 reading of docs/FORMATS.md (and docs/NUMERICS.md for syncdoth), written for this
repository. The two fixtures made by the projects' own code are tests/data/fla-tiny and
tests/data/syncdoth-tiny; this reading reproduces them too (checked at the end of a run).

Each fixture is a random model stored the way its family stores it, the logits of the reference
for two 30-token sequences (float32, [batch, time, vocab]), and the token ids:

  fla-fused-bf16              fla, MLP fused as files before 2025 store it (gate_proj [2I, d], no
                              up_proj), weights in BF16, intermediate_size null (the formula)
  fla-grouped-heads           fla, num_kv_heads 2 of 4 heads, expand_k 0.5, F32
  fla-no-norm-weight-no-gate  fla, elementwise_affine false, use_output_gate false, F16, tied
                              embeddings, eps given as rms_norm_eps only
  syncdoth-lm-decay           syncdoth, use_lm_decay true, hub-like config (sqrt(d) scale,
                              layernorm_embedding), its retnet_rel_pos buffers, two shards + index
"""
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "families")


# ---------------------------------------------------------------- safetensors


def to_dtype_bytes(a, dtype):
    a = np.ascontiguousarray(a, dtype=np.float64)
    if dtype == "F32":
        return a.astype("<f4").tobytes()
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)  # BF16: round to nearest even
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()


def stored_value(a, dtype):
    """What a reader gets back from `a` stored as dtype, as float64."""
    raw = to_dtype_bytes(a, dtype)
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").astype(np.float64).reshape(a.shape)
    if dtype == "F16":
        return np.frombuffer(raw, "<f2").astype(np.float64).reshape(a.shape)
    bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
    return bits.view(np.float32).astype(np.float64).reshape(a.shape)


def write_safetensors(path, tensors, dtype):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = to_dtype_bytes(t, "F32" if "retnet_rel_pos" in name else dtype)
        header[name] = {"dtype": "F32" if "retnet_rel_pos" in name else dtype,
                        "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if info["dtype"] == "BF16":
            arr = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(buf, {"F16": "<f2", "F32": "<f4", "F64": "<f8"}[info["dtype"]])
        out[name] = arr.astype(np.float64).reshape(info["shape"])
    return out


# ---------------------------------------------------------------- the functions, in float64


def rmsnorm(x, eps, w=None):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * w if w is not None else y


def swish(x):
    return x / (1.0 + np.exp(-x))


def causal_decay(gamma, t):
    n = np.arange(t)
    diff = n[:, None] - n[None, :]
    return np.where(diff >= 0, gamma ** np.maximum(diff, 0), 0.0)


def rotate_halves(z, theta_phase):
    """fla: (z[i], z[i + dk/2]) turns by n·theta_i."""
    half = z.shape[-1] // 2
    a, b = z[:, :half], z[:, half:]
    c, s = np.cos(theta_phase), np.sin(theta_phase)
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def rotate_pairs(z, phase):
    """torchscale, syncdoth: (z[2i], z[2i+1]) turns by n·angle_i."""
    a, b = z[:, 0::2], z[:, 1::2]
    c, s = np.cos(phase), np.sin(phase)
    out = np.empty_like(z)
    out[:, 0::2] = a * c - b * s
    out[:, 1::2] = b * c + a * s
    return out


def fla_sizes(cfg):
    d, h = cfg["hidden_size"], cfg["num_heads"]
    hkv = cfg.get("num_kv_heads") or h
    key_dim, value_dim = int(d * cfg.get("expand_k", 1.0)), int(d * cfg.get("expand_v", 2.0))
    inter = cfg.get("intermediate_size")
    if inter is None:
        ratio = cfg.get("hidden_ratio", 2)
        ratio = 4 if ratio is None else ratio
        inter = 256 * ((int(d * ratio * 2 / 3) + 255) // 256)
    return d, h, hkv, key_dim, value_dim, key_dim // h, value_dim // h, inter


def fla_logits(cfg, w, tokens):
    """docs/FORMATS.md, "fla": w maps names (without "model.") to float64 arrays."""
    d, h, hkv, key_dim, value_dim, dk, dv, inter = fla_sizes(cfg)
    eps = cfg.get("norm_eps", cfg.get("rms_norm_eps", 1e-6))
    gate = cfg.get("use_output_gate", True)
    affine = cfg.get("elementwise_affine", True)
    norm_name = "g_norm_swish_gate" if gate and cfg.get("fuse_norm", True) else "g_norm"
    t = len(tokens)
    n = np.arange(t, dtype=np.float64)
    theta = 10000.0 ** (-2.0 * np.arange(dk // 2) / dk)
    phase = n[:, None] * theta[None, :]
    x = w["embeddings.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        hid = rmsnorm(x, eps, w[p + "attn_norm.weight"])
        q, k, v = hid @ w[p + "attn.q_proj.weight"].T, hid @ w[p + "attn.k_proj.weight"].T, \
            hid @ w[p + "attn.v_proj.weight"].T
        heads = []
        for head in range(h):
            kv = head // (h // hkv)
            qh = rotate_halves(q[:, head * dk:(head + 1) * dk], phase)
            kh = rotate_halves(k[:, kv * dk:(kv + 1) * dk], phase)
            vh = v[:, kv * dv:(kv + 1) * dv]
            gamma = 1.0 - 2.0 ** (-5.0 - head)
            o = ((dk ** -0.5) * (qh @ kh.T) * causal_decay(gamma, t)) @ vh
            heads.append(rmsnorm(o, eps, w[p + f"attn.{norm_name}.weight"] if affine else None))
        o = np.concatenate(heads, axis=-1)
        if gate:
            o = o * swish(hid @ w[p + "attn.g_proj.weight"].T)
        x = x + o @ w[p + "attn.o_proj.weight"].T
        hid = rmsnorm(x, eps, w[p + "mlp_norm.weight"])
        if p + "mlp.up_proj.weight" in w:
            g, u = hid @ w[p + "mlp.gate_proj.weight"].T, hid @ w[p + "mlp.up_proj.weight"].T
        else:  # fused: the gate's rows first, then up's
            gu = hid @ w[p + "mlp.gate_proj.weight"].T
            g, u = gu[:, :inter], gu[:, inter:]
        x = x + (swish(g) * u) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["embeddings.weight"])
    return rmsnorm(x, eps, w["norm.weight"]) @ head.T


def syncdoth_decays(h, lm_decay):
    if lm_decay:
        e = -5.0 - 4.0 * np.arange(h) / (h - 1) if h > 1 else np.array([-5.0])
        return 1.0 - 2.0 ** e
    return 1.0 - 2.0 ** (-5.0 - np.arange(h))


def syncdoth_logits(cfg, w, tokens):
    """docs/NUMERICS.md with syncdoth's keys (docs/FORMATS.md, "syncdoth"), in the parallel form:
    row n divided by c_n and by clamp(|sum_m A[n][m]|, 1, 5e4), the library's rule. syncdoth's own
    parallel form clamps sum_m |A[n][m]| instead; the two differ only through the per-head norm's
    eps (counted and printed; on syncdoth-tiny the reference still matches syncdoth's logits)."""
    d, h = cfg["decoder_embed_dim"], cfg["decoder_retention_heads"]
    dk, dv = d // h, cfg["decoder_value_embed_dim"] // h
    eps = cfg.get("layernorm_eps", 1e-6)
    t = len(tokens)
    n = np.arange(t, dtype=np.float64)
    pairs = dk // 2
    angle = 1.0 / 10000.0 ** (np.linspace(0, 1, pairs) if pairs > 1 else np.zeros(1))
    phase = n[:, None] * angle[None, :]
    gammas = syncdoth_decays(h, cfg.get("use_lm_decay", False))
    x = w["embed_tokens.weight"][tokens]
    if not cfg.get("no_scale_embedding", True):
        x = x * np.sqrt(d)
    if cfg.get("layernorm_embedding", False):
        x = rmsnorm(x, eps, w["layernorm_embedding.weight"])
    clamp_differs = 0
    for i in range(cfg["decoder_layers"]):
        p = f"layers.{i}."
        hid = rmsnorm(x, eps, w[p + "retention_layer_norm.weight"])
        q = hid @ w[p + "retention.q_proj.weight"].T
        k = hid @ w[p + "retention.k_proj.weight"].T * dk ** -0.5
        v = hid @ w[p + "retention.v_proj.weight"].T
        g = hid @ w[p + "retention.g_proj.weight"].T
        heads = []
        for head in range(h):
            qh = rotate_pairs(q[:, head * dk:(head + 1) * dk], phase)
            kh = rotate_pairs(k[:, head * dk:(head + 1) * dk], phase)
            dmat = causal_decay(gammas[head], t)
            dmat = dmat / np.sqrt(dmat.sum(-1, keepdims=True))
            a = (qh @ kh.T) * dmat
            by_abs = np.clip(np.abs(a).sum(-1, keepdims=True), 1, 5e4)
            by_sum = np.clip(np.abs(a.sum(-1, keepdims=True)), 1, 5e4)
            clamp_differs += int(np.sum(np.abs(by_abs - by_sum) > 1e-12))
            heads.append(rmsnorm((a / by_sum) @ v[:, head * dv:(head + 1) * dv], eps))
        o = np.concatenate(heads, axis=-1) * swish(g)
        x = x + o @ w[p + "retention.out_proj.weight"].T
        hid = rmsnorm(x, eps, w[p + "final_layer_norm.weight"])
        f = swish(hid @ w[p + "ffn.fc1.weight"].T) * (hid @ w[p + "ffn.gate.weight"].T)
        x = x + f @ w[p + "ffn.fc2.weight"].T
    if clamp_differs:  # the library's rule and syncdoth's agree here only through eps
        print(f"  ({clamp_differs} rows where |sum| and sum|.| clamp differently)")
    head = w.get("lm_head.weight", w["embed_tokens.weight"])
    return rmsnorm(x, eps, w["layer_norm.weight"]) @ head.T


# ---------------------------------------------------------------- fixtures


def normal(rng, shape, fan_in):
    return rng.normal(0, fan_in ** -0.5, shape)


def norm_weight(rng, size):
    return 1 + 0.1 * rng.normal(size=size)


def fla_weights(cfg, rng, fused):
    d, h, hkv, key_dim, value_dim, dk, dv, inter = fla_sizes(cfg)
    w = {"embeddings.weight": rng.normal(0, 1, (cfg["vocab_size"], d))}
    norm_name = "g_norm_swish_gate" if cfg.get("use_output_gate", True) and \
        cfg.get("fuse_norm", True) else "g_norm"
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        w[p + "attn_norm.weight"] = norm_weight(rng, d)
        w[p + "attn.q_proj.weight"] = 2.0 * normal(rng, (key_dim, d), d)
        w[p + "attn.k_proj.weight"] = 2.0 * normal(rng, (key_dim * hkv // h, d), d)
        w[p + "attn.v_proj.weight"] = normal(rng, (value_dim * hkv // h, d), d)
        if cfg.get("use_output_gate", True):
            w[p + "attn.g_proj.weight"] = normal(rng, (value_dim, d), d)
        if cfg.get("elementwise_affine", True):
            w[p + f"attn.{norm_name}.weight"] = norm_weight(rng, dv)
        w[p + "attn.o_proj.weight"] = normal(rng, (d, value_dim), value_dim)
        w[p + "mlp_norm.weight"] = norm_weight(rng, d)
        if fused:
            w[p + "mlp.gate_proj.weight"] = normal(rng, (2 * inter, d), d)
        else:
            w[p + "mlp.gate_proj.weight"] = normal(rng, (inter, d), d)
            w[p + "mlp.up_proj.weight"] = normal(rng, (inter, d), d)
        w[p + "mlp.down_proj.weight"] = normal(rng, (d, inter), inter)
    w["norm.weight"] = norm_weight(rng, d)
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = normal(rng, (cfg["vocab_size"], d), d)
    return w


def syncdoth_weights(cfg, rng):
    d, dv_all, ffn = cfg["decoder_embed_dim"], cfg["decoder_value_embed_dim"], \
        cfg["decoder_ffn_embed_dim"]
    w = {"embed_tokens.weight": rng.normal(0, d ** -0.5, (cfg["vocab_size"], d))}
    if cfg.get("layernorm_embedding"):
        w["layernorm_embedding.weight"] = norm_weight(rng, d)
    for i in range(cfg["decoder_layers"]):
        p = f"layers.{i}."
        w[p + "retention_layer_norm.weight"] = norm_weight(rng, d)
        for proj, shape in (("q", (d, d)), ("k", (d, d)), ("v", (dv_all, d)), ("g", (dv_all, d)),
                            ("out", (d, dv_all))):
            w[p + f"retention.{proj}_proj.weight"] = normal(rng, shape, shape[1])
        w[p + "final_layer_norm.weight"] = norm_weight(rng, d)
        w[p + "ffn.fc1.weight"] = normal(rng, (ffn, d), d)
        w[p + "ffn.gate.weight"] = normal(rng, (ffn, d), d)
        w[p + "ffn.fc2.weight"] = normal(rng, (d, ffn), ffn)
    w["layer_norm.weight"] = norm_weight(rng, d)
    w["lm_head.weight"] = normal(rng, (cfg["vocab_size"], d), d)
    return w


def save_fixture(name, cfg, weights, dtype, logits_fn, seed, shards=1, buffers=None):
    out = os.path.join(OUT, name)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    # Names as the family stores them: "model." before all but lm_head.
    stored = {("" if k.startswith("lm_head.") else "model.") + k: v for k, v in weights.items()}
    stored.update(buffers or {})
    # The reference reads what the file holds (rounded to dtype).
    readable = {k: stored_value(v, dtype) for k, v in weights.items()}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = list(stored)
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), stored, dtype)
    else:
        weight_map = {}
        for s in range(shards):
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {k: stored[k] for k in names[s::shards]}
            write_safetensors(os.path.join(out, file), part, dtype)
            weight_map.update({k: file for k in part})
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)
    tokens = rng.integers(0, cfg["vocab_size"], (2, 30))
    logits = np.stack([logits_fn(cfg, readable, row) for row in tokens])
    np.save(os.path.join(out, "tokens.npy"), tokens.astype(np.int64))
    np.save(os.path.join(out, "logits.npy"), logits.astype(np.float32))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(f"# {name}\n\nNumPy-reference fixture (not the project's own code): made by "
                "tools/make_family_fixtures.py, which says why and how. logits.npy: float32 "
                "[batch, time, vocab] of tokens.npy.\n")
    print(f"{name}: {dtype}, {shards} file(s), logits {logits.shape}, "
          f"max |logit| {np.abs(logits).max():.3f}")


def check_against_project_fixtures():
    """The reference against the two fixtures made by fla's and syncdoth's own code."""
    for name, fn, prefix_free in (("fla-tiny", fla_logits, "embeddings.weight"),
                                  ("syncdoth-tiny", syncdoth_logits, "embed_tokens.weight")):
        d = os.path.join(ROOT, "tests", "data", name)
        cfg = json.load(open(os.path.join(d, "config.json")))
        w = {k[len("model."):] if k.startswith("model.") else k: v
             for k, v in read_safetensors(os.path.join(d, "model.safetensors")).items()}
        tokens = np.load(os.path.join(d, "tokens.npy"))
        expected = np.load(os.path.join(d, "logits.npy")).astype(np.float64)
        got = np.stack([fn(cfg, w, row) for row in tokens])
        err = np.abs(got - expected).max() / np.abs(expected).max()
        print(f"reference vs {name} (the project's own code): {err:.1e} relative")
        if err > 1e-5:
            sys.exit(f"the reference disagrees with {name}")


def main():
    fla_base = {"model_type": "retnet", "architectures": ["RetNetForCausalLM"], "attn": None,
                "attn_mode": "chunk", "feature_map": None, "use_short_conv": False,
                "hidden_act": "swish", "hidden_size": 64, "num_heads": 4, "num_kv_heads": None,
                "expand_k": 1, "expand_v": 2, "hidden_ratio": 2, "intermediate_size": None,
                "num_hidden_layers": 2, "norm_eps": 1e-6, "elementwise_affine": True,
                "use_output_gate": True, "fuse_norm": True, "tie_word_embeddings": False,
                "vocab_size": 97}
    rng = np.random.default_rng(13)
    cfg = dict(fla_base)
    save_fixture("fla-fused-bf16", cfg, fla_weights(cfg, rng, fused=True), "BF16", fla_logits, 1)
    cfg = dict(fla_base, num_kv_heads=2, expand_k=0.5, intermediate_size=96)
    save_fixture("fla-grouped-heads", cfg, fla_weights(cfg, rng, fused=False), "F32",
                 fla_logits, 2)
    cfg = dict(fla_base, elementwise_affine=False, use_output_gate=False,
               tie_word_embeddings=True, intermediate_size=128)
    del cfg["norm_eps"]
    cfg["rms_norm_eps"] = 1e-5
    save_fixture("fla-no-norm-weight-no-gate", cfg, fla_weights(cfg, rng, fused=False), "F16",
                 fla_logits, 3)

    cfg = {"model_type": "retnet", "architectures": ["RetNetForCausalLM"],
           "forward_impl": "parallel", "activation_fn": "swish", "decoder_embed_dim": 64,
           "decoder_value_embed_dim": 128, "decoder_retention_heads": 4,
           "decoder_ffn_embed_dim": 96, "decoder_layers": 2, "decoder_normalize_before": True,
           "deepnorm": False, "layernorm_embedding": True, "layernorm_eps": 1e-6,
           "no_scale_embedding": False, "recurrent_chunk_size": 4, "subln": True,
           "tie_word_embeddings": False, "use_glu": True, "use_lm_decay": True,
           "use_ffn_rms_norm": False, "vocab_size": 97}
    h, dk = 4, 16
    gammas = syncdoth_decays(h, True)
    angle = 1.0 / 10000.0 ** np.linspace(0, 1, dk // 2)
    buffers = {"model.retnet_rel_pos.angle": np.repeat(angle, 2),
               "model.retnet_rel_pos.decay": np.log(gammas)}
    save_fixture("syncdoth-lm-decay", cfg, syncdoth_weights(cfg, rng), "F32", syncdoth_logits, 4,
                 shards=2, buffers=buffers)
    check_against_project_fixtures()


if __name__ == "__main__":
    main()
