"""The benchmarks' baseline check (bench/stats.py): PyTorch's BLAS is probed and its kernel chosen
from the CPU flags; a wrong product is caught; a run whose PyTorch SGEMM is below half of uatlab's
prints no ratio and fails, naming the BLAS; so does a run recorded without PyTorch's SGEMM. An
earlier build timed beside today's (run_certify.py --baseline) gets its row and its per-round ratio.

usage: /usr/bin/python3 tests/test_bench_baseline.py
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import run_certify  # noqa: E402
import stats  # noqa: E402
import torch  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


# The kernel the CPU flags allow, best first; an unknown core name ranks below every known one.
avx512 = {"avx512f", "avx512vl", "avx512bw", "avx512dq", "avx2", "fma"}
check(stats.best_core_type(avx512 | {"avx512_bf16"}) == "Cooperlake", "AVX-512 with bf16: Cooperlake")
check(stats.best_core_type(avx512) == "SkylakeX", "AVX-512: SkylakeX")
check(stats.best_core_type({"avx2", "fma", "sse3"}) == "Haswell", "AVX2 + FMA: Haswell")
check(stats.best_core_type({"sse3"}) == "Prescott", "SSE3 only: Prescott")
check(stats.core_rank("Prescott") > stats.core_rank("SkylakeX") > stats.core_rank("Cooperlake"), "ranks")
check(stats.core_rank("Zen") == len(stats.CORE_TYPES), "an unlisted core ranks last")

# The product check: PyTorch's own product passes, one wrong entry (by 0.1) or a NaN fails.
g = torch.Generator().manual_seed(1)
a, b = torch.rand(256, 256, generator=g) * 2 - 1, torch.rand(256, 256, generator=g) * 2 - 1
c = a @ b
check(stats.product_is_correct(a, b, c), "PyTorch's SGEMM is within the summation bound")
wrong = c.clone()
wrong[3, 7] += 0.1  # the bound here is about 1e-3
check(not stats.product_is_correct(a, b, wrong), "an entry off by 0.1 is caught")
wrong[3, 7] = float("nan")
check(not stats.product_is_correct(a, b, wrong), "a NaN is caught")

# The probe names the BLAS PyTorch runs on and finds its SGEMM correct, whatever BLAS that is.
found = stats.probe_blas(1)
print("probe:", json.dumps(found))
check(found["correct"] and found["gflops"] > 0 and found["libraries"], "the probe runs, names the libraries")

# The refusal: PyTorch's SGEMM below half of uatlab's, or not recorded.
fast, slow = [2 * 1024 ** 3 / 300e9] * 5, [2 * 1024 ** 3 / 1.6e9] * 5
reference = {"blas": "reference BLAS or unknown", "core": None}
check(stats.crippled_baseline({"rows": [{"sgemm": fast, "torch_sgemm": fast}]}) is None, "equal SGEMMs pass")
why = stats.crippled_baseline({"blas": reference, "rows": [{"sgemm": fast, "torch_sgemm": slow}]})
check(why is not None and "1.6 GFLOP/s" in why and "reference BLAS" in why, f"a crippled baseline is named: {why}")
check(stats.crippled_baseline({"rows": [{"sgemm": fast}]}) is not None, "a run without PyTorch's SGEMM is refused")

# End to end: a bench script's table from a crippled run prints no ratio and exits non-zero.
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "train.json")
    row = {"config": "tiny", "B": 64, "n": 16, "d": 8, "H": 1, "m": 32, "flops": 1e9, "uatlab": [1e-4] * 5,
           "torch": [1e-3] * 5, "sgemm": fast, "torch_sgemm": slow}
    with open(path, "w") as f:
        json.dump({"threads": 2, "torch": "x", "reps": 5, "blas": reference, "rows": [row]}, f)
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "run_train.py"), "--from-json", path],
                         capture_output=True, text=True)
    check(run.returncode != 0 and "×" not in run.stdout and "no ratio printed" in run.stderr,
          "run_train.py --from-json on a crippled run: no ratio, exit 1")
    row["torch_sgemm"] = fast
    with open(path, "w") as f:
        json.dump({"threads": 2, "torch": "x", "reps": 5, "blas": reference, "rows": [row]}, f)
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "run_train.py"), "--from-json", path],
                         capture_output=True, text=True)
    check(run.returncode == 0 and "10.0 (10.0-10.0)×" in run.stdout, "the same run with a fair SGEMM: the ratio")
    # An earlier build timed in the same rounds (run_certify.py --baseline): its row and its ratio.
    path = os.path.join(tmp, "certify.json")
    with open(path, "w") as f:
        json.dump({"cores": 2, "reps": 5, "blas": reference, "memorize_to_certified": [1.0] * 5,
                   "memorize": [2.0, 2.0, 2.0, 2.0, 4.0], "analyse_1000": [1.0] * 5, "analyse_trained": [1.0] * 5,
                   "baseline:old/build": [6.0, 6.0, 6.0, 6.0, 6.0],
                   "baseline analyse trained:old/build": [2.0] * 5, "analyse_region": [3.0] * 5,
                   "baseline region:old/build": [6.0] * 5, "sgemm": fast, "torch_sgemm": fast}, f)
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "run_certify.py"), "--from-json", path],
                         capture_output=True, text=True)
    check(run.returncode == 0 and "| old/build | memorize 1000, with the fewest bits | 6 (6-6) | 3 (1.5-3)× |" in
          run.stdout and "| old/build | analyse trained | 2 (2-2) | 2 (2-2)× |" in run.stdout and
          "| analyse trained, mean-value region (5 sequences) | 3 (3-3) | - |" in run.stdout and
          "| old/build | analyse trained, mean-value region (5 sequences) | 6 (6-6) | 2 (2-2)× |" in run.stdout,
          "run_certify.py --baseline: the earlier build's rows, its time over today's per round")
    check(run_certify.labelled("a9690c7 (old)=x/build") == ("a9690c7 (old)", "x/build") and
          run_certify.labelled("x/build") == ("x/build", "x/build"), "--baseline LABEL=DIR and a bare DIR")

if failures:
    sys.exit(f"{len(failures)} failed")
