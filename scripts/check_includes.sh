#!/usr/bin/env bash
# Fails when a header includes one from a higher floor of the stack
#   core <- kernels <- ops <- layers <- model <- io, text <- train
# (io and text are one floor and do not include each other). A header in a subfolder
# (text/hf/) belongs to the floor of its top folder. Usage: check_includes.sh INCLUDE_DIR
set -euo pipefail
root=${1:-include/retnet}
floor() {
  case $1 in
    core) echo 0 ;; kernels) echo 1 ;; ops) echo 2 ;; layers) echo 3 ;; model) echo 4 ;;
    io | text) echo 5 ;; train) echo 6 ;; *) echo -1 ;;
  esac
}
bad=0
checked=0
while IFS= read -r header; do
  relative=${header#"$root"/}
  [ "$relative" = "${relative#*/}" ] && continue  # the umbrella headers include everything
  from=${relative%%/*}  # a subfolder (text/hf/) is on its parent's floor
  from_floor=$(floor "$from")
  if [ "$from_floor" -lt 0 ]; then
    echo "$header: folder '$from' is not a floor of the stack"; bad=1; continue
  fi
  while IFS= read -r target; do
    to=${target%%/*}
    to_floor=$(floor "$to")
    checked=$((checked + 1))
    if [ "$to_floor" -lt 0 ] || [ "$to_floor" -gt "$from_floor" ] ||
       { [ "$to_floor" -eq "$from_floor" ] && [ "$to" != "$from" ]; }; then
      echo "${header#"$root"/}: includes retnet/$target, which is above or beside '$from'"
      bad=1
    fi
  done < <(sed -n 's|^#include "retnet/\([^"]*\)".*|\1|p' "$header")
done < <(find "$root" -name '*.hpp' | sort)
[ "$bad" -eq 0 ] && echo "include direction: $checked includes checked, all point down the stack"
exit "$bad"
