#!/usr/bin/env bash
# Install what is missing (Debian packages, idempotent), then configure and build uatlab (Release).
# Sourced by scripts/run.sh and scripts/test.sh; BUILD_DIR defaults to ./build. EXTRA_PACKAGES and
# CMAKE_EXTRA (scripts/test.sh, fuzz.sh, sanitize.sh) add packages and CMake options; BUILD_TARGETS
# names the targets to build (scripts/run.sh: the CLI alone), every configured one by default.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"

# Arb has its own package in Debian 12; from Debian 13 on it is part of FLINT 3's libflint-dev.
ARB_PACKAGE=libflint-arb-dev
if [ "$(cut -d. -f1 /etc/debian_version 2>/dev/null)" -ge 13 ] 2>/dev/null; then ARB_PACKAGE=libflint-dev; fi
PACKAGES=(
  g++ cmake ninja-build pkg-config clang-format
  libeigen3-dev                         # linear algebra for every scalar type
  libboost-dev                          # Boost.Multiprecision front end for MPFR / MPFI / GMP
  libmpfr-dev libmpfi-dev libgmp-dev    # arbitrary precision, certified intervals, exact rationals
  "$ARB_PACKAGE"                        # Arb's balls: the certified engine past binary128
  libfftw3-dev                          # FFTs: DP-free heads' lag convolutions over long sequences
  libhwy-dev                            # Highway: training's kernels for every SIMD instruction set, chosen at run time
  nlohmann-json3-dev                    # JSON: architecture headers, lossless model files, datasets
  libcli11-dev                          # the command line
  libmuparser-dev                       # user expressions for target functions
  libgtest-dev libgmock-dev             # unit tests
  libbenchmark-dev                      # benchmarks
  python3-torch python3-numpy           # PyTorch interop module, oracle tests, baseline benchmark
  python3-dev pybind11-dev              # the Python module uatlab (pybind11, for /usr/bin/python3)
  python3-venv python3-pip python3-setuptools  # pip install . into a venv (pyproject.toml; tests/pip)
  python3-matplotlib jupyter-nbconvert python3-ipykernel python3-nbformat  # the tour notebook, executed by the suite
  gnuplot-nox                           # plots written by uatlab reproduce / sweep
  libopenmpi-dev openmpi-bin            # mpirun -n K uatlab sweep: a sweep over several processes/machines
)
# shellcheck disable=SC2086
"$ROOT/scripts/install.sh" "${PACKAGES[@]}" ${EXTRA_PACKAGES:-}

# Warnings are errors for both set-up commands: the library's objects then compile with the same
# flags in scripts/run.sh and scripts/test.sh, and test.sh after run.sh compiles only what run.sh did
# not (the tests, benchmarks and Python module; docs/building.md). CMAKE_EXTRA comes last and wins.
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUATLAB_WERROR=ON ${CMAKE_EXTRA:-} >/dev/null
# One compile per core: Ninja's default (cores + 2) runs four heavy template files at once on 2 cores,
# and the build took longer for it (docs/building.md).
# shellcheck disable=SC2086
ninja -C "$BUILD_DIR" -j "$(nproc)" ${BUILD_TARGETS:-}
