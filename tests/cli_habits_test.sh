#!/usr/bin/env bash
# The command line's habits (issue 27, points 3, 6 and 8): the shared default sampler and random
# seeds, the sampler flags, long aliases and attached values, "did you mean", --version, the
# usage of bare `retnet`, one error prefix, and output that keeps the text and the speed line
# apart. Usage: cli_habits_test.sh RETNET_BINARY DATA_DIR
set -u
retnet=$1
data=$2
model=$data/tiny-bytes
tok=$data/tokenizers
source_dir=$(cd "$data/../.." && pwd)
. "$(dirname "$0")/checks.sh"  # start_checks, ok, fail, expect_ok, json_number
start_checks
# Exit status, exactly one line on stderr, and that line is `line` exactly.
expect_line() {  # name, status, line, command...
  local name=$1 status=$2 line=$3; shift 3
  "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -ne "$status" ]; then fail "$name: exit $rc, expected $status: $(cat "$work/err")"; return; fi
  # The model's load summary ("loaded DIR: ...") precedes a refusal that comes after loading.
  sed -i '/^loaded /d' "$work/err"
  if [ "$(wc -l <"$work/err")" -ne 1 ]; then fail "$name: not one line on stderr: $(cat "$work/err")"; return; fi
  if [ "$(cat "$work/err")" = "$line" ]; then ok; else fail "$name: '$(cat "$work/err")', expected '$line'"; fi
}
contains() {  # name, file, text
  if grep -qF -- "$3" "$2"; then ok; else fail "$1: '$3' not in $(head -c 300 "$2")"; fi
}
lacks() {  # name, file, text
  if grep -qF -- "$3" "$2"; then fail "$1: '$3' in $(head -c 300 "$2")"; else ok; fi
}
same() {  # name, file a, file b
  if [ -s "$2" ] && cmp -s "$2" "$3"; then ok; else
    fail "$1: $(od -c "$2" | head -2) vs $(od -c "$3" | head -2)"; fi
}
seed_of() { sed -n 's/.*; seed: \([0-9]*\)$/\1/p' "$1"; }  # the seed on a speed line
gen=("$retnet" generate -m "$model" --threads 1)

# --- seeds (point 3): -1 (the default) draws one, printed with the speed line; running again
# with the printed seed gives the same text.
expect_ok "generate, default seed" "${gen[@]}" -p Hi -n 24
cp "$work/out" "$work/random1"
seed1=$(seed_of "$work/err")
if [ -n "$seed1" ]; then ok; else fail "no seed on the speed line: $(cat "$work/err")"; fi
expect_ok "generate, default seed again" "${gen[@]}" -p Hi -n 24
seed2=$(seed_of "$work/err")
if [ -n "$seed2" ] && [ "$seed1" != "$seed2" ]; then ok; else fail "two runs drew seeds '$seed1' and '$seed2'"; fi
expect_ok "generate --seed <printed>" "${gen[@]}" -p Hi -n 24 --seed "${seed1:-0}"
same "the printed seed gives the text again" "$work/out" "$work/random1"
if [ "$(seed_of "$work/err")" = "$seed1" ]; then ok; else fail "--seed $seed1 printed $(seed_of "$work/err")"; fi
expect_ok "generate --seed -1" "${gen[@]}" -p Hi -n 4 --seed -1
if [ -n "$(seed_of "$work/err")" ]; then ok; else fail "--seed -1 printed no seed"; fi
expect_line "--seed -2" 2 "retnet generate: --seed must be in [-1, 9223372036854775807], got -2" \
  "${gen[@]}" --seed -2
# The defaults are SamplerParams::shared_defaults(), shown in --help, and a run without sampler
# flags is the run with them all given.
expect_ok "generate --help" "$retnet" generate --help
for line in "--temp, --temperature T" "temperature; 0 = greedy (default 0.8)" "(default 40)" \
    "(default 0.95)" "--min-p P" "(default 0.05)" "(default 1.1)" "--repeat-last-n N" \
    "(default 64)" "--presence-penalty A" "--frequency-penalty B" "--logit-bias ID=BIAS" \
    "-1 = drawn at random (printed with the speeds) (default -1)"; do
  contains "generate --help" "$work/out" "$line"
