"""Forward-pass benchmark: uatlab (C++) against PyTorch on the same networks, same machine, same run.

usage: /usr/bin/python3 bench/run.py BUILD_DIR [--threads 2] [--min-time 0.3] [--reps 7] [--json F]
       /usr/bin/python3 bench/run.py --from-json F
Writes the networks with `uatlab init`, then times `bench_forward` (Google Benchmark, one
repetition per round) and PyTorch (torch.no_grad, batched (B, n, d) tensors, the same thread
count) interleaved, round by round, with each side's 1024^3 SGEMM (bench/stats.py). Prints a
Markdown table of microseconds per batch, median (min-max) over the rounds, and the speed-up of
uatlab over PyTorch (median of the per-round ratios).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import stats

# (name, d, n, heads, head size, ff width, blocks); batch B = 64.
CONFIGS = [
    ("tiny", 8, 16, 1, 8, 32, 1),
    ("small", 16, 16, 2, 8, 64, 2),
    ("d32n32", 32, 32, 4, 8, 128, 2),
]
BATCH = 64


def torch_seconds(net, x, min_time):
    import torch
    with torch.no_grad():
        reps, start = 0, time.perf_counter()
        while True:
            net(x)
            reps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                return elapsed / reps


def run(args):
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "uatlab"))
    import pytorch as uatlab_torch
    torch.set_num_threads(args.threads)
    env = stats.thread_env(args.threads)
    uatlab = os.path.join(args.build, "uatlab")
    doc = {"benchmark": "forward", "threads": args.threads, "torch": torch.__version__, "batch": BATCH,
           "reps": args.reps, "min_time": args.min_time, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, d, n, h, s, m, blocks in CONFIGS:
            layers = []
            for _ in range(blocks):
                layers += [{"type": "attention", "heads": h, "head_size": s, "sqrt_scaling": True},
                           {"type": "feedforward", "width": m}]
            path = os.path.join(tmp, name + ".safetensors")
            subprocess.run([uatlab, "init", "--arch", json.dumps({"d": d, "layers": layers}), "-o", path],
                           check=True, capture_output=True)
            cmd = [os.path.join(args.build, "bench", "bench_forward"), "--models", path, "--batch", str(BATCH),
                   "--n", str(n)]
            for dtype, tdtype in (("double", torch.float64), ("float", torch.float32)):
                net = uatlab_torch.load(path, dtype=tdtype)
                x = torch.rand(BATCH, n, d, dtype=tdtype) * 2 - 1
                torch_seconds(net, x, 0.05)  # warm up
                theirs, split = stats.torch_at_best(lambda t: torch_seconds(net, x, t), args.threads, args.min_time)
                rounds = stats.interleaved(
                    [("uatlab", lambda: stats.google_benchmark_seconds(cmd, f"forward/{dtype}/{path}", env,
                                                                       args.min_time)),
                     ("torch", theirs),
                     *stats.peak_sides(args.build, args.threads, args.min_time)],
                    args.reps, lambda r, t: print(f"{name} {dtype}: round {r}/{t}", file=sys.stderr))
                doc["rows"].append({"config": name, "d": d, "n": n, "H": h, "s": s, "m": m, "blocks": blocks,
                                    "dtype": dtype, "torch_threads": split, **rounds})
            doc["simd"] = stats.SIMD.get(cmd[0], "not reported by this build")
    return doc


def table(doc):
    lines = [f"Batched forward, B = {doc['batch']}, {doc['threads']} threads, torch {doc['torch']}; "
             f"median (min-max) of {doc['reps']} interleaved rounds; uatlab's SIMD path: "
             f"{doc.get('simd', 'not recorded')}\n",
             "| config | d | n | H | s | m | blocks | dtype | uatlab µs/batch | PyTorch µs/batch (threads) | speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        ours, theirs = stats.summary(r["uatlab"]), stats.summary(r["torch"])
        up = stats.speedup(r["torch"], r["uatlab"])
        lines.append(f"| {r['config']} | {r['d']} | {r['n']} | {r['H']} | {r['s']} | {r['m']} | {r['blocks']} | "
                     f"{r['dtype']} | {stats.spread(ours, 1e6)} | {stats.spread(theirs, 1e6)} ({stats.split_label(r)}) | "
                     f"{stats.spread(up)}× |")
    return "\n".join(lines)


if __name__ == "__main__":
    stats.cli(run, table, stats.google_benchmark_options)
