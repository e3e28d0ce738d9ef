#!/usr/bin/env bash
# `retnet serve` end to end (ctest "Server"): checks its flags (--help, and a bad flag is one line
# naming the problem, exit status 2), starts the server through `retnet serve` on 127.0.0.1 (any
# free port) with the demo model, then
#   client_test.mjs   the official OpenAI client for Node and plain HTTP: completions, streaming,
#                     stop sequences, logprobs, sessions, errors and bad input, 32 concurrent
#                     streams against their solo runs, a client leaving mid-stream, 1000
#                     sequential requests with memory and threads flat;
#   fields_test.mjs   the sampling fields (defaults, seed, logit_bias, min_p, penalties, n, echo)
#                     and the refusal of fields the server does not read;
#   chat_test.mjs     /v1/chat/completions, streamed and not, against /v1/completions on the
#                     plain template's rendering (and, after the restart, a --chat-template file);
#   a restart         SIGTERM, start again on the same --sessions-dir, a session continues;
#   browser_test.mjs  headless Chromium types a prompt on "/" and watches the stream
#                     (screenshot WORK/page.png), then page_checks.mjs: the sampler's fields,
#                     seed 7's text against `retnet generate`'s, error, Stop, session label.
# The Node packages are installed with npm into WORK. Exits 77 (ctest SKIP) when node or npm is
# missing or the registry cannot be reached; without Chromium (and not root to install it) the
# browser step alone is skipped, with a message.
# Usage: run.sh RETNET_CLI MODEL_DIR WORK_DIR
set -uo pipefail
mkdir -p "$3"
cli=$(realpath "$1") model=$(realpath "$2") work=$(cd "$3" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
start=$SECONDS
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; [ -f "$work/server.log" ] && tail -20 "$work/server.log"; exit 1; }

