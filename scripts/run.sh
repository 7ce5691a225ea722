#!/usr/bin/env bash
# Set up (scripts/setup.sh: packages, then the CLI target alone) and run uatlab's main job on its
# embedded default; then build the rest of the command line.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_TARGETS=uatlab_cli
source "$ROOT/scripts/setup.sh"
# --force: the main job owns its two outputs in the build folder and replaces them on every run.
"$BUILD_DIR/uatlab" memorize --force --out "$BUILD_DIR/demo-memorized.json" "$@"
# Then the rest of the command line (training and the experiments, uatlab-lab): the main job has
# printed without waiting for it (docs/building.md).
ninja -C "$BUILD_DIR" -j "$(nproc)" uatlab_lab
