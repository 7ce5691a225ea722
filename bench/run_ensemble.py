"""Many tiny trainings: `uatlab sweep` (one model per core) against PyTorch training the same
models as a vmap ensemble (functorch, stacked parameters, one AdamW over the stack), interleaved
round by round with each side's 1024^3 SGEMM (bench/stats.py). Models per second, median
(min-max), and the speed-up.

usage: /usr/bin/python3 bench/run_ensemble.py BUILD_DIR [--reps 5] [--steps 400] [--json F]
       /usr/bin/python3 bench/run_ensemble.py --from-json F

Shapes (16 models each, every step run: early_stop false):
  kajitsuka   memorize: d 4, n 8, N 32, |V| 32, 3 classes per token; one tied head of size 1
              (Q = K = V), W_O, ReLU FF of width 16 (8 models) and 32 (8 models); batch 32
  mahdavi     random-labels: d 16, n 8, N 256, 2 classes on the first token; H = 1 (8 models) and
              H = 4 (8 models) heads of size 4, no FF; batch 64
The PyTorch models have the same layers and sizes; the data are random tensors of the same
shapes (throughput does not depend on the values). PyTorch runs at the same thread count.
uatlab's time is the whole `uatlab sweep` process (start, data, training, evaluation, runs.jsonl
and summary.csv) with --no-plots: PyTorch's side draws no plot either.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import stats
import torch
from torch import nn

SHAPES = {
    "kajitsuka": {"task": "memorize", "d": 4, "n": 8, "N": 32, "V": 32, "classes": 3, "per_token": True,
                  "batch": 32, "groups": [{"H": 1, "s": 1, "m": 16, "tied": True},
                                          {"H": 1, "s": 1, "m": 32, "tied": True}]},
    "mahdavi": {"task": "random-labels", "d": 16, "n": 8, "N": 256, "classes": 2, "per_token": False,
                "batch": 64, "groups": [{"H": 1, "s": 4, "m": 0, "tied": False},
                                        {"H": 4, "s": 4, "m": 0, "tied": False}]},
}
PER_GROUP = 8


class Model(nn.Module):
    """x + attention (H heads of size s, tied or not, 1/sqrt(s)) [+ ReLU FF], linear readout."""

    def __init__(self, d, H, s, m, tied, classes):
        super().__init__()
        self.H, self.s, self.tied = H, s, tied
        self.q = nn.Linear(d, H * s, bias=False)
        if not tied:
            self.k = nn.Linear(d, H * s, bias=False)
            self.v = nn.Linear(d, H * s, bias=False)
        self.o = nn.Linear(H * s, d, bias=False)
        self.ff = nn.Sequential(nn.Linear(d, m), nn.ReLU(), nn.Linear(m, d)) if m else None
        self.readout = nn.Linear(d, classes)

    def forward(self, x):  # (B, n, d)
        B, n, _ = x.shape
        q = self.q(x).view(B, n, self.H, self.s).transpose(1, 2)
        k = q if self.tied else self.k(x).view(B, n, self.H, self.s).transpose(1, 2)
        v = q if self.tied else self.v(x).view(B, n, self.H, self.s).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-1, -2) / self.s ** 0.5, dim=-1)
        x = x + self.o((a @ v).transpose(1, 2).reshape(B, n, self.H * self.s))
        if self.ff is not None:
            x = x + self.ff(x)
        return self.readout(x)


def torch_ensemble(shape, steps):
    """A function that trains every model of the shape once (each group as one vmap ensemble) and
    returns seconds per model."""
    from functorch import combine_state_for_ensemble, vmap
    torch.manual_seed(0)
    ensembles = []
    for g in shape["groups"]:
        models = [Model(shape["d"], g["H"], g["s"], g["m"], g["tied"], shape["classes"]) for _ in range(PER_GROUP)]
        fmodel, params, buffers = combine_state_for_ensemble(models)
        params = [p.detach().requires_grad_() for p in params]
        x = torch.randn(PER_GROUP, shape["N"], shape["n"], shape["d"])
        labels = (shape["N"], shape["n"]) if shape["per_token"] else (shape["N"],)
        y = torch.randint(0, shape["classes"], (PER_GROUP,) + labels)
        ensembles.append((fmodel, params, buffers, x, y))

    def train_all():
        t0 = time.perf_counter()
        for fmodel, params, buffers, x, y in ensembles:
            opt = torch.optim.AdamW(params, lr=0.01)
            for step in range(steps):
                idx = torch.randint(0, shape["N"], (shape["batch"],))
                logits = vmap(fmodel)(params, buffers, x[:, idx])  # (M, B, n, classes)
                if not shape["per_token"]:
                    logits = logits[:, :, 0]
                loss = nn.functional.cross_entropy(logits.reshape(-1, shape["classes"]), y[:, idx].reshape(-1))
                opt.zero_grad(set_to_none=True)
                (loss * PER_GROUP).backward()  # each model's mean loss: the sum over models
                opt.step()
        return (time.perf_counter() - t0) / (PER_GROUP * len(ensembles))
    return train_all


def uatlab_sweep(binary, shape, steps, tmp):
    cfg = {"task": shape["task"], "d": shape["d"], "n": [shape["n"]], "N": [shape["N"]], "steps": steps,
           "batch": shape["batch"], "lr": 0.01, "seeds": PER_GROUP, "early_stop": False}
    if shape["task"] == "memorize":
        cfg["V"] = shape["V"]
    else:
        cfg["classes"] = shape["classes"]
    g = shape["groups"]
    cfg.update({"H": sorted({x["H"] for x in g}), "s": [g[0]["s"]], "m": sorted({x["m"] for x in g}),
                "tied": g[0]["tied"]})
    models = PER_GROUP * len(cfg["H"]) * len(cfg["m"])
    cores = os.cpu_count()

    def run():
        out = tempfile.mkdtemp(dir=tmp)
        t0 = time.perf_counter()
        subprocess.run([binary, "sweep", json.dumps(cfg), "--out-dir", out, "--threads", str(cores), "--no-plots"],
                       check=True, capture_output=True, env=stats.thread_env(cores))
        return (time.perf_counter() - t0) / models
    return run


def run(args):
    torch.set_num_threads(os.cpu_count())
    binary = os.path.join(args.build, "uatlab")
    doc = {"benchmark": "ensemble", "cores": os.cpu_count(), "torch": torch.__version__, "steps": args.steps,
           "reps": args.reps, "models": PER_GROUP * 2, "rows": []}
    tmp = tempfile.mkdtemp(prefix="uatlab-bench-ensemble-")
    try:
        for name, shape in SHAPES.items():
            ours, train_all = uatlab_sweep(binary, shape, args.steps, tmp), torch_ensemble(shape, args.steps)
            theirs, split = stats.torch_at_best(lambda _: train_all(), os.cpu_count(), None)
            rounds = stats.interleaved([("uatlab", ours), ("torch", theirs),
                                        *stats.peak_sides(args.build, os.cpu_count(), 0.3)], args.reps,
                                       lambda r, t: print(f"{name}: round {r}/{t}", file=sys.stderr))
            doc["rows"].append({"shape": name, "torch_threads": split, **rounds})
    finally:
        shutil.rmtree(tmp)
    return doc


def table(doc):
    lines = [f"{doc['models']} models per shape, {doc['steps']} steps each (every step), {doc['cores']} cores, "
             f"torch {doc['torch']}; median (min-max) of {doc['reps']} interleaved rounds\n",
             "| shapes | uatlab sweep, models/s | PyTorch vmap ensemble, models/s (threads) | speed-up |",
             "|---|---|---|---|"]
    for r in doc["rows"]:
        ours = stats.summary([1 / t for t in r["uatlab"]])
        theirs = stats.summary([1 / t for t in r["torch"]])
        up = stats.speedup(r["torch"], r["uatlab"])
        lines.append(f"| {r['shape']} | {stats.spread(ours)} | {stats.spread(theirs)} ({stats.split_label(r)}) | "
                     f"{stats.spread(up)}× |")
    return "\n".join(lines)


def options(ap):
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--reps", type=int, default=5)

if __name__ == "__main__":
    stats.cli(run, table, options)