# The flags (tools/flags.hpp, shared with the other commands): no node needed.
expect_usage_error() {  # text in the message, arguments...
  local text=$1 out rc lines
  shift
  out=$("$cli" serve "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s\n' "$out" | wc -l)
  [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && [[ $out == *"$text"* ]] ||
    fail "retnet serve $*: exit $rc, $lines line(s) on stderr, wanted one with '$text': $out"
}
"$cli" serve --help >"$work/help.txt" || fail "retnet serve --help failed"
grep -q "usage: retnet serve" "$work/help.txt" && grep -q -- "--max-batch N" "$work/help.txt" ||
  fail "retnet serve --help: $(cat "$work/help.txt")"
expect_usage_error "unknown argument '--bogus' (see retnet serve --help)" -m "$model" --bogus 1
expect_usage_error "--port needs a value" -m "$model" --port
expect_usage_error "--port expects an integer, got 'http'" -m "$model" --port http
expect_usage_error "--max-batch must be in [1, 256], got 0" -m "$model" --max-batch 0
expect_usage_error "--max-batch must be in [1, 256], got 257" -m "$model" --max-batch 257
expect_usage_error "--threads must be in [1, " -m "$model" --threads 0
expect_usage_error "give -m DIR" --port 0
out=$("$cli" serve -m "$model" --chat-template "$work/no-such-template.txt" 2>&1 >/dev/null)
rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] &&
  [[ $out == *"no-such-template.txt"* ]] ||
  fail "retnet serve --chat-template MISSING: exit $rc, wanted 1 and one line naming it: $out"
echo "retnet serve flags: --help and 8 bad command lines as expected"

command -v node >/dev/null && command -v npm >/dev/null ||
  skip "the server test needs node and npm (apt-get install nodejs npm)"
cp "$here/package.json" "$work/package.json"

# npm install only when the pinned versions are not in WORK yet (a rerun needs no network).
version_of() {
  node -e "try { console.log(JSON.parse(require('fs').readFileSync('$work/node_modules/$1/package.json')).version) } catch (e) {}"
}
wanted_of() { node -e "console.log(require('$here/package.json').dependencies['$1'])"; }
if [ "$(version_of openai)" != "$(wanted_of openai)" ] ||
   [ "$(version_of playwright-core)" != "$(wanted_of playwright-core)" ]; then
  echo "installing openai and playwright-core with npm into $work"
  (cd "$work" && timeout 240 npm install --no-audit --no-fund --loglevel=error \
     --fetch-timeout=20000 --fetch-retries=1 >"$work/npm.log" 2>&1) ||
    skip "npm could not install the test clients (registry unreachable?); see $work/npm.log"
fi

browser=$(command -v chromium || true)
if [ -z "$browser" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "installing chromium with apt-get (once; it is large)"
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq chromium >"$work/apt.log" 2>&1 ||
    { timeout 300 apt-get update -qq >>"$work/apt.log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq chromium >>"$work/apt.log" 2>&1; }
  browser=$(command -v chromium || true)
fi

key="key-$RANDOM$RANDOM"
sessions="$work/sessions"
rm -rf "$sessions" "$work/page.png" "$work/kept.json" "$work/server.log"
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null' EXIT

start_server() {  # extra flags...
  [ -f "$work/server.log" ] && port_lines=$(grep -c listening "$work/server.log") || port_lines=0
  # Through the CLI, so that `retnet serve` running retnet-serve is tested too. One compute
  # thread: the test machine is shared and small. Up to 32 requests in a step: the 32
  # concurrent streams share steps of any number of rows.
  "$cli" serve -m "$model" --host 127.0.0.1 --port 0 --threads 1 --api-key "$key" \
    --max-batch 32 --sessions-dir "$sessions" --sessions-memory 1 "$@" >>"$work/server.log" 2>&1 &
  pid=$!
  port=
  local seen
  for _ in $(seq 300); do
    # One read of the log for both the count and the port: read twice, the new server's line
    # could arrive in between, and the previous server's port be taken for it.
    seen=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$work/server.log")
    if [ -n "$seen" ] && [ "$(printf '%s\n' "$seen" | wc -l)" -gt "$port_lines" ]; then
      port=$(printf '%s\n' "$seen" | tail -1 | sed 's/.*://')
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || fail "the server did not start"
    sleep 0.1
  done
  fail "the server did not report its port within 30 s"
}

stop_server() {
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  pid=
  [ "$rc" -eq 0 ] || fail "the server exited with status $rc after SIGTERM"
}

status=0
start_server
echo "server on 127.0.0.1:$port (pid $pid)"
cp "$here/client_test.mjs" "$here/browser_test.mjs" "$here/page_checks.mjs" "$work/"  # next to node_modules
cp "$here/fields_test.mjs" "$here/chat_test.mjs" "$here/checks.mjs" "$work/"
timeout 240 node "$work/client_test.mjs" "http://127.0.0.1:$port" "$key" "$work" main || status=1
timeout 120 node "$work/fields_test.mjs" "http://127.0.0.1:$port" "$key" || status=1
timeout 120 node "$work/chat_test.mjs" "http://127.0.0.1:$port" "$key" plain || status=1
stop_server

start_server --chat-template "$here/chat_template.txt"
echo "restarted on 127.0.0.1:$port"
grep -q "chat template: file $here/chat_template.txt" "$work/server.log" ||
  fail "the server did not name its --chat-template at startup"
timeout 60 node "$work/chat_test.mjs" "http://127.0.0.1:$port" "$key" "$here/chat_template.txt" ||
  status=1
timeout 60 node "$work/client_test.mjs" "http://127.0.0.1:$port" "$key" "$work" after-restart ||
  status=1
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ -n "$browser" ] && [ "$node_major" -lt 20 ]; then
  echo "SKIPPED: the browser check (playwright-core needs Node 20 or later; this is Node $node_major)"
elif [ -n "$browser" ]; then
  # The command line's text for one seed, every sampler setting left at its default: the page
  # must show the same (one default sampler for the CLI, the server and the page).
  "$cli" generate -m "$model" -p "ROMEO:" -n 40 --seed 7 --threads 1 >"$work/cli_seed7.txt" \
    2>"$work/cli_seed7.log" || fail "retnet generate --seed 7: $(cat "$work/cli_seed7.log")"
  timeout 180 node "$work/browser_test.mjs" "http://127.0.0.1:$port" "$key" "$browser" \
    "$work/page.png" "$work/cli_seed7.txt" || status=1
else
  echo "SKIPPED: the browser check (no chromium, and not root to install it: apt-get install chromium)"
fi
stop_server

echo "server test: $([ $status -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - start)) s" \
  "(server log: $work/server.log)"
exit $status
