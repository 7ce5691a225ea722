"""Forward-pass benchmark: uatlab (C++) against PyTorch on the same networks, same machine, same run.

usage: /usr/bin/python3 bench/run.py BUILD_DIR [--threads 2] [--min-time 0.5]
Writes the networks with `uatlab init`, times `bench_forward` (Google Benchmark) and PyTorch
(torch.no_grad, batched (B, n, d) tensors, torch.set_num_threads), prints a Markdown table of
microseconds per batch and the speed-up of uatlab over PyTorch.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import uatlab_torch  # noqa: E402

# (name, d, n, heads, head size, ff width, blocks); batch B = 64.
CONFIGS = [
    ("tiny", 8, 16, 1, 8, 32, 1),
    ("small", 16, 16, 2, 8, 64, 2),
    ("d32n32", 32, 32, 4, 8, 128, 2),
]
BATCH = 64


REPETITIONS = 3  # both sides report the best of 3 timed runs: the machine is shared and noisy


def time_torch(net, x, min_time):
    best = float("inf")
    with torch.no_grad():
        for _ in range(5):
            net(x)
        for _ in range(REPETITIONS):
            reps, start = 0, time.perf_counter()
            while True:
                net(x)
                reps += 1
                elapsed = time.perf_counter() - start
                if elapsed >= min_time:
                    break
            best = min(best, elapsed / reps)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=0.5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    uatlab = os.path.join(args.build, "uatlab")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, d, n, h, s, m, blocks in CONFIGS:
            layers = []
            for _ in range(blocks):
                layers += [{"type": "attention", "heads": h, "head_size": s, "sqrt_scaling": True},
                           {"type": "feedforward", "width": m}]
            path = os.path.join(tmp, name + ".safetensors")
            subprocess.run([uatlab, "init", "--arch", json.dumps({"d": d, "layers": layers}), "-o", path],
                           check=True, capture_output=True)
            out = subprocess.run([os.path.join(args.build, "bench", "bench_forward"), "--models", path,
                                  "--batch", str(BATCH), "--n", str(n), "--benchmark_format=json",
                                  f"--benchmark_min_time={args.min_time}",
                                  f"--benchmark_repetitions={REPETITIONS}"],
                                 check=True, capture_output=True, text=True, env=env).stdout
            ours = {}
            for b in json.loads(out)["benchmarks"]:
                if b.get("run_type") == "aggregate":
                    continue
                t = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}[b["time_unit"]]
                key = b["name"].split("/")[1]
                ours[key] = min(ours.get(key, t), t)
            for dtype, tdtype in (("double", torch.float64), ("float", torch.float32)):
                net = uatlab_torch.load(path, dtype=tdtype)
                x = torch.rand(BATCH, n, d, dtype=tdtype) * 2 - 1
                theirs = time_torch(net, x, args.min_time)
                rows.append((name, d, n, h, s, m, blocks, dtype, ours[dtype], theirs))
    print(f"Batched forward, B = {BATCH}, {args.threads} threads, torch {torch.__version__}, best of {REPETITIONS}\n")
    print("| config | d | n | H | s | m | blocks | dtype | uatlab µs/batch | PyTorch µs/batch | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, d, n, h, s, m, blocks, dtype, ours, theirs in rows:
        print(f"| {name} | {d} | {n} | {h} | {s} | {m} | {blocks} | {dtype} | {ours * 1e6:.1f} | {theirs * 1e6:.1f} | "
              f"{theirs / ours:.2f}× |")


if __name__ == "__main__":
    main()
