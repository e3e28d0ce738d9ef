#!/usr/bin/env python3
"""The project's reference model: a slow, plain NumPy (float64) reading of docs/NUMERICS.md and
docs/FORMATS.md, the logits of a RetNet decoder of every checkpoint family.

Written for this repository from its numerics contract, independently of the C++ library, so
that every expected value in tests/data can be regenerated from the repository alone
(scripts/fixtures/make_reference_fixtures.py and make_family_fixtures.py use it). `Model`
(torchscale, fairseq and Hugging Face names) follows the contract section by section:

    Retention / Scale factors  out_n = o_n / (c_n * clamp(|u_n| / c_n, 1, 5e4)), u_n the signed
                               row sum of Q K^T (*) D, c_n = sqrt(sum_{i<=n} gamma^i)
    Multi-scale retention      Q, K * dk^-0.5, V, G; rotation; per-head norm; swish gate
    Feed-forward               GLU (fc1, gate, fc2) or plain FFN with biases and optional subln
    Decoder                    embedding scale, layernorm_embedding, pre-norm layers, final norm
    Config keys, Tensor names  defaults, prefixes "", "decoder.", "model.", output projection

`fla_logits` and `syncdoth_logits` read the other two families' checkpoints (docs/FORMATS.md,
"fla" and "syncdoth") from a {name: float64 array} map without the "model." prefix.

Usage:
    python3 scripts/reference/retnet.py MODEL_DIR --tokens 5,17,3 [--form parallel|recurrent]
                                        [--out logits.npy]

The recurrent form (S_n = gamma S_{n-1} + k_n^T [v_n, 1]) is here to check the reference
against itself: both forms agree to about 1e-15 relative.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

if not __package__:  # run as a program: make the `reference` package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from reference.safetensors_io import read_safetensors  # noqa: E402


# ---------------------------------------------------------------- the functions, in float64


def swish(x):
    return x / (1.0 + np.exp(-x))


def gelu(x):  # exact (erf) GELU
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def rms_norm(x, eps, weight=None):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if weight is None else y * weight


def layer_norm(x, eps):
    centred = x - np.mean(x, axis=-1, keepdims=True)
    return centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)


def causal_decay(gamma, t):
    """[t, t]: gamma^(n-m) for n >= m, else 0."""
    n = np.arange(t)
    diff = n[:, None] - n[None, :]
    return np.where(diff >= 0, gamma ** np.maximum(diff, 0), 0.0)


def pair_angles(dk):
    """torchscale's and syncdoth's rotation angles, one per pair: 10000^-linspace(0, 1, dk/2)."""
    return 1.0 / 10000.0 ** np.linspace(0.0, 1.0, dk // 2)  # [1.] when dk = 2


def rotate_pairs(z, phase):
    """torchscale, syncdoth: (z[2i], z[2i+1]) turns by phase[n, i] = n·angle_i."""
    a, b = z[:, 0::2], z[:, 1::2]
    c, s = np.cos(phase), np.sin(phase)
    out = np.empty_like(z)
    out[:, 0::2] = a * c - b * s
    out[:, 1::2] = b * c + a * s
    return out


def rotate_halves(z, theta_phase):
    """fla: (z[i], z[i + dk/2]) turns by n·theta_i."""
    half = z.shape[-1] // 2
    a, b = z[:, :half], z[:, half:]
    c, s = np.cos(theta_phase), np.sin(theta_phase)
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


# ---------------------------------------------------------------- torchscale, fairseq, Hugging Face


class Config:
    """The keys of docs/NUMERICS.md#config-keys with their defaults."""

    def __init__(self, c):
        self.vocab = c["vocab_size"]
        self.d = c["decoder_embed_dim"]
        self.value_dim = c["decoder_value_embed_dim"]
        self.heads = c["decoder_retention_heads"]
        self.ffn = c["decoder_ffn_embed_dim"]
        self.layers = c["decoder_layers"]

        def get(key, default):  # null counts as absent
            v = c.get(key)
            return default if v is None else v

        self.activation = get("activation_fn", "gelu")
        self.norm = get("norm_type", "rmsnorm")
        self.eps = float(get("layernorm_eps", 1e-6))
        self.scale_embedding = not get("no_scale_embedding", True)
        self.layernorm_embedding = get("layernorm_embedding", False)
        self.tied = get("share_decoder_input_output_embed", False) or get("tie_word_embeddings", False)
        self.glu = get("use_glu", True)
        self.subln = get("subln", False)
        assert self.activation in ("gelu", "swish", "silu"), self.activation
        assert self.norm in ("rmsnorm", "layernorm"), self.norm
        assert self.d % self.heads == 0 and self.value_dim % self.heads == 0
        self.dk, self.dv = self.d // self.heads, self.value_dim // self.heads
        assert self.dk % 2 == 0


