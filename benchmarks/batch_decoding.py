#!/usr/bin/env python3
"""Batched decoding and the deferred fold, in one command: decode tokens/s at batch 1 and 8, with
the state written every token (--fold-every 1, the plain recurrence, what generate and serve do)
and once per 16 tokens (a deferred fold, RetNetModel::defer_fold), in alternating rounds, against
the bandwidth floor.

    python3 benchmarks/batch_decoding.py build-rel --rounds 3

Each round runs `bench_kernels BM_ReadBandwidth/142/T` (a 142 MB read, the base config's f32 step)
and `BM_FmaPeak/T`, then `retnet bench --config` for every weight type, fold setting and batch
size, one process each. A step's floor is its bytes (the weights a step reads plus the state it
moves, `decode_step_weight_bytes + step_state_bytes`) over the bandwidth of the same round; the
multiply-adds of a batch-8 step (2 x 8 x weights) over FmaPeak are given beside it. Figures are
medians of the rounds; ratios are of medians. JSON on stdout (and --out FILE).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from weight_types import bench, bench_kernels, print_result  # noqa: E402


def floors(build, threads):
    pattern = f"BM_ReadBandwidth/142/{threads}/|BM_FmaPeak/{threads}/"
    values = {b["name"].split("/")[0]: b for b in bench_kernels(build, pattern)}
    return values["BM_ReadBandwidth"]["GB/s"], values["BM_FmaPeak"]["GFLOP/s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("build", help="a release build folder (bench_kernels and tools/retnet)")
    ap.add_argument("--config", default="benchmarks/configs/base.json")
    ap.add_argument("--types", default="f32,q4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--folds", default="1,16", help="--fold-every values to compare")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--out")
    args = ap.parse_args()
    cli = os.path.join(args.build, "tools", "retnet")
    folds = [int(f) for f in args.folds.split(",")]
    runs, bandwidth, peak = {}, [], []
    for r in range(args.rounds):
        gbs, gflops = floors(args.build, args.threads)
        bandwidth.append(gbs)
        peak.append(gflops)
        for t in args.types.split(","):
            for fold in folds:
                for batch in (1, 8):
                    extra = ["--prompt-len", "16", "--gen-len", str(args.gen_len), "--batch",
                             str(batch), "--fold-every", str(fold), "--repetitions", "3"]
                    j = bench(cli, ["--config", args.config], t, args.threads, extra)
                    j["round_bandwidth_gb_s"] = gbs
                    runs.setdefault(f"{t}/fold {fold}/batch {batch}", []).append(j)
                    print(f"round {r} {t:4s} fold {fold:2d} batch {batch} "
                          f"{j['decode_tokens_per_s']:8.1f} tok/s ({gbs:.1f} GB/s)",
                          file=sys.stderr, flush=True)
    result = {"config": args.config, "threads": args.threads, "rounds": args.rounds,
              "read_bandwidth_gb_s": statistics.median(bandwidth), "read_bandwidth_all": bandwidth,
              "fma_peak_gflop_s": statistics.median(peak), "cases": {}, "ratios": {}}
    for key, js in runs.items():
        rate = statistics.median(j["decode_tokens_per_s"] for j in js)
        batch = js[0]["batch"]
        step_bytes = js[0]["decode_step_weight_bytes"] + js[0]["step_state_bytes"]
        floor = statistics.median(j["round_bandwidth_gb_s"] * 1e9 / step_bytes * batch for j in js)
        case = {"decode_tokens_per_s": rate, "all": [j["decode_tokens_per_s"] for j in js],
                "step_bytes": step_bytes, "bandwidth_floor_tokens_per_s": floor,
                "share_of_floor": rate / floor}
        if js[0]["weights"] == "f32":  # the multiply-adds of a step against the peak
            flops = 2.0 * batch * js[0]["decode_step_weight_bytes"] / 4
            case["fma_floor_tokens_per_s"] = result["fma_peak_gflop_s"] * 1e9 / flops * batch
        result["cases"][key] = case
    cases = result["cases"]
    for t in args.types.split(","):
        for fold in folds:
            b1, b8 = cases[f"{t}/fold {fold}/batch 1"], cases[f"{t}/fold {fold}/batch 8"]
            result["ratios"][f"{t}/fold {fold}/batch 8 over batch 1"] = (
                b8["decode_tokens_per_s"] / b1["decode_tokens_per_s"])
            result["ratios"][f"{t}/fold {fold}/floor batch 8 over batch 1"] = (
                b8["bandwidth_floor_tokens_per_s"] / b1["bandwidth_floor_tokens_per_s"])
        for batch in (1, 8):
            base = cases[f"{t}/fold {folds[0]}/batch {batch}"]["decode_tokens_per_s"]
            for fold in folds[1:]:
                result["ratios"][f"{t}/batch {batch}/fold {fold} over fold {folds[0]}"] = (
                    cases[f"{t}/fold {fold}/batch {batch}"]["decode_tokens_per_s"] / base)
    print_result(result, args.out)


if __name__ == "__main__":
    main()