done
expect_ok "default sampler" "${gen[@]}" -p Hi -n 40 --seed 7
cp "$work/out" "$work/defaults"
expect_ok "the shared defaults given" "${gen[@]}" -p Hi -n 40 --seed 7 --temp 0.8 --top-k 40 \
  --top-p 0.95 --min-p 0.05 --repeat-penalty 1.1 --repeat-last-n 64 --presence-penalty 0 \
  --frequency-penalty 0
same "no sampler flags = the shared defaults" "$work/out" "$work/defaults"

# --- the sampler's new fields (point 4's CLI side)
expect_ok "greedy" "${gen[@]}" -p hello -n 20 --temp 0
cp "$work/out" "$work/greedy"
# min-p 1 keeps only the most likely token: greedy, whatever the temperature and seed.
expect_ok "--min-p 1" "${gen[@]}" -p hello -n 20 --temp 1.5 --seed 3 --min-p 1
same "--min-p 1 is greedy" "$work/out" "$work/greedy"
# A bias of 100 outweighs any logit of this model; -100 bans the greedy choice.
expect_ok "--logit-bias 65=100" "${gen[@]}" -p hi -n 8 --temp 0 --logit-bias 65=100
if [ "$(cat "$work/out")" = "hiAAAAAAAA" ]; then ok; else fail "--logit-bias 65=100: $(od -c "$work/out" | head -2)"; fi
first=$(od -An -tu1 -j 5 -N 1 "$work/greedy" | tr -d ' ')
expect_ok "--logit-bias ban" "${gen[@]}" -p hello -n 20 --temp 0 --logit-bias "$first=-100"
if [ -n "$first" ] && [ "$(od -An -tu1 -j 5 -N 1 "$work/out" | tr -d ' ')" != "$first" ]; then ok; else
  fail "--logit-bias $first=-100 still chose $first"; fi
# Presence and frequency penalties against the logits from `score`: each greedy byte is the
# argmax of its row less 1.5 x [seen] + 0.5 x count over the last 8 bytes (prompt included).
expect_ok "greedy with penalties" "${gen[@]}" -p hello -n 16 --temp 0 --repeat-penalty 1 \
  --repeat-last-n 8 --presence-penalty 1.5 --frequency-penalty 0.5
