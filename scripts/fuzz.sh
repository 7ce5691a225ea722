#!/usr/bin/env bash
# Fuzz every input reader with libFuzzer (clang, ASan + UBSan): bash scripts/fuzz.sh [SECONDS] [TARGET...]
# Each target runs SECONDS (default 600) from its seed corpus (fuzz/corpus/<target>/) plus what
# earlier runs found (build-fuzz/corpus/<target>/). A crash, leak, sanitizer report or timeout is
# saved under build-fuzz/crashes/<target>/ and fails the run: copy it to tests/fuzz/<target>/, fix
# the cause, and the normal test suite replays it from then on (fuzz/CMakeLists.txt).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_EACH="${1:-600}"
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(model dataset sweep_config expression)
OUT="${FUZZ_DIR:-$ROOT/build-fuzz}"

EXTRA_PACKAGES="clang libclang-rt-14-dev libomp-14-dev" BUILD_DIR="$OUT" \
  CMAKE_EXTRA="-DCMAKE_CXX_COMPILER=clang++ -DUATLAB_FUZZ=ON -DUATLAB_PYTHON=OFF -DUATLAB_TESTS=OFF -DUATLAB_BENCH=OFF \
               -DUATLAB_MPI=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo" \
  bash "$ROOT/scripts/setup.sh"

status=0
for t in "${TARGETS[@]}"; do
  mkdir -p "$OUT/corpus/$t" "$OUT/crashes/$t"
  echo "fuzz: $t for ${SECONDS_EACH} s"
  # -rss_limit_mb and -timeout make runaway memory and hangs findings, like crashes.
  if ! "$OUT/fuzz/fuzz_$t" "$OUT/corpus/$t" "$ROOT/fuzz/corpus/$t" -max_total_time="$SECONDS_EACH" \
      -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$OUT/crashes/$t/" >"$OUT/$t.log" 2>&1; then
    echo "fuzz: $t FOUND A DEFECT (see $OUT/$t.log and $OUT/crashes/$t/)"
    status=1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb|cov:" "$OUT/$t.log" | tail -3
done
exit $status
