#!/usr/bin/env bash
# Peak memory (VmHWM, the resident high-water mark) of the `retnet` command line against stated
# bounds. Usage: memory_test.sh RETNET_BINARY DATA_DIR [plain|sanitized]
# (sanitized: the binary is built with a sanitizer, whose shadow memory and quarantine inflate
# the RSS; the script then reports a skip, exit 77).
#
# 1. Prompts: `retnet bench` reads prompts of 20 000 and 200 000 tokens (chunkwise) with the
#    demo-size model tests/data/tiny-bytes and reports its own peak RSS. The prompt's token ids
#    are held (4 bytes each); activations and logits are bounded by the chunk. Bound: the peak
#    grows by at most 8 bytes per extra token + 1 MiB (measured: 4.0 bytes per token). Holding
#    one d = 32 float activation row per token would add 128 bytes per token, the logits
#    1 KiB per token.
# 2. `retnet score --file` on files of 20 000 and 200 000 bytes, measured by GNU time (or
#    Python's getrusage when GNU time is missing). The file's text and its token ids are held
#    whole (about 8 bytes per byte); segments of logits and activations are bounded by the
#    chunk. Bound: at most 12 bytes per extra byte + 1 MiB (measured: 8.2 bytes per byte).
# 3. Weights are never held twice: a model with 104 MB of float32 weights (one constant value,
#    written here as safetensors) is loaded and runs one token (`retnet bench`, which reports
#    its peak RSS); the peak must stay within the weight bytes + 24 MiB (measured: weights +
#    12.2 MB, of which about 5 MB is the process itself). A copy of the weights at any moment
#    of loading would add 104 MB.
# 4. Weight types hold their stored bytes, not float32: the same model loaded with --weights
#    f16, bf16, q8 and q4 (converted a panel of 48 rows at a time while loading) must report
#    exactly the type's bytes (2, 2, 1 + 2/32 and 0.5 + 4/32 bytes per weight of a linear map; the
#    7680 norm weights stay float32: 51 935 232 for f16 and bf16, 27 604 992 and 16 250 880 bytes)
#    and peak within them + the same 24 MiB as float32 (measured: + 11.2, 11.2, 10.6 and 10.1 MB). A float32 copy of the
#    weights (104 MB), or of more than about 14 MB of them, would break the bound. The q4 folder
#    written by `retnet convert` loads within the same bound.
set -u
retnet=$1
data=$2
if [ "${3:-plain}" = sanitized ]; then
  echo "SKIPPED: a sanitizer build's RSS includes shadow memory; run on a plain build"
  exit 77
fi
model=$data/tiny-bytes
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
skipped=""
MiB=1048576

. "$(dirname "$0")/checks.sh"  # json_number, check
# Peak RSS in bytes of a command (its stdout and stderr are discarded); empty when the command
# fails or nothing can measure it.
peak_rss_of() {
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -o "$work/time" -f %M "$@" >/dev/null 2>&1 || return 1
    echo $(($(tail -n 1 "$work/time") * 1024))
  elif command -v python3 >/dev/null; then
    python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
sys.exit(r.returncode) if r.returncode else print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)' "$@"
  else
    return 2
  fi
}

# --- 1. prompts
for n in 20000 200000; do
  if ! "$retnet" bench -m "$model" --prompt-len $n --gen-len 1 --repetitions 1 --threads 1 --json \
      >"$work/bench$n.json" 2>"$work/err"; then
    echo "FAIL: bench --prompt-len $n: $(cat "$work/err")"
    failed=$((failed + 1))
  fi
done
small=$(json_number "$work/bench20000.json" peak_rss_bytes)
large=$(json_number "$work/bench200000.json" peak_rss_bytes)
echo "prompt of 20000 tokens: peak RSS ${small:-?} bytes; 200000 tokens: ${large:-?} bytes"
check "prompt memory grows by at most 8 bytes per token + 1 MiB" \
  "b > 1e6 && a > 1e6 && b - a <= 8 * 180000 + $MiB" "$small" "$large"

# --- 2. score --file
for n in 20000 200000; do
  yes "Now is the winter of our discontent made glorious summer." | head -c $n >"$work/text$n.txt"
done
small=$(peak_rss_of "$retnet" score -m "$model" --file "$work/text20000.txt" --threads 1)
rc=$?
large=$(peak_rss_of "$retnet" score -m "$model" --file "$work/text200000.txt" --threads 1)
if [ $rc -eq 2 ]; then
  skipped="score --file (neither GNU time, /usr/bin/time, nor python3 is installed to measure it)"
  echo "SKIPPED: $skipped"
else
  echo "score --file of 20000 bytes: peak RSS ${small:-?} bytes; 200000 bytes: ${large:-?} bytes"
  check "score --file memory grows by at most 12 bytes per byte + 1 MiB" \
    "b > 1e6 && a > 1e6 && b - a <= 12 * 180000 + $MiB" "$small" "$large"
fi

