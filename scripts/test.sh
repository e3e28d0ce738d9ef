#!/usr/bin/env bash
# Builds everything (library, tests, benchmarks, examples, CLI) and runs the whole test suite.
source "$(dirname "$0")/common.sh"
install_dependencies
build build
ctest --test-dir build --output-on-failure -j "$(nproc)"
