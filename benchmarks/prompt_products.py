#!/usr/bin/env python3
"""Prompts against the multiply-add peak, in one command: the prompt products and the time to
first token, f32 against bf16 and bf16 with bf16 dots (x rounded to bfloat16: vdpbf16ps where the
CPU has AVX512-BF16), in alternating rounds.

    python3 benchmarks/prompt_products.py build-rel --rounds 3

Each round runs, one after the other: `bench_kernels` for the floors (BM_FmaPeak, and
BM_Bf16DotPeak where the build has AVX512-BF16) and BM_PromptProduct (T = 256, 512, 2048; f32,
bf16 and bf16 dots panels; 1 and 2 threads), then `retnet bench` on --config for the time to
first token of a --prompt-len prompt in each of the three, at each thread count. Every figure is
the median of its rounds; the products are also given as a share of the peak measured in the
same round (f32 against BM_FmaPeak, bf16 dots against BM_Bf16DotPeak), and bf16 dots as a ratio
to f32 at the same size and thread count. JSON on stdout (and --out FILE).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from weight_types import bench, bench_kernels, print_result  # noqa: E402


def kernels(build, threads):
    counts = "|".join(threads)
    pattern = f"BM_FmaPeak/({counts})/|BM_Bf16DotPeak/({counts})/|BM_PromptProduct/({counts})/[023]/"
    return {b["name"].removesuffix("/real_time"): b["GFLOP/s"] for b in bench_kernels(build, pattern)}


def first_token(build, config, weights, dots, threads, prompt_len):
    extra = ["--prompt-len", str(prompt_len), "--gen-len", "0", "--repetitions", "2"]
    row = bench(os.path.join(build, "tools", "retnet"), ["--config", config], weights, threads,
                extra + (["--bf16-dots"] if dots else []))
    return row["prefill_seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("build", help="a release build folder (bench_kernels and tools/retnet)")
    ap.add_argument("--config", default="benchmarks/configs/base.json")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=2048)
    ap.add_argument("--out")
    args = ap.parse_args()
    threads = args.threads.split(",")
    kinds = [("f32", "f32", False), ("bf16", "bf16", False), ("bf16 dots", "bf16", True)]
    rates, ttft = {}, {}
    for _ in range(args.rounds):
        for name, value in kernels(args.build, threads).items():
            rates.setdefault(name, []).append(value)
        for t in threads:
            for kind, weights, dots in kinds:
                seconds = first_token(args.build, args.config, weights, dots, t, args.prompt_len)
                ttft.setdefault(f"{kind}/{t}", []).append(seconds)
    median = {k: statistics.median(v) for k, v in rates.items()}
    result = {"rounds": args.rounds, "gflops": median, "gflops_all": rates,
              "ttft_seconds": {k: statistics.median(v) for k, v in ttft.items()},
              "ttft_seconds_all": ttft, "prompt_len": args.prompt_len, "share_of_peak": {},
              "bf16_dots_over_f32": {}}
    for name, value in median.items():
        parts = name.split("/")
        if parts[0] != "BM_PromptProduct":
            continue
        t, variant, rows = parts[1], parts[2], parts[3]
        peak = median.get(f"BM_{'Bf16DotPeak' if variant == '3' else 'FmaPeak'}/{t}")
        if peak and variant in ("0", "3"):
            result["share_of_peak"][name] = value / peak
        if variant == "3":
            result["bf16_dots_over_f32"][f"PromptProduct/{t}/{rows}"] = (
                value / median[f"BM_PromptProduct/{t}/0/{rows}"])
    for t in threads:
        result["bf16_dots_over_f32"][f"ttft/{t}"] = (
            result["ttft_seconds"][f"f32/{t}"] / result["ttft_seconds"][f"bf16 dots/{t}"])
    print_result(result, args.out)


if __name__ == "__main__":
    main()
