#!/usr/bin/env bash
# Set up (scripts/setup.sh) with the tests, benchmarks and Python module, warnings as errors, and run
# the whole test suite; arguments go to ctest (bash scripts/test.sh -L unit -LE slow: the fast
# subset, docs/building.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CMAKE_EXTRA="-DUATLAB_TESTS=ON -DUATLAB_BENCH=ON -DUATLAB_PYTHON=ON -DUATLAB_WERROR=ON ${CMAKE_EXTRA:-}"
source "$ROOT/scripts/setup.sh"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
