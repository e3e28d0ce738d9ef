#!/usr/bin/env bash
# What the `retnet` command line says about the folder it loads: a wrong tokenizer or model path
# is a one-line error (never bytes, never a confusing inner path), GGUF and PyTorch files are
# said to be unread, a load shows a summary line on stderr (an updating line on a terminal),
# `bench` runs every combination of its comma lists, and the README's held-out score command
# runs as written. Usage: cli_load_test.sh RETNET_BINARY SOURCE_DIR [sanitized|plain]
set -u
retnet=$1
src=$2
sanitized=${3:-plain}  # "sanitized": the held-out score (a minute in Release) is not run
data=$src/tests/data
model=$data/tiny-bytes
. "$(dirname "$0")/checks.sh"  # start_checks, ok, fail, expect_ok, json_number
start_checks
# Non-zero exit, no crash, exactly one line on stderr holding every expected text.
expect_error() {  # name, command..., then -- and the expected texts
  local name=$1; shift
  local args=() texts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  shift
  texts=("$@")
  "${args[@]}" >"$work/out" 2>"$work/err"
  local rc=$? lines t
  lines=$(wc -l <"$work/err")
  if [ $rc -eq 0 ]; then fail "$name: exit 0 (stdout: $(head -c 200 "$work/out"))"; return; fi
  if [ $rc -ge 128 ]; then fail "$name: crashed with exit $rc"; return; fi
  if [ "$lines" -ne 1 ]; then fail "$name: $lines lines on stderr: $(cat "$work/err")"; return; fi
  for t in "${texts[@]}"; do
    if ! grep -qF -- "$t" "$work/err"; then fail "$name: message lacks '$t': $(cat "$work/err")"; return; fi
  done
  ok
}
contains() {  # name, file, text
  if grep -qF -- "$3" "$2"; then ok; else fail "$1: '$3' not in $(head -c 300 "$2")"; fi
}

# --- Point 1: a wrong tokenizer path is an error, never bytes
gpt2=$data/tokenizers/gpt2
expect_error "tokenize: no such folder" "$retnet" tokenize -m /nonexistent --text hi \
  -- "retnet tokenize: /nonexistent: no such folder"
expect_error "tokenize: tokenizer.json given as the folder" "$retnet" tokenize -m "$gpt2/tokenizer.json" --text hi \
  -- "$gpt2/tokenizer.json: is a regular file, expected a folder: give the folder that holds it, $gpt2"
expect_error "detokenize: no such folder" "$retnet" detokenize -m /nonexistent --ids 104 \
  -- "/nonexistent: no such folder"
expect_ok "tokenize: GPT-2's folder" "$retnet" tokenize -m "$gpt2" --text hi
contains "tokenize: GPT-2's id for hi" "$work/out" "5303"
mkdir "$work/bytes-only"
expect_ok "tokenize: a folder without tokenizer.json is bytes" "$retnet" tokenize -m "$work/bytes-only" --text hi
contains "tokenize: bytes" "$work/out" "104,105"
expect_ok "info: byte tokenizer named" "$retnet" info -m "$model"
contains "info text names the byte tokenizer" "$work/out" "tokenizer   byte-level (no tokenizer.json"
expect_ok "info --json: byte tokenizer named" "$retnet" info -m "$model" --json
contains "info json names the byte tokenizer" "$work/out" '"tokenizer":"byte-level (no tokenizer.json'
mkdir "$work/gpt2-model"
cp "$model"/config.json "$model"/model.safetensors "$gpt2"/tokenizer.json "$work/gpt2-model/"
expect_ok "info: tokenizer.json named" "$retnet" info -m "$work/gpt2-model"
contains "info names tokenizer.json" "$work/out" "tokenizer   tokenizer.json, BPE, byte-level, 50257 ids"

# --- Point 7: misleading model paths
for c in "generate -p hi -n 1" "score --text hello" "info" "bench --prompt-len 2 --gen-len 1 --repetitions 1"; do
  # shellcheck disable=SC2086
  expect_error "$c: model.safetensors given as -m" "$retnet" $c -m "$model/model.safetensors" \
    -- "$model/model.safetensors: is a file, expected a model folder" "give the folder that holds it, $model"
  # shellcheck disable=SC2086
  expect_error "$c: no such folder" "$retnet" $c -m "$work/nowhere" -- "$work/nowhere: no such folder"
