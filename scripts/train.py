#!/usr/bin/env python3
"""Train, evaluate, verify and sample a small byte-level RetNet (the function of docs/NUMERICS.md).

Written from docs/NUMERICS.md (RMSNorm variant, GLU FFN, no_scale_embedding, untied lm_head).
Pure PyTorch on the CPU. Run with Debian's interpreter, which has torch:

    /usr/bin/python3 scripts/train.py train  --out models/shakespeare      # train + export
    /usr/bin/python3 scripts/train.py eval   models/shakespeare             # continuous held-out nats/byte
    /usr/bin/python3 scripts/train.py check  models/shakespeare             # parallel = chunkwise = recurrent
    /usr/bin/python3 scripts/train.py sample models/shakespeare --prompt "ROMEO:"

Retention is computed in chunks with the state carried between them
(docs/NUMERICS.md#retention, "chunkwise"), including torchscale's scale factors: row n of the normalized decay is divided
by sqrt(c_n), c_n = sum_{i<=n} gamma^(n-i) = (1 - gamma^(n+1)) / (1 - gamma), and row n of
(Q K^T * D) by clamp(|row sum|, 1, 5e4). The row sums are themselves a retention with v = 1,
so every head carries, next to its dk x dv state S, a dk-vector z (z_n = gamma z_{n-1} + k_n).

Training reads the text as B parallel streams: each step takes the next `window` bytes of
every stream and starts from the (detached) retention state the previous step left, at the
true absolute positions, so the model trains in the same steady state in which the held-out
text is scored (one continuous sequence). Streams restart at fresh random offsets every
`segment` bytes.
"""
import argparse, ctypes, json, math, os, sys, time

# Threads: OMP_NUM_THREADS sets torch's own pool (train sets it through torch.set_num_threads);
# Debian's torch also calls OpenBLAS (pthread build), whose pool OPENBLAS_NUM_THREADS sizes and
# which must be set before torch loads. Both default to 1; the demo model was trained with both
# at 2 (the machine's two cores: 1.1 s per step against 3.1 s with one thread).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
try:   # keep freed activations in the heap (no mmap/munmap page-fault storm every step)
    _libc = ctypes.CDLL("libc.so.6")
    _libc.mallopt(-3, 32 << 20)        # M_MMAP_THRESHOLD: the largest allowed value, 32 MiB
    _libc.mallopt(-1, 1 << 40)         # M_TRIM_THRESHOLD: never give the heap back
    _libc.mallopt(-2, 256 << 20)       # M_TOP_PAD
except OSError:
    pass

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import retnet as reference  # noqa: E402
from reference.safetensors_io import read_safetensors, write_safetensors  # noqa: E402

# Tiny Shakespeare (the char-rnn corpus, 1,115,394 bytes); point RETNET_TRAIN_DATA at your copy.
DATA = os.environ.get("RETNET_TRAIN_DATA", "tinyshakespeare.txt")


# ----------------------------------------------------------------------------- model
class Config:
    def __init__(self, **kw):
        self.vocab_size = kw.get("vocab_size", 256)
        self.decoder_embed_dim = kw.get("decoder_embed_dim", 256)
        self.decoder_value_embed_dim = kw.get("decoder_value_embed_dim", 512)
        self.decoder_retention_heads = kw.get("decoder_retention_heads", 4)
        self.decoder_ffn_embed_dim = kw.get("decoder_ffn_embed_dim", 512)
        self.decoder_layers = kw.get("decoder_layers", 4)
        self.activation_fn = kw.get("activation_fn", "swish")
        self.layernorm_eps = kw.get("layernorm_eps", 1e-6)
        self.recurrent_chunk_size = kw.get("recurrent_chunk_size", 64)

    def to_json(self):
        return {
            "model_type": "retnet",
            "vocab_size": self.vocab_size,
            "decoder_embed_dim": self.decoder_embed_dim,
            "decoder_value_embed_dim": self.decoder_value_embed_dim,
            "decoder_retention_heads": self.decoder_retention_heads,
            "decoder_ffn_embed_dim": self.decoder_ffn_embed_dim,
            "decoder_layers": self.decoder_layers,
            "activation_fn": self.activation_fn,
            "layernorm_eps": self.layernorm_eps,
            "no_scale_embedding": True,
            "layernorm_embedding": False,
            "tie_word_embeddings": False,
            "share_decoder_input_output_embed": False,
            "use_glu": True,
            "norm_type": "rmsnorm",
            "recurrent_chunk_size": self.recurrent_chunk_size,
        }


