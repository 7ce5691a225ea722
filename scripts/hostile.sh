#!/usr/bin/env bash
# The reproducers of the hostile-input review, run against a built uatlab: bash scripts/hostile.sh [BUILD_DIR]
# Each runs under a 4 GiB address-space limit and a 60 s timeout; the table it prints (status, seconds,
# peak memory, the last line of stderr) is recorded in docs/robustness.md. The test suite checks the
# same classes (tests/test_hostile.cpp, tests/test_hostile_flags.py); this script is the record.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
U="$(cd "${1:-$ROOT/build}" && pwd)/uatlab"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
cd "$T"
"$U" init --d 4 --layer attention:heads=2,head_size=1 --layer feedforward:width=8 --seed 7 -o net.safetensors >/dev/null
printf '{"x": [[0.5, 1, 2, 3], [1, 2, 3, 4]]}\n' >data.jsonl
python3 - <<'PY'
import json
deep = lambda k: "[" * k + "]" * k
open("deep.jsonl", "w").write('{"x": ' + deep(200000) + "}\n")
open("deep.json", "w").write('{"format": "uatlab-model-1", "architecture": ' + deep(200000) + ', "tensors": {}}')
open("bignum.jsonl", "w").write('{"x": [["1e999999999", 1, 2, 3]]}\n')
open("over.jsonl", "w").write('{"x": [["1e400", 1, 2, 3]]}\n')
open("over39.jsonl", "w").write('{"x": [["1e39", 1, 2, 3]]}\n')
arch = {"d": 1000000000, "layers": [{"type": "feedforward", "width": 1}]}
open("huge.json", "w").write(json.dumps({"format": "uatlab-model-1", "architecture": arch, "tensors": {}}))
arch = {"d": 16384, "layers": [{"type": "feedforward", "width": 16384}]}
open("large.json", "w").write(json.dumps({"format": "uatlab-model-1", "architecture": arch, "tensors": {}}))
open("deepcfg.json", "w").write('{"N": ' + deep(60000) + "}")
open("parens.txt", "w").write("(" * 30000 + "x1" + ")" * 30000)
open("minus.txt", "w").write("-" * 50000 + "x1")
PY
printf 'mine' >mine.safetensors

row() {
  local out rc
  out=$( (ulimit -v 4194304; /usr/bin/time -f "TIME %e %M" timeout 60 "$U" "$@") 2>&1 >/dev/null)
  rc=$?
  local t m
  t=$(echo "$out" | awk '/^TIME/ {print $2}')
  m=$(echo "$out" | awk '/^TIME/ {print int($3/1024)}')
  local msg
  msg=$(echo "$out" | grep -v '^TIME\|^Command exited\|^\[' | tail -1 | cut -c1-120)
  local args="$*"
  printf '| `%s` | %s | %s | %s | %s |\n' "${args:0:60}" "$rc" "$t" "$m" "${msg//|/\\|}"
}

echo "| command | status | seconds | MiB | message |"
echo "|---|---|---|---|---|"
row init --d 4 --layer attention:heads=65536,head_size=65536 -o big.safetensors
row init --d 4 --layer attention:rpe=t5,t5_buckets=2 -o t5.safetensors
row eval net.safetensors deep.jsonl
row info deep.json
row polynomial "$(cat parens.txt)" --vars x1
row polynomial "$(cat minus.txt)" --vars x1
row approximate tokenwise-sin --d 0
row approximate tokenwise-sin --n -1
row fang-fit x1 --vars x1 --samples -5
row fang-fit x1 --vars x1 --test 0
row fang-regression x1^2 --vars x1 --sizes -5
row approximate tokenwise-sin --d 31 --n 2 --K 2
row approximate tokenwise-sin --d 22 --n 2 --K 2
row approximate tokenwise-sin --d 63 --n 2 --K 2
row eval net.safetensors bignum.jsonl
row init --d 4 --layer attention:scale=1e999999999 -o s.safetensors
row polynomial "1e999999999*x1" --vars x1
row memorize demo --tolerance 1e999999999 --out m.json
row info huge.json
row info large.json
row sweep deepcfg.json --out-dir sw1
row eval net.safetensors over.jsonl
row eval net.safetensors over39.jsonl --precision float
row eval net.safetensors data.jsonl --hardmax-tol -1
row eval net.safetensors data.jsonl --hardmax-tol nan
row approximate tokenwise-sin --d 1 --n 1 --K 2
row approximate tokenwise-sin --check-limit 0
row approximate tokenwise-sin --samples 0
row polynomial x1 --vars x1,x1
row polynomial x1^2 --vars x1 --degree -3
row polynomial x1^2 --vars x1 --degree 1
row sweep '{"d": [4, 8]}' --out-dir sw2
row sweep '{"seeds": 0}' --out-dir sw3
row sweep '[1,2]' --out-dir sw4
row hardmax-counterexample --draws -5
row memorize demo --out m.safetensors
row memorize demo --out mine.json
row fang-fit "x1=1" --vars x1
row approximate "x=1"
