# Helpers the shell tests source: json_number (cli_test.sh, memory_test.sh, quality_test.sh), check (the last two).

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
