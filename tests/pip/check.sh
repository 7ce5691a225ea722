#!/usr/bin/env bash
# `pip install --no-build-isolation .` into a venv made from Debian's python3 with
# --system-site-packages (docs/python.md), offline, reusing this build's compiled module
# (UATLAB_CMAKE_BUILD_DIR, setup.py); then the venv imports uatlab from its own site-packages and
# runs it. And where `cmake --install` puts the package (python/site_dir.py) for a venv, the user
# site and a Debian prefix.
# usage: check.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
SRC=$1 BUILD=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK"
/usr/bin/python3 -m venv --system-site-packages "$WORK/venv"
(cd "$SRC" && UATLAB_CMAKE_BUILD_DIR="$BUILD" "$WORK/venv/bin/pip" install --no-build-isolation --no-index \
  --no-deps --quiet .)
(cd "$WORK" && "$WORK/venv/bin/python" -c "
import sys, uatlab
assert uatlab.__file__.startswith(sys.argv[1]), uatlab.__file__
net, proof = uatlab.polynomial('x1*x2', ['x1', 'x2'])
assert proof['exact']
print('pip: installed into', uatlab.__file__)" "$WORK/venv/lib")
"$WORK/venv/bin/pip" uninstall --yes --quiet uatlab
test "$("$WORK/venv/bin/python" "$SRC/python/site_dir.py" "$WORK/venv")" = \
  "$WORK/venv/lib/python$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages"
test "$(/usr/bin/python3 "$SRC/python/site_dir.py" "$HOME/.local")" = "$(/usr/bin/python3 -m site --user-site)"
case "$(/usr/bin/python3 "$SRC/python/site_dir.py" "$WORK/prefix")" in
  "$WORK/prefix/lib/python3"*"/dist-packages") ;;
  *) echo "site_dir: Debian's layout expected under $WORK/prefix"; exit 1 ;;
esac
echo "pip: install, import, uninstall; cmake --install's site directories"
