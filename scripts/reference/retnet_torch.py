"""The reference RetNet decoders in PyTorch, the benchmarks' opponents: RetNetDecoder
(docs/NUMERICS.md with torchscale's op structure, written here, not copied) for
benchmarks/compare_pytorch.py, and FlaDecoder (fla's checkpoints) for benchmarks/real_size.py.

RMSNorm, multi-scale retention with q/k/v/g projections, rotation ("theta shift"), per-head
decay masks with torchscale's normalisation, a per-head RMS group norm, swish gate, GLU FFN,
and three forms: parallel (all positions at once), chunkwise (inner-chunk parallel, cross-chunk
state) and a recurrent step with a per-layer state (batch, heads, dk, dv) used for decoding.
Tensor names follow torchscale, so a torchscale state dict loads as it is. The NumPy float64
reference of the same functions is reference/retnet.py; benchmarks/compare_pytorch.py checks
RetNetDecoder against it and against tests/data/torchscale-tiny.

Needs torch and NumPy (Debian: python3-torch, python3-numpy).
"""
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from reference.safetensors_io import read_model_folder, read_safetensors

class Config:
    """The docs/NUMERICS.md config keys this model uses, with torchscale's defaults."""

    def __init__(self, c):
        self.vocab = c["vocab_size"]
        self.d = c["decoder_embed_dim"]
        self.dv_total = c.get("decoder_value_embed_dim", self.d)
        self.heads = c["decoder_retention_heads"]
        self.ffn = c["decoder_ffn_embed_dim"]
        self.layers = c["decoder_layers"]
        self.act = c.get("activation_fn", "gelu")
        self.eps = c.get("layernorm_eps", 1e-6)
        self.scale_embedding = not c.get("no_scale_embedding", True)
        self.layernorm_embedding = c.get("layernorm_embedding", False)
        self.tied = c.get("share_decoder_input_output_embed", c.get("tie_word_embeddings", False))
        self.chunk = c.get("recurrent_chunk_size", 64)
        self.glu = c.get("use_glu", True)
        if c.get("norm_type", "rmsnorm") != "rmsnorm" or c.get("subln", False) and not self.glu:
            raise SystemExit("retnet_torch.py: only the RMSNorm model (no subln) is written here")
        self.dk, self.dv = self.d // self.heads, self.dv_total // self.heads

    def matmul_params(self):
        """Parameters in the matmuls a token goes through, without the embedding lookup."""
        ffn = (3 if self.glu else 2) * self.d * self.ffn
        per_layer = 2 * self.d * self.d + 2 * self.d * self.dv_total + self.dv_total * self.d + ffn
        return self.layers * per_layer, self.vocab * self.d