done
printf 'GGUF' >"$work/model-Q4_K_M.gguf"
expect_error "generate: a GGUF file" "$retnet" generate -m "$work/model-Q4_K_M.gguf" -p hi \
  -- "model-Q4_K_M.gguf: a GGUF file, a format retnet does not read" "Hugging Face repository" \
  "save_pretrained(DIR, safe_serialization=True)"
mkdir "$work/pickled"
cp "$model/config.json" "$work/pickled/"
printf 'PK' >"$work/pickled/pytorch_model.bin"
expect_error "generate: a folder with pytorch_model.bin" "$retnet" generate -m "$work/pickled" -p hi \
  -- "model.safetensors: missing" "it holds pytorch_model.bin: a PyTorch pickle, which retnet does not read" \
  "can run code" "save_pretrained(DIR, safe_serialization=True)"
rm "$work/pickled/config.json"
expect_error "info: a folder with only pytorch_model.bin" "$retnet" info -m "$work/pickled" \
  -- "it holds pytorch_model.bin: a PyTorch pickle"
expect_error "generate: a .pt file" "$retnet" generate -m "$work/pickled/pytorch_model.bin" -p hi \
  -- "pytorch_model.bin: a PyTorch pickle, which retnet does not read"

# --- Point 2: the load's summary line when stderr is not a terminal
expect_ok "generate with stderr to a file" "$retnet" generate -m "$model" -p hi -n 2 --threads 1
contains "generate: load summary" "$work/err" "loaded $model: 0.2 MB in "
contains "generate: load summary types" "$work/err" " s (F32 -> f32)"
expect_ok "score with stderr to a file" "$retnet" score -m "$model" --text hello --weights q8
contains "score: load summary" "$work/err" "(F32 -> q8)"
if [ "$(grep -c $'\r' "$work/err")" -eq 0 ]; then ok; else fail "no carriage return off a terminal"; fi
if command -v script >/dev/null; then
  # On a terminal the line updates in place: "loading DIR: a/b MB (p %)", then the summary.
  script -qec "'$retnet' generate -m '$model' -p hi -n 1 --threads 1 2>&1 >/dev/null" /dev/null >"$work/tty" </dev/null
  contains "terminal: updating line" "$work/tty" "loading $model: "
  contains "terminal: percent" "$work/tty" "(100 %)"
  contains "terminal: summary" "$work/tty" "loaded $model: "
fi

# --- Point 6: bench's comma lists, table and JSON
expect_ok "bench 2x2 table" "$retnet" bench -m "$model" --threads 1,2 --prompt-len 4,8 --gen-len 2 --repetitions 2
rows=$(grep -c '^| ' "$work/out")
if [ "$rows" -eq 6 ]; then ok; else fail "bench 2x2: $rows table lines, expected 6 (head, rule, 4 rows): $(cat "$work/out")"; fi
columns=$(grep '^| ' "$work/out" | awk -F'|' '{ print NF - 2 }' | sort -u)
if [ "$columns" = "9" ]; then ok; else fail "bench 2x2: column counts '$columns', expected 9"; fi
if grep '^| f32 ' "$work/out" | grep -q ' ± '; then ok; else fail "bench: no mean ± sd: $(cat "$work/out")"; fi
for combination in "| 1 | 1 | 4 |" "| 1 | 1 | 8 |" "| 2 | 1 | 4 |" "| 2 | 1 | 8 |"; do
  contains "bench row $combination" "$work/out" "$combination"
done
contains "bench load time" "$work/err" "loaded $model: "
expect_ok "bench --json" "$retnet" bench -m "$model" --threads 1 --prompt-len 4,8 --gen-len 2 --weights f32,q8 --repetitions 2 --json
if python3 -c '
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) == 4, rows
assert [(r["weights"], r["prompt_len"]) for r in rows] == [("f32", 4), ("f32", 8), ("q8", 4), ("q8", 8)]
for r in rows:
    assert r["repetitions"] == 2 and len(r["prefill_seconds_all"]) == 2
    assert r["load_seconds"] > 0 and r["prefill_tokens_per_s"] > 0 and r["prefill_tokens_per_s_sd"] >= 0
