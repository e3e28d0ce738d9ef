#!/usr/bin/env python3
"""A slow, plain NumPy (float64) reading of docs/NUMERICS.md: the logits of a RetNet decoder.

Written for this repository from its numerics contract, independently of the C++ library, so
that every expected value in tests/data can be regenerated from the repository alone
(tools/make_reference_fixtures.py uses it). It follows the contract section by section:

    Retention / Scale factors  out_n = o_n / (c_n * clamp(|u_n| / c_n, 1, 5e4)), u_n the signed
                               row sum of Q K^T (*) D, c_n = sqrt(sum_{i<=n} gamma^i)
    Multi-scale retention      Q, K * dk^-0.5, V, G; rotation; per-head norm; swish gate
    Feed-forward               GLU (fc1, gate, fc2) or plain FFN with biases and optional subln
    Decoder                    embedding scale, layernorm_embedding, pre-norm layers, final norm
    Config keys, Tensor names  defaults, prefixes "", "decoder.", "model.", output projection

Usage:
    python3 tools/retnet_reference.py MODEL_DIR --tokens 5,17,3 [--form parallel|recurrent]
                                      [--out logits.npy]

The recurrent form (S_n = gamma S_{n-1} + k_n^T [v_n, 1]) is here to check the reference
against itself: both forms agree to about 1e-15 relative.
"""
import argparse
import json
import math
import struct

import numpy as np

_STORED = {"F16": np.float16, "F32": np.float32, "F64": np.float64}


def load_safetensors(path):
    """{name: float64 array} for every tensor of a safetensors file (F16, BF16, F32, F64)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = data[begin:end]
        if info["dtype"] == "BF16":  # the top half of a float32: converts exactly
            a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(buf, np.dtype(_STORED[info["dtype"]]).newbyteorder("<"))
        out[name] = a.astype(np.float64).reshape(info["shape"])
    return out


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


def swish(x):
    return x / (1.0 + np.exp(-x))


def gelu(x):  # exact (erf) GELU
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def rms_norm(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def layer_norm(x, eps):
    centred = x - np.mean(x, axis=-1, keepdims=True)
    return centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + eps)


class Model:
    def __init__(self, model_dir):
        self.c = Config(json.load(open(f"{model_dir}/config.json")))
        self.w = load_safetensors(f"{model_dir}/model.safetensors")
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
        return rms_norm(x, self.c.eps) * self.tensor(name + ".weight")

    def head_norm(self, x):  # no weight or bias
        return layer_norm(x, self.c.eps) if self.c.norm == "layernorm" else rms_norm(x, self.c.eps)

    def rotate(self, z, positions):
        """Theta shift of z [T, dk] at the given positions: pairs (2i, 2i+1) turn by n * angle_i."""
        half = self.c.dk // 2
        angle = 1.0 / 10000.0 ** np.linspace(0.0, 1.0, half)  # [1.] when dk = 2
        theta = positions[:, None].astype(np.float64) * angle[None, :]
        cos, sin = np.cos(theta), np.sin(theta)
        a, b = z[:, 0::2], z[:, 1::2]
        out = np.empty_like(z)
        out[:, 0::2] = a * cos - b * sin
        out[:, 1::2] = b * cos + a * sin
        return out

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
