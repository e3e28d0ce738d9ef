#!/usr/bin/env bash
# The `retnet` command line on good and bad input. Usage: cli_test.sh RETNET_BINARY DATA_DIR
# Every bad input must exit non-zero with exactly one line on stderr and no crash.
set -u
retnet=$1
data=$2
model=$data/tiny-bytes
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

expect_ok() {  # name, command...
  local name=$1; shift
  if "$@" >"$work/out" 2>"$work/err"; then ok; else fail "$name (exit $?): $(cat "$work/err")"; fi
}
expect_error() {  # name, expected text in the message, command...
  local name=$1 text=$2; shift 2
  "$@" >"$work/out" 2>"$work/err"
  local rc=$? lines
  lines=$(wc -l <"$work/err")
  if [ $rc -eq 0 ]; then fail "$name: exit 0"; return; fi
  if [ $rc -ge 128 ]; then fail "$name: crashed with exit $rc"; return; fi
  if [ "$lines" -ne 1 ]; then fail "$name: $lines lines on stderr: $(cat "$work/err")"; return; fi
  if ! grep -qF -- "$text" "$work/err"; then fail "$name: message lacks '$text': $(cat "$work/err")"; return; fi
  ok
}
contains() {  # name, file, text
  if grep -qF -- "$3" "$2"; then ok; else fail "$1: '$3' not in $(head -c 300 "$2")"; fi
}

# --- help
expect_ok "help" "$retnet" --help
for c in generate score bench info; do
  expect_ok "$c --help" "$retnet" $c --help
  contains "$c --help text" "$work/out" "usage: retnet $c"
done

# --- generate
expect_ok "generate" "$retnet" generate -m "$model" -p "ROMEO:" -n 12 --temp 0 --threads 1
contains "generate echoes the prompt" "$work/out" "ROMEO:"
contains "generate reports speed" "$work/err" "tokens/s"
"$retnet" generate -m "$model" -p "Hi" -n 20 --temp 0.9 --seed 3 >"$work/a" 2>/dev/null
"$retnet" generate -m "$model" -p "Hi" -n 20 --temp 0.9 --seed 3 >"$work/b" 2>/dev/null
if cmp -s "$work/a" "$work/b"; then ok; else fail "same seed gave different text"; fi
# save after the prompt, resume from the file: same text as one uninterrupted run
"$retnet" generate -m "$model" -p "KING:" -n 16 --temp 0 >"$work/full" 2>/dev/null
"$retnet" generate -m "$model" -p "KING:" -n 0 --temp 0 --save-state "$work/s.bin" >/dev/null 2>&1
"$retnet" generate -m "$model" -n 16 --temp 0 --load-state "$work/s.bin" >"$work/resumed" 2>/dev/null
if [ "$(cat "$work/full")" = "KING:$(cat "$work/resumed")" ]; then ok; else
  fail "resumed text differs: '$(cat "$work/full")' vs 'KING:$(cat "$work/resumed")'"; fi

# --- score
expect_ok "score --json" "$retnet" score -m "$model" --text "To be, or not to be" --json
contains "score json tokens" "$work/out" '"tokens":19'
contains "score json nats" "$work/out" '"nats_per_token"'
contains "score json perplexity" "$work/out" '"perplexity"'
for mode in parallel chunkwise recurrent; do
  expect_ok "score --mode $mode" "$retnet" score -m "$model" --tokens 5,17,3,200,9,31,4,4,4,100 \
    --mode $mode --chunk-size 3 --json
  sed -n 's/.*"nats_per_token":\([0-9][0-9.e+-]*\).*/\1/p' "$work/out" | cut -c1-7 >"$work/nats_$mode"
done
if [ -s "$work/nats_parallel" ] && cmp -s "$work/nats_parallel" "$work/nats_chunkwise" &&
   cmp -s "$work/nats_parallel" "$work/nats_recurrent"; then ok; else
  fail "modes disagree or gave no number: $(cat "$work"/nats_*)"; fi