' "$work/out"; then ok; else fail "bench --json rows: $(head -c 400 "$work/out")"; fi
expect_ok "bench one row --json parses as one object" "$retnet" bench -m "$model" --prompt-len 4 --gen-len 1 --repetitions 1 --json
if python3 -c 'import json, sys; assert isinstance(json.load(open(sys.argv[1])), dict)' "$work/out"; then ok; else fail "bench one row: not one JSON object"; fi
expect_error "bench bad thread item" "$retnet" bench -m "$model" --threads 1,x \
  -- "bench: --threads expects an integer, got 'x' (in the list '1,x')"
expect_error "bench empty item" "$retnet" bench -m "$model" --prompt-len 4,,8 \
  -- "bench: --prompt-len has an empty item in '4,,8'"
expect_error "bench bad weight item" "$retnet" bench -m "$model" --weights f32,q7 \
  -- "bench: --weights: unknown weight type 'q7'"
expect_error "bench zero threads" "$retnet" bench -m "$model" --threads 0,1 -- "bench: --threads must be in [1, "
"$retnet" bench -m "$model" --gen-len 1,-1 >/dev/null 2>&1
if [ $? -eq 2 ]; then ok; else fail "bench bad list item: exit status is not 2 (usage)"; fi

# --- Point 10: the README's held-out score command, as written, from the source folder
command=$(grep -o '\./build/tools/retnet score -m models/shakespeare --file [^ `]*' "$src/README.md" | head -1)
if [ -n "$command" ]; then ok; else fail "README: no score command on the held-out text"; fi
file=${command##* }
if [ -f "$src/$file" ] && [ "$(stat -c %s "$src/$file")" -eq 111540 ]; then ok; else fail "README's $file is not the 111,540-byte held-out text"; fi
# shellcheck disable=SC2086
if [ "$sanitized" = sanitized ]; then
  echo "not run in this sanitized build: the README's score command (the Release build runs it)"
else
  if (cd "$src" && "$retnet" ${command#./build/tools/retnet} >"$work/out" 2>"$work/err"); then ok; else fail "README's score command: $(cat "$work/err")"; fi
  contains "held-out score as README and TRAINING.md state it" "$work/out" "tokens 111540, nats/token 1.5367,"
fi

# --- The BPE model (models/shakespeare-bpe): Llama 2's tokenizer end to end on a trained model.
# The first 8 KB of the held-out text is 2728 of its tokens (Hugging Face's count, as the
# tokenizer tests check it) at 4.6391 nats/token (measured; a broken tokenizer, tied embedding
# or f16 path moves it by far more than the bound).
bpe=$src/models/shakespeare-bpe
if "$retnet" score -m "$bpe" --file "$data/shakespeare-heldout-8k.txt" --json --threads 1 \
  >"$work/bpe.json" 2>"$work/err"; then ok; else fail "score the BPE model: $(tail -n 1 "$work/err")"; fi
check "BPE model: 2728 tokens at 4.6391 nats/token" "a == 2728 && b > 4.638 && b < 4.6402" \
  "$(json_number "$work/bpe.json" tokens)" "$(json_number "$work/bpe.json" nats_per_token)"
if "$retnet" generate -m "$bpe" -p "ROMEO:" -n 40 --seed 1 --threads 1 >"$work/bpe.txt" 2>"$work/err"; then ok; else
  fail "generate with the BPE model: $(tail -n 1 "$work/err")"; fi
# Words, not byte soup: at least 15 of the text's space-separated words are in the corpus.
words=$(tr -s ' \n' '\n\n' <"$work/bpe.txt" | grep -cxFf <(tr -s ' \n' '\n\n' <"$src/models/shakespeare/heldout.txt" | sort -u))
if [ "$words" -ge 15 ]; then ok; else fail "BPE generation: only $words corpus words in: $(cat "$work/bpe.txt")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
