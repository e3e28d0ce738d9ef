#!/usr/bin/env bash
# Training memory against sequence length: the peak RSS of `retnet grad` (one sequence, the
# chunkwise form) on the base config (benchmarks/configs/base.json, random weights) at
# T = 4096, 8192 and 16384, with and without --recompute. It prints the differences
# M(8192) - M(4096) and M(16384) - M(8192) and the ratio of their per-token slopes
# ((M16384 - M8192) / 8192) / ((M8192 - M4096) / 4096): 1 when memory grows linearly in T (the
# target is 1 within 10 %: no quadratic term, such as a [T, T] buffer, and nothing growing faster).
#
# Usage: benchmarks/train_memory.sh RETNET_BINARY [WORK_DIR]
# Needs /usr/bin/time and Debian's /usr/bin/python3 (torch, numpy) to write the random folder.
set -eu
retnet=$(realpath "$1")
work=${2:-$(mktemp -d)}
root=$(cd "$(dirname "$0")/.." && pwd)
model="$work/base-random"

if [ ! -f "$model/model.safetensors" ]; then
  mkdir -p "$model"
  cp "$root/benchmarks/configs/base.json" "$model/config.json"
  (cd "$root/scripts" && /usr/bin/python3 - "$model" <<'PY'
import json, os, sys
import numpy as np
from reference.retnet_torch import Config, RetNetDecoder
from reference.safetensors_io import write_safetensors
out = sys.argv[1]
cfg = json.load(open(os.path.join(out, "config.json")))
m = RetNetDecoder(Config(cfg)).randomize(0)
write_safetensors(os.path.join(out, "model.safetensors"),
                  {k: v.numpy() for k, v in m.state_dict().items()}, "F32")
PY
  )
fi

tokens() {  # T: a fixed pseudo-random sequence of T ids below the base vocabulary
  awk -v n="$1" 'BEGIN { x = 12345; for (i = 0; i < n; ++i) { x = (x * 1103515245 + 12345) % 2147483648;
    printf "%s%d", (i ? "," : ""), x % 32000 } }'
}

peak_kib() {  # T, extra flags...: the peak RSS in KiB of one `retnet grad` run
  local t=$1; shift
  /usr/bin/time -v "$retnet" grad -m "$model" --tokens "$(tokens "$t")" --mode chunkwise \
    --out "$work/g.safetensors" "$@" >"$work/out" 2>"$work/time" ||
    { cat "$work/time" >&2; exit 1; }
  sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time"
}

echo "load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
for flags in "" "--recompute"; do
  m4=$(peak_kib 4096 $flags)
  m8=$(peak_kib 8192 $flags)
  m16=$(peak_kib 16384 $flags)
  awk -v f="${flags:-(stored activations)}" -v a="$m4" -v b="$m8" -v c="$m16" 'BEGIN {
    printf "%s: peak RSS %.0f / %.0f / %.0f MiB at T 4096 / 8192 / 16384\n", f, a/1024, b/1024, c/1024
    r = ((c-b)/8192) / ((b-a)/4096)
    printf "  M(8192)-M(4096) = %.0f MiB, M(16384)-M(8192) = %.0f MiB, ratio %.3f, per-token ratio %.3f", (b-a)/1024, (c-b)/1024, (c-b)/(b-a), r
    printf " (linear: 1; within 10 %%: %s)\n", (r >= 0.9 && r <= 1.1) ? "yes" : "no" }'
done
