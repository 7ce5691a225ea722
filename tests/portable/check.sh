#!/usr/bin/env bash
# The portable build: on an AVX-512 machine the default build (-march=native) never compiles the
# kernels' portable paths (thin_product.hpp without __AVX512F__, narrower blocks, Eigen's SSE
# packets). This configures a second build tree with UATLAB_NATIVE=OFF and warnings as errors,
# builds TARGET and runs it: uatlab_portable_kernels (the suite's entry: the token and head
# products against Eigen) or uatlab_portable_tests (scripts/portable.sh: with them the library's
# core and the agreement, training and lag-convolution tests). The tree is kept, so a rerun
# rebuilds only what changed.
# usage: check.sh SOURCE_DIR WORK_DIR [TARGET]
set -euo pipefail
SRC=$1 WORK=$2 TARGET=${3:-uatlab_portable_kernels}
cmake -S "$SRC" -B "$WORK" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUATLAB_NATIVE=OFF -DUATLAB_TESTS=ON \
  -DUATLAB_PYTHON=OFF -DUATLAB_BENCH=OFF -DUATLAB_MPI=OFF -DUATLAB_WERROR=ON >/dev/null
ninja -C "$WORK" -j "$(nproc)" "$TARGET" | tail -1
if grep -q -- "-march=native" "$WORK/build.ninja"; then
  echo "portable: the build still compiles with -march=native" >&2
  exit 1
fi
"$WORK/tests/$TARGET" --gtest_brief=1