# A model folder without tokenizer files and with fewer than 256 ids: ids need no tokenizer.
expect_ok "score --tokens without a tokenizer" "$retnet" score -m "$data/torchscale-tiny" --tokens 1,2,3,96 --json
contains "score --tokens counts" "$work/out" '"tokens":4'
# Logits row t is the prediction after token t: rows before a changed token are identical,
# the row of the changed token differs (vocab 256, float32, a 128-byte npy header).
row=$((256 * 4))
"$retnet" score -m "$model" --tokens 10,20,30,40 --logits-out "$work/a.npy" >/dev/null 2>&1 || fail "logits a"
"$retnet" score -m "$model" --tokens 10,20,31,40 --logits-out "$work/b.npy" >/dev/null 2>&1 || fail "logits b"
if cmp -s -n $((128 + 2 * row)) "$work/a.npy" "$work/b.npy"; then ok; else fail "rows 0-1 depend on token 2"; fi
if cmp -s -i $((128 + 2 * row)) -n $row "$work/a.npy" "$work/b.npy"; then fail "row 2 ignores token 2"; else ok; fi
yes "Now is the winter of our discontent made glorious summer." | head -c 5000 >"$work/text.txt"
expect_ok "score --file with logits" "$retnet" score -m "$model" --file "$work/text.txt" --logits-out "$work/l.npy"
size=$(stat -c %s "$work/l.npy")
if [ "$size" -eq $((128 + 5000 * 256 * 4)) ]; then ok; else fail "logits file has $size bytes"; fi

# --- bench
expect_ok "bench --config" "$retnet" bench --config "$model/config.json" --prompt-len 16 --gen-len 4 --batch 2 --repeat 1 --json
for key in prefill_tokens_per_s decode_tokens_per_s peak_rss_bytes state_bytes; do
  contains "bench json $key" "$work/out" "\"$key\""
done
expect_ok "bench -m" "$retnet" bench -m "$model" --prompt-len 8 --gen-len 2 --mode parallel --repeat 1

# --- info: family, sizes, parameters, dtypes, tokenizer kind
expect_ok "info fla" "$retnet" info -m "$data/fla-tiny"
contains "info family" "$work/out" "family      fla"
contains "info parameters" "$work/out" "parameters  176640"
contains "info dtypes" "$work/out" "F32: 25 tensors"
contains "info tokenizer" "$work/out" "byte-level (no tokenizer.json"
expect_ok "info fused bf16" "$retnet" info -m "$data/families/fla-fused-bf16" --json
contains "info json dtype" "$work/out" '"BF16"'
contains "info json family" "$work/out" '"family":"fla"'
expect_ok "info syncdoth shards" "$retnet" info -m "$data/families/syncdoth-lm-decay"
contains "info syncdoth" "$work/out" "family      syncdoth"
contains "info shards" "$work/out" "2 safetensors file(s)"
mkdir -p "$work/withtok"
cp "$data/torchscale-tiny/config.json" "$data/torchscale-tiny/model.safetensors" "$work/withtok/"
echo '{"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0, "b": 1}}}' >"$work/withtok/tokenizer.json"
expect_ok "info tokenizer.json" "$retnet" info -m "$work/withtok"
contains "info tokenizer kind" "$work/out" "tokenizer.json: BPE, byte fallback"
# Unsupported variants and mixed families: one line each.
mkdir -p "$work/conv"
cp "$data/fla-tiny/model.safetensors" "$work/conv/"
sed 's/"use_short_conv": false/"use_short_conv": true/' "$data/fla-tiny/config.json" >"$work/conv/config.json"
expect_error "fla short conv" "use_short_conv" "$retnet" generate -m "$work/conv" -p hi
expect_error "fla short conv info" "use_short_conv" "$retnet" info -m "$work/conv"
cp "$data/syncdoth-tiny/config.json" "$work/conv/config.json"
expect_error "mixed families" "mixes checkpoint families" "$retnet" score -m "$work/conv" --tokens 1,2,3