# --- 3. weights held once
# d 512, value dim 1024, FFN 1024, 4 heads, 7 layers, vocab 256: 25 959 936 floats.
big=$work/big
mkdir -p "$big"
cat >"$big/config.json" <<'EOF'
{"vocab_size": 256, "decoder_embed_dim": 512, "decoder_value_embed_dim": 1024,
 "decoder_retention_heads": 4, "decoder_ffn_embed_dim": 1024, "decoder_layers": 7,
 "activation_fn": "swish", "tie_word_embeddings": false}
EOF
tensors=()  # name:rows:cols (cols 0 for a vector)
tensors+=("model.embed_tokens.weight:256:512" "model.layer_norm.weight:512:0" "lm_head.weight:256:512")
for i in 0 1 2 3 4 5 6; do
  p="model.layers.$i"
  tensors+=("$p.retention_layer_norm.weight:512:0" "$p.final_layer_norm.weight:512:0"
    "$p.retention.q_proj.weight:512:512" "$p.retention.k_proj.weight:512:512"
    "$p.retention.v_proj.weight:1024:512" "$p.retention.g_proj.weight:1024:512"
    "$p.retention.out_proj.weight:512:1024" "$p.ffn.fc1.weight:1024:512"
    "$p.ffn.gate.weight:1024:512" "$p.ffn.fc2.weight:512:1024")
done
header="" offset=0
for t in "${tensors[@]}"; do
  IFS=: read -r name rows cols <<<"$t"
  if [ "$cols" -eq 0 ]; then shape="[$rows]" bytes=$((rows * 4)); else
    shape="[$rows, $cols]" bytes=$((rows * cols * 4)); fi
  header+="${header:+, }\"$name\": {\"dtype\": \"F32\", \"shape\": $shape, \"data_offsets\": [$offset, $((offset + bytes))]}"
  offset=$((offset + bytes))
done
header="{$header}"
while [ $((${#header} % 8)) -ne 0 ]; do header+=" "; done
{
  # u64 little-endian header length, the header, then every float 0x3c3c3c3c (about 0.0115)
  len=${#header}
  printf "$(printf '\\%03o' $((len & 255)) $(((len >> 8) & 255)) $(((len >> 16) & 255)) 0 0 0 0 0)"
  printf '%s' "$header"
  head -c "$offset" /dev/zero | tr '\0' '<'
} >"$big/model.safetensors"
echo "weights: $offset bytes in $(stat -c %s "$big/model.safetensors") bytes of safetensors"
if "$retnet" bench -m "$big" --prompt-len 1 --gen-len 1 --repetitions 1 --threads 1 --json \
    >"$work/big.json" 2>"$work/err"; then
  peak=$(json_number "$work/big.json" peak_rss_bytes)
  weights=$(json_number "$work/big.json" weight_bytes)
  echo "peak RSS $peak bytes for $weights bytes of weights"
  check "the loaded model holds the $offset bytes of the file's weights" "a == b" "$weights" "$offset"
  check "peak RSS is at most the weight bytes + 24 MiB (weights never held twice)" \
    "a >= b && a <= b + 24 * $MiB" "$peak" "$weights"
else
  echo "FAIL: bench on the 104 MB model: $(cat "$work/err")"
  failed=$((failed + 1))
fi

# --- 4. weight types: resident bytes = stored bytes
norms=$((15 * 512 * 4))
linear=$(((offset - norms) / 4))  # weights of linear maps; every row is whole blocks of 32
declare -A type_bytes=([f16]=$((linear * 2 + norms)) [bf16]=$((linear * 2 + norms)) [q8]=$((linear + linear / 32 * 2 + norms))
  [q4]=$((linear / 2 + linear / 32 * 2 + norms)))
typed_peak() {  # name, expected weight bytes, bench arguments...
  local name=$1 want=$2 peak weights; shift 2
  if "$retnet" bench "$@" --prompt-len 1 --gen-len 1 --repetitions 1 --threads 1 --json \
      >"$work/typed.json" 2>"$work/err"; then
    peak=$(json_number "$work/typed.json" peak_rss_bytes)
    weights=$(json_number "$work/typed.json" weight_bytes)
    echo "$name: peak RSS $peak bytes for $weights bytes of weights"
    check "$name holds $want bytes of weights" "a == b" "$weights" "$want"
    check "$name: peak RSS is at most the weight bytes + 24 MiB (no float32 copy)" \
      "a >= b && a <= b + 24 * $MiB" "$peak" "$weights"
  else
    echo "FAIL: $name: $(cat "$work/err")"
    failed=$((failed + 1))
  fi
}
for t in f16 bf16 q8 q4; do
  typed_peak "--weights $t" "${type_bytes[$t]}" -m "$big" --weights $t
done
if "$retnet" convert -m "$big" -o "$work/big-q4" --weights q4 --threads 1 >/dev/null 2>"$work/err"; then
  rm -f "$big/model.safetensors"  # the disk space of the float32 file
  typed_peak "the converted q4 folder" "${type_bytes[q4]}" -m "$work/big-q4"
else
  echo "FAIL: convert to q4: $(cat "$work/err")"
  failed=$((failed + 1))
fi

if [ "$failed" -ne 0 ]; then
  echo "$failed check(s) failed"
  exit 1
fi
if [ -n "$skipped" ]; then
  echo "skipped: $skipped"
  exit 77
fi
echo "all memory checks passed"
