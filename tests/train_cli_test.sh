#!/usr/bin/env bash
# `retnet train` end to end: a tiny config trained for a few steps on tests/data text, the
# output loaded by `generate` and `score`, a resumed run equal to an unbroken one byte for byte,
# and every bad input refused in one line with a non-zero exit (a full disk while saving
# included: the earlier checkpoint stays loadable). Usage: train_cli_test.sh RETNET_BINARY DATA_DIR
set -u
retnet=$1
data=$2
. "$(dirname "$0")/checks.sh"  # start_checks, ok, fail, expect_ok
start_checks
text=$data/shakespeare-heldout-8k.txt
cat >"$work/tiny.json" <<'JSON'
{"vocab_size": 256, "decoder_embed_dim": 16, "decoder_value_embed_dim": 16,
 "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 32, "decoder_layers": 1,
 "model_type": "retnet", "activation_fn": "swish", "recurrent_chunk_size": 8}
JSON
# The tiny config on the text for 6 steps unless told otherwise.
train() { "$retnet" train --config "$work/tiny.json" --batch 2 --seq-len 16 --warmup 2 \
  --eval-every 3 --threads 1 "$@"; }
train6() { train --data "$text" --steps 6 "$@"; }
expect_error() {  # name, expected text in the message, command...
  local name=$1 text=$2; shift 2
  "$@" >"$work/out" 2>"$work/err"
  local rc=$? lines
  lines=$(grep -cv '^loaded \|^training \|^step [0-9]*/[0-9]* loss' "$work/err")
  if [ $rc -eq 0 ]; then fail "$name: exit 0"; return; fi
  if [ $rc -ge 128 ]; then fail "$name: crashed with exit $rc"; return; fi
  if [ "$lines" -ne 1 ]; then fail "$name: $lines lines on stderr: $(cat "$work/err")"; return; fi
  if ! grep -qF -- "$text" "$work/err"; then fail "$name: message lacks '$text': $(cat "$work/err")"; return; fi
  ok
}
same_files() {  # name, folder a, folder b
  local f
  for f in model.safetensors optimizer.safetensors config.json; do
    if cmp -s "$2/$f" "$3/$f"; then ok; else fail "$1: $f differs"; fi
  done
}

# A run, its progress lines, and the folder loaded by generate and score.
expect_ok "train" train6 --out "$work/unbroken"
if grep -q '^step 3/6 loss [0-9.]* heldout [0-9.]* tok/s [0-9]* eta ' "$work/err"; then ok; else
  fail "progress line: $(cat "$work/err")"; fi
if grep -q '^step 2/6 loss [0-9.]* tok/s' "$work/err"; then ok; else fail "no heldout off eval steps"; fi
expect_ok "generate loads the output" "$retnet" generate -m "$work/unbroken" -p "To be" -n 8 --seed 1
expect_ok "score loads the output" "$retnet" score -m "$work/unbroken" --text "To be or not to be" --json
if [ -e "$work/unbroken/.checkpoint-partial" ]; then fail "staging folder left behind"; else ok; fi

# Stopped after step 3 and resumed: the same bytes as the unbroken run (one thread).
expect_ok "train to step 3" train6 --out "$work/resumed" --stop-after 3
expect_ok "resume" train6 --out "$work/resumed" --resume
same_files "resumed equals unbroken" "$work/unbroken" "$work/resumed"
expect_ok "accumulate" train --data "$text" --out "$work/accumulated" --accumulate 2 --steps 2 --save-every 1

# Fine-tuning a model folder: its tokenizer files travel with it.
expect_ok "continue -m" "$retnet" train -m "$work/unbroken" --data "$text" --out "$work/tuned" \
  --batch 2 --seq-len 16 --steps 2 --threads 1
expect_ok "score loads the tuned output" "$retnet" score -m "$work/tuned" --text "To be"

# A new model with a BPE tokenizer (Llama 2's): the text is read with it, its files are copied
# into --out, and the folder generates and scores through it.
llama2=$data/tokenizers/llama2
sed 's/"vocab_size": 256/"vocab_size": 32000/' "$work/tiny.json" >"$work/bpe.json"
expect_ok "train --tokenizer" "$retnet" train --config "$work/bpe.json" --tokenizer "$llama2" \
  --data "$text" --out "$work/bpe" --batch 2 --seq-len 16 --steps 2 --threads 1
if cmp -s "$llama2/tokenizer.json" "$work/bpe/tokenizer.json"; then ok; else fail "tokenizer.json not copied"; fi
# 8 KB of English in Llama 2's pieces: about 3.5 bytes each, so far fewer tokens than bytes.
bpe_tokens=$(sed -n 's/^training [0-9]* parameters on \([0-9]*\) tokens.*/\1/p' "$work/err")
if [ -n "$bpe_tokens" ] && [ "$bpe_tokens" -lt 4000 ]; then ok; else
  fail "--tokenizer: not read as BPE tokens: $(head -2 "$work/err")"; fi
