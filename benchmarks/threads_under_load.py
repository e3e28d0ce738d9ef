#!/usr/bin/python3
"""Decoding at the default thread count against one thread, on an idle machine and beside one
competing CPU-bound process (a busy loop pinned nowhere, as a user's other program would be).

For the demo model (models/shakespeare) and the base config (benchmarks/configs/base.json,
random weights), each round runs `retnet bench --json` at 1 thread, at every thread count up to
the cores, and with no --threads (the library's default), in turn; rounds alternate the order.
It reports the median decode tokens/s of each, and the two ratios the library is held to:

  * loaded: default / 1 thread (target >= 0.9: more threads never make it slower);
  * idle:   default / best thread count (target >= 0.95).

Usage: /usr/bin/python3 benchmarks/threads_under_load.py RETNET_BINARY [OTHER_BINARY ...]
           [--rounds 3] [--out benchmarks/results/threads_under_load.json]
With more than one binary (another commit's build, say), each setting runs every binary in turn,
so that they are compared side by side. Standard library only. It needs the machine otherwise quiet: it reports the load average
before each round.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {  # name: (retnet bench's model flags, decoded tokens per run)
    "demo": (["-m", os.path.join(ROOT, "models", "shakespeare")], 2048),
    "base": (["--config", os.path.join(ROOT, "benchmarks", "configs", "base.json")], 256),
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def decode_rate(cli, model_flags, gen_len, threads):
    """Decode tokens/s of one `retnet bench` run (3 timed runs after a warm-up, their mean)."""
    args = [cli, "bench", *model_flags, "--prompt-len", "16", "--gen-len", str(gen_len),
            "--repetitions", "3", "--json"]
    if threads is not None:
        args += ["--threads", str(threads)]
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    return row["decode_tokens_per_s"], row["threads"]


def start_competitor():
    """One CPU-bound process: a shell busy loop (no system calls, no memory traffic)."""
    return subprocess.Popen(["sh", "-c", "while :; do :; done"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("clis", nargs="+", metavar="cli", help="retnet binaries")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results",
                                                  "threads_under_load.json"))
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    settings = [str(t) for t in range(1, cores + 1)] + ["default"]
    rates = {}  # (model, condition, setting) -> [tok/s per round]
    default_threads = None
    loads = []
    for rnd in range(args.rounds):
        order = settings if rnd % 2 == 0 else settings[::-1]
        for condition in ("idle", "loaded"):
            loads.append(os.getloadavg()[0])
            competitor = start_competitor() if condition == "loaded" else None
            try:
                for model, (flags, gen_len) in MODELS.items():
                    for s in order:
                        for cli in (args.clis if rnd % 2 == 0 else args.clis[::-1]):
                            rate, used = decode_rate(cli, flags, gen_len,
                                                     None if s == "default" else int(s))
                            if s == "default":
                                default_threads = used
                            rates.setdefault((cli, model, condition, s), []).append(rate)
                            log(f"round {rnd + 1} {condition:6} {model}: threads {s:7} "
                                f"{rate:9.1f} tok/s  {cli}")
            finally:
                if competitor:
                    competitor.kill()
                    competitor.wait()

    summary = {}
    for cli in args.clis:
        for model in MODELS:
            med = {c: {s: statistics.median(rates[(cli, model, c, s)]) for s in settings}
                   for c in ("idle", "loaded")}
            best_idle = max(med["idle"][s] for s in settings if s != "default")
            row = {
                "median_decode_tokens_per_s": med,
                "loaded_default_over_1_thread": med["loaded"]["default"] / med["loaded"]["1"],
                "idle_default_over_best": med["idle"]["default"] / best_idle,
            }
            summary[f"{cli} {model}"] = row
            log(f"{model}: loaded default/1 thread {row['loaded_default_over_1_thread']:.3f}"
                f" (target >= 0.9); idle default/best {row['idle_default_over_best']:.3f}"
                f" (target >= 0.95)  {cli}")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown")
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu, "cores": cores, "default_threads": default_threads, "rounds": args.rounds,
        "load_average_before_each_condition": loads,
        "competitor": "one `sh -c 'while :; do :; done'` process during the loaded runs",
        "runs": {f"{cli} {m} {c} {s}": v for (cli, m, c, s), v in rates.items()},
        "summary": summary,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
