#!/usr/bin/env bash
# `retnet grad` on the three tiny layouts. Usage: grad_cli_test.sh RETNET_BINARY DATA_DIR
# Its loss is `retnet score`'s nats_per_token on the same tokens; its file holds one float32
# gradient under every parameter name of the folder's model.safetensors, equal to the PyTorch
# autograd fixture (DATA_DIR/gradients, 1e-4 relative per tensor); bad input is refused in one
# line with a non-zero exit.
set -u
retnet=$1
data=$2
. "$(dirname "$0")/checks.sh"  # start_checks, ok, fail, expect_ok, json_number, check
start_checks

# A standard-library reader of safetensors files (F32/F64): the fixture's tokens, and the
# comparison of a gradient file with the fixture and with the folder's tensor names.
cat >"$work/st.py" <<'PY'
import json, math, struct, sys

def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        fmt = {"F32": "f", "F64": "d"}.get(e["dtype"])
        blob = raw[8 + n + a:8 + n + b]
        out[name] = struct.unpack("<%d%s" % (len(blob) // struct.calcsize(fmt), fmt), blob) if fmt else None
    return out

if sys.argv[1] == "tokens":
    print(",".join(str(int(t)) for t in read(sys.argv[2])["tokens"]))
else:  # compare GRADS FIXTURE MODEL
    got, ref, model = read(sys.argv[2]), read(sys.argv[3]), read(sys.argv[4])
    params = {k for k in model if "retnet_rel_pos" not in k}
    ref.pop("tokens"), ref.pop("loss")
    bad = sorted(params ^ set(got)) + sorted(set(ref) ^ set(got))
    if bad:
        sys.exit("names differ: " + " ".join(bad))
    worst = 0.0
    for k, r in ref.items():
        g = got[k]
        d = math.sqrt(sum((x - y) ** 2 for x, y in zip(g, r)))
        worst = max(worst, d / max(math.sqrt(sum(y * y for y in r)), 1e-30))
    print(worst)
    sys.exit(0 if worst < 1e-4 else 1)
PY

for family in torchscale syncdoth fla; do
  model="$data/$family-tiny"
  fixture="$data/gradients/$family.safetensors"
  tokens=$(python3 "$work/st.py" tokens "$fixture")
  for mode in parallel chunkwise recurrent; do
    expect_ok "$family $mode: grad" "$retnet" grad -m "$model" --tokens "$tokens" --mode "$mode" \
      --chunk 5 --out "$work/g.safetensors"
    cp "$work/out" "$work/grad.json"
    expect_ok "$family $mode: score" "$retnet" score -m "$model" --tokens "$tokens" --mode "$mode" \
      --chunk-size 5 --json
    check "$family $mode: grad's loss is score's nats_per_token (1e-5 relative)" \
      "(a - b) ^ 2 <= (1e-5 * b) ^ 2" "$(json_number "$work/grad.json" nats_per_token)" \
      "$(json_number "$work/out" nats_per_token)"
    check "$family $mode: predicted_tokens is T-1" "a == b" \
      "$(json_number "$work/grad.json" predicted_tokens)" "$(($(tr -cd , <<<"$tokens" | wc -c)))"
    if worst=$(python3 "$work/st.py" compare "$work/g.safetensors" "$fixture" \
      "$model/model.safetensors" 2>&1); then
      echo "ok: $family $mode: every gradient within 1e-4 of autograd (worst $worst)"
    else
      fail "$family $mode: gradients against the fixture: $worst"
    fi
  done
done

# Bad input: a non-zero exit and one error line on stderr (beside the "loaded ..." line that
# every command loading a model prints).
model="$data/torchscale-tiny"
refused() {  # name, arguments...
  local name=$1; shift
  rm -f "$work/bad.safetensors"
  if "$retnet" grad -m "$model" "$@" >"$work/out" 2>"$work/err"; then
    fail "$name: accepted"
  elif [ "$(grep -vc '^loaded ' "$work/err")" -ne 1 ]; then
    fail "$name: not one line: $(cat "$work/err")"
  else
    ok
  fi
}
refused "no --out" --tokens 1,2,3
refused "token id >= vocab" --tokens 1,97,3 --out "$work/bad.safetensors"
refused "one token" --tokens 5 --out "$work/bad.safetensors"
refused "unwritable --out" --tokens 1,2,3 --out "$work/no/such/dir/g.safetensors"

echo "grad_cli_test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