def rms_norm(x, eps, weight=None):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


class Tables:
    """float64-computed constants (rotation, decays, scale factors), cached per dtype."""

    def __init__(self, cfg):
        H = cfg.decoder_retention_heads
        self.dk = cfg.decoder_embed_dim // H
        self.angle = 1.0 / 10000 ** np.linspace(0, 1, self.dk // 2)           # float64 [dk/2]
        self.gamma = 1 - 2.0 ** (-5 - np.arange(H, dtype=np.float64))         # [H]
        self.cache = {}

    def rot(self, pos0, T, dtype):
        """exp(i n angle_j) [T, 1, dk/2] (complex) for absolute positions pos0 .. pos0+T-1."""
        ang = (np.arange(pos0, pos0 + T, dtype=np.float64)[:, None] * self.angle)  # [T, dk/2]
        cdt = torch.complex128 if dtype == torch.float64 else torch.complex64
        return torch.tensor(np.exp(1j * ang), dtype=cdt)[:, None, :]

    def chunk(self, C, dtype):
        key = (C, dtype)
        if key not in self.cache:
            g = self.gamma[:, None, None]
            j = np.arange(C)[:, None]
            i = np.arange(C)[None, :]
            Dc = np.where(j >= i, g ** np.maximum(j - i, 0), 0.0)              # [H, C, C]
            wq = self.gamma[:, None] ** (np.arange(C) + 1)                      # [H, C] gamma^(j+1)
            wk = self.gamma[:, None] ** (C - 1 - np.arange(C))                  # [H, C] gamma^(C-1-i)
            gC = self.gamma ** C                                                # [H]
            t = lambda a: torch.tensor(a, dtype=dtype)
            self.cache[key] = (t(Dc), t(wq), t(wk), t(gC))
        return self.cache[key]

    def inv_sqrt_c(self, pos0, T, dtype):
        """1/sqrt(c_n) [H, T] with c_n = (1 - gamma^(n+1)) / (1 - gamma)."""
        n = np.arange(pos0, pos0 + T, dtype=np.float64)
        g = self.gamma[:, None]
        c = (1 - g ** (n[None, :] + 1)) / (1 - g)
        return torch.tensor(1 / np.sqrt(c), dtype=dtype)


def rotate(x, rot):
    """x [B, T, H, dk] -> [B, H, T, dk]: each pair (2i, 2i+1) = (a, b) read as the complex
    number a + ib and multiplied by exp(i n angle_i): (a cos - b sin, b cos + a sin)."""
    B, T, H, dk = x.shape
    xc = torch.view_as_complex(x.reshape(B, T, H, dk // 2, 2))
    return torch.view_as_real(xc * rot).reshape(B, T, H, dk).transpose(1, 2)


def retention(q, k, v, state, pos0, C, tab):
    """Multi-head retention of one window, chunk size C, state carried in and out.

    q, k [B, H, T, dk] (rotated, k already scaled), v [B, H, T, dv]; T % C == 0.
    state: (S [B,H,dk,dv], z [B,H,dk]) un-normalized sums over all earlier positions, or None.
    Returns the per-head output after torchscale's scale factors (before the per-head norm),
    and the new state.
    """
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    assert T % C == 0
    nc = T // C
    dt = q.dtype
    Dc, wq, wk, gC = tab.chunk(C, dt)
    qc = q.reshape(B, H, nc, C, dk)
    kc = k.reshape(B, H, nc, C, dk)
    vc = v.reshape(B, H, nc, C, dv)
    inner = (qc @ kc.transpose(-1, -2)) * Dc[:, None]                       # [B,H,nc,C,C]
    o = inner @ vc                                                          # [B,H,nc,C,dv]
    a = inner.sum(-1)                                                       # [B,H,nc,C]
    kw = kc * wk[:, None, :, None]                                          # gamma^(C-1-i) k_i
    KV = kw.transpose(-1, -2) @ vc                                          # [B,H,nc,dk,dv]
    Z = kw.sum(-2)                                                          # [B,H,nc,dk]
    if state is None:
        S = q.new_zeros(B, H, dk, dv)
        z = q.new_zeros(B, H, dk)
    else:
        S, z = state
    g = gC[:, None, None]
    Ss, zs = [], []
    for c in range(nc):                                                     # state before chunk c
        Ss.append(S)
        zs.append(z)
        S = g * S + KV[:, :, c]
        z = gC[:, None] * z + Z[:, :, c]
    Sb = torch.stack(Ss, 2)                                                 # [B,H,nc,dk,dv]
    zb = torch.stack(zs, 2)                                                 # [B,H,nc,dk]
    qw = qc * wq[:, None, :, None]                                          # gamma^(j+1) q_j
    o = o + qw @ Sb
    a = a + (qw @ zb.unsqueeze(-1)).squeeze(-1)
    o = o.reshape(B, H, T, dv)
    a = a.reshape(B, H, T)
    isc = tab.inv_sqrt_c(pos0, T, dt)                                       # [H, T]
    # normalized decay: o/sqrt(c), rowsum a/sqrt(c); then divide by clamp(|rowsum|, 1, 5e4)
    a = a * isc
    o = o * (isc / a.abs().clamp(1, 5e4)).unsqueeze(-1)
    return o, (S, z)


class LinearSplit(torch.autograd.Function):
    """F.linear(x, W).split(sizes, -1), with a backward that assembles the output gradient by
    plain copies (torch 1.13's cat/split backward is very slow on this CPU for these shapes)."""

    @staticmethod
    def forward(ctx, x, W, sizes):
        ctx.save_for_backward(x, W)
        ctx.sizes = sizes
        return tuple(F.linear(x, W).split(sizes, -1))

    @staticmethod
    def backward(ctx, *grads):
        x, W = ctx.saved_tensors
        G = x.new_empty(x.shape[:-1] + (W.shape[0],))
        o = 0
        for g, n in zip(grads, ctx.sizes):
            if g is None:
                G[..., o:o + n].zero_()
            else:
                G[..., o:o + n].copy_(g)
            o += n
        G2 = G.reshape(-1, W.shape[0])
        gx = (G2 @ W).view(x.shape) if ctx.needs_input_grad[0] else None
        gW = G2.t() @ x.reshape(-1, x.shape[-1]) if ctx.needs_input_grad[1] else None
        return gx, gW, None


class RetNet(torch.nn.Module):
    """Fused projections: qkvg = [q; k; v; g] and ffn_in = [fc1; gate]; split on export."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, Dv, F_, L, V = (cfg.decoder_embed_dim, cfg.decoder_value_embed_dim,
                           cfg.decoder_ffn_embed_dim, cfg.decoder_layers, cfg.vocab_size)
        self.H = cfg.decoder_retention_heads
        self.tab = Tables(cfg)
        P = torch.nn.Parameter
        self.embed = P(torch.randn(V, d))
        self.ln_ret = torch.nn.ParameterList([P(torch.ones(d)) for _ in range(L)])
        self.qkvg = torch.nn.ParameterList([P(torch.randn(2 * d + 2 * Dv, d) * d ** -0.5) for _ in range(L)])
        self.out = torch.nn.ParameterList([P(torch.randn(d, Dv) * (Dv ** -0.5) / math.sqrt(2 * L)) for _ in range(L)])
        self.ln_ffn = torch.nn.ParameterList([P(torch.ones(d)) for _ in range(L)])
        self.ffn_in = torch.nn.ParameterList([P(torch.randn(2 * F_, d) * d ** -0.5) for _ in range(L)])
        self.ffn_out = torch.nn.ParameterList([P(torch.randn(d, F_) * (F_ ** -0.5) / math.sqrt(2 * L)) for _ in range(L)])
        self.ln_f = P(torch.ones(d))
        self.lm_head = P(torch.randn(V, d) * d ** -0.5 * 0.5)

    dropout = 0.0   # training only: on each block's output (before the residual add)

    def drop(self, x):
        return F.dropout(x, self.dropout, self.training) if self.dropout > 0 else x

    def act(self, x):
        return F.silu(x) if self.cfg.activation_fn == "swish" else F.gelu(x)

    def forward(self, tokens, state=None, pos0=0, chunk=64):
        """tokens [B, T] (T % chunk == 0); state: list per layer or None. -> logits, state."""
        cfg = self.cfg
        d, Dv, H = cfg.decoder_embed_dim, cfg.decoder_value_embed_dim, self.H
        dk, dv, eps = d // H, Dv // H, cfg.layernorm_eps
        B, T = tokens.shape
        x = self.embed[tokens]
        rot = self.tab.rot(pos0, T, x.dtype)
        new_state = []
        for l in range(cfg.decoder_layers):
            h = rms_norm(x, eps, self.ln_ret[l])
            q, k, v, g = LinearSplit.apply(h, self.qkvg[l], [d, d, Dv, Dv])
            q = rotate(q.view(B, T, H, dk), rot)
            k = rotate(k.view(B, T, H, dk) * dk ** -0.5, rot)
            v = v.view(B, T, H, dv).transpose(1, 2)
            o, st = retention(q, k, v, None if state is None else state[l], pos0, chunk, self.tab)
            new_state.append(st)
            o = rms_norm(o, eps).transpose(1, 2).reshape(B, T, Dv)
            x = x + self.drop(F.linear(F.silu(g) * o, self.out[l]))
            h = rms_norm(x, eps, self.ln_ffn[l])
            f1, gt = LinearSplit.apply(h, self.ffn_in[l], [cfg.decoder_ffn_embed_dim] * 2)
            x = x + self.drop(F.linear(self.act(f1) * gt, self.ffn_out[l]))
        x = rms_norm(x, eps, self.ln_f)
        return F.linear(x, self.lm_head), new_state

    def forward_any(self, tokens, state=None, pos0=0, chunk=64):
        """Like forward, for any T: full chunks, then one shorter chunk for the remainder."""
        T = tokens.shape[1]
        n = (T // chunk) * chunk
        outs = []
        if n:
            lg, state = self.forward(tokens[:, :n], state, pos0, chunk)
            outs.append(lg)
        if T > n:
            lg, state = self.forward(tokens[:, n:], state, pos0 + n, T - n)
            outs.append(lg)
        return torch.cat(outs, 1), state

    # ------------------------------------------------------------------ HF tensor names
    def hf_tensors(self):
        cfg = self.cfg
        d, Dv = cfg.decoder_embed_dim, cfg.decoder_value_embed_dim
        t = {"model.embed_tokens.weight": self.embed}
        for l in range(cfg.decoder_layers):
            p = f"model.layers.{l}."
            q, k, v, g = self.qkvg[l].split([d, d, Dv, Dv], 0)
            f1, gt = self.ffn_in[l].chunk(2, 0)
            t[p + "retention_layer_norm.weight"] = self.ln_ret[l]
            t[p + "retention.q_proj.weight"] = q
            t[p + "retention.k_proj.weight"] = k
            t[p + "retention.v_proj.weight"] = v
            t[p + "retention.g_proj.weight"] = g
            t[p + "retention.out_proj.weight"] = self.out[l]
            t[p + "final_layer_norm.weight"] = self.ln_ffn[l]
            t[p + "ffn.fc1.weight"] = f1
            t[p + "ffn.gate.weight"] = gt
            t[p + "ffn.fc2.weight"] = self.ffn_out[l]
        t["model.layer_norm.weight"] = self.ln_f
        t["lm_head.weight"] = self.lm_head
        return {k: v.detach() for k, v in t.items()}

    @torch.no_grad()
    def load_tensors(self, w):
        """w: name -> tensor, HF ("model." + lm_head), torchscale ("" + output_projection) or fairseq."""
        cfg = self.cfg
        pre = next(p for p in ("model.", "decoder.", "") if p + "embed_tokens.weight" in w)
        get = lambda n: w[pre + n]
        self.embed.copy_(get("embed_tokens.weight"))
        for l in range(cfg.decoder_layers):
            p = f"layers.{l}."
            self.qkvg[l].copy_(torch.cat([get(p + f"retention.{n}_proj.weight") for n in "qkvg"], 0))
            self.out[l].copy_(get(p + "retention.out_proj.weight"))
            self.ln_ret[l].copy_(get(p + "retention_layer_norm.weight"))
            self.ln_ffn[l].copy_(get(p + "final_layer_norm.weight"))
            self.ffn_in[l].copy_(torch.cat([get(p + "ffn.fc1.weight"), get(p + "ffn.gate.weight")], 0))
            self.ffn_out[l].copy_(get(p + "ffn.fc2.weight"))
        self.ln_f.copy_(get("layer_norm.weight"))
        head = w.get("lm_head.weight", w.get(pre + "output_projection.weight", w.get("output_projection.weight")))
        self.lm_head.copy_(head if head is not None else get("embed_tokens.weight"))


def load_safetensors(path):
    """Every tensor of the file as a float32 torch tensor."""
    return {k: torch.from_numpy(v) for k, v in read_safetensors(path, np.float32).items()}


def load_model(model_dir, dtype=torch.float32):
    cfg_json = json.load(open(os.path.join(model_dir, "config.json")))
    cfg = Config(**cfg_json)
    m = RetNet(cfg)
    m.load_tensors(load_safetensors(os.path.join(model_dir, "model.safetensors")))
    return m.to(dtype)


# ----------------------------------------------------------------------------- data / eval
def load_data():
    raw = np.frombuffer(open(DATA, "rb").read(), np.uint8)
    n = int(len(raw) * 0.9)
    return raw[:n], raw[n:]


@torch.no_grad()
def eval_continuous(model, data, chunk=64, window=1024, streams=1):
    """Mean nats/byte of predicting data[1:] from everything before, one continuous sequence
    from an empty state (streams > 1: split into that many independent sequences, faster)."""
    data = torch.tensor(np.asarray(data), dtype=torch.long)
    N = (len(data) - 1) // streams
    x = torch.stack([data[s * N:(s + 1) * N + 1] for s in range(streams)])  # [S, N+1]
    state, total, count = None, 0.0, 0
    for p in range(0, N, window):
        inp = x[:, p:min(p + window, N)]
        tgt = x[:, p + 1:min(p + window, N) + 1]
        lg, state = model.forward_any(inp, state, p, chunk)
        total += F.cross_entropy(lg.reshape(-1, lg.shape[-1]).double(), tgt.reshape(-1), reduction="sum").item()
        count += tgt.numel()
    return total / count


@torch.no_grad()
def generate(model, prompt, n, temperature=0.8, seed=0):
    g = torch.Generator().manual_seed(seed)
    toks = list(prompt.encode())
    lg, state = model.forward_any(torch.tensor([toks]), None, 0, 64)
    pos, out = len(toks), []
    for _ in range(n):
        logits = lg[0, -1].double()
        if temperature <= 0:
            t = int(logits.argmax())
        else:
            t = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=g))
        out.append(t)
        lg, state = model.forward(torch.tensor([[t]]), state, pos, 1)       # recurrent form
        pos += 1
    return prompt + bytes(out).decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------- training
def export(model, out_dir, dtype="F16"):
    os.makedirs(out_dir, exist_ok=True)
    json.dump(model.cfg.to_json(), open(os.path.join(out_dir, "config.json"), "w"), indent=2)
    tensors = {k: v.to(torch.float32).numpy() for k, v in model.hf_tensors().items()}
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, dtype, metadata={"format": "pt"})


def train(a):
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # 1 unless the command line sets it
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    train_data, held = load_data()
    cfg = Config(decoder_embed_dim=a.d, decoder_value_embed_dim=a.dv, decoder_retention_heads=a.heads,
                 decoder_ffn_embed_dim=a.ffn, decoder_layers=a.layers, activation_fn=a.act,
                 recurrent_chunk_size=a.chunk)
    model = RetNet(cfg)
    if a.init:  # continue from an exported model (a second stage); its config wins
        cfg = Config(**json.load(open(os.path.join(a.init, "config.json"))))
        model = RetNet(cfg)
        model.load_tensors(load_safetensors(os.path.join(a.init, "model.safetensors")))
    model.dropout = a.dropout
    nparam = sum(p.numel() for p in model.parameters())
    log = open(a.log, "w") if a.log else None

    def say(s):
        print(s, flush=True)
        if log:
            log.write(s + "\n")
            log.flush()

    say("command: " + " ".join([sys.executable] + sys.argv))
    say(f"threads: torch {torch.get_num_threads()}, OPENBLAS_NUM_THREADS {os.environ['OPENBLAS_NUM_THREADS']}")
    say("config: " + json.dumps(cfg.to_json()))
    say(f"parameters: {nparam} ({nparam / 1e6:.3f} M); train bytes {len(train_data)}, held-out bytes {len(held)}")
    say(f"hyper: {json.dumps(vars(a))}")
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() == 2 and n != "embed" else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.98), eps=1e-8)
    data = torch.tensor(train_data.astype(np.int64))
    B, T = a.batch, a.window
    steps_per_seg = max(1, a.segment // T)
    t0 = time.time()
    budget = a.minutes * 60
    step, state, offs, pos0 = 0, None, None, 0
    ema = None
    held_small = held[:a.eval_bytes]
    while True:
        elapsed = time.time() - t0
        progress = max(step / a.max_steps, elapsed / budget)
        if progress >= 1:
            break
        if step % steps_per_seg == 0:                  # fresh random streams, empty state
            offs = rng.integers(0, len(data) - a.segment - 1, B)
            state, pos0 = None, 0
        idx = torch.tensor(offs + pos0)[:, None] + torch.arange(T + 1)[None]
        chunk = data[idx]
        if step < a.warmup:
            lr = a.lr * (step + 1) / a.warmup
        else:
            lr = a.lr * (a.min_lr + (1 - a.min_lr) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))
        for gr in opt.param_groups:
            gr["lr"] = lr
        logits, state = model(chunk[:, :-1], state, pos0, a.chunk)
        state = [(S.detach(), z.detach()) for S, z in state]
        loss = F.cross_entropy(logits.reshape(-1, 256), chunk[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        pos0 += T
        step += 1
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % a.log_every == 0:
            say(f"step {step} time {time.time() - t0:.0f}s lr {lr:.2e} loss {loss.item():.4f} ema {ema:.4f} gnorm {gn:.2f}")
        if step % a.eval_every == 0:
            model.eval()
            hl = eval_continuous(model, held_small, chunk=a.chunk, window=1024, streams=1)
            model.train()
            say(f"eval step {step} time {time.time() - t0:.0f}s train_ema {ema:.4f} heldout_first{len(held_small)} {hl:.4f}")
    wall = time.time() - t0
    say(f"done: {step} steps, {step * B * T} tokens, training wall time {wall:.0f}s ({wall / 60:.1f} min)")
    export(model, a.out)
    # final: continuous held-out on the exported (F16-rounded) weights
    m16 = load_model(a.out)
    t1 = time.time()
    hl = eval_continuous(m16, held, chunk=a.chunk, window=1024, streams=1)
    say(f"final continuous held-out ({len(held) - 1} predictions, F16 weights): {hl:.4f} nats/byte "
        f"({hl / math.log(2):.4f} bits/byte), eval {time.time() - t1:.0f}s")
    say("sample (T=0.8, seed 0):\n" + generate(m16, "ROMEO:", 400, 0.8, 0))
    say("sample (greedy):\n" + generate(m16, "ROMEO:", 300, 0.0, 0))


# ----------------------------------------------------------------------------- checks
@torch.no_grad()
def check(a):
    """parallel (one chunk) == chunkwise == recurrent == the NumPy reference
    (scripts/reference/retnet.py), float64, on the start of the held-out text; plus the
    torchscale fixture, if present."""
    torch.set_num_threads(1)
    m = load_model(a.model_dir, torch.float64)
    _, held = load_data()
    toks = torch.tensor(held[:a.n].astype(np.int64))[None]
    par, _ = m.forward(toks, None, 0, a.n)
    ch, _ = m.forward_any(toks, None, 0, 64)
    ch2 = []
    st = None
    for p in range(0, a.n, 100):                                     # windows of 100 with chunk 7
        lg, st = m.forward_any(toks[:, p:p + 100], st, p, 7)
        ch2.append(lg)
    ch2 = torch.cat(ch2, 1)
    rec, st = [], None
    for p in range(a.n):
        lg, st = m.forward(toks[:, p:p + 1], st, p, 1)
        rec.append(lg)
    rec = torch.cat(rec, 1)
    rel = lambda x: ((x - par).abs().max() / par.abs().max()).item()
    print(f"max rel diff vs parallel (T={a.n}): chunkwise64 {rel(ch):.2e}, windows100/chunk7 {rel(ch2):.2e}, recurrent {rel(rec):.2e}")
    want = torch.from_numpy(reference.Model(a.model_dir).logits(toks[0].numpy()))
    print(f"NumPy reference vs parallel (T={a.n}): max rel diff {rel(want[None]):.2e}")
    fx = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                      "torchscale-tiny")
    if os.path.exists(fx):
        fm = load_model(fx, torch.float64)
        tk = torch.tensor(np.load(f"{fx}/tokens.npy").astype(np.int64))
        ref = torch.tensor(np.load(f"{fx}/logits.npy")).double()
        for name, out in (("parallel", fm.forward(tk, None, 0, tk.shape[1])[0]),
                          ("chunk4", fm.forward_any(tk, None, 0, 4)[0])):
            print(f"torchscale-tiny fixture {name}: max rel diff {((out - ref).abs().max() / ref.abs().max()).item():.2e}")
    if a.ref:
        ref = np.load(a.ref).astype(np.float64)
        tk = torch.tensor([int(t) for t in open(a.tokens).read().split(",")])[None]
        out = m.forward(tk, None, 0, tk.shape[1])[0][0].numpy()
        print(f"vs {a.ref} (T={tk.shape[1]}): max abs diff {np.abs(out - ref).max():.3e}, "
              f"max rel diff {np.abs(out - ref).max() / np.abs(ref).max():.3e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train")
    t.add_argument("--out", default="models/shakespeare")
    t.add_argument("--log", default="")
    t.add_argument("--d", type=int, default=256)
    t.add_argument("--dv", type=int, default=512)
    t.add_argument("--heads", type=int, default=4)
    t.add_argument("--ffn", type=int, default=512)
    t.add_argument("--layers", type=int, default=4)
    t.add_argument("--act", default="swish")
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--window", type=int, default=256)
    t.add_argument("--chunk", type=int, default=64)
    t.add_argument("--segment", type=int, default=8192)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--min_lr", type=float, default=0.05, help="final lr as a fraction of --lr")
    t.add_argument("--wd", type=float, default=0.1)
    t.add_argument("--dropout", type=float, default=0.1)
    t.add_argument("--clip", type=float, default=1.0)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--minutes", type=float, default=40)
    t.add_argument("--max_steps", type=int, default=10 ** 9)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--init", default="", help="start from this model folder's weights")
    t.add_argument("--log_every", type=int, default=10)
    t.add_argument("--eval_every", type=int, default=200)
    t.add_argument("--eval_bytes", type=int, default=16384)
    e = sub.add_parser("eval")
    e.add_argument("model_dir")
    e.add_argument("--chunk", type=int, default=64)
    e.add_argument("--window", type=int, default=1024)
    c = sub.add_parser("check")
    c.add_argument("model_dir")
    c.add_argument("--n", type=int, default=300)
    c.add_argument("--ref", help="logits .npy from scripts/reference/retnet.py")
    c.add_argument("--tokens", help="file with the comma-separated token ids given to it")
    s = sub.add_parser("sample")
    s.add_argument("model_dir")
    s.add_argument("--prompt", default="ROMEO:")
    s.add_argument("--n", type=int, default=400)
    s.add_argument("--temperature", type=float, default=0.8)
    s.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.mode == "train":
        train(a)
    elif a.mode == "eval":
        torch.set_num_threads(1)
        m = load_model(a.model_dir)
        _, held = load_data()
        t0 = time.time()
        hl = eval_continuous(m, held, a.chunk, a.window, 1)
        print(f"continuous held-out: {len(held)} bytes, {len(held) - 1} predictions, "
              f"{hl:.4f} nats/byte ({hl / math.log(2):.4f} bits/byte), {time.time() - t0:.0f}s")
    elif a.mode == "check":
        check(a)
    else:
        torch.set_num_threads(1)
        print(generate(load_model(a.model_dir), a.prompt, a.n, a.temperature, a.seed))


if __name__ == "__main__":
    main()
