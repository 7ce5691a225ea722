#!/usr/bin/env bash
# The whole portable check (a heavy check, docs/building.md): the library's core compiled without
# -march=native (build-portable/) and the kernel, agreement, training and lag-convolution tests run
# on it. The suite's `portable` entry runs the kernel tests alone (Eigen's fixed-size kernels in
# thin_product.hpp and the SIMD kernels, on every instruction set); run this before resolving a
# change to the training passes or the model's arithmetic.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/tests/portable/check.sh" "$ROOT" "${PORTABLE_DIR:-$ROOT/build-portable}" uatlab_portable_tests
