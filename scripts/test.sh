#!/usr/bin/env bash
# Builds everything (library, tests, benchmarks, examples, CLI) and runs the whole test suite.
# Every option it relies on is set here, so a build folder configured by demo.sh is reused
# with the tests switched on, not left without them.
source "$(dirname "$0")/common.sh"
install_dependencies
build build -DRETNET_BUILD_TOOLS=ON -DRETNET_BUILD_TESTS=ON -DRETNET_BUILD_BENCHMARKS=ON \
  -DRETNET_BUILD_EXAMPLES=ON
ctest --test-dir build --output-on-failure --no-tests=error -j "$(nproc)"
