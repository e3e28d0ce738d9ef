#!/usr/bin/python3
"""How retnet's costs scale with sequence length, for benchmarks/plot.py.

Measures, with `retnet bench --json` on random weights of one config (default
benchmarks/configs/base.json), one process per point:

  * prompt throughput (tokens/s) and peak RSS against the prompt length T in
    {128, 256, ..., 8192}, for the parallel and the chunkwise form (--gen-len 0; by default
    --logits last, i.e. the state plus the last position's logits);
  * decode ms/step and state bytes after a prompt of {16, 1024, 8192} tokens (chunkwise prompt,
    then --decode-steps greedy recurrent steps);
  * the Transformer baseline, if its benchmark binary is built
    (build-rel/benchmarks/bench_transformer_baseline, run with --benchmark_format=json):
    decode ms/token and KV-cache bytes per context, next to RetNet's step in the same binary
    (at OMP_NUM_THREADS = --threads; the binary builds its models from base.json).
    If it is missing, scaling.json says so and the plot shows RetNet alone.

Writes benchmarks/results/scaling.json. Run with any python3 (standard library only):

    /usr/bin/python3 benchmarks/scaling.py                        # minutes (parallel T=8192 is O(T²))
    /usr/bin/python3 benchmarks/scaling.py --quick --config /tmp/small.json --out /tmp/scaling.json
    /usr/bin/python3 benchmarks/plot.py                           # then the plots
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys

from retnet_bench import run_retnet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def log(msg):
    print(msg, file=sys.stderr, flush=True)




def context_of(entry):
    """The context length of a Google Benchmark entry: a `context` counter, else the name's
    `context:N` argument, else its last `/N`."""
    for key in ("context", "ctx", "context_len"):
        if isinstance(entry.get(key), (int, float)):
            return int(entry[key])
    name = entry.get("run_name", entry.get("name", ""))
    m = re.search(r"context:(\d+)", name) or re.search(r"/(\d+)(?:/|$)", name)
    return int(m.group(1)) if m else None


def ms_per_token(entry):
    if "ms_per_token" in entry:
        return float(entry["ms_per_token"])
    unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[entry.get("time_unit", "ns")]
    return float(entry["real_time"]) * unit  # one iteration is one token


def run_baseline(binary, extra_args, threads):
    """Runs the Transformer-baseline benchmark; returns its parsed per-context numbers."""
    out = dict(binary=binary, available=os.access(binary, os.X_OK))
    if not out["available"]:
        out["reason"] = f"{os.path.relpath(binary, ROOT)} is not built"
        return out
    args = [binary, "--benchmark_format=json"] + extra_args
    log("  " + " ".join(args))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))  # the binary's thread count
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if proc.returncode:
        out.update(available=False, reason=f"exited with {proc.returncode}: {proc.stderr.strip()[-500:]}")
        return out
    raw = json.loads(proc.stdout)
    out["raw"] = raw
    series = {}
    for e in raw.get("benchmarks", []):
        if e.get("run_type") == "aggregate" and e.get("aggregate_name") != "median":
            continue
        name = e.get("run_name", e["name"])
        model = "transformer" if "transformer" in name.lower() else "retnet" if "retnet" in name.lower() else name
        point = dict(context=context_of(e), ms_per_token=ms_per_token(e), name=e["name"])
        for key in ("kv_cache_bytes", "state_bytes", "params"):
            if key in e:
                point[key] = e[key]
        series.setdefault(model, []).append(point)
    for points in series.values():
        points.sort(key=lambda p: (p["context"] is None, p["context"]))
    out["series"] = series
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--retnet", default=os.path.join(ROOT, "build-rel", "tools", "retnet"))
    ap.add_argument("--config", default=os.path.join(ROOT, "benchmarks", "configs", "base.json"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=2, help="runs per point (median)")
    ap.add_argument("--lengths", default="128,256,512,1024,2048,4096,8192", help="prompt lengths T")
    ap.add_argument("--modes", default="parallel,chunkwise")
    ap.add_argument("--logits", choices=["last", "all"], default="last", help="prompt logits")
    ap.add_argument("--contexts", default="16,1024,8192", help="decode contexts")
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--baseline", default=os.path.join(ROOT, "build-rel", "benchmarks", "bench_transformer_baseline"))
    ap.add_argument("--baseline-args", default="", help="extra arguments for the baseline, e.g. "
                    "--benchmark_min_time=0.2")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "scaling.json"))
    a = ap.parse_args()
    if a.quick:
        a.lengths, a.contexts, a.repeat, a.decode_steps = "128,256,512,1024", "16,256,1024", 1, 8
        a.baseline_args = a.baseline_args or "--benchmark_min_time=0.01 --benchmark_filter=context:(16|256|1024)/"
    if not os.access(a.retnet, os.X_OK):
        raise SystemExit(f"no retnet CLI at {a.retnet}; build it or pass --retnet")

    lengths = [int(x) for x in a.lengths.split(",")]
    contexts = [int(x) for x in a.contexts.split(",")]
    results = dict(date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                   config_path=os.path.abspath(a.config), config=json.load(open(a.config)),
                   threads=a.threads, repeat=a.repeat, logits=a.logits, load_average_start=os.getloadavg(),
                   retnet_commit=subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                                capture_output=True, text=True).stdout.strip())
    prompt = []
    for mode in a.modes.split(","):
        for T in lengths:
            r = run_retnet(a.retnet, a.config, a.threads, a.repeat, prompt_len=T, gen_len=0, mode=mode,
                      logits=a.logits)
            prompt.append(r)
            log(f"  prompt {mode:9s} T={T:5d}: {r['prefill_tokens_per_s']:9.0f} tokens/s, "
                f"peak RSS {r['peak_rss_bytes'] / 1e6:.1f} MB")
    results["prompt"] = prompt

    decode = []
    for c in contexts:
        r = run_retnet(a.retnet, a.config, a.threads, a.repeat, prompt_len=c, gen_len=a.decode_steps,
                  mode="chunkwise", logits="last")
        decode.append(dict(r, context=c))
        log(f"  decode after {c:5d}: {r['decode_ms_per_step']:.2f} ms/step, state {r['state_bytes'] / 1e6:.2f} MB")
    results["decode"] = decode

    log("Transformer baseline...")
    results["baseline"] = run_baseline(a.baseline, a.baseline_args.split(), a.threads)
    if not results["baseline"]["available"]:
        log(f"  skipped: {results['baseline']['reason']}")
    results["load_average_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