expect_ok "generate through the BPE tokenizer" "$retnet" generate -m "$work/bpe" -p "To be" -n 4 --seed 1
expect_ok "tokenize with the trained folder" "$retnet" tokenize -m "$work/bpe" --text "To be"
if [ "$(cat "$work/out")" = "$("$retnet" tokenize -m "$llama2" --text "To be")" ]; then ok; else
  fail "trained folder tokenizes differently from $llama2"; fi
expect_error "--tokenizer with -m" "--tokenizer is for a new model" "$retnet" train -m "$work/unbroken" \
  --tokenizer "$llama2" --data "$text" --out "$work/x"
expect_error "--tokenizer without tokenizer.json" "no tokenizer.json" "$retnet" train \
  --config "$work/bpe.json" --tokenizer "$work/unbroken" --data "$text" --out "$work/x"
expect_error "--tokenizer beyond vocab_size" "vocab_size is 256" "$retnet" train \
  --config "$work/tiny.json" --tokenizer "$llama2" --data "$text" --out "$work/x"

# Dropout: a run with it differs from one without, and stopping and resuming gives the same
# bytes as an unbroken run (the masks follow the step, not the process).
expect_ok "dropout" train6 --out "$work/dropout" --dropout 0.2
if cmp -s "$work/dropout/model.safetensors" "$work/unbroken/model.safetensors"; then
  fail "--dropout changed nothing"; else ok; fi
expect_ok "dropout to step 3" train6 --out "$work/dropout-resumed" --dropout 0.2 --stop-after 3
expect_ok "dropout resume" train6 --out "$work/dropout-resumed" --dropout 0.2 --resume
same_files "dropout: resumed equals unbroken" "$work/dropout" "$work/dropout-resumed"
expect_error "dropout out of range" "--dropout must be in" train6 --out "$work/x" --dropout 1

# A full disk while saving: one line, exit 1, and the step-6 checkpoint as it was.
cp -r "$work/unbroken" "$work/full"
cp -r "$work/unbroken" "$work/before"
expect_error "disk full" "in $work/full is kept" bash -c 'trap "" XFSZ; ulimit -f 48; exec "$@"' _ \
  "$retnet" train --config "$work/tiny.json" --data "$text" --batch 2 --seq-len 16 --steps 8 \
  --warmup 2 --threads 1 --out "$work/full" --resume
same_files "disk full keeps the checkpoint" "$work/before" "$work/full"
expect_ok "the kept checkpoint loads" "$retnet" score -m "$work/full" --text "To be"
if [ -e "$work/full/.checkpoint-partial" ]; then fail "disk full: staging folder left"; else ok; fi

# Bad input: one line each, non-zero exit.
printf 'short' >"$work/short.txt"
sed 's/"vocab_size": 256/"vocab_size": 100/' "$work/tiny.json" >"$work/small-vocab.json"
expect_error "no model" "give one of --config" "$retnet" train --data "$text" --out "$work/x"
expect_error "both models" "give one of --config" \
  "$retnet" train --config "$work/tiny.json" -m "$work/unbroken" --data "$text" --out "$work/x"
expect_error "no data flag" "--data is required" "$retnet" train --config "$work/tiny.json" --out "$work/x"
expect_error "missing data" "nope.txt" train --steps 6 --data "$work/nope.txt" --out "$work/x"
expect_error "short data" "fewer than one sequence" train --steps 6 --data "$work/short.txt" --out "$work/x"
expect_error "vocab too small" "smaller than the 256 ids" \
  "$retnet" train --config "$work/small-vocab.json" --data "$text" --out "$work/x"
expect_error "out is the input" "--out is the -m folder" \
  "$retnet" train -m "$work/unbroken" --data "$text" --out "$work/unbroken"
expect_error "bad lr" "--lr must be in" train6 --out "$work/x" --lr 0
expect_error "bad mode" "--mode must be" train6 --out "$work/x" --mode sideways
expect_error "unknown flag" "did you mean --steps?" train6 --out "$work/x" --stpes 3
# Weights that overflow (every output weight the largest float): the loss is nan at step 1.
cp -r "$work/unbroken" "$work/overflow"
if python3 - "$work/overflow/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
blob = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", blob[:8])[0]
begin, end = json.loads(blob[8:8 + n])["output_projection.weight"]["data_offsets"]
blob[8 + n + begin:8 + n + end] = struct.pack("<f", 3.4e38) * ((end - begin) // 4)
open(path, "wb").write(blob)
PY
then
  expect_error "nan loss" "step 1: loss is nan" "$retnet" train -m "$work/overflow" \
    --data "$text" --out "$work/nan" --batch 2 --seq-len 16 --steps 3
  if [ -e "$work/nan/model.safetensors" ]; then fail "nan loss: a checkpoint was saved"; else ok; fi
fi
expect_error "resume without a checkpoint" "optimizer.safetensors" train6 --out "$work/empty" --resume
expect_error "resume with another batch" "--batch 2" \
  "$retnet" train --config "$work/tiny.json" --data "$text" --batch 3 --seq-len 16 --steps 6 \
  --out "$work/unbroken" --resume

echo "train command line: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
