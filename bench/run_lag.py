"""DP-free heads over long windows: one build's `uatlab train` against another's, same run.

usage: /usr/bin/python3 bench/run_lag.py NEW_UATLAB OLD_UATLAB [--reps 5] [--cells T:RPE,...] [--json F]
       /usr/bin/python3 bench/run_lag.py --from-json F
The sparse-memory cells' model of `reproduce wang-e-rates` (16 DP-free heads of size 1, causal,
strict past, a window of 2T lags, sequences of 2T + 32 tokens, 32 a step, one thread): trained for
S1 and S2 steps by each build, interleaved round by round (bench/stats.py); the time of a step is
(t(S2) − t(S1))/(S2 − S1) from the training seconds each run reports, so that set-up and the
validation passes cancel. There is no PyTorch side: PyTorch has no DP-free heads, and this measures
uatlab's FFT path (src/train/lag_convolution.hpp) against its n×n products of an earlier build.
"""
import argparse
import json
import os
import subprocess
import sys

import stats

MODEL = f"/tmp/uatlab-run-lag-{os.getpid()}.safetensors"  # written by each run, removed at the end

CELLS = [(64, "lin"), (128, "lin"), (128, "log"), (256, "lin"), (256, "log"), (1024, "lin"), (1024, "log")]


def command(uatlab, T, rpe, steps):
    return [uatlab, "train", "--task", "kernel-lags", "--task-lags", str(T), "--task-window", str(2 * T),
            "--task-mask-before", str(2 * T), "--task-n", str(2 * T + 32), "--task-d", "2", "--task-N", "64",
            "--task-val-N", "16", "--d", "2", "--readout", "1", "--layer",
            f"attention:heads=16,head_size=1,dp_free=true,rpe={rpe},causal=true,strict_past=true,window={2 * T}",
            "--steps", str(steps), "--seed", "3", "--eval-every", str(steps), "-o", MODEL]


def train_seconds(uatlab, T, rpe, steps):
    out = subprocess.run(command(uatlab, T, rpe, steps), check=True, capture_output=True, text=True,
                         env=stats.thread_env(1)).stdout
    return json.loads(out.strip().splitlines()[-1])["seconds"]


def step_seconds(uatlab, T, rpe):
    s1, s2 = (4, 12) if T >= 1024 else (10, 40)
    return (train_seconds(uatlab, T, rpe, s2) - train_seconds(uatlab, T, rpe, s1)) / (s2 - s1)


def table(doc):
    lines = ["| T | tokens | RPE | before (ms/step) | now (ms/step) | speed-up |", "|---|---|---|---|---|---|"]
    for cell in doc["cells"]:
        old, new = stats.summary(cell["old"]), stats.summary(cell["new"])
        ratio = stats.speedup(cell["old"], cell["new"])
        lines.append(f"| {cell['T']} | {2 * cell['T'] + 32} | {cell['rpe']} | {stats.spread(old, 1e3)} | "
                     f"{stats.spread(new, 1e3)} | {stats.spread(ratio)}× |")
    m = doc["machine"]
    lines.append(f"\n{m['cpu']}, {m['cores']} cores, {m['date']}; medians (min-max) of {doc['reps']} interleaved rounds")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("new", nargs="?")
    ap.add_argument("old", nargs="?")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cells", help="T:RPE,... instead of the default cells (e.g. 16:lin,32:lin)")
    ap.add_argument("--json")
    ap.add_argument("--from-json")
    a = ap.parse_args()
    if a.from_json:
        print(table(stats.load(a.from_json)))
        return
    if not a.new or not a.old:
        ap.error("NEW_UATLAB and OLD_UATLAB are required")
    doc = {"reps": a.reps, "cells": []}
    cells = [(int(c.split(":")[0]), c.split(":")[1]) for c in a.cells.split(",")] if a.cells else CELLS
    for T, rpe in cells:
        rounds = stats.interleaved([("old", lambda: step_seconds(a.old, T, rpe)),
                                    ("new", lambda: step_seconds(a.new, T, rpe))], a.reps)
        doc["cells"].append({"T": T, "rpe": rpe, **rounds})
        print(f"T={T} {rpe} done", file=sys.stderr, flush=True)
    if os.path.exists(MODEL):
        os.remove(MODEL)
    doc["machine"] = stats.machine()
    if a.json:
        stats.save(a.json, doc)
    print(table(doc))


if __name__ == "__main__":
    main()
