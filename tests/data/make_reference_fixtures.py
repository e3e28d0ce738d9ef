#!/usr/bin/env python3
"""Makes the NumPy-reference fixtures in tests/data (run from the repository root):

    /usr/bin/python3 tests/data/make_reference_fixtures.py PATH/TO/retnet_ref.py

retnet_ref.py is the project's float64 NumPy reading of docs/NUMERICS.md; it is not part of
this repository. Each fixture is a random model written with another naming/dtype convention
than torchscale-tiny, plus the reference's logits for two token sequences. Queries and keys
get large weights so that torchscale's row-sum clamp (|row sum| > 1) is active; its effect on
the logits is small (about 1e-6 relative here) because the per-head norm cancels it up to eps.
"""
import importlib.util, json, os, struct, sys
import numpy as np

spec = importlib.util.spec_from_file_location("retnet_ref", sys.argv[1])
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
HERE = os.path.dirname(os.path.abspath(__file__))


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


def make(name, cfg, prefix, dtype, head_name, qk_scale, seed):
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
    out = os.path.join(HERE, name)
    os.makedirs(out, exist_ok=True)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    save_safetensors(os.path.join(out, "model.safetensors"), tensors, dtype)
    tokens = rng.integers(0, vocab, (2, 30))
    logits = np.stack([ref.logits(out, t) for t in tokens])
    np.save(os.path.join(out, "tokens.npy"), tokens.astype(np.int64))
    np.save(os.path.join(out, "logits.npy"), logits.astype(np.float32))
    print(name, "logits", logits.shape, "max |logit|", np.abs(logits).max())


base = dict(vocab_size=61, decoder_embed_dim=32, decoder_value_embed_dim=48, decoder_retention_heads=2,
            decoder_ffn_embed_dim=40, decoder_layers=2, layernorm_eps=1e-6, model_type="retnet")
make("hf-f16-tied", dict(base, activation_fn="gelu", no_scale_embedding=False, layernorm_embedding=True,
                         tie_word_embeddings=True), "model.", "F16", None, 4.0, 1)
make("fairseq-bf16", dict(base, activation_fn="swish", decoder_retention_heads=4,
                          decoder_value_embed_dim=64), "decoder.", "BF16",
     "decoder.output_projection.weight", 4.0, 2)
# Byte-level (vocab 256) for the command-line tests.
make("tiny-bytes", dict(base, vocab_size=256, activation_fn="swish", recurrent_chunk_size=8,
                        tie_word_embeddings=False), "model.", "F32", "lm_head.weight", 1.0, 3)
