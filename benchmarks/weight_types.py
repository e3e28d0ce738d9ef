#!/usr/bin/env python3
"""Speed of each weight type (f32, f16, bf16, q8, q4) side by side in one run, with `retnet bench`.

    python3 benchmarks/weight_types.py build/tools/retnet --config benchmarks/configs/base.json
    python3 benchmarks/weight_types.py build/tools/retnet -m /tmp/retnet-1.3B-synthetic \\
        --skip-prompt --gen-len 8 --rounds 2

Every measurement is its own `retnet bench --json` process. Rounds alternate the types (f32,
f16, bf16, q8, q4, f32, ...) at each thread count, so that a machine whose speed drifts over minutes
compares like with like; each type keeps the median of its rounds. Measured per type and thread
count: decode tokens/s at batch 1 and at batch 8 (after a short prompt), prompt tokens/s at
--prompt-len with every position's logits (scoring), peak RSS and the bytes of weights a decode
step reads (`decode_step_weight_bytes`). Ratios are against f32 at the same thread count and,
for the best thread count of each, across counts. JSON on stdout (and --out FILE).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def bench(cli, source, weights, threads, extra):
    cmd = [cli, "bench", *source, "--weights", weights, "--threads", str(threads), "--json", *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def bench_kernels(build, pattern):
    """The JSON benchmarks of `bench_kernels --benchmark_filter=PATTERN` in the build folder."""
    cmd = [os.path.join(build, "benchmarks", "bench_kernels"), f"--benchmark_filter={pattern}",
           "--benchmark_format=json"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)[
        "benchmarks"]


def print_result(result, out):
    """The result as indented JSON on stdout, and in the file `out` when given."""
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("cli")
    ap.add_argument("-m", dest="model")
    ap.add_argument("--config")
    ap.add_argument("--types", default="f32,f16,bf16,q8,q4")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=2048)
    ap.add_argument("--skip-prompt", action="store_true", help="decode only (real-size models)")
    ap.add_argument("--out")
    args = ap.parse_args()
    if bool(args.model) == bool(args.config):
        ap.error("give exactly one of -m DIR or --config FILE")
    source = ["-m", args.model] if args.model else ["--config", args.config]
    types = args.types.split(",")
    thread_counts = [int(t) for t in args.threads.split(",")]
    runs = {}  # (type, threads, what) -> list of results
    for r in range(args.rounds):
        for threads in thread_counts:
            for t in types:
                cases = {
                    "decode_b1": ["--prompt-len", "16", "--gen-len", str(args.gen_len),
                                  "--batch", "1", "--repetitions", "3"],
                    "decode_b8": ["--prompt-len", "16", "--gen-len", str(max(1, args.gen_len // 2)),
                                  "--batch", "8", "--repetitions", "3"],
                }
                if not args.skip_prompt:
                    cases["prompt"] = ["--prompt-len", str(args.prompt_len), "--gen-len", "0",
                                       "--logits", "all", "--repetitions", "2"]
                for what, extra in cases.items():
                    j = bench(args.cli, source, t, threads, extra)
                    runs.setdefault((t, threads, what), []).append(j)
                    rate = j["decode_tokens_per_s"] if what != "prompt" else j["prefill_tokens_per_s"]
                    print(f"round {r} {t:5s} threads {threads} {what:9s} {rate:10.1f} tok/s "
                          f"rss {j['peak_rss_bytes'] / 1e6:8.1f} MB", file=sys.stderr, flush=True)
    result = {"source": source, "rounds": args.rounds, "per_type": {}}
    for (t, threads, what), js in runs.items():
        key = "prefill_tokens_per_s" if what == "prompt" else "decode_tokens_per_s"
        entry = result["per_type"].setdefault(t, {}).setdefault(str(threads), {})
        entry[what] = statistics.median(j[key] for j in js)
        entry[what + "_all"] = [j[key] for j in js]
        entry["peak_rss_bytes"] = max(j["peak_rss_bytes"] for j in js)
        entry["weight_bytes"] = js[0]["weight_bytes"]
        entry["decode_step_weight_bytes"] = js[0]["decode_step_weight_bytes"]
    ratios = {}
    for t in types:
        for what in ["decode_b1", "decode_b8"] + ([] if args.skip_prompt else ["prompt"]):
            best = max(result["per_type"][t][str(n)][what] for n in thread_counts)
            best_f32 = max(result["per_type"]["f32"][str(n)][what] for n in thread_counts) \
                if "f32" in types else None
            ratios.setdefault(t, {})[what + "_best"] = best
            if best_f32:
                ratios[t][what + "_vs_f32"] = best / best_f32
        b1 = ratios[t]["decode_b1_best"]
        ratios[t]["batch8_vs_batch1"] = ratios[t]["decode_b8_best"] / b1
    result["best"] = ratios
    print_result(result, args.out)


if __name__ == "__main__":
    main()
