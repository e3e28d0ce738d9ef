#!/usr/bin/env bash
# Sets everything up on a fresh Debian/Ubuntu machine, builds the command line, and generates
# text with the demo model (a byte-level RetNet trained on Tiny Shakespeare, models/shakespeare).
source "$(dirname "$0")/common.sh"
install_dependencies
build build -DRETNET_BUILD_TOOLS=ON -DRETNET_BUILD_TESTS=OFF -DRETNET_BUILD_BENCHMARKS=OFF \
  -DRETNET_BUILD_EXAMPLES=OFF
# Arguments, when given, replace the demo's generation flags (a flag may be given only once).
if [ $# -eq 0 ]; then set -- -p "ROMEO:" -n 300 --temp 0.8 --seed 1; fi
./build/tools/retnet generate -m models/shakespeare "$@"
