# Helpers the shell tests source: the counters and scratch folder of the command-line tests
# (start_checks, ok, fail, expect_ok), json_number, and check (memory_test.sh, quality_test.sh).

# `work`, a scratch folder removed at exit, and the counters `passed` and `failed`.
start_checks() {
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  passed=0
  failed=0
}
ok() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

# The command succeeds; its output in $work/out and $work/err.
expect_ok() {  # name, command...
  local name=$1; shift
  if "$@" >"$work/out" 2>"$work/err"; then ok; else fail "$name (exit $?): $(cat "$work/err")"; fi
}

# The number after "KEY": in a one-line JSON object; empty (and the caller fails) when the key
# is missing or its value is not a number (null, a string, ...).
json_number() {  # file, key
  sed -n 's/.*"'"$2"'":\(-\{0,1\}[0-9][0-9.eE+-]*\)[,}].*/\1/p' "$1"
}

# "ok: DESCRIPTION" when the awk condition over a and b holds (both given), else "FAIL: ..."
# and one more in $failed.
check() {  # description, condition on a and b, a, b
  if [ -n "$3" ] && [ -n "$4" ] && awk -v a="$3" -v b="$4" "BEGIN { exit !($2) }"; then
    echo "ok: $1"
  else
    echo "FAIL: $1"
    failed=$((failed + 1))
  fi
}
