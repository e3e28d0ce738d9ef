#!/usr/bin/env bash
# The server's speed (docs/PERFORMANCE.md, "retnet serve"): for the demo model and the base config
# (random weights), starts retnet-serve on 127.0.0.1 and runs benchmarks/serve_bench.mjs against
# it: 1 against N concurrent streams, and a 4000-token session against a fresh prompt and against
# the whole history sent again. Results in benchmarks/results/serve_<model>.json.
# Usage: benchmarks/serve_bench.sh [BUILD_DIR] [THREADS] [extra serve_bench.mjs options...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-$(nproc)}
shift $(($# < 2 ? $# : 2))
extra=("$@")
server="$build/tools/retnet-serve"
[ -x "$server" ] || { echo "no $server: build the retnet_serve target first" >&2; exit 1; }
mkdir -p benchmarks/results
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null' EXIT

run() {  # run NAME SERVER_ARGS...
  local name=$1 log
  shift
  log=$(mktemp)
  "$server" "$@" --host 127.0.0.1 --port 0 --threads "$threads" --max-batch 8 >"$log" 2>&1 &
  pid=$!
  local port=
  for _ in $(seq 600); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | sed 's/.*://' || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$log"; exit 1; }
  echo "== $name ($threads compute threads; $(lscpu | sed -n 's/^Model name: *//p'))"
  node benchmarks/serve_bench.mjs "http://127.0.0.1:$port" \
    --json "benchmarks/results/serve_$name.json" ${extra[@]+"${extra[@]}"}
  kill "$pid"
  wait "$pid" || true
  pid=
  rm -f "$log"
}

run shakespeare -m models/shakespeare
run base --random-weights benchmarks/configs/base.json
