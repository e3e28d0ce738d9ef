#!/usr/bin/env python3
"""What f16, bf16, q8 and q4 weights cost a model, from files `retnet` writes (docs/PERFORMANCE.md,
"Weight types: quality", has the commands and the results). Needs NumPy.

  weight_type_quality.py weights MODEL.safetensors
      relative RMS error of the linear maps' weights under f16, bf16, q8, q4 (scale and minimum) and
      three symmetric 4-bit roundings, computed here from the formats' definitions
  weight_type_quality.py logits DIR TEXT
      DIR/logits_{f32,f16,bf16,q8,q4}.npy from `retnet score --file TEXT --logits-out`: against f32,
      the relative logit error (max |x - r| / max |r|, as the tests compute it, and RMS), the
      share of positions whose most likely next byte is f32's, KL(f32 || type), nats/byte
  weight_type_quality.py paired F32.npy A.npy B.npy TEXT
      the per-position difference of B's and A's negative log-likelihoods, relative to f32's
      nats/byte, with a block-bootstrap interval (blocks of 1024 bytes)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
from reference.safetensors_io import read_safetensors  # noqa: E402

CHUNK = 8192  # logit rows read at a time


def half(x):
    return x.astype(np.float16).astype(np.float32)


def q4_minimum(w):  # w: [blocks, 32]; scale = (max - min) / 15, minimum = min, both binary16
    lo, hi = w.min(1, keepdims=True), w.max(1, keepdims=True)
    s, m = half((hi - lo) / 15), half(lo)
    n = np.where(s > 0, np.clip(np.rint((w - m) / np.where(s > 0, s, 1)), 0, 15), 0)
    return s * n + m


def q4_symmetric(w, rule):  # w = d * (n - 8), n in [0, 15]
    amax = np.abs(w).max(1, keepdims=True)
    extreme = np.take_along_axis(w, np.abs(w).argmax(1)[:, None], 1)
    d = half({"q4_0": extreme / -8, "max/7": amax / 7, "max/7.5": amax / 7.5}[rule])
    n = np.where(d != 0, np.clip(np.rint(w / np.where(d != 0, d, 1)) + 8, 0, 15), 8)
    return d * (n - 8)


def q8(w):
    d = half(np.abs(w).max(1, keepdims=True) / 127)
    return d * np.where(d > 0, np.clip(np.rint(w / np.where(d > 0, d, 1)), -127, 127), 0)


def bf16(w):  # round to nearest even
    u = w.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def weights(path):
    schemes = {
        "f16": half,
        "bf16": bf16,
        "q8": q8,
        "q4 (scale, minimum)": q4_minimum,
        "q4 symmetric, llama.cpp q4_0 (d = signed extreme / -8)": lambda w: q4_symmetric(w, "q4_0"),
        "q4 symmetric, d = max|w| / 7": lambda w: q4_symmetric(w, "max/7"),
        "q4 symmetric, d = max|w| / 7.5": lambda w: q4_symmetric(w, "max/7.5"),
    }
    error = dict.fromkeys(schemes, 0.0)
    norm, count, centred = 0.0, 0, []
    for name, w in read_safetensors(path, np.float32).items():
        if w.ndim != 2:
            continue  # norms stay in the model's scalar type
        if w.shape[1] % 32:
            sys.exit(f"{name}: rows of {w.shape[1]} values are not whole blocks of 32")
        x = w.reshape(-1, 32)
        norm += float((x.astype(np.float64) ** 2).sum())
        count += x.size
        centred.append(np.abs(x.mean(1)) / np.maximum(np.abs(x).max(1), 1e-30))
        for k, f in schemes.items():
            error[k] += float(((f(x).astype(np.float64) - x) ** 2).sum())
    print(f"{count} weights in linear maps; |mean| / max|w| of a block of 32: median "
          f"{np.median(np.concatenate(centred)):.3f}")
    for k in schemes:
        print(f"{k}: relative RMS error {np.sqrt(error[k] / norm):.4f}")


def text_ids(path):
    return np.frombuffer(open(path, "rb").read(), dtype=np.uint8).astype(np.int64)


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(1, keepdims=True))


def logits(directory, text):
    ids = text_ids(text)
    ref = np.load(f"{directory}/logits_f32.npy", mmap_mode="r")
    T = ref.shape[0] - 1  # row t predicts byte t + 1
    if ref.shape[0] != len(ids):
        sys.exit(f"{len(ids)} bytes of text but {ref.shape[0]} rows of logits")
    for t in ["f16", "bf16", "q8", "q4"]:
        got = np.load(f"{directory}/logits_{t}.npy", mmap_mode="r")
        num = den = se = sr = kl = nll = nll_ref = 0.0
        agree = 0
        for s in range(0, T + 1, CHUNK):
            e = min(T + 1, s + CHUNK)
            r, g = np.asarray(ref[s:e], np.float64), np.asarray(got[s:e], np.float64)
            num, den = max(num, float(np.abs(g - r).max())), max(den, float(np.abs(r).max()))
            se, sr = se + float(((g - r) ** 2).sum()), sr + float((r**2).sum())
            e = min(T, e)  # the last row predicts nothing
            if e <= s:
                continue
            a, b = log_softmax(ref[s:e]), log_softmax(got[s:e])
            agree += int((a.argmax(1) == b.argmax(1)).sum())
            kl += float((np.exp(a) * (a - b)).sum())
            y = ids[s + 1 : e + 1]
            nll -= float(b[np.arange(e - s), y].sum())
            nll_ref -= float(a[np.arange(e - s), y].sum())
        print(f"{t}: logit error max {num / den:.3g}, RMS {np.sqrt(se / sr):.3g}; most likely byte "
              f"= f32's at {agree} of {T} positions ({100 * agree / T:.2f} %); KL(f32 || {t}) "
              f"{kl / T:.2e} nats/byte; {nll / T:.6f} nats/byte (f32 {nll_ref / T:.6f}, "
              f"{100 * (nll / nll_ref - 1):+.4f} %)")


def nll_of(path, ids):
    x = np.load(path, mmap_mode="r")
    T = x.shape[0] - 1
    out = np.empty(T)
    for s in range(0, T, CHUNK):
        e = min(T, s + CHUNK)
        out[s:e] = -log_softmax(x[s:e])[np.arange(e - s), ids[s + 1 : e + 1]]
    return out


def paired(f32, path_a, path_b, text):
    ids = text_ids(text)
    ref, a, b = (nll_of(p, ids) for p in (f32, path_a, path_b))
    d = (b - a) / ref.mean()
    B = 1024
    n = len(d) // B
    blocks = d[: n * B].reshape(n, B).mean(1)
    rng = np.random.default_rng(0)
    boot = np.array([blocks[rng.integers(0, n, n)].mean() for _ in range(2000)])
    for name, x in [(path_a, a), (path_b, b)]:
        print(f"{name}: {100 * (x.mean() / ref.mean() - 1):+.3f} % nats/byte against f32")
    print(f"{path_b} - {path_a}: {100 * d.mean():+.3f} % of f32's nats/byte; block bootstrap "
          f"({n} blocks of {B}): SE {100 * boot.std():.3f} %, 95 % interval "
          f"[{100 * np.percentile(boot, 2.5):+.3f}, {100 * np.percentile(boot, 97.5):+.3f}] %")


if __name__ == "__main__":
    commands = {"weights": (weights, 1), "logits": (logits, 2), "paired": (paired, 4)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) != 2 + commands[sys.argv[1]][1]:
        sys.exit(__doc__)
    commands[sys.argv[1]][0](*sys.argv[2:])
