#!/usr/bin/env bash
# Set up (scripts/setup.sh, warnings as errors) with the tests, benchmarks and Python module, and run
# the whole test suite; arguments go to ctest (bash scripts/test.sh -L unit -LE slow: the fast
# subset, docs/building.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CMAKE_EXTRA="-DUATLAB_TESTS=ON -DUATLAB_BENCH=ON -DUATLAB_PYTHON=ON ${CMAKE_EXTRA:-}"
source "$ROOT/scripts/setup.sh"
# The entries run side by side, one per core, and many of them start OpenMP teams of their own:
# threads that spin while they wait take the cores their neighbours need (docs/training.md,
# "Threads"). Passive waiting made the whole suite 21-22% faster on 2 cores (126 → 99 s and
# 133 → 103 s, two alternating pairs, 2026-11-29); a caller's own setting is kept.
OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}" ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
