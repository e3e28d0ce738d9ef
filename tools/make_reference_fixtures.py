#!/usr/bin/env python3
"""Makes the NumPy-reference fixtures in tests/data (needs only NumPy: python3-numpy).

    python3 tools/make_reference_fixtures.py            # (re)writes tests/data/<fixture>/
    python3 tools/make_reference_fixtures.py --check    # regenerates into a temporary folder and
                                                        # compares with tests/data; exit 1 if not equal

Each fixture is a random model (seeded, so the same bytes every time) written with one naming
and dtype convention, plus the logits of tools/retnet_reference.py (the float64 NumPy reading
of docs/NUMERICS.md) for two token sequences, stored as float32. tests/data/torchscale-tiny is
not made here: its logits come from torchscale itself.

Two families of query/key scale:
- qk_scale 4 (hf-f16-tied, fairseq-bf16) and 1 (tiny-bytes): |row sum| > 1, so the row clamp is
  active. The clamp divides out any factor on q or k, so the key scale dk^-0.5 and the decay
  normaliser c_n reach the logits only through the per-head norm's eps (about 1e-8 relative
  at scale 4).
- qk_scale 0.03 (small-qk-*): |row sum| / c_n < 0.003, the clamp is inactive and retention
  outputs are small against the norm's eps, so every factor shows at full strength: leaving
  out the key scale changes these logits by 31-43 %, leaving out c_n by 25-45 % (printed below
  as "without key scale" and "without c_n").
"""
import argparse
import filecmp
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import retnet_reference as ref  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")


def save_safetensors(path, tensors, dtype):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        if dtype == "F16":
            raw = t.astype(np.float16).tobytes()
        elif dtype == "BF16":  # round to nearest even on the top 16 bits
            bits = t.astype(np.float32).view(np.uint32).astype(np.uint64)
            raw = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
        else:
            raw = t.astype(np.float32).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class Ablated(ref.Model):
    """The reference without one scale factor, to report how much each one moves the logits."""

    def __init__(self, model_dir, drop):
        super().__init__(model_dir)
        self.drop = drop

    def retention_head(self, q, k, v, gamma, form):
        if self.drop == "key scale":
            k = k * np.sqrt(self.c.dk)
        if self.drop != "c_n":
            return super().retention_head(q, k, v, gamma, form)
        T = q.shape[0]
        n = np.arange(T)
        D = np.where(n[:, None] >= n[None, :], gamma ** (n[:, None] - n[None, :]).astype(np.float64), 0.0)
        o = ((q @ k.T) * D) @ np.concatenate([v, np.ones((T, 1))], axis=1)
        return o[:, :-1] / np.clip(np.abs(o[:, -1]), 1.0, 5e4)[:, None]


def row_sum_ratio(model, tokens):
    """max over heads, layers and positions of |u_n| / c_n (the clamp is active where > 1)."""
    worst = [0.0]
    original = model.retention_head

    def spy(q, k, v, gamma, form):
        n = np.arange(q.shape[0])
        D = np.where(n[:, None] >= n[None, :], gamma ** (n[:, None] - n[None, :]).astype(np.float64), 0.0)
        u = ((q @ k.T) * D).sum(-1)
        c = np.sqrt((1.0 - gamma ** (n + 1.0)) / (1.0 - gamma))
        worst[0] = max(worst[0], float(np.max(np.abs(u) / c)))
        return original(q, k, v, gamma, form)

    model.retention_head = spy
    for t in tokens:
        model.logits(t)
    return worst[0]


