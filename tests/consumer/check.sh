#!/usr/bin/env bash
# Install the built project into a fresh prefix, then build tests/consumer against it twice, as a
# user would: with CMake (find_package(uatlab CONFIG)) and with pkg-config. Each program must run.
# usage: check.sh BUILD_DIR WORK_DIR
set -euo pipefail
BUILD=$1 WORK=$2
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$WORK" && mkdir -p "$WORK"
cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
test -x "$WORK/prefix/bin/uatlab" && test -f "$WORK/prefix/share/uatlab/tinyshakespeare.txt"
cmake -S "$HERE" -B "$WORK/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$WORK/prefix" >/dev/null
cmake --build "$WORK/cmake" >/dev/null
"$WORK/cmake/consumer"
export PKG_CONFIG_PATH="$WORK/prefix/lib/pkgconfig:$WORK/prefix/lib/x86_64-linux-gnu/pkgconfig"
# shellcheck disable=SC2046
g++ -std=c++17 -O2 "$HERE/main.cpp" -o "$WORK/consumer-pc" $(pkg-config --cflags --libs uatlab)
"$WORK/consumer-pc"
echo "consumer: the installed package builds and runs with CMake and with pkg-config"
