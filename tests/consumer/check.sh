#!/usr/bin/env bash
# Install the built project into a fresh prefix, then build tests/consumer against it twice, as a
# user would: with CMake (find_package(uatlab CONFIG)) and with pkg-config. Each program must run.
# usage: check.sh BUILD_DIR WORK_DIR [python]   (python: also the installed Python package)
set -euo pipefail
BUILD=$1 WORK=$2 PYTHON=${3:-}
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
if [ "$PYTHON" != python ]; then
  echo "consumer: the installed package builds and runs with CMake and with pkg-config"
  exit 0
fi
# The Python package: installed under the prefix where Debian's python3 looks (for the default
# prefix /usr/local, a folder already on its sys.path), importable and working from there.
PY_DIR=$(find "$WORK/prefix/lib" -maxdepth 3 -type d -name uatlab -path "*dist-packages*" | head -1)
test -n "$PY_DIR" && test -f "$PY_DIR/__init__.py" && test -f "$PY_DIR/pytorch.py"
SITE=$(dirname "$PY_DIR")
/usr/bin/python3 -c "import sys; want = sys.argv[1].replace(sys.argv[2], '/usr/local');
assert want in sys.path, (want, sys.path)" "$SITE" "$WORK/prefix"
(cd "$WORK" && PYTHONPATH="$SITE" /usr/bin/python3 -c "
import uatlab, sys
assert uatlab.__file__.startswith(sys.argv[1]), uatlab.__file__
net, proof = uatlab.polynomial('x1*x2', ['x1', 'x2'])
assert proof['exact']" "$SITE")
echo "consumer: the installed package builds and runs with CMake and with pkg-config; Python imports it"
