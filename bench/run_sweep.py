"""Sweep throughput: many tiny trainings, one model per core (uatlab sweep's default) against one
model at a time with OpenMP over each batch (what a loop of `uatlab train` calls does).

usage: /usr/bin/python3 bench/run_sweep.py BUILD_DIR [--cells 16] [--steps 400] [--reps 5] [--json F]
       /usr/bin/python3 bench/run_sweep.py --from-json F
The two modes run interleaved, round by round, with each side's 1024^3 SGEMM as a record of the
machine (bench/stats.py; no PyTorch ratio here, so a slow PyTorch BLAS refuses nothing); models per
second are given as median (min-max) over the rounds, the speed-up as the median of the per-round
ratios.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import stats

MODES = [("one model per core", "per_core"), ("one model at a time, OpenMP over the batch", "omp")]


def run(args):
    binary = os.path.join(args.build, "uatlab")
    cfg = {"task": "memorize", "d": 4, "n": 8, "V": 32, "N": [32], "H": [1], "s": [1], "tied": True,
           "m": [16, 32], "seeds": args.cells // 2, "steps": args.steps, "batch": 32, "lr": 0.01}
    cores = os.cpu_count()
    tmp = tempfile.mkdtemp(prefix="uatlab-bench-sweep-")

    def sweep(key):
        out = tempfile.mkdtemp(dir=tmp)
        threads = cores if key == "per_core" else 1
        env = stats.thread_env(cores)
        t0 = time.perf_counter()
        subprocess.run([binary, "sweep", json.dumps(cfg), "--out-dir", out, "--threads", str(threads), "--no-plots"],
                       check=True, capture_output=True, env=env)
        return (time.perf_counter() - t0) / args.cells  # seconds per model
    sides = [(key, lambda key=key: sweep(key)) for _, key in MODES]
    try:
        rounds = stats.interleaved(sides + stats.peak_sides(args.build, cores, 0.3), args.reps,
                                   lambda r, t: print(f"round {r}/{t}", file=sys.stderr))
    finally:
        shutil.rmtree(tmp)
    return {"benchmark": "sweep", "cores": cores, "cells": args.cells, "steps": args.steps, "reps": args.reps,
            "config": cfg, **rounds}


def table(doc):
    lines = [f"{doc['cells']} trainings of {doc['steps']} steps, {doc['cores']} cores; median (min-max) of "
             f"{doc['reps']} interleaved rounds\n",
             "| mode | models per second | speed-up |", "|---|---|---|"]
    for label, key in MODES:
        per_s = stats.summary([1 / t for t in doc[key]])
        up = stats.speedup(doc["omp"], doc[key])
        lines.append(f"| {label} | {stats.spread(per_s)} | {stats.spread(up)}× |")
    return "\n".join(lines)


def options(ap):
    ap.add_argument("--cells", type=int, default=16)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--reps", type=int, default=5)

if __name__ == "__main__":
    stats.cli(run, table, options, compares_torch=False)