# --- bad input: one line, non-zero, no crash
expect_error "no command" "missing command" "$retnet"
expect_error "unknown command" "unknown command 'frobnicate'" "$retnet" frobnicate
expect_error "unknown flag" "unknown argument '--bogus'" "$retnet" generate -m "$model" --bogus
expect_error "missing value" "--temp needs a value" "$retnet" generate -m "$model" --temp
expect_error "bad number" "--temp expects a number, got 'hot'" "$retnet" generate -m "$model" --temp hot
expect_error "bad integer" "-n expects an integer" "$retnet" generate -m "$model" -n 1.5
expect_error "zero threads" "--threads must be in [1, " "$retnet" generate -m "$model" --threads 0
expect_error "huge threads" "--threads must be in [1, " "$retnet" generate -m "$model" --threads 100000
expect_error "wrapping threads" "--threads must be in [1, " "$retnet" generate -m "$model" --threads 4294967297
expect_error "wrapping repeat" "--repeat must be in [1, 1000]" "$retnet" bench -m "$model" --repeat 4294967296
expect_error "huge seed" "--seed must be in [0, " "$retnet" generate -m "$model" --seed 18446744073709551615
expect_error "wrapping top-k" "--top-k must be in [0, " "$retnet" generate -m "$model" --top-k 4294967296
expect_error "tiny repeat penalty" "--repeat-penalty must be in" "$retnet" generate -m "$model" --repeat-penalty 1e-40
expect_error "bad top-p" "--top-p must be in [0, 1]" "$retnet" generate -m "$model" --top-p 1.5
expect_error "no model" "-m is required" "$retnet" generate -p hi
expect_error "missing model dir" "config.json" "$retnet" generate -m "$work/nowhere"
expect_error "missing state file" "is not a regular file" "$retnet" generate -m "$model" --load-state "$work/none.bin"
echo "garbage" >"$work/bad.state"
expect_error "corrupt state file" "bad magic" "$retnet" generate -m "$model" --load-state "$work/bad.state"
mkdir -p "$work/broken"
cp "$model/config.json" "$work/broken/"
head -c 1000 "$model/model.safetensors" >"$work/broken/model.safetensors"
expect_error "truncated weights" "model.safetensors" "$retnet" generate -m "$work/broken"
echo "{not json" >"$work/broken/config.json"
expect_error "malformed config" "not valid JSON" "$retnet" score -m "$work/broken" --text hi
expect_error "score without input" "exactly one of --text" "$retnet" score -m "$model"
expect_error "score bad mode" "--mode must be" "$retnet" score -m "$model" --text hi --mode sideways
expect_error "score bad tokens" "--tokens expects" "$retnet" score -m "$model" --tokens 1,x,3
expect_error "score token out of range" "token id 999" "$retnet" score -m "$model" --tokens 1,999
expect_error "score missing file" "is not a regular file" "$retnet" score -m "$model" --file "$work/none.txt"
expect_error "score directory" "is not a regular file" "$retnet" score -m "$model" --file "$work"
expect_error "score /dev/zero" "is not a regular file" "$retnet" score -m "$model" --file /dev/zero
mkfifo "$work/fifo"
expect_error "score FIFO" "is not a regular file" timeout 20 "$retnet" score -m "$model" --file "$work/fifo"
expect_error "score trailing comma" "--tokens expects" "$retnet" score -m "$model" --tokens 1,2,
expect_error "score one token" "at least 2 are needed" "$retnet" score -m "$model" --tokens 7
expect_error "bench both sources" "exactly one of -m" "$retnet" bench -m "$model" --config "$model/config.json"
expect_error "bench recurrent prompt" "--mode must be parallel, chunkwise" "$retnet" bench --config "$model/config.json" --mode recurrent

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
