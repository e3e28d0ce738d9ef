#!/usr/bin/env python3
"""Decode speed of retnet beside llama.cpp on the same bytes per token, per weight type, in one run:

    npm install --prefix benchmarks/llama_cpp          # node-llama-cpp 3.22.1, once
    python3 benchmarks/llama_cpp_side_by_side.py build-rel/tools/retnet \\
        --config benchmarks/configs/base.json --bench-kernels build-rel/benchmarks/bench_kernels
    python3 benchmarks/llama_cpp_side_by_side.py build-rel/tools/retnet -m /tmp/retnet-1.3B-synthetic \\
        --gen-len 32 --rounds 2 --bench-kernels build-rel/benchmarks/bench_kernels

For each type (f32, bf16, q8, q4) it writes, with benchmarks/gguf_writer.py into --work, a
llama-architecture GGUF with the RetNet's width, depth, head count and vocabulary whose bytes per
decoded token match the RetNet's: the RetNet reads its weights but the embedding table
(`decode_step_weight_bytes` of `retnet bench --json`) and reads and writes its state
(2 x `state_bytes`); llama.cpp reads its weights but the embedding table and its f16 KV cache at
the mean position of the run. Attention is 4 d^2 per layer, so the feed-forward width (a multiple
of 32) is what is chosen. q8 and q4 are the same blocks on both sides (GGML Q8_0 and Q4_0).

Rounds alternate the sides, type by type, at each thread count: retnet `retnet bench
--prompt-len 16 --gen-len N --batch 1 --repetitions 3` (its decode tokens/s), then llama.cpp
twice, both timed by llama.cpp's own perf counters ("eval time": the one-token steps without the
prompt or sampling) after a 16-token prompt: benchmarks/llama_cpp/decode_native.cpp, compiled
here against node-llama-cpp's prebuilt libllama (headers from the package's own git bundle), and
benchmarks/llama_cpp/decode.mjs through node-llama-cpp's API. llama.cpp is credited with the
faster of the two: on a 2-core machine node's JavaScript thread takes a core while a step runs,
which slows llama.cpp's 2-thread steps several-fold. With --bench-kernels,
`BM_ReadBandwidth/1024/2` (a 1 GiB array, 2 threads) is measured right before each retnet run,
and the run's bytes per step x tokens/s is taken over it (the median of these fractions is
reported): on a shared machine the bandwidth moves by a quarter between minutes. Every side
keeps its median round. JSON on stdout (and --out FILE) and a table on stderr.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gguf_writer import nbytes, tensor_list  # noqa: E402
from weight_types import bench, print_result  # noqa: E402

PROMPT_LEN = 16
NODE_LLAMA = os.path.join(HERE, "llama_cpp", "node_modules", "node-llama-cpp")
LLAMA_BINS = os.path.join(HERE, "llama_cpp", "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
LLAMA_RUNNERS = ("native", "node")
KV_BYTES = 2  # llama.cpp's default KV cache type, f16


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def model_shape(args):
    path = args.config or os.path.join(args.model, "config.json")
    with open(path) as f:
        cfg = json.load(f)

    def first(*keys):
        for k in keys:
            if k in cfg:
                return int(cfg[k])
        sys.exit(f"llama_cpp_side_by_side: {path} has none of {keys}")

    return {"dim": first("hidden_size", "decoder_embed_dim"),
            "layers": first("num_hidden_layers", "num_layers", "decoder_layers"),
            "heads": first("num_heads", "decoder_retention_heads", "num_attention_heads"),
            "vocab": first("vocab_size")}


def retnet_bench(args, wtype, threads):
    source = ["-m", args.model] if args.model else ["--config", args.config]
    return bench(args.cli, source, wtype, threads, ["--prompt-len", str(PROMPT_LEN), "--gen-len",
                                                    str(args.gen_len), "--batch", "1", "--repetitions", "3"])


def llama_bench(args, runner, gguf, threads):
    """llama.cpp's decode tokens/s by one of its two front ends."""
    if runner == "native":
        cmd = [args.native, gguf, str(threads), str(args.gen_len), str(PROMPT_LEN), LLAMA_BINS]
    else:
        cmd = ["node", os.path.join(HERE, "llama_cpp", "decode.mjs"), gguf, str(threads),
               str(args.gen_len), str(PROMPT_LEN)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["decode_tokens_per_s"]


def build_native(work):
    """decode_native.cpp against the prebuilt libllama, headers from the npm package's bundle."""
    src = os.path.join(work, "llama.cpp-headers")
    if not os.path.isdir(src):
        subprocess.run(["git", "-c", "advice.detachedHead=false", "clone", "-q", os.path.join(NODE_LLAMA, "llama", "gitRelease.bundle"), src],
                       check=True)
    exe = os.path.join(work, "decode_native")
    libs = [f"-l:{f}" for f in ("libllama.v0.5.0.so", "libggml.v0.5.0.so", "libggml-base.so")]
    subprocess.run(["c++", "-O2", "-std=c++17", "-I", os.path.join(src, "include"), "-I",
                    os.path.join(src, "ggml", "include"), os.path.join(HERE, "llama_cpp", "decode_native.cpp"),
                    "-o", exe, "-L", LLAMA_BINS, *libs, f"-Wl,-rpath,{LLAMA_BINS}"], check=True)
    return exe


def read_bandwidth(bench_kernels):
    cmd = [bench_kernels, "--benchmark_filter=ReadBandwidth/1024/2/", "--benchmark_format=json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["benchmarks"][0]["GB/s"] * 1e9


def llama_step_bytes(shape, wtype, ff, gen_len):
    s = argparse.Namespace(type=wtype, ff=ff, **shape)  # gguf_writer's arguments
    weights = sum(nbytes(dims, t) for name, dims, t in tensor_list(s) if name != "token_embd.weight")
    mean_position = PROMPT_LEN + gen_len / 2
    return weights + 2 * shape["layers"] * mean_position * shape["dim"] * KV_BYTES


def matching_ff(shape, wtype, target, gen_len):
    """The multiple of 32 whose llama step bytes are nearest `target`."""
    per_ff = llama_step_bytes(shape, wtype, 64, gen_len) - llama_step_bytes(shape, wtype, 32, gen_len)
    base = llama_step_bytes(shape, wtype, 32, gen_len) - per_ff
    ff = max(32, 32 * round((target - base) / per_ff))
    return ff, llama_step_bytes(shape, wtype, ff, gen_len)


def write_ggufs(args, shape, types):
    """GGUF path and bytes per step for each type, matched to the RetNet's step."""
    os.makedirs(args.work, exist_ok=True)
    out = {}
    for wtype in types:
        r = retnet_bench(args, wtype, 1)
        retnet_bytes = r["decode_step_weight_bytes"] + 2 * r["state_bytes"]
        ff, llama_bytes = matching_ff(shape, wtype, retnet_bytes, args.gen_len)
        name = f"llama-d{shape['dim']}-L{shape['layers']}-h{shape['heads']}-ff{ff}-v{shape['vocab']}-{wtype}.gguf"
        path = os.path.join(args.work, name)
        if not os.path.exists(path):
            log(f"writing {path}")
            cmd = [sys.executable, os.path.join(HERE, "gguf_writer.py"), path + ".part", "--type", wtype,
                   "--dim", str(shape["dim"]), "--layers", str(shape["layers"]), "--heads",
                   str(shape["heads"]), "--ff", str(ff), "--vocab", str(shape["vocab"])]
            subprocess.run(cmd, check=True)
            os.replace(path + ".part", path)
        out[wtype] = {"gguf": path, "llama_ff": ff, "retnet_step_bytes": retnet_bytes,
                      "llama_step_bytes": llama_bytes,
                      "bytes_difference": llama_bytes / retnet_bytes - 1}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("cli")
    ap.add_argument("-m", dest="model")
    ap.add_argument("--config")
    ap.add_argument("--types", default="f32,bf16,q8,q4")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--work", default="/tmp/retnet-llama-cpp", help="where the GGUFs are written (kept)")
    ap.add_argument("--bench-kernels", help="bench_kernels binary, for the read bandwidth")
    ap.add_argument("--out")
    args = ap.parse_args()
    if bool(args.model) == bool(args.config):
        ap.error("give exactly one of -m DIR or --config FILE")
    if args.gen_len < 2:
        ap.error("--gen-len must be at least 2")
    if not os.path.isdir(LLAMA_BINS):
        sys.exit("llama_cpp_side_by_side: run `npm install --prefix benchmarks/llama_cpp` first (linux-x64)")
    types = args.types.split(",")
    for t in types:
        if t not in ("f32", "bf16", "q8", "q4"):
            ap.error(f"--types: {t!r} is none of f32, bf16, q8, q4")
    thread_counts = [int(t) for t in args.threads.split(",")]
    shape = model_shape(args)
    models = write_ggufs(args, shape, types)
    args.native = build_native(args.work)

    runs, bandwidths = run_rounds(args, types, thread_counts, models)
    results, best = summarize(runs, bandwidths, models)
    report = {"shape": shape, "gen_len": args.gen_len, "prompt_len": PROMPT_LEN, "rounds": args.rounds,
              "read_bandwidth_bytes_per_s": bandwidths, "results": results, "best_thread_count": best}
    print_table(results, best)
    print_result(report, args.out)


def run_rounds(args, types, thread_counts, models):
    runs, bandwidths = {}, []
    for r in range(args.rounds):
        for threads in thread_counts:
            for t in types:
                bw = read_bandwidth(args.bench_kernels) if args.bench_kernels else None
                rr = retnet_bench(args, t, threads)["decode_tokens_per_s"]
                ll = {runner: llama_bench(args, runner, models[t]["gguf"], threads) for runner in LLAMA_RUNNERS}
                runs.setdefault((t, threads), []).append({"retnet": rr, **ll, "read_bandwidth": bw})
                if bw:
                    bandwidths.append(bw)
                log(f"round {r + 1} {t} {threads} threads: retnet {rr:.1f}, llama.cpp native "
                    f"{ll['native']:.1f}, node {ll['node']:.1f} tok/s" + (f", {bw / 1e9:.1f} GB/s" if bw else ""))
    return runs, bandwidths


def summarize(runs, bandwidths, models):
    """Medians per type and thread count, and each side at its best thread count per type."""
    bandwidth = statistics.median(bandwidths) if bandwidths else None
    results = []
    for (t, threads), rounds in runs.items():
        med = {side: statistics.median(p[side] for p in rounds) for side in ("retnet", *LLAMA_RUNNERS)}
        llama = max(med[r] for r in LLAMA_RUNNERS)  # llama.cpp's better front end
        row = {"type": t, "threads": threads, "retnet_tokens_per_s": med["retnet"],
               "llama_cpp_tokens_per_s": llama, "llama_cpp_native_tokens_per_s": med["native"],
               "llama_cpp_node_tokens_per_s": med["node"], "retnet_over_llama_cpp": med["retnet"] / llama,
               "rounds": rounds, **models[t]}
        if bandwidth:
            # Each run against the bandwidth measured just before it: the machine's bandwidth
            # moves by a quarter between minutes, more than the runs differ.
            row["retnet_bandwidth_fraction"] = statistics.median(
                models[t]["retnet_step_bytes"] * p["retnet"] / p["read_bandwidth"] for p in rounds)
            row["llama_cpp_bandwidth_fraction"] = statistics.median(
                models[t]["llama_step_bytes"] * max(p[r] for r in LLAMA_RUNNERS) / p["read_bandwidth"]
                for p in rounds)
        results.append(row)
    best = {}
    for t in dict.fromkeys(row["type"] for row in results):
        rows = [row for row in results if row["type"] == t]
        rr = max(rows, key=lambda row: row["retnet_tokens_per_s"])
        ll = max(rows, key=lambda row: row["llama_cpp_tokens_per_s"])
        best[t] = {"retnet_tokens_per_s": rr["retnet_tokens_per_s"], "retnet_threads": rr["threads"],
                   "llama_cpp_tokens_per_s": ll["llama_cpp_tokens_per_s"], "llama_cpp_threads": ll["threads"],
                   "retnet_over_llama_cpp": rr["retnet_tokens_per_s"] / ll["llama_cpp_tokens_per_s"]}
    return results, best


def print_table(results, best):
    log("type threads  retnet tok/s  llama.cpp tok/s (native / node)  ratio  step MB (retnet / llama)"
        "  retnet % of read bandwidth")
    for row in results:
        frac = f"{100 * row['retnet_bandwidth_fraction']:.0f} %" if "retnet_bandwidth_fraction" in row else "-"
        log(f"{row['type']:>4} {row['threads']:>7} {row['retnet_tokens_per_s']:>13.1f} "
            f"{row['llama_cpp_native_tokens_per_s']:>11.1f} / {row['llama_cpp_node_tokens_per_s']:<8.1f}"
            f"{row['retnet_over_llama_cpp']:>13.2f} {row['retnet_step_bytes'] / 1e6:>11.1f} / "
            f"{row['llama_step_bytes'] / 1e6:<8.1f} {frac:>12}")
    for t, b in best.items():
        log(f"best thread count, {t}: retnet {b['retnet_tokens_per_s']:.1f} ({b['retnet_threads']}), "
            f"llama.cpp {b['llama_cpp_tokens_per_s']:.1f} ({b['llama_cpp_threads']}): "
            f"{b['retnet_over_llama_cpp']:.2f} x")


if __name__ == "__main__":
    main()
