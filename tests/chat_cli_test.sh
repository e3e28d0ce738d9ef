#!/usr/bin/env bash
# `retnet chat` driven through a pipe. Usage: chat_cli_test.sh RETNET_BINARY MODEL_DIR
# (models/shakespeare: a byte-level model, so a text's token count is its byte count).
# The key property: chat keeps the model state between turns and reads only each turn's new
# text, and its replies are the ones `retnet generate` gives for the whole conversation so far
# (greedy), so the kept state is the state of reading the whole transcript.
set -u
export LC_ALL=C  # ${#s} counts bytes
retnet=$1
model=$2
. "$(dirname "$0")/checks.sh"  # start_checks, ok, fail, json_number
start_checks
# The template's name from chat's stderr (its line also names the seed).
template_line() { grep -m1 '^chat template: ' "$1" | sed 's/; seed: [0-9]*$//'; }
same() {  # name, got, expected
  if [ "$2" == "$3" ]; then ok; else fail "$1: got '$2', expected '$3'"; fi
}

nl=$'\n'
# The plain template's user message $1 and the assistant's opening (no command substitution:
# it would drop the final newline).
turn_text() { turn="User:${nl}$1${nl}${nl}Assistant:${nl}"; }
# The reply `retnet generate` gives after the prompt $1, cut where chat cuts it (the plain
# template's stop strings), with the newline both commands print after it.
generated_reply() {
  local out
  out=$("$retnet" generate -m "$model" --temp 0 -n 60 --stop "$nl$nl" --stop "User:" -p "$1" 2>"$work/gen_err"; echo x)
  out=${out%x}
  printf '%s' "${out:${#1}}"
}
# The number after "read" on stderr line "turn N: ...".
read_count() { sed -n "s/^turn $1: read \([0-9]*\) tokens (new text only).*/\1/p" "$work/err"; }

# Three turns, then /exit: the line after it is never answered.
printf 'Who art thou?\nWhat news?\n\nGood night.\n/exit\nNot answered.\n' |
  "$retnet" chat -m "$model" --temp 0 -n 60 >"$work/out" 2>"$work/err"
same "three turns: exit status" "$?" 0
same "three turns: the template named" "$(template_line "$work/err")" "chat template: plain"
same "three turns: one speed line per turn (the empty line is no turn)" \
  "$(grep -c '^turn ' "$work/err")" 3
same "three turns: nothing else on stderr (no prompt when stdin is a pipe)" \
  "$(grep -vc -e '^turn ' -e '^chat template: ' -e '^loaded ' "$work/err")" 0
transcript=""
expected=""
for user in "Who art thou?" "What news?" "Good night."; do
  turn_text "$user"
  transcript+=$turn
  reply=$(generated_reply "$transcript"; echo x)
  reply=${reply%x}
  expected+=$reply
  transcript+="${reply%$nl}$nl$nl"
done
same "three turns: each reply is generate's on the whole conversation so far" \
  "$(cat "$work/out"; echo x)" "${expected}x"
turn_text "Who art thou?"
same "turn 1 reads its text" "$(read_count 1)" "${#turn}"
turn_text "What news?"
same "turn 2 reads only its new text" "$(read_count 2)" "${#turn}"
turn_text "Good night."
same "turn 3 reads only its new text" "$(read_count 3)" "${#turn}"

# --system: a system message before the first user message, read with it.
system="System:${nl}Speak plainly.${nl}${nl}"
printf 'Who art thou?\n' |
  "$retnet" chat -m "$model" --temp 0 -n 60 --system "Speak plainly." >"$work/out" 2>"$work/err"
same "--system: exit status" "$?" 0
turn_text "Who art thou?"
same "--system: the reply" "$(cat "$work/out"; echo x)" "$(generated_reply "$system$turn"; echo x)"
same "--system: turn 1 reads the system message too" "$(read_count 1)" "$((${#system} + ${#turn}))"

# --chat-template FILE: its format and its stop strings.
printf '[{Role}] {content}\n' >"$work/template.txt"
printf 'Who art thou?\n' | "$retnet" chat -m "$model" --temp 0 -n 60 \
  --chat-template "$work/template.txt" >"$work/out" 2>"$work/err"
same "--chat-template: exit status" "$?" 0
same "--chat-template: the template named" "$(template_line "$work/err")" \
  "chat template: file $work/template.txt"
prompt="[User] Who art thou?${nl}[Assistant] "
out=$("$retnet" generate -m "$model" --temp 0 -n 60 --stop "$nl" --stop "[User]" -p "$prompt" 2>/dev/null)
same "--chat-template: the reply" "$(cat "$work/out")" "${out:${#prompt}}"

# Empty input: no turn, exit 0.
"$retnet" chat -m "$model" </dev/null >"$work/out" 2>"$work/err"
same "no input: exit status" "$?" 0
same "no input: no output" "$(wc -c <"$work/out")" 0

# Bad template files: exit 1 with one line naming the file and the problem.
expect_refusal() {  # name, expected text, template file
  printf 'hi\n' | "$retnet" chat -m "$model" --chat-template "$3" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -ne 1 ]; then fail "$1: exit $rc, expected 1: $(cat "$work/err")"; return; fi
  if [ "$(wc -l <"$work/err")" -ne 1 ]; then fail "$1: not one line: $(cat "$work/err")"; return; fi
  if ! grep -qF -- "$2" "$work/err"; then fail "$1: message lacks '$2': $(cat "$work/err")"; return; fi
  ok
}
printf '{role}: {contents}\n' >"$work/typo.txt"
expect_refusal "unknown placeholder" \
  "retnet chat: $work/typo.txt: unknown placeholder \"{contents}\" at byte 8: expected {role}, {Role} or {content}" \
  "$work/typo.txt"
printf '{%% for m in messages %%}{{ m.content }}{%% endfor %%}' >"$work/jinja.txt"
expect_refusal "Jinja file" "$work/jinja.txt: is a Jinja template" "$work/jinja.txt"
printf '{role}\n' >"$work/no_content.txt"
expect_refusal "no {content}" "$work/no_content.txt: has 0 {content} placeholders: expected exactly one" \
  "$work/no_content.txt"
expect_refusal "absent file" "$work/absent.txt: cannot open: no such file" "$work/absent.txt"
head -c 70000 /dev/zero | tr '\0' x >"$work/large.txt"
expect_refusal "too large" "$work/large.txt: 70000 bytes, more than the 65536-byte limit" "$work/large.txt"
printf 'hi\n' | "$retnet" chat -m "$model" --chat-template >"$work/out" 2>"$work/err"
same "--chat-template without a value: exit status" "$?" 2

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