class Model:
    def __init__(self, model_dir):
        self.c = Config(json.load(open(f"{model_dir}/config.json")))
        self.w = read_safetensors(f"{model_dir}/model.safetensors")
        prefixes = [p for p in ("", "decoder.", "model.") if p + "embed_tokens.weight" in self.w]
        if len(prefixes) != 1:
            raise ValueError(f"embed_tokens.weight found under prefixes {prefixes}: need exactly one")
        self.prefix = prefixes[0]
        head = None
        for name in (self.prefix + "output_projection.weight", "output_projection.weight", "lm_head.weight"):
            if name in self.w:
                head = self.w[name]
                break
        if head is None:
            if not self.c.tied:
                raise ValueError("no output projection in an untied checkpoint")
            head = self.tensor("embed_tokens.weight")
        self.output = head

    def tensor(self, name):
        return self.w[self.prefix + name]

    def decoder_norm(self, x, name):
        """A decoder norm with its weight (and bias for LayerNorm)."""
        if self.c.norm == "layernorm":
            return layer_norm(x, self.c.eps) * self.tensor(name + ".weight") + self.tensor(name + ".bias")
        return rms_norm(x, self.c.eps, self.tensor(name + ".weight"))

    def head_norm(self, x):  # no weight or bias
        return layer_norm(x, self.c.eps) if self.c.norm == "layernorm" else rms_norm(x, self.c.eps)

    def rotate(self, z, positions):
        """Theta shift of z [T, dk] at the given positions: pairs (2i, 2i+1) turn by n * angle_i."""
        return rotate_pairs(z, positions[:, None].astype(np.float64) * pair_angles(self.c.dk)[None, :])

    def retention_head(self, q, k, v, gamma, form):
        """Scaled retention of one head: q, k [T, dk], v [T, dv] -> [T, dv] (docs: Scale factors)."""
        T = q.shape[0]
        n = np.arange(T)
        ones = np.concatenate([v, np.ones((T, 1))], axis=1)  # [v_n, 1]: the last column is u_n
        if form == "parallel":
            D = np.where(n[:, None] >= n[None, :], gamma ** (n[:, None] - n[None, :]).astype(np.float64), 0.0)
            o = ((q @ k.T) * D) @ ones
        else:  # recurrent
            S = np.zeros((q.shape[1], ones.shape[1]))
            o = np.empty((T, ones.shape[1]))
            for t in range(T):
                S = gamma * S + np.outer(k[t], ones[t])
                o[t] = q[t] @ S
        c = np.sqrt(n + 1.0) if gamma == 1.0 else np.sqrt((1.0 - gamma ** (n + 1.0)) / (1.0 - gamma))
        u = o[:, -1]
        scale = c * np.clip(np.abs(u) / c, 1.0, 5e4)
        return o[:, :-1] / scale[:, None]

    def retention(self, x, layer, positions, form):
        c = self.c
        p = lambda name: self.tensor(f"layers.{layer}.retention.{name}.weight")
        q = x @ p("q_proj").T
        k = x @ p("k_proj").T * c.dk ** -0.5
        v = x @ p("v_proj").T
        g = x @ p("g_proj").T
        heads = []
        for h in range(c.heads):
            gamma = 1.0 - 2.0 ** (-5 - h)
            qh = self.rotate(q[:, h * c.dk:(h + 1) * c.dk], positions)
            kh = self.rotate(k[:, h * c.dk:(h + 1) * c.dk], positions)
            vh = v[:, h * c.dv:(h + 1) * c.dv]
            heads.append(self.head_norm(self.retention_head(qh, kh, vh, gamma, form)))
        return (swish(g) * np.concatenate(heads, axis=1)) @ p("out_proj").T

    def feed_forward(self, x, layer):
        c = self.c
        p = lambda name: self.tensor(f"layers.{layer}.ffn.{name}")
        act = gelu if c.activation == "gelu" else swish
        if c.glu:
            return (act(x @ p("fc1.weight").T) * (x @ p("gate.weight").T)) @ p("fc2.weight").T
        h = act(x @ p("fc1.weight").T + p("fc1.bias"))
        if c.subln:  # always a LayerNorm over F values
            h = layer_norm(h, c.eps) * p("ffn_layernorm.weight") + p("ffn_layernorm.bias")
        return h @ p("fc2.weight").T + p("fc2.bias")

    def logits(self, tokens, form="parallel"):
        """float64 logits [T, vocab] of one sequence read from position 0."""
        c = self.c
        tokens = np.asarray(tokens, dtype=np.int64)
        assert tokens.ndim == 1 and tokens.min() >= 0 and tokens.max() < c.vocab
        positions = np.arange(len(tokens))
        x = self.tensor("embed_tokens.weight")[tokens]
        if c.scale_embedding:
            x = x * math.sqrt(c.d)
        if c.layernorm_embedding:
            x = self.decoder_norm(x, "layernorm_embedding")
        for layer in range(c.layers):
            x = x + self.retention(self.decoder_norm(x, f"layers.{layer}.retention_layer_norm"), layer, positions, form)
            x = x + self.feed_forward(self.decoder_norm(x, f"layers.{layer}.final_layer_norm"), layer)
        return self.decoder_norm(x, "layer_norm") @ self.output.T


