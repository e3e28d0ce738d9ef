#!/usr/bin/python3
"""Training speed of `retnet train` against PyTorch, side by side in one run, on one machine.

For each config (default: the demo model's and benchmarks/configs/base.json) and each thread
count (1 and 2), both sides train the same function on the same tokens (the bytes of
models/shakespeare/heldout.txt) with the same step: a batch of B sequences of T tokens through
the chunkwise form (chunk C), mean next-token cross-entropy, the backward pass, global-norm
clipping at 1.0 and an AdamW update. Random initial weights on both sides.

  * PyTorch: the project's PyTorch decoder (scripts/reference/retnet_torch.py, RetNetDecoder:
    docs/NUMERICS.md with torchscale's op structure) with autograd and torch.optim.AdamW, in its
    own subprocess per thread count (torch.set_num_threads; OpenBLAS likewise), one warm-up
    step, then --steps timed steps.
  * retnet: `retnet train --config CFG` run twice, for 1 and for 1 + --steps steps; the
    difference of the two wall times is the time of --steps steps (start-up, data reading and
    the final save cancel out).

The sides alternate (PyTorch, retnet, PyTorch, retnet, ...) for --rounds rounds; each keeps its
median round, then its best thread count. Prints a Markdown table (tokens/s each, the ratio
retnet / PyTorch, target 1.5) and writes the raw numbers to --out.

Run with Debian's python (torch):

    /usr/bin/python3 benchmarks/train_speed.py --retnet build/tools/retnet
    /usr/bin/python3 benchmarks/train_speed.py --quick      # one round, few steps
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TORCH_STEP = r"""
import json, os, sys, time
threads = int(sys.argv[1])
os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
import torch
sys.path.insert(0, os.path.join(sys.argv[2], "scripts"))
from reference.retnet_torch import RetNetDecoder, Config
torch.set_num_threads(threads)
cfg = json.load(open(sys.argv[3]))
batch, seq, chunk, steps = (int(a) for a in sys.argv[4:8])
data = torch.tensor(list(open(sys.argv[8], "rb").read()), dtype=torch.long)
model = RetNetDecoder(Config(cfg)).randomize(1).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
gen = torch.Generator().manual_seed(1)
def step():
    starts = torch.randint(0, len(data) - seq - 1, (batch,), generator=gen)
    window = torch.stack([data[s:s + seq + 1] for s in starts]) % cfg["vocab_size"]
    logits, _ = model(window[:, :-1], "chunkwise", chunk=chunk)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             window[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss)
step()  # warm-up
start = time.perf_counter()
for _ in range(steps):
    step()
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def torch_tokens_per_s(args, config, threads):
    out = subprocess.run(
        ["/usr/bin/python3", "-c", TORCH_STEP, str(threads), ROOT, config, str(args.batch),
         str(args.seq_len), str(args.chunk), str(args.steps), args.data],
        check=True, capture_output=True, text=True).stdout
    seconds = json.loads(out.strip().splitlines()[-1])["seconds"]
    return args.steps * args.batch * args.seq_len / seconds


def retnet_seconds(args, config, threads, steps, out_dir):
    cmd = [args.retnet, "train", "--config", config, "--data", args.data, "--out", out_dir,
           "--steps", str(steps), "--batch", str(args.batch), "--seq-len", str(args.seq_len),
           "--mode", "chunkwise", "--chunk", str(args.chunk), "--threads", str(threads),
           "--lr", "1e-3", "--warmup", "0", "--eval-every", str(steps + 1),
           "--save-every", str(steps + 1), "--seed", "1"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.perf_counter() - start


def retnet_tokens_per_s(args, config, threads):
    with tempfile.TemporaryDirectory() as tmp:
        short = retnet_seconds(args, config, threads, 1, os.path.join(tmp, "a"))
        long = retnet_seconds(args, config, threads, 1 + args.steps, os.path.join(tmp, "b"))
    return args.steps * args.batch * args.seq_len / max(long - short, 1e-9)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--retnet", default=os.path.join(ROOT, "build/tools/retnet"))
    p.add_argument("--configs", nargs="+",
                   default=[os.path.join(ROOT, "models/shakespeare/config.json"),
                            os.path.join(ROOT, "benchmarks/configs/base.json")])
    p.add_argument("--data", default=os.path.join(ROOT, "models/shakespeare/heldout.txt"))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--chunk", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--quick", action="store_true", help="one round of 2 steps")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks/results/train_speed.json"))
    args = p.parse_args()
    if args.quick:
        args.rounds, args.steps = 1, 2
    threads = [int(t) for t in args.threads.split(",")]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown CPU")
    results = {"cpu": cpu, "nproc": os.cpu_count(), "batch": args.batch, "seq_len": args.seq_len,
               "chunk": args.chunk, "steps": args.steps, "rounds": args.rounds, "configs": {}}
    for config in args.configs:
        runs = {("torch", t): [] for t in threads}
        runs.update({("retnet", t): [] for t in threads})
        for _ in range(args.rounds):
            for t in threads:  # alternating: each pair measured side by side
                runs[("torch", t)].append(torch_tokens_per_s(args, config, t))
                runs[("retnet", t)].append(retnet_tokens_per_s(args, config, t))
        medians = {f"{side} {t} threads": statistics.median(v) for (side, t), v in runs.items()}
        best = {side: max((statistics.median(runs[(side, t)]), t) for t in threads)
                for side in ("torch", "retnet")}
        results["configs"][os.path.relpath(config, ROOT)] = {
            "rounds": {f"{side} {t} threads": v for (side, t), v in runs.items()},
            "medians": medians, "best": best, "ratio": best["retnet"][0] / best["torch"][0]}
        (tt, tn), (rt, rn) = best["torch"], best["retnet"]
        print(f"{os.path.relpath(config, ROOT)}: PyTorch {tt:,.0f} tok/s ({tn} threads), retnet "
              f"{rt:,.0f} tok/s ({rn} threads), {rt / tt:.2f}x; medians {medians}",
              file=sys.stderr, flush=True)
    print(f"CPU: {cpu}, {os.cpu_count()} logical CPUs; batch {args.batch} x {args.seq_len} "
          f"tokens, chunkwise chunk {args.chunk}; medians of {args.rounds} alternating rounds\n")
    print("| config | PyTorch tok/s (threads) | retnet tok/s (threads) | retnet / PyTorch | target |")
    print("|---|---|---|---|---|")
    for name, r in results["configs"].items():
        (tt, tn), (rt, rn) = r["best"]["torch"], r["best"]["retnet"]
        print(f"| {name} | {tt:,.0f} ({tn}) | {rt:,.0f} ({rn}) | {r['ratio']:.2f}x | 1.5x |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
