#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run uatlab's main job on its embedded default.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
"$BUILD_DIR/uatlab" memorize --out "$BUILD_DIR/demo-memorized.json" "$@"
