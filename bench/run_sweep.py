"""Sweep throughput: many tiny trainings, one model per core (uatlab sweep's default) against one
model at a time with OpenMP over each batch (what a loop of `uatlab train` calls does).

/usr/bin/python3 bench/run_sweep.py build [--cells 16] [--steps 400]
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cells", type=int, default=16)
    ap.add_argument("--steps", type=int, default=400)
    a = ap.parse_args()
    binary = os.path.join(a.build, "uatlab")
    cfg = {"task": "memorize", "d": 4, "n": 8, "V": 32, "N": [32], "H": [1], "s": [1], "tied": True,
           "m": [16, 32], "seeds": a.cells // 2, "steps": a.steps, "batch": 32, "lr": 0.01}
    cores = os.cpu_count()
    tmp = tempfile.mkdtemp(prefix="uatlab-bench-sweep-")
    try:
        times = {}
        for name, threads, omp in [("one model per core", cores, "1"), ("one model at a time, OpenMP over the batch", 1, str(cores))]:
            out = os.path.join(tmp, name.split()[0] + str(threads))
            env = dict(os.environ, OMP_NUM_THREADS=omp if threads == 1 else str(cores))
            t0 = time.perf_counter()
            subprocess.run([binary, "sweep", json.dumps(cfg), "--out-dir", out, "--threads", str(threads)],
                           check=True, capture_output=True, env=env)
            times[name] = time.perf_counter() - t0
        base = times["one model at a time, OpenMP over the batch"]
        print("| mode | seconds for %d trainings of %d steps | models per second | speed-up |" % (a.cells, a.steps))
        print("|---|---|---|---|")
        for name, t in times.items():
            print("| %s | %.2f | %.2f | %.2fx |" % (name, t, a.cells / t, base / t))
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
