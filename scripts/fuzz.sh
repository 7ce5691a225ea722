#!/usr/bin/env bash
# Fuzz every input reader with libFuzzer (clang, ASan + UBSan): bash scripts/fuzz.sh [SECONDS] [TARGET...]
# (target "python": the Python entry points' arguments, tests/fuzz_python.py, on the normal build;
# it is in the default list, run last)
# Each target runs SECONDS (default 600) from its seed corpus (fuzz/corpus/<target>/) plus what
# earlier runs found (build-fuzz/corpus/<target>/). A crash, leak, sanitizer report or timeout is
# saved under build-fuzz/crashes/<target>/ and fails the run: copy it to tests/fuzz/<target>/, fix
# the cause, and the normal test suite replays it from then on (fuzz/CMakeLists.txt).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_EACH="${1:-600}"
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(model dataset sweep_config expression python)
OUT="${FUZZ_DIR:-$ROOT/build-fuzz}"

if [ "${TARGETS[*]}" != python ]; then
  EXTRA_PACKAGES="clang libclang-rt-14-dev libomp-14-dev" BUILD_DIR="$OUT" \
    CMAKE_EXTRA="-DCMAKE_CXX_COMPILER=clang++ -DUATLAB_FUZZ=ON -DUATLAB_PYTHON=OFF -DUATLAB_TESTS=OFF -DUATLAB_BENCH=OFF \
                 -DUATLAB_MPI=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo" \
    bash "$ROOT/scripts/setup.sh"
fi

status=0
for t in "${TARGETS[@]}"; do
  if [ "$t" = python ]; then  # the Python entry points' arguments (tests/fuzz_python.py), on the normal build
    seed="${FUZZ_SEED:-$RANDOM}"  # a failure names its case: fuzz_python.py BUILD --seed S --case I
    echo "fuzz: python for ${SECONDS_EACH} s (seed $seed)"
    PY_BUILD="${PY_BUILD:-$ROOT/build}"
    [ -d "$PY_BUILD/python" ] || bash "$ROOT/scripts/setup.sh"
    mkdir -p "$OUT"
    /usr/bin/python3 "$ROOT/tests/fuzz_python.py" "$PY_BUILD" --seconds "$SECONDS_EACH" --seed "$seed" \
      | tee "$OUT/python.log" | tail -20 || status=1
    continue
  fi
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