def make(root, name, cfg, prefix, dtype, head_name, qk_scale, seed):
    rng = np.random.default_rng(seed)
    d, dv, ffn, vocab = cfg["decoder_embed_dim"], cfg["decoder_value_embed_dim"], cfg["decoder_ffn_embed_dim"], cfg["vocab_size"]
    w = {"embed_tokens.weight": rng.normal(0, 1, (vocab, d))}
    if cfg.get("layernorm_embedding"):
        w["layernorm_embedding.weight"] = 1 + 0.1 * rng.normal(size=d)
    for i in range(cfg["decoder_layers"]):
        p = f"layers.{i}."
        w[p + "retention_layer_norm.weight"] = 1 + 0.1 * rng.normal(size=d)
        for proj, shape, scale in (("q", (d, d), qk_scale), ("k", (d, d), qk_scale), ("v", (dv, d), 1), ("g", (dv, d), 1), ("out", (d, dv), 1)):
            w[p + f"retention.{proj}_proj.weight"] = scale * rng.normal(0, shape[1] ** -0.5, shape)
        w[p + "final_layer_norm.weight"] = 1 + 0.1 * rng.normal(size=d)
        w[p + "ffn.fc1.weight"] = rng.normal(0, d ** -0.5, (ffn, d))
        w[p + "ffn.gate.weight"] = rng.normal(0, d ** -0.5, (ffn, d))
        w[p + "ffn.fc2.weight"] = rng.normal(0, ffn ** -0.5, (d, ffn))
    w["layer_norm.weight"] = 1 + 0.1 * rng.normal(size=d)
    tensors = {prefix + k: v for k, v in w.items()}
    if head_name:
        tensors[head_name] = rng.normal(0, d ** -0.5, (vocab, d))
    tensors["retnet_rel_pos.angle"] = np.zeros(4)  # an ignorable buffer, as torchscale saves
    out = os.path.join(root, name)
    os.makedirs(out, exist_ok=True)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), tensors, dtype)
    tokens = rng.integers(0, vocab, (2, 30))
    model = ref.Model(out)
    logits = np.stack([model.logits(t) for t in tokens])
    np.save(os.path.join(out, "tokens.npy"), tokens.astype(np.int64))
    np.save(os.path.join(out, "logits.npy"), logits.astype(np.float32))
    scale = np.abs(logits).max()
    effects = []
    for drop in ("key scale", "c_n"):
        ablated = Ablated(out, drop)
        other = np.stack([ablated.logits(t) for t in tokens])
        effects.append(f"without {drop} {np.abs(other - logits).max() / scale:.2g}")
    print(f"{name}: logits {logits.shape}, max |logit| {scale:.3g}, max |row sum|/c_n "
          f"{row_sum_ratio(ref.Model(out), tokens):.3g}; relative change {', '.join(effects)}")


def make_all(root):
    base = dict(vocab_size=61, decoder_embed_dim=32, decoder_value_embed_dim=48, decoder_retention_heads=2,
                decoder_ffn_embed_dim=40, decoder_layers=2, layernorm_eps=1e-6, model_type="retnet")
    make(root, "hf-f16-tied", dict(base, activation_fn="gelu", no_scale_embedding=False, layernorm_embedding=True,
                                   tie_word_embeddings=True), "model.", "F16", None, 4.0, 1)
    make(root, "fairseq-bf16", dict(base, activation_fn="swish", decoder_retention_heads=4,
                                    decoder_value_embed_dim=64), "decoder.", "BF16",
         "decoder.output_projection.weight", 4.0, 2)
    # Byte-level (vocab 256) for the command-line tests.
    make(root, "tiny-bytes", dict(base, vocab_size=256, activation_fn="swish", recurrent_chunk_size=8,
                                  tie_word_embeddings=False), "model.", "F32", "lm_head.weight", 1.0, 3)
    # Small q·k: the row clamp stays inactive and the key scale and c_n show in full.
    make(root, "small-qk-f32", dict(base, activation_fn="swish"), "", "F32", "output_projection.weight", 0.03, 4)
    make(root, "small-qk-f16", dict(base, activation_fn="gelu", tie_word_embeddings=True), "model.", "F16",
         None, 0.03, 5)
    make(root, "small-qk-bf16", dict(base, activation_fn="swish", decoder_retention_heads=4,
                                     decoder_value_embed_dim=64), "decoder.", "BF16",
         "decoder.output_projection.weight", 0.03, 6)


def check():
    """Regenerates into a temporary folder; every file must equal the committed one, except
    logits.npy, which may differ by float32 rounding of float64 values (1 unit in the last place)."""
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        make_all(tmp)
        for name in sorted(os.listdir(tmp)):
            for f in sorted(os.listdir(os.path.join(tmp, name))):
                new, old = os.path.join(tmp, name, f), os.path.join(DATA, name, f)
                if not os.path.exists(old):
                    print(f"MISSING {name}/{f}")
                    failures += 1
                elif f == "logits.npy":
                    a, b = np.load(new), np.load(old)
                    ulps = np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32)).max() if a.shape == b.shape else -1
                    ok = a.shape == b.shape and np.all(np.isfinite(b)) and ulps <= 1
                    print(f"{'ok' if ok else 'DIFFERS'} {name}/{f}: max difference {ulps} units in the last place")
                    failures += not ok
                elif not filecmp.cmp(new, old, shallow=False):
                    print(f"DIFFERS {name}/{f}")
                    failures += 1
                else:
                    print(f"ok {name}/{f}: identical")
    print("fixtures reproduce" if failures == 0 else f"{failures} file(s) differ")
    return failures == 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare a regeneration with tests/data")
    args = ap.parse_args()
    if args.check:
        sys.exit(0 if check() else 1)
    make_all(DATA)
