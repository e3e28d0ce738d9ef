#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each, from a fresh copy of its corpus (the corpora in
# the repository are never written), and fails on any finding: a crash, a sanitizer report, an
# out-of-memory (over 2 GB) or a timeout (one input over 10 s). Builds nothing: configure and
# build the targets first, e.g.
#   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DRETNET_BUILD_FUZZERS=ON \
#     -DRETNET_BUILD_TESTS=OFF -DRETNET_BUILD_BENCHMARKS=OFF -DRETNET_BUILD_EXAMPLES=OFF \
#     -DRETNET_BUILD_TOOLS=OFF -DRETNET_USE_OPENMP=OFF
#   cmake --build build-fuzz
# Usage: fuzz/run.sh SECONDS [BUILD_DIR]   (BUILD_DIR defaults to build-fuzz in the repo root)
# A finding's input is kept under $RETNET_FUZZ_ARTIFACTS (default: a temporary folder, printed);
# turn it into a regression test, then add it to the corpus.
set -uo pipefail

seconds=${1:-}
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 SECONDS [BUILD_DIR]" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build-fuzz}
artifacts=${RETNET_FUZZ_ARTIFACTS:-$(mktemp -d -t retnet-fuzz-artifacts.XXXXXX)}
mkdir -p "$artifacts"

# target  corpus (relative to fuzz/)  dictionary
targets=(
  "fuzz_safetensors corpus safetensors.dict"
  "fuzz_index corpus_index json.dict"
  "fuzz_config corpus_config json.dict"
  "fuzz_state corpus_state state.dict"
  "fuzz_tokenizer corpus_tokenizer tokenizer.dict"
  "fuzz_tokenizer_encode corpus_tokenizer_encode tokenizer.dict"
)

failed=()
for line in "${targets[@]}"; do
  read -r target corpus dict <<<"$line"
  binary=$build/fuzz/$target
  if [[ ! -x "$binary" ]]; then
    echo "=== $target: $binary not found (build with -DRETNET_BUILD_FUZZERS=ON first)" >&2
    failed+=("$target (not built)")
    continue
  fi
  work=$(mktemp -d -t "retnet-$target.XXXXXX")
  cp -r "$root/fuzz/$corpus/." "$work/"
  echo "=== $target: ${seconds} s from $(ls "$work" | wc -l) seeds of fuzz/$corpus"
  "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict="$root/fuzz/$dict" -artifact_prefix="$artifacts/$target-" "$work" >"$work.log" 2>&1
  status=$?
  tail -n 4 "$work.log"
  if [[ $status -ne 0 ]]; then
    echo "=== $target: FINDING (exit $status); log $work.log, input under $artifacts" >&2
    grep -m 20 -E "ERROR|SUMMARY|runtime error|Test unit written" "$work.log" >&2
    failed+=("$target")
  else
    rm -rf "$work" "$work.log"
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "=== fuzzing failed: ${failed[*]}" >&2
  exit 1
fi
rmdir "$artifacts" 2>/dev/null || true
echo "=== fuzzing passed: ${#targets[@]} targets, ${seconds} s each"
