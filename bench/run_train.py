"""Train-step benchmark: uatlab (bench_train) against PyTorch on the same machine, same run.

usage: /usr/bin/python3 bench/run_train.py BUILD_DIR [--threads 2] [--min-time 0.5]
Model per config: x + MultiheadAttention(x) (bias, 1/sqrt(head size)), then + ReLU feed-forward
(width m), MSE loss, AdamW; float32. Prints ms/step, the speed-up, GFLOP/s and the fraction of
the attainable peak (a 1024^3 SGEMM measured by bench_train in the same run).
"""
import argparse
import json
import os
import subprocess
import time

import torch
from torch import nn

CONFIGS = [("tiny", 64, 16, 8, 1, 32), ("small", 64, 32, 32, 4, 128), ("medium", 32, 64, 128, 4, 512)]
GOALS = {"tiny": 5.0, "small": 5.0, "medium": 1.5}
REPETITIONS = 3


class Block(nn.Module):
    def __init__(self, d, h, m):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, h, bias=True, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, m), nn.ReLU(), nn.Linear(m, d))

    def forward(self, x):
        x = x + self.attn(x, x, x, need_weights=False)[0]
        return x + self.ff(x)


def flops(B, n, d, m):
    T = B * n
    return 3 * T * (2 * 4 * d * d + 2 * 2 * n * d + 2 * 2 * d * m)


def time_torch(B, n, d, h, m, min_time):
    torch.manual_seed(0)
    net = Block(d, h, m)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    x, y = torch.rand(B, n, d) * 2 - 1, torch.rand(B, n, d) * 2 - 1

    def step():
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()

    for _ in range(5):
        step()
    best = float("inf")
    for _ in range(REPETITIONS):
        reps, start = 0, time.perf_counter()
        while time.perf_counter() - start < min_time:
            step()
            reps += 1
        best = min(best, (time.perf_counter() - start) / reps)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=0.5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    out = subprocess.run([os.path.join(args.build, "bench", "bench_train"), "--benchmark_format=json",
                          f"--benchmark_min_time={args.min_time}", f"--benchmark_repetitions={REPETITIONS}"],
                         check=True, capture_output=True, text=True, env=env).stdout
    ours, peak = {}, 0.0
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        t = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}[b["time_unit"]]
        if b["name"].startswith("sgemm_peak"):
            peak = max(peak, b["GFLOPs"])
        else:
            key = b["name"].split("/")[1]
            ours[key] = min(ours.get(key, t), t)
    print(f"Train step (fwd + bwd + AdamW), float32, {args.threads} threads, torch {torch.__version__}, best of "
          f"{REPETITIONS}; attainable peak (SGEMM 1024^3) {peak:.0f} GFLOP/s\n")
    print("| config | B | n | d | H | m | uatlab ms/step | PyTorch ms/step | speed-up | goal | uatlab GFLOP/s | of peak |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, B, n, d, h, m in CONFIGS:
        theirs = time_torch(B, n, d, h, m, args.min_time)
        gf = flops(B, n, d, m) / ours[name] / 1e9
        print(f"| {name} | {B} | {n} | {d} | {h} | {m} | {ours[name] * 1e3:.3f} | {theirs * 1e3:.3f} | "
              f"{theirs / ours[name]:.2f}× | ≥ {GOALS[name]}× | {gf:.1f} | {gf / peak * 100:.0f}% |")


if __name__ == "__main__":
    main()
