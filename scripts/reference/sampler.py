#!/usr/bin/env python3
"""An independent Python/NumPy reading of the sampler in include/retnet/text/sampler.hpp, and the
golden token sequences that tests/test_sampler.cpp holds the C++ sampler to.

    python3 scripts/reference/sampler.py          # (re)writes tests/data/sampler_golden.json
    python3 scripts/reference/sampler.py --check  # recomputes it and compares; exit 1 if not equal

The algorithm, step by step (float32 where the C++ code uses float, Python floats = IEEE double
where it uses double, summed in the same order):
1. Generator: xoshiro256** whose four state words come from splitmix64 of the seed; a uniform
   in [0, 1) is the top 53 bits of the next output times 2^-53.
2. Repetition penalty (CTRL, as in llama.cpp): each distinct token among the last repeat_last_n
   entries of `recent` gets a positive logit divided by the penalty, a non-positive one
   multiplied (in float32).
3. Temperature 0: the first maximum of the penalised logits, no draw.
4. Candidates: every id in index order; with 0 < top_k < vocab, the top_k most likely, most
   likely first (ties: lower id first); with top_p < 1 (and no top-k), all of them sorted so.
5. p_i = exp((logit_i - max) / T) in double, with 1 / T computed first; sum in order.
6. Top-p: the shortest prefix of the sorted candidates whose cumulative p_i / sum reaches
   top_p - 1e-6 (the slack for p given as a float), then renormalised.
7. A single candidate is returned without a draw. Otherwise target = uniform() * (sum of the
   kept probabilities), and the first candidate whose running sum exceeds target is drawn
   (zero-probability candidates skipped; the last non-zero one if rounding runs past the end).

The golden file holds, for several logit vectors and parameter sets, the first draws of a
generation: each drawn token is appended to `recent` before the next draw, as the Generator
does. Only std::exp (glibc's, correctly rounded in practice) is shared with the code under test.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "sampler_golden.json")
TOP_P_SLACK = 1e-6


class Xoshiro256:
    def __init__(self, seed):
        x = seed & MASK64
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & MASK64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & MASK64

    def next(self):
        s = self.s
        result = (self.rotl((s[1] * 5) & MASK64, 7) * 9) & MASK64
        t = (s[1] << 17) & MASK64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self.rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53


class Sampler:
    def __init__(self, temperature, top_k=0, top_p=1.0, repeat_penalty=1.0, repeat_last_n=64, seed=0):
        self.temperature = np.float32(temperature)
        self.top_k = int(top_k)
        self.top_p = np.float32(top_p)
        self.repeat_penalty = np.float32(repeat_penalty)
        self.repeat_last_n = int(repeat_last_n)
        self.rng = Xoshiro256(seed)

    def penalised(self, logits, recent):
        work = np.array(logits, dtype=np.float32)
        if self.repeat_penalty == np.float32(1) or self.repeat_last_n == 0 or not recent:
            return work
        window = recent[len(recent) - min(len(recent), self.repeat_last_n):]
        seen = set()
        for i in window:
            if i in seen:
                continue
            seen.add(i)
            x = work[i]
            work[i] = x / self.repeat_penalty if x > 0 else x * self.repeat_penalty  # float32
        return work

    def prepare(self, logits, recent):
        """(ids, probabilities) of the kept candidates, in the order the draw walks them."""
        work = self.penalised(logits, recent)
        vocab = len(work)
        if self.temperature == 0:
            return [int(np.argmax(work))], [1.0]  # argmax: the first maximum
        by_likelihood = sorted(range(vocab), key=lambda i: (-float(work[i]), i))
        use_top_p = self.top_p < np.float32(1)
        if 0 < self.top_k < vocab:
            ids = by_likelihood[:self.top_k]
        elif use_top_p:
            ids = by_likelihood
        else:
            ids = list(range(vocab))
        max_logit = max(float(work[i]) for i in ids)
        inv_t = 1.0 / float(self.temperature)
        probs, total = [], 0.0
        for i in ids:
            p = math.exp((float(work[i]) - max_logit) * inv_t)
            probs.append(p)
            total += p
        if use_top_p:
            threshold = float(self.top_p) - TOP_P_SLACK
            cumulative, kept = 0.0, 0
            while kept < len(ids):
                cumulative += probs[kept] / total
                kept += 1
                if cumulative >= threshold:
                    break
            ids, probs = ids[:kept], probs[:kept]
            total = 0.0
            for p in probs:
                total += p
        return ids, [p / total for p in probs]

    def probabilities(self, logits, recent):
        ids, probs = self.prepare(logits, recent)
        out = [0.0] * len(logits)
        for i, p in zip(ids, probs):
            out[i] = p
        return out

    def sample(self, logits, recent):
        ids, probs = self.prepare(logits, recent)
        if len(ids) == 1:
            return ids[0]
        total = 0.0
        for p in probs:
            total += p
        target = self.rng.uniform() * total
        cumulative, last_nonzero = 0.0, 0
        for k, p in enumerate(probs):
            if p <= 0.0:
                continue
            cumulative += p
            last_nonzero = k
            if target < cumulative:
                return ids[k]
        return ids[last_nonzero]


def f32(x):
    """The float32 value of x as a Python float (exact in JSON, exact when C++ casts it back)."""
    return float(np.float32(x))


def golden():
    rng = np.random.default_rng(20240601)
    eight = [2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.25]
    normal = [f32(x) for x in 1.2 * rng.normal(size=256)]
    ties = [f32(x) for x in rng.integers(-3, 4, size=50)]  # many equal logits: tie-breaking by id
    masked = [f32(x) for x in rng.normal(size=40)]
    for i in range(0, 40, 3):
        masked[i] = -math.inf
    boundary = [f32(math.log(p)) for p in (0.15, 0.5, 0.05, 0.3)]  # top-p 0.8 ends exactly on 0.5 + 0.3
    flat = [0.0] * 1000
    vectors = {"eight": eight, "normal256": normal, "ties50": ties, "masked40": masked,
               "boundary4": boundary, "flat1000": flat}

    def case(name, vector, draws=64, recent=(), **params):
        params.setdefault("temperature", 1.0)
        params.setdefault("top_k", 0)
        params.setdefault("top_p", 1.0)
        params.setdefault("repeat_penalty", 1.0)
        params.setdefault("repeat_last_n", 64)
        params.setdefault("seed", 0)
        for key in ("temperature", "top_p", "repeat_penalty"):
            params[key] = f32(params[key])
        sampler = Sampler(**params)
        initial, recent = list(recent), list(recent)
        first = sampler.probabilities(vectors[vector], recent)
        tokens = []
        for _ in range(draws):
            t = sampler.sample(vectors[vector], recent)
            tokens.append(t)
            recent.append(t)
        return dict(name=name, logits=vector, recent=initial, **params, first_probabilities=first,
                    tokens=tokens)

    cases = [
        case("plain softmax", "eight", seed=20240601),
        case("temperature 0.7, top-k 5", "normal256", temperature=0.7, top_k=5, seed=1),
        case("temperature 1.3, top-p 0.9", "normal256", temperature=1.3, top_p=0.9, seed=2),
        case("top-k 40, top-p 0.95, penalty 1.3 over the last 16", "normal256", temperature=0.8, top_k=40,
             top_p=0.95, repeat_penalty=1.3, repeat_last_n=16, seed=3, recent=(5, 17, 200, 5, 31)),
        case("ties: top-k 4 cuts a tie", "ties50", temperature=0.5, top_k=4, seed=4),
        case("ties: top-p 0.3 cuts a tie", "ties50", temperature=1.0, top_p=0.3, seed=5),
        case("ties: greedy with penalty 1.5", "ties50", temperature=0.0, repeat_penalty=1.5, seed=6),
        case("masked tokens (-inf)", "masked40", temperature=1.0, seed=7),
        case("masked tokens, top-p 0.7", "masked40", temperature=0.6, top_p=0.7, seed=8),
        case("top-p 0.8 on a cumulative sum (slack)", "boundary4", top_p=0.8, seed=9),
        case("penalty 0.5 rewards repetition", "eight", repeat_penalty=0.5, repeat_last_n=4, seed=10),
        case("flat 1000, seed 0", "flat1000", seed=0),
        case("flat 1000, seed 2^64 - 1", "flat1000", seed=(1 << 64) - 1),
        case("top-k larger than the vocabulary", "eight", top_k=100, seed=11),
    ]
    streams = []
    for seed in (0, 1, 20240601, (1 << 64) - 1):
        g = Xoshiro256(seed)
        streams.append({"seed": seed, "outputs": [g.next() for _ in range(8)]})
    return {"note": "made by scripts/reference/sampler.py, an independent reading of "
                    "include/retnet/text/sampler.hpp; each case draws `tokens` one after another "
                    "from `logits`, appending each draw to `recent`",
            "xoshiro256": streams,
            # JSON has no infinity: a masked logit (-inf) is written as null.
            "vectors": {k: [None if x == -math.inf else x for x in v] for k, v in vectors.items()},
            "cases": cases}


def dump(data):
    return json.dumps(data, indent=1, allow_nan=False) + "\n"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed golden file")
    args = ap.parse_args()
    text = dump(golden())
    if args.check:
        same = open(GOLDEN).read() == text
        print("sampler golden values reproduce" if same else "sampler_golden.json differs")
        sys.exit(0 if same else 1)
    open(GOLDEN, "w").write(text)
    print("wrote", os.path.relpath(GOLDEN))