ids=$(head -c 21 "$work/out" | od -An -v -tu1 | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
expect_ok "score the penalised text" "$retnet" score -m "$model" --tokens "$ids" --logits-out "$work/pen.npy" --threads 1
read -r lo hi < <(od -An -tu1 -j 8 -N 2 "$work/pen.npy")
if od -An -v -tf4 -w4 -j $((10 + lo + 256 * hi)) "$work/pen.npy" | tr -d ' ' | awk -v ids="$ids" '
    BEGIN { n = split(ids, id, ",") }
    { v[int((NR - 1) / 256), (NR - 1) % 256] = $1 }
    END { if (NR != n * 256) exit 1
          for (t = 4; t < n - 1; t++) {  # row t predicts token t + 1 (id[t + 2])
            delete c; for (k = (t - 7 > 0 ? t - 7 : 0); k <= t; k++) c[id[k + 1]]++
            best = -1
            for (j = 0; j < 256; j++) {
              x = v[t, j]; if (j in c) x -= 1.5 + 0.5 * c[j]
              if (best < 0 || x > bx) { best = j; bx = x } }
            if (best != id[t + 2]) { print "row " t ": " best " vs " id[t + 2] > "/dev/stderr"; exit 1 } }
          exit 0 }'; then ok; else fail "greedy bytes under the penalties are not the penalised argmax"; fi
expect_line "--min-p 1.5" 2 "retnet generate: --min-p must be in [0, 1], got 1.5" "${gen[@]}" --min-p 1.5
expect_line "--presence-penalty 3" 2 "retnet generate: --presence-penalty must be in [-2, 2], got 3" \
  "${gen[@]}" --presence-penalty 3
expect_line "--frequency-penalty -2.5" 2 "retnet generate: --frequency-penalty must be in [-2, 2], got -2.5" \
  "${gen[@]}" --frequency-penalty -2.5
expect_line "--logit-bias 5" 2 "retnet generate: --logit-bias expects ID=BIAS, got '5'" "${gen[@]}" --logit-bias 5
expect_line "--logit-bias 5=200" 2 "retnet generate: --logit-bias BIAS must be in [-100, 100], got 200" \
  "${gen[@]}" --logit-bias 5=200
expect_line "--logit-bias -1=2" 2 "retnet generate: --logit-bias ID must be in [0, 2147483647], got -1" \
  "${gen[@]}" --logit-bias -1=2
expect_line "--logit-bias twice" 2 "retnet generate: SamplerParams: logit_bias gives id 5 twice" \
  "${gen[@]}" --logit-bias 5=1 --logit-bias 5=2
expect_line "--logit-bias beyond the vocabulary" 1 \
  "retnet generate: --logit-bias id 300 is outside the model's vocabulary [0, 256)" \
  "${gen[@]}" -p hi --logit-bias 300=1

# --- llama.cpp's habits (point 6)
expect_ok "long aliases" "$retnet" generate --model "$model" --prompt hello --n-predict 20 --temperature 0 --threads 1
same "--model --prompt --n-predict --temperature" "$work/out" "$work/greedy"
expect_ok "--max-tokens" "${gen[@]}" -p hello --max-tokens 20 --temp 0
same "--max-tokens" "$work/out" "$work/greedy"
expect_ok "attached values" "$retnet" generate "-m=$model" -phello -n20 --temp=0 --threads=1
same "-m=DIR -pTEXT -n20 --temp=0" "$work/out" "$work/greedy"
printf 'hello' >"$work/prompt.txt"
expect_ok "-f" "${gen[@]}" -f "$work/prompt.txt" -n 20 --temp 0
same "-f FILE" "$work/out" "$work/greedy"
expect_ok "--file" "${gen[@]}" --file "$work/prompt.txt" -n 20 --temp 0
same "--file FILE" "$work/out" "$work/greedy"
expect_line "-p and -f" 2 "retnet generate: give -p or -f, not both" "${gen[@]}" -p hi -f "$work/prompt.txt"
expect_line "-f missing" 1 "retnet generate: $work/none.txt: cannot open: no such file" "${gen[@]}" -f "$work/none.txt"
expect_line "-f a directory" 1 "retnet generate: $work: is a directory, expected a regular file" "${gen[@]}" -f "$work"
expect_line "-m and --model" 2 "retnet generate: --model given twice" "${gen[@]}" --model "$model"
expect_line "a switch with a value" 2 "retnet score: --json takes no value, got '--json=1'" \
  "$retnet" score -m "$model" --text hi --json=1
expect_line "did you mean --temp" 2 "retnet generate: unknown argument '--tmp' (did you mean --temp?)" \
  "${gen[@]}" --tmp 0.5
expect_line "did you mean --temperature" 2 \
  "retnet generate: unknown argument '--temperture=1' (did you mean --temperature?)" "${gen[@]}" --temperture=1
expect_line "did you mean --model" 2 "retnet tokenize: unknown argument '--modle' (did you mean --model?)" \
  "$retnet" tokenize --modle "$model" --text hi
expect_line "nothing close" 2 "retnet generate: unknown argument '--bogus' (see retnet generate --help)" \
  "${gen[@]}" --bogus
expect_ok "tokenize --model" "$retnet" tokenize --model "$tok/gpt2" --text "Hello world"
if [ "$(cat "$work/out")" = "15496,995" ]; then ok; else fail "tokenize --model: $(cat "$work/out")"; fi
expect_ok "--help shows the aliases" "$retnet" score --help
contains "score --help" "$work/out" "-m, --model DIR"
version=$(sed -n 's/^project(RetNet VERSION \([0-9.]*\).*/\1/p' "$source_dir/CMakeLists.txt")
expect_ok "--version" "$retnet" --version
if [ -n "$version" ] && [ "$(cat "$work/out")" = "retnet $version" ]; then ok; else
  fail "--version printed '$(cat "$work/out")', the project's version is '$version'"; fi
"$retnet" >"$work/out" 2>"$work/err"
rc=$?
if [ $rc -eq 2 ] && [ ! -s "$work/out" ] && grep -q "^usage: retnet COMMAND" "$work/err" &&
    grep -q "^  generate " "$work/err"; then ok; else fail "bare retnet: exit $rc, stderr $(head -c 200 "$work/err")"; fi

# --- output details (point 8)
# stdout and stderr into one file: the speed line (with the load time) is a line of its own
# after the whole text (the load summary, a line of its own, comes before it).
"${gen[@]}" -p hello -n 20 --temp 0 >"$work/mixed" 2>&1
sed -i '1{/^loaded /d}' "$work/mixed"
size=$(stat -c %s "$work/greedy")
if cmp -s <(head -c "$size" "$work/mixed") "$work/greedy"; then ok; else
  fail "2>&1: the text is not first: $(od -c "$work/mixed" | head -3)"; fi
tail -c +$((size + 1)) "$work/mixed" >"$work/speed"
if [ "$(wc -l <"$work/speed")" -eq 1 ] && grep -qE '^load: [0-9]+\.[0-9]{2} s; prompt: 5 tokens in .*; decode: 20 tokens in .*; seed: [0-9]+$' "$work/speed"; then
  ok; else fail "2>&1: the speed line is not one line of its own: $(od -c "$work/speed" | head -3)"; fi
# A text that ends a line gets no second newline.
expect_ok "a prompt ending a line" "${gen[@]}" -p $'hi\n' -n 0
if [ "$(od -An -c "$work/out" | tr -d ' ')" = 'hi\n' ]; then ok; else fail "stdout: $(od -c "$work/out" | head -2)"; fi
# detokenize: byte-exact into a pipe (the CommandLine test), a newline after it on a terminal.
if command -v script >/dev/null; then
  script -qec "$retnet detokenize -m $tok/gpt2 --ids 15496,995" /dev/null >"$work/tty" 2>&1
  if [ "$(od -An -c "$work/tty" | tr -d ' \n')" = 'Helloworld\r\n' ]; then ok; else
    fail "detokenize on a terminal: $(od -c "$work/tty" | head -2)"; fi
else
  fail "script(1) is missing: the terminal case of detokenize is not checked"
fi
expect_ok "detokenize into a file" "$retnet" detokenize -m "$tok/gpt2" --ids 15496,995
if [ "$(od -An -c "$work/out" | tr -d ' \n')" = 'Helloworld' ]; then ok; else fail "detokenize piped: $(od -c "$work/out")"; fi
# One prefix: "retnet COMMAND: problem", whoever wrote the problem.
expect_line "empty prompt" 1 "retnet generate: the prompt is empty (0 tokens)" "${gen[@]}" -p ""
expect_line "a flag twice" 2 "retnet generate: --temp given twice" "${gen[@]}" --temp 1 --temp 1
expect_line "tokenize without text" 2 "retnet tokenize: give exactly one of --text, --file" \
  "$retnet" tokenize -m "$model"
expect_line "score without input" 2 "retnet score: give exactly one of --text, --file, --tokens" \
  "$retnet" score -m "$model"
expect_line "unknown command" 2 "retnet: unknown command 'frobnicate' (see retnet --help)" "$retnet" frobnicate
expect_line "did you mean generate" 2 "retnet: unknown command 'genrate' (did you mean generate?)" "$retnet" genrate
# --top-p 0 is refused by the range check itself.
expect_line "--top-p 0" 2 "retnet generate: --top-p must be in (0, 1], got 0" "${gen[@]}" --top-p 0
expect_ok "--top-p 1e-30 (a tiny p keeps the top token)" "${gen[@]}" -p hello -n 20 --top-p 1e-30 --seed 1
same "--top-p 1e-30 is greedy" "$work/out" "$work/greedy"
# A state file that cannot be written: the reason, before the model is read.
expect_line "--save-state into no folder" 1 \
  "retnet generate: $work/nowhere/s.bin: cannot create a file beside it to write (No such file or directory)" \
  "${gen[@]}" -p hi --save-state "$work/nowhere/s.bin"
expect_line "--save-state before the model" 1 \
  "retnet generate: $work/nowhere/s.bin: cannot create a file beside it to write (No such file or directory)" \
  "$retnet" generate -m "$work/no-model" -p hi --save-state "$work/nowhere/s.bin"
expect_ok "--save-state" "${gen[@]}" -p hi -n 0 --save-state "$work/s.bin"
if [ -s "$work/s.bin" ] && [ "$(find "$work" -name 's.bin.partial-*' | wc -l)" -eq 0 ]; then ok; else
  fail "--save-state: no file, or a partial file left"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