class RMSNorm(nn.Module):
    def __init__(self, dim, eps, affine=True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None

    def forward(self, x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return y * self.weight if self.weight is not None else y


class Linear(nn.Linear):
    """nn.Linear, but a single row goes through torch.mv: on this torch (OpenBLAS) F.linear of one
    row calls sgemm, about 3x slower than sgemv, which would handicap PyTorch's batch-1 decoding."""

    def forward(self, x):
        if x.numel() != x.shape[-1]:
            return F.linear(x, self.weight, self.bias)
        y = torch.mv(self.weight, x.reshape(-1))
        return (y if self.bias is None else y + self.bias).view(*x.shape[:-1], -1)


def rotate_every_two(x):
    """(a, b) pairs -> (-b, a), the 90-degree turn that theta_shift mixes in."""
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def theta_shift(x, sin, cos):
    return x * cos + rotate_every_two(x) * sin


class ChunkMasks:
    """Decay tensors for chunk length B, per head. The pure ones:
    decay      [H,B,B]  gamma^(i-j) for i >= j, else 0
    value_raw  [H,B,1]  gamma^(B-1-j): weight of k_j^T v_j in the state after the chunk
    query_raw  [H,B,1]  gamma^(i+1): weight of the state before the chunk for query i
    cross      [H,1,1]  gamma^B: the state's decay across one chunk
    and torchscale's normalised ones (the chunk's rows divided by sqrt(their sums), the state
    kept in units of value_sum = sum_{j<B} gamma^j):
    inner      [H,B,B]  decay / sqrt(row sum)      (also the parallel form's mask, B = T)
    value      [H,B,1]  value_raw / value_sum
    query      [H,B,1]  query_raw * value_sum / sqrt(row sum)"""

    def __init__(self, log_gamma, B, dtype):
        idx = torch.arange(B, dtype=torch.float64)
        diff = idx[:, None] - idx[None, :]
        decay = torch.where(diff >= 0, torch.exp(log_gamma[:, None, None] * diff.clamp(min=0)),
                            torch.zeros(()))
        value_sum = decay[:, -1].sum(-1)[:, None, None]
        row_scale = decay.sum(-1, keepdim=True).sqrt()
        value_raw = decay[:, -1].unsqueeze(-1)
        query_raw = torch.exp(log_gamma[:, None] * (idx + 1))[:, :, None]
        cast = lambda t: t.to(dtype)  # noqa: E731
        self.decay, self.value_raw, self.query_raw = cast(decay), cast(value_raw), cast(query_raw)
        self.cross = cast(torch.exp(log_gamma * B)[:, None, None])
        self.inner, self.value = cast(decay / row_scale), cast(value_raw / value_sum)
        self.query, self.value_sum = cast(query_raw * value_sum / row_scale), cast(value_sum)


class RelPos:
    """Rotation angles and per-head decays, with cached masks (they depend on sizes only)."""

    def __init__(self, cfg, dtype):
        half = cfg.dk // 2
        self.angle = (1.0 / 10000 ** torch.linspace(0, 1, half, dtype=torch.float64)).repeat_interleave(2)
        self.log_gamma = torch.log(1 - 2.0 ** (-5 - torch.arange(cfg.heads, dtype=torch.float64)))
        self.gamma = torch.exp(self.log_gamma).to(dtype)
        self.dtype = dtype
        self._rot, self._par, self._chunk = {}, {}, {}

    def rotation(self, start, T):
        key = (start, T)
        if key not in self._rot:
            pos = torch.arange(start, start + T, dtype=torch.float64)[:, None] * self.angle[None]
            val = (torch.sin(pos).to(self.dtype), torch.cos(pos).to(self.dtype))
            if T == 1:
                return val  # decode steps: every position differs, nothing to reuse
            self._rot[key] = val
        return self._rot[key]

    def parallel_mask(self, T):
        """[H,T,T] gamma^(n-m) for n >= m, each row divided by sqrt(its sum) (torchscale)."""
        if T not in self._par:
            self._par[T] = ChunkMasks(self.log_gamma, T, self.dtype).inner
        return self._par[T]

    def chunk_masks(self, B):
        if B not in self._chunk:
            self._chunk[B] = ChunkMasks(self.log_gamma, B, self.dtype)
        return self._chunk[B]

    def row_factors(self, start, T):
        """[T,H,1]: 1 / sqrt(sum_{i<=n} gamma^i) for positions n = start .. start+T-1."""
        n = torch.arange(start + 1, start + T + 1, dtype=torch.float64)[:, None]
        g = torch.exp(self.log_gamma)[None]
        return ((1 - g) / (1 - g ** n)).sqrt()[..., None].to(self.dtype)

    def scale_after(self, n):
        """sum_{i<n} gamma^i per head: the recurrent form's normaliser after n tokens."""
        g = torch.exp(self.log_gamma)
        return ((1 - g ** n) / (1 - g)).to(self.dtype)


class State:
    """Per layer (kv [b,H,dk,dv], scale [H]) in the recurrent form's normalisation
    (kv = S / sqrt(scale), S the pure state of docs/NUMERICS.md#retention), plus the tokens
    consumed."""

    def __init__(self, layers, position):
        self.layers, self.position = layers, position

    def clone(self):
        return State([(kv.clone(), s.clone()) for kv, s in self.layers], self.position)

    def nbytes(self):
        return sum(kv.numel() * kv.element_size() + s.numel() * s.element_size()
                   for kv, s in self.layers)


class MultiScaleRetention(nn.Module):
    """torchscale=True: torchscale's data-dependent scales too (the parallel rows divided by
    clamp(sum |row|, 1, 5e4), the chunkwise inner/cross scales). The RMS group norm cancels
    them up to its eps, so with them the forms agree only up to eps effects; without them
    (default) every form divides row n by sqrt(sum_{i<=n} gamma^i) and they agree to rounding."""

    def __init__(self, cfg, torchscale=False):
        super().__init__()
        self.cfg, self.torchscale = cfg, torchscale
        d, Dv = cfg.d, cfg.dv_total
        self.q_proj = Linear(d, d, bias=False)
        self.k_proj = Linear(d, d, bias=False)
        self.v_proj = Linear(d, Dv, bias=False)
        self.g_proj = Linear(d, Dv, bias=False)
        self.out_proj = Linear(Dv, d, bias=False)
        self.group_norm = RMSNorm(cfg.dv, cfg.eps, affine=False)
        self.scaling = cfg.dk ** -0.5

    # ---- the three forms; q, k: [b,H,T,dk], v: [b,H,T,dv]; outputs [b,T,H,dv] --------------

    def parallel(self, q, k, v, rel, position):
        if position:
            raise ValueError("the parallel form starts from an empty state")
        T = q.shape[2]
        qk = (q @ k.transpose(-1, -2)) * rel.parallel_mask(T)      # rows / sqrt(sum of decays)
        if self.torchscale:
            qk = qk / qk.abs().sum(-1, keepdim=True).clamp(min=1, max=5e4)
        out = (qk @ v).transpose(1, 2)
        # hand-off to the recurrent form: S = sum_m gamma^(T-1-m) k_m^T v_m
        weights = torch.exp(rel.log_gamma[:, None] * torch.arange(T - 1, -1, -1, dtype=torch.float64))
        S = (k * weights.to(q.dtype)[..., None]).transpose(-1, -2) @ v
        scale = rel.scale_after(T)
        return out, (S / scale.sqrt()[:, None, None], scale)

    def chunkwise(self, q, k, v, rel, layer_state, position, B):
        kv, scale = layer_state
        S = kv * scale.sqrt()[:, None, None]                    # the pure state
        T, nfull = q.shape[2], q.shape[2] // B
        outs = []
        chunks = self._chunks_torchscale if self.torchscale else self._chunks
        for lo, hi, size in ((0, nfull * B, B), (nfull * B, T, T - nfull * B)):
            if hi > lo:   # the full chunks at once, then a shorter last chunk if there is one
                out, S = chunks(q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi],
                                rel.chunk_masks(size), S)
                outs.append(out)
        out = torch.cat(outs, 1) if len(outs) > 1 else outs[0]
        new_scale = rel.scale_after(position + T)
        if not self.torchscale:  # row n / sqrt(sum_{i<=n} gamma^i), as the other two forms
            out = out * rel.row_factors(position, T)
        return out, (S / new_scale.sqrt()[:, None, None], new_scale)

    @staticmethod
    def _split(q, k, v, B):
        b, H, T, dk = q.shape
        dv, nc = v.shape[-1], T // B
        return (q.reshape(b, H, nc, B, dk).transpose(1, 2),     # [b,nc,H,B,dk]
                k.reshape(b, H, nc, B, dk).transpose(1, 2),
                v.reshape(b, H, nc, B, dv).transpose(1, 2), nc)

    @classmethod
    def _chunks(cls, q, k, v, m, S):
        """Chunkwise over T = nc * B from pure state S, unnormalised: inner-chunk parallel form
        plus the state before each chunk; returns the pure output and state."""
        b, H, T, _ = q.shape
        q, k, v, nc = cls._split(q, k, v, m.decay.shape[-1])
        kt = k.transpose(-1, -2)
        inner = ((q @ kt) * m.decay) @ v                          # inside each chunk: parallel
        kv = kt @ (v * m.value_raw)                               # each chunk's state update
        states = []
        for i in range(nc):                                       # across chunks: recurrence
            states.append(S)
            S = S * m.cross + kv[:, i]
        out = inner + (q * m.query_raw) @ torch.stack(states, 1)
        return out.transpose(2, 3).reshape(b, T, H, v.shape[-1]), S

    @classmethod
    def _chunks_torchscale(cls, q, k, v, m, S):
        """torchscale's chunk_recurrent_forward (its normalisations) over T = nc * B."""
        b, H, T, _ = q.shape
        q, k, v, nc = cls._split(q, k, v, m.decay.shape[-1])
        kt = k.transpose(-1, -2)
        qk = (q @ kt) * m.inner
        inner_scale = qk.abs().sum(-1, keepdim=True).clamp(min=1)
        inner = (qk / inner_scale) @ v
        kv = kt @ (v * m.value)
        state = S / m.value_sum                                   # in the chunks' units
        scale = state.abs().sum(-2, keepdim=True).amax(-1, keepdim=True).clamp(min=1)
        states, scales = [], []
        for i in range(nc):
            states.append(state / scale)
            scales.append(scale)
            state = state * m.cross + kv[:, i]
            scale = state.abs().sum(-2, keepdim=True).amax(-1, keepdim=True).clamp(min=1)
        cross_state, cross_scale = torch.stack(states, 1), torch.stack(scales, 1)
        cross = (q * m.query) @ cross_state
        all_scale = torch.maximum(inner_scale, cross_scale)
        out = inner * (inner_scale / all_scale) + cross * (cross_scale / all_scale)
        return out.transpose(2, 3).reshape(b, T, H, v.shape[-1]), state * m.value_sum

    @staticmethod
    def recurrent_step(q, k, v, rel, layer_state):
        """One token: scale' = gamma scale + 1, kv' = kv sqrt(scale) gamma / sqrt(scale')
        + k^T v / sqrt(scale'), o = q kv'."""
        kv, scale = layer_state
        g = rel.gamma
        new_scale = scale * g + 1
        inv_root = new_scale.rsqrt()
        decay, weight = (scale.sqrt() * g * inv_root)[:, None, None], inv_root[:, None, None]
        kv = torch.addcmul(kv * decay, k.transpose(-1, -2) @ v, weight)
        return (q @ kv).transpose(1, 2), (kv, new_scale)

    def forward(self, x, rel, form, layer_state, position, chunk):
        cfg = self.cfg
        b, T, _ = x.shape
        sin, cos = rel.rotation(position, T)
        q = self.q_proj(x).view(b, T, cfg.heads, cfg.dk).transpose(1, 2)
        k = (self.k_proj(x) * self.scaling).view(b, T, cfg.heads, cfg.dk).transpose(1, 2)
        v = self.v_proj(x).view(b, T, cfg.heads, cfg.dv).transpose(1, 2)
        g = self.g_proj(x)
        q, k = theta_shift(q, sin, cos), theta_shift(k, sin, cos)
        if form == "parallel":
            out, new_state = self.parallel(q, k, v, rel, position)
        elif form == "chunkwise":
            out, new_state = self.chunkwise(q, k, v, rel, layer_state, position, chunk)
        else:  # recurrent, token by token
            outs, new_state = [], layer_state
            for t in range(T):
                o, new_state = self.recurrent_step(q[:, :, t:t + 1], k[:, :, t:t + 1],
                                                   v[:, :, t:t + 1], rel, new_state)
                outs.append(o)
            out = torch.cat(outs, 1)
        out = self.group_norm(out).reshape(b, T, cfg.dv_total)
        return self.out_proj(F.silu(g) * out), new_state


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.glu = cfg.glu
        self.act = F.silu if cfg.act == "swish" else F.gelu
        self.fc1 = Linear(cfg.d, cfg.ffn, bias=not cfg.glu)
        self.fc2 = Linear(cfg.ffn, cfg.d, bias=not cfg.glu)
        if cfg.glu:
            self.gate = Linear(cfg.d, cfg.ffn, bias=False)

    def forward(self, x):
        h = self.act(self.fc1(x))
        return self.fc2(h * self.gate(x) if self.glu else h)


class DecoderLayer(nn.Module):
    def __init__(self, cfg, torchscale):
        super().__init__()
        self.retention_layer_norm = RMSNorm(cfg.d, cfg.eps)
        self.retention = MultiScaleRetention(cfg, torchscale)
        self.final_layer_norm = RMSNorm(cfg.d, cfg.eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x, rel, form, layer_state, position, chunk):
        y, new_state = self.retention(self.retention_layer_norm(x), rel, form, layer_state,
                                      position, chunk)
        x = x + y
        return x + self.ffn(self.final_layer_norm(x)), new_state


class RetNetDecoder(nn.Module):
    """Tensor names follow torchscale, so a torchscale state dict loads as it is."""

    def __init__(self, cfg, dtype=torch.float32, torchscale=False):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.d)
        if cfg.layernorm_embedding:
            self.layernorm_embedding = RMSNorm(cfg.d, cfg.eps)
        self.layers = nn.ModuleList(DecoderLayer(cfg, torchscale) for _ in range(cfg.layers))
        self.layer_norm = RMSNorm(cfg.d, cfg.eps)
        if not cfg.tied:
            self.output_projection = Linear(cfg.d, cfg.vocab, bias=False)
        self.rel = RelPos(cfg, dtype)
        self.to(dtype)

    def randomize(self, seed=0):
        """Matrices ~ N(0, 1/in), norm weights ~ 1 + N(0, 0.1), biases ~ N(0, 0.1) (as retnet's)."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    p.normal_(0, p.shape[1] ** -0.5, generator=gen)
                else:
                    p.normal_(1.0 if "norm" in name else 0.0, 0.1, generator=gen)
        return self

    def new_state(self, batch):
        c, p = self.cfg, next(self.parameters())
        return State([(torch.zeros(batch, c.heads, c.dk, c.dv, dtype=p.dtype),
                       torch.zeros(c.heads, dtype=p.dtype)) for _ in range(c.layers)], 0)

    def forward(self, tokens, form="parallel", state=None, chunk=None, logits="all"):
        """tokens [b,T] -> (logits [b,T or 1,vocab] or None, state after the tokens)."""
        state = state if state is not None else self.new_state(tokens.shape[0])
        chunk = chunk or self.cfg.chunk
        x = self.embed_tokens(tokens)
        if self.cfg.scale_embedding:
            x = x * math.sqrt(self.cfg.d)
        if self.cfg.layernorm_embedding:
            x = self.layernorm_embedding(x)
        new_layers = []
        for layer, layer_state in zip(self.layers, state.layers):
            x, s = layer(x, self.rel, form, layer_state, state.position, chunk)
            new_layers.append(s)
        new_state = State(new_layers, state.position + tokens.shape[1])
        if logits == "none":
            return None, new_state
        h = self.layer_norm(x if logits == "all" else x[:, -1:])
        out = self.output_projection(h) if not self.cfg.tied else F.linear(h, self.embed_tokens.weight)
        return out, new_state

    def step(self, tokens, state):
        """One recurrent decoding step: tokens [b,1]."""
        return self.forward(tokens, "recurrent", state)


def load_model_dir(model_dir, dtype=torch.float32, torchscale=False):
    cfg_dict = json.load(open(os.path.join(model_dir, "config.json")))
    model = RetNetDecoder(Config(cfg_dict), dtype, torchscale)
    weights = {k: torch.from_numpy(v) for k, v in
               read_safetensors(os.path.join(model_dir, "model.safetensors"), np.float32).items()}
    prefix = next(p for p in ("model.", "decoder.", "") if p + "embed_tokens.weight" in weights)
    sd = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
    if "lm_head.weight" in weights:
        sd["output_projection.weight"] = weights["lm_head.weight"]
    sd = {k: v for k, v in sd.items() if not k.startswith("retnet_rel_pos")}
    model.load_state_dict({k: v.to(dtype) for k, v in sd.items()}, strict=True)
    return model.eval(), cfg_dict


def rel_diff(a, b):
    return float((a - b).abs().max() / b.abs().max())


def check_forms(model, tokens, chunk, steps=3):
    """Logits of the three forms, and of `steps` recurrent steps after each form's state."""
    T = tokens.shape[1]
    res, decoded = {}, {}
    with torch.inference_mode():
        for form in ("parallel", "chunkwise", "recurrent"):
            logits, state = model(tokens, form, chunk=chunk)
            res[form] = logits
            nxt, outs = tokens[:, -1:], []
            for _ in range(steps):
                lg, state = model.step(nxt, state)
                outs.append(lg)
                nxt = lg[:, -1].argmax(-1, keepdim=True)
                nxt = (nxt * 0 + 7) % model.cfg.vocab  # the same tokens for every form
            decoded[form] = torch.cat(outs, 1)
        # the chunkwise form continuing from a state: a prompt read in two pieces
        cut = max(1, T // 3)
        a, st = model(tokens[:, :cut], "chunkwise", chunk=chunk)
        b, _ = model(tokens[:, cut:], "chunkwise", st, chunk=chunk)
        split = torch.cat([a, b], 1)
    base = res["recurrent"]
    return {
        "parallel_vs_recurrent": rel_diff(res["parallel"], base),
        "chunkwise_vs_recurrent": rel_diff(res["chunkwise"], base),
        "chunkwise_vs_parallel": rel_diff(res["chunkwise"], res["parallel"]),
        "chunkwise_in_two_pieces_vs_recurrent": rel_diff(split, base),
        "decode_after_parallel_vs_after_recurrent": rel_diff(decoded["parallel"], decoded["recurrent"]),
        "decode_after_chunkwise_vs_after_recurrent": rel_diff(decoded["chunkwise"], decoded["recurrent"]),
    }, res


class FlaDecoder:
    """fla's RetNetForCausalLM forward (docs/FORMATS.md, "fla") with plain torch ops, float32, for
    benchmarks/real_size.py: the parallel form over a prompt, then recurrent steps. Untied, with
    the output gate's fused norm and the MLP fused as fla-hub's uploads store it (gate_proj
    [2I, d]). w: {name without "model.": float32 tensor}."""

    def __init__(self, cfg, w):
        self.w = w
        self.d, self.h = cfg["hidden_size"], cfg["num_heads"]
        self.layers = cfg["num_hidden_layers"]
        self.dk = int(self.d * cfg["expand_k"]) // self.h
        self.dv = int(self.d * cfg["expand_v"]) // self.h
        self.eps = cfg.get("norm_eps", 1e-6)
        self.gammas = 1 - 2.0 ** (-5.0 - torch.arange(self.h, dtype=torch.float64))
        self.theta = 10000.0 ** (-2.0 * torch.arange(self.dk // 2, dtype=torch.float64) / self.dk)

    def rms(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def rotate(self, z, cos, sin):  # z [..., T, dk], halves
        half = self.dk // 2
        a, b = z[..., :half], z[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    def tables(self, positions):
        phase = positions.to(torch.float64)[:, None] * self.theta[None, :]
        return phase.cos().float(), phase.sin().float()

    def attn_in(self, i, x, cos, sin):
        p, w = f"layers.{i}.", self.w
        hid = self.rms(x, w[p + "attn_norm.weight"])
        T = x.shape[0]
        q = F.linear(hid, w[p + "attn.q_proj.weight"]).view(T, self.h, self.dk).transpose(0, 1)
        k = F.linear(hid, w[p + "attn.k_proj.weight"]).view(T, self.h, self.dk).transpose(0, 1)
        v = F.linear(hid, w[p + "attn.v_proj.weight"]).view(T, self.h, self.dv).transpose(0, 1)
        g = F.linear(hid, w[p + "attn.g_proj.weight"])
        return self.rotate(q, cos, sin) * self.dk ** -0.5, self.rotate(k, cos, sin), v, g

    def attn_out(self, i, x, o, g):
        p, w = f"layers.{i}.", self.w
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps)
        o = o * w[p + "attn.g_norm_swish_gate.weight"]
        o = o.transpose(0, 1).reshape(x.shape[0], self.h * self.dv) * F.silu(g)
        x = x + F.linear(o, w[p + "attn.o_proj.weight"])
        hid = self.rms(x, w[p + "mlp_norm.weight"])
        gate, up = F.linear(hid, w[p + "mlp.gate_proj.weight"]).chunk(2, -1)
        return x + F.linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])

    def logits(self, x):
        return F.linear(self.rms(x, self.w["norm.weight"]), self.w["lm_head.weight"])

    def prefill(self, tokens):
        """Parallel form over the prompt: logits of the last position and the states."""
        T = len(tokens)
        cos, sin = self.tables(torch.arange(T))
        n = torch.arange(T, dtype=torch.float64)
        diff = n[:, None] - n[None, :]
        decay = torch.where(diff >= 0, self.gammas[:, None, None] ** diff.clamp(min=0),
                            torch.zeros(1, dtype=torch.float64)).float()  # [H, T, T]
        last = (self.gammas[:, None] ** (T - 1 - n)[None, :]).float()  # [H, T]
        x = self.w["embeddings.weight"][tokens]
        states = []
        for i in range(self.layers):
            q, k, v, g = self.attn_in(i, x, cos, sin)
            o = ((q @ k.transpose(-1, -2)) * decay) @ v
            states.append((k * last[:, :, None]).transpose(-1, -2) @ v)  # [H, dk, dv]
            x = self.attn_out(i, x, o, g)
        return self.logits(x[-1:]), states

    def step(self, token, position, states):
        cos, sin = self.tables(torch.tensor([position]))
        x = self.w["embeddings.weight"][torch.tensor([token])]
        g32 = self.gammas.float()[:, None, None]
        for i in range(self.layers):
            q, k, v, g = self.attn_in(i, x, cos, sin)
            states[i] = g32 * states[i] + k.transpose(-1, -2) @ v
            x = self.attn_out(i, x, q @ states[i], g)
        return self.logits(x)


def load_fla(model_dir):
    """An fla checkpoint folder as (config, {name without "model.": float32 tensor})."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w = {k[len("model."):] if k.startswith("model.") else k: torch.from_numpy(v)
         for k, v in read_model_folder(model_dir, np.float32).items()}
    return cfg, w