def logits(model_dir, tokens, form="parallel"):
    """float64 logits [T, vocab] (tokens [T]) or [B, T, vocab] (tokens [B, T])."""
    model = Model(model_dir)
    tokens = np.asarray(tokens)
    if tokens.ndim == 2:
        return np.stack([model.logits(t, form) for t in tokens])
    return model.logits(tokens, form)


# ---------------------------------------------------------------- fla


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
        hid = rms_norm(x, eps, w[p + "attn_norm.weight"])
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
            heads.append(rms_norm(o, eps, w[p + f"attn.{norm_name}.weight"] if affine else None))
        o = np.concatenate(heads, axis=-1)
        if gate:
            o = o * swish(hid @ w[p + "attn.g_proj.weight"].T)
        x = x + o @ w[p + "attn.o_proj.weight"].T
        hid = rms_norm(x, eps, w[p + "mlp_norm.weight"])
        if p + "mlp.up_proj.weight" in w:
            g, u = hid @ w[p + "mlp.gate_proj.weight"].T, hid @ w[p + "mlp.up_proj.weight"].T
        else:  # fused: the gate's rows first, then up's
            gu = hid @ w[p + "mlp.gate_proj.weight"].T
            g, u = gu[:, :inter], gu[:, inter:]
        x = x + (swish(g) * u) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["embeddings.weight"])
    return rms_norm(x, eps, w["norm.weight"]) @ head.T


# ---------------------------------------------------------------- syncdoth


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
    phase = n[:, None] * pair_angles(dk)[None, :]
    gammas = syncdoth_decays(h, cfg.get("use_lm_decay", False))
    x = w["embed_tokens.weight"][tokens]
    if not cfg.get("no_scale_embedding", True):
        x = x * np.sqrt(d)
    if cfg.get("layernorm_embedding", False):
        x = rms_norm(x, eps, w["layernorm_embedding.weight"])
    clamp_differs = 0
    for i in range(cfg["decoder_layers"]):
        p = f"layers.{i}."
        hid = rms_norm(x, eps, w[p + "retention_layer_norm.weight"])
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
            heads.append(rms_norm((a / by_sum) @ v[:, head * dv:(head + 1) * dv], eps))
        o = np.concatenate(heads, axis=-1) * swish(g)
        x = x + o @ w[p + "retention.out_proj.weight"].T
        hid = rms_norm(x, eps, w[p + "final_layer_norm.weight"])
        f = swish(hid @ w[p + "ffn.fc1.weight"].T) * (hid @ w[p + "ffn.gate.weight"].T)
        x = x + f @ w[p + "ffn.fc2.weight"].T
    if clamp_differs:  # the library's rule and syncdoth's agree here only through eps
        print(f"  ({clamp_differs} rows where |sum| and sum|.| clamp differently)")
    head = w.get("lm_head.weight", w["embed_tokens.weight"])
    return rms_norm(x, eps, w["layer_norm.weight"]) @ head.T


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--form", choices=("parallel", "recurrent"), default="parallel")
    ap.add_argument("--out", help="write float32 [T, vocab] logits here (.npy)")
    a = ap.parse_args()
    out = logits(a.model_dir, [int(t) for t in a.tokens.split(",")], a.form)
    if a.out:
        np.save(a.out, out.astype(np.float32))
    else:
        np.set_printoptions(precision=5, suppress=True, linewidth=150)
        print(out)
