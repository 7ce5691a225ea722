"""Train-step benchmark: uatlab (bench_train) against PyTorch on the same machine, same run.

usage: /usr/bin/python3 bench/run_train.py BUILD_DIR [--threads 2] [--min-time 0.3] [--reps 7] [--json F]
                                          [--baseline OLD_BUILD_DIR]
       /usr/bin/python3 bench/run_train.py --from-json F
Model per config: x + MultiheadAttention(x) (bias, 1/sqrt(head size)), then + ReLU feed-forward
(width m), MSE loss, AdamW; float32. Both sides and a 1024^3 SGEMM on each side (uatlab's Eigen,
PyTorch's BLAS: the attainable peaks) run interleaved, round by round (bench/stats.py). Prints
ms/step, median (min-max) over the rounds, the speed-up (median of the per-round ratios), GFLOP/s
and the fraction of each SGEMM.
--baseline adds another build's bench_train (an earlier commit) to every round, and a table of
where the step goes before and after.
"""
import os
import sys
import time

import stats
import torch
from torch import nn

CONFIGS = [("tiny", 64, 16, 8, 1, 32), ("small", 64, 32, 32, 4, 128), ("medium", 32, 64, 128, 4, 512)]
GOALS = {"tiny": 8.0, "small": 6.0, "medium": 2.0}  # issue 18: medians of one run
PEAK_GOALS = {"tiny": 60, "small": 85, "medium": 90}  # issue 39: % of uatlab's own SGEMM


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


def torch_step(B, n, d, h, m):
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
    return step


def seconds_per_call(fn, min_time):
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_time:
        fn()
        reps += 1
    return (time.perf_counter() - start) / reps


def run(args):
    torch.set_num_threads(args.threads)
    env = stats.thread_env(args.threads)
    cmd = [os.path.join(args.build, "bench", "bench_train")]
    doc = {"benchmark": "train_step", "threads": args.threads, "torch": torch.__version__, "reps": args.reps,
           "min_time": args.min_time, "rows": []}
    for name, B, n, d, h, m in CONFIGS:
        step = torch_step(B, n, d, h, m)
        theirs, split = stats.torch_at_best(lambda t: seconds_per_call(step, t), args.threads, args.min_time)
        phases, base_phases = [], []  # seconds per step in each phase, per round
        sides = [("uatlab", lambda: stats.google_benchmark_seconds(cmd, f"train_step/{name}", env, args.min_time,
                                                                   phases)),
                 ("torch", theirs),
                 *stats.peak_sides(args.build, args.threads, args.min_time)]
        if args.baseline:
            base = [os.path.join(args.baseline, "bench", "bench_train")]
            sides.append(("baseline", lambda: stats.google_benchmark_seconds(base, f"train_step/{name}", env,
                                                                             args.min_time, base_phases)))
        rounds = stats.interleaved(sides, args.reps, lambda r, t: print(f"{name}: round {r}/{t}", file=sys.stderr))
        doc["rows"].append({"config": name, "B": B, "n": n, "d": d, "H": h, "m": m, "flops": flops(B, n, d, m),
                            "torch_threads": split,
                            "phases": phases, **rounds, **({"baseline_phases": base_phases} if args.baseline else {})})
    doc["simd"] = stats.SIMD.get(cmd[0], "not reported by this build")
    return doc


def table(doc):
    lines = [f"Train step (fwd + bwd + AdamW), float32, {doc['threads']} threads, torch {doc['torch']}; "
             f"median (min-max) of {doc['reps']} interleaved rounds; peaks: each side's 1024^3 SGEMM in the "
             f"same rounds; uatlab's SIMD path: {doc.get('simd', 'not recorded')}\n",
             "| config | B | n | d | H | m | uatlab ms/step | PyTorch ms/step (threads) | speed-up | goal "
             "| uatlab GFLOP/s | of uatlab's SGEMM (goal) | of PyTorch's SGEMM |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        ours, theirs = stats.summary(r["uatlab"]), stats.summary(r["torch"])
        up = stats.speedup(r["torch"], r["uatlab"])
        gf = r["flops"] / ours["median"] / 1e9
        peak, torch_peak = stats.sgemm_gflops(r["sgemm"]), stats.sgemm_gflops(r["torch_sgemm"])
        lines.append(f"| {r['config']} | {r['B']} | {r['n']} | {r['d']} | {r['H']} | {r['m']} | "
                     f"{stats.spread(ours, 1e3)} | {stats.spread(theirs, 1e3)} ({stats.split_label(r)}) | "
                     f"{stats.spread(up)}× | ≥ {GOALS[r['config']]}× | {gf:.1f} | {gf / peak * 100:.0f}% of {peak:.0f} "
                     f"(≥ {PEAK_GOALS[r['config']]}%) | {gf / torch_peak * 100:.0f}% of {torch_peak:.0f} |")
    if not any(r.get("phases") for r in doc["rows"]):
        return "\n".join(lines)
    before = any(r.get("baseline_phases") for r in doc["rows"])
    lines += ["", "Where uatlab's step goes (median over the rounds, ms per step; forward includes splitting "
              "the batch, optimizer includes zeroing the gradient" + ("; before: the --baseline build in the "
                                                                      "same rounds" if before else "") + "):", "",
              "| config | build | forward | backward | reduction | optimizer | sum of phases | step |",
              "|---|---|---|---|---|---|---|---|"]

    def phase_row(config, build, phases, steps):
        med = {k: stats.summary([p[k] for p in phases])["median"] * 1e3
               for k in ("s_forward", "s_backward", "s_reduce", "s_optimizer")}
        return (f"| {config} | {build} | {stats.number(med['s_forward'])} | {stats.number(med['s_backward'])} | "
                f"{stats.number(med['s_reduce'])} | {stats.number(med['s_optimizer'])} | "
                f"{stats.number(sum(med.values()))} | {stats.number(stats.summary(steps)['median'] * 1e3)} |")
    for r in doc["rows"]:
        if r.get("baseline_phases"):
            lines.append(phase_row(r["config"], "before", r["baseline_phases"], r["baseline"]))
        if r.get("phases"):
            lines.append(phase_row(r["config"], "after" if before else "", r["phases"], r["uatlab"]))
    if before:
        lines += ["", "| config | step before / after (median of the per-round ratios) |", "|---|---|"]
        for r in doc["rows"]:
            lines.append(f"| {r['config']} | {stats.spread(stats.speedup(r['baseline'], r['uatlab']))}× |")
    return "\n".join(lines)


def options(ap):
    stats.google_benchmark_options(ap)
    ap.add_argument("--baseline", help="build folder of an earlier commit, timed in the same rounds")


if __name__ == "__main__":
    stats.cli(run, table, options)
