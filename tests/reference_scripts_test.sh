#!/usr/bin/env bash
# The expected values in tests/data come from the scripts in scripts/reference/ and
# scripts/fixtures/: regenerating them must reproduce the committed files (fixtures byte for
# byte, logits to float32 rounding; the sampler's golden values exactly).
# Usage: reference_scripts_test.sh SOURCE_DIR
# Skipped (exit 77) when no python3 with NumPy is installed (Debian: python3-numpy).
set -u
cd "$1" || exit 1
python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import numpy" 2>/dev/null; then python=$p; break; fi
done
if [ -z "$python" ]; then
  echo "SKIPPED: needs python3 with NumPy (apt-get install python3-numpy)"
  exit 77
fi
status=0
"$python" scripts/fixtures/make_reference_fixtures.py --check || status=1
"$python" scripts/fixtures/make_family_fixtures.py --check || status=1
"$python" scripts/reference/sampler.py --check || status=1
exit $status
