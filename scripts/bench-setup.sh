#!/usr/bin/env bash
# The benchmarks' set-up (not the main job's): scripts/setup.sh with the benchmarks and the Python
# module, plus OpenBLAS for PyTorch. Debian's PyTorch calls
# the system's libblas.so.3, which is the reference BLAS (about 2 GFLOP/s for a 1024^3 SGEMM) until
# an optimised one is installed: every ratio against PyTorch on that BLAS is meaningless, and the
# bench/ scripts refuse to print one (bench/stats.py). Then run e.g. /usr/bin/python3
# bench/run_train.py build (docs/benchmarks.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRA_PACKAGES="libopenblas0-pthread ${EXTRA_PACKAGES:-}"
CMAKE_EXTRA="-DUATLAB_BENCH=ON -DUATLAB_PYTHON=ON ${CMAKE_EXTRA:-}"
source "$ROOT/scripts/setup.sh"
