"""Certification timings: how long uatlab takes to certify what a network does, each case a whole
CLI process timed from start to exit, the cases interleaved round by round (bench/stats.py).

usage: /usr/bin/python3 bench/run_certify.py BUILD_DIR [--reps 5] [--json F] [--baseline [LABEL=]DIR ...]
       /usr/bin/python3 bench/run_certify.py --from-json F
Cases (issue 39's goals beside them):
  memorize 1000    `uatlab memorize DATA` on `make-data --demo-N 1000 --demo-n 8 --demo-d 4
                   --demo-V 64`: to a certified model (the report's contextual + construct and
                   certify seconds) and in all, with the search for the fewest bits
  analyse 1000     `uatlab analyse MODEL DATA --labels values` on that network (about 8,000 units):
                   memorization, separation, the fewest bits, float32 / bfloat16 / float16 weights
  analyse trained  `uatlab analyse MODEL DATA` of a 2-layer d 16 encoder trained by `uatlab train`
                   (float32, 1,500 steps) on 100 sequences of 8 tokens, 3 classes per token
  region           `uatlab analyse MODEL DATA5 --epsilon 1/10000000 --region-method mean-value
                   --no-min-bits --no-rounding` of that encoder on its first 5 sequences: the
                   mean-value form, whose Jacobian the MPFI training passes enclose (no goal)
Both sides of every other benchmark are timed against PyTorch; here there is no PyTorch side (no
library certifies these), so the figures are absolute; the SGEMMs record the machine's state.
--baseline [LABEL=]DIR (repeatable) adds another build's memorize, analyse trained and region (an
earlier commit, each its whole process; it must know `analyse --region-method`) to every round, and
a table of each against BUILD_DIR's: what a change did, or whether a change of figures between
machines is the CPU or the code.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import stats

DEMO = ["--demo-N", "1000", "--demo-n", "8", "--demo-d", "4", "--demo-V", "64"]
# The cases: key of their rounds, name, goal in seconds (issue 39; None: none), and for the cases an
# earlier build runs too (--baseline) the key of its rounds before the build's label.
CASES = [("memorize_to_certified", "memorize 1000, to a certified model", 5.0, None),
         ("memorize", "memorize 1000, with the fewest bits", 8.0, "baseline:"),
         ("analyse_1000", "analyse 1000", 10.0, None),
         ("analyse_trained", "analyse trained", 3.0, "baseline analyse trained:"),
         ("analyse_region", "analyse trained, mean-value region (5 sequences)", None, "baseline region:")]
REGION = ["--epsilon", "1/10000000", "--region-method", "mean-value", "--no-min-bits", "--no-rounding"]


def trained_data(path, seed=1):
    """100 sequences of 8 token ids (vocabulary 16), a random class in {0, 1, 2} per token."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(100):
            f.write(json.dumps({"tokens": [rng.randrange(16) for _ in range(8)],
                                "y": [rng.randrange(3) for _ in range(8)]}) + "\n")


def labelled(baseline):
    """'LABEL=DIR' -> (LABEL, DIR); a bare DIR is its own label."""
    label, _, build = baseline.rpartition("=")
    return (label or build, build)


def run(args):
    uatlab = os.path.join(args.build, "uatlab")
    tmp = tempfile.mkdtemp(prefix="uatlab-bench-certify-")
    env = stats.thread_env(os.cpu_count())

    def timed(argv):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=env)
        return time.perf_counter() - t0

    def cli(*argv):
        return timed([uatlab, "-q", *argv])
    try:
        data, model, report = (os.path.join(tmp, f) for f in ("demo.jsonl", "demo.json", "report.json"))
        cli("make-data", *DEMO, "--seed", "1", "-o", data)
        cli("memorize", data, "-o", model, "--force")
        tdata, tmodel = os.path.join(tmp, "trained.jsonl"), os.path.join(tmp, "trained.safetensors")
        trained_data(tdata)
        tdata5 = os.path.join(tmp, "trained5.jsonl")
        with open(tdata) as f, open(tdata5, "w") as g:
            g.writelines(f.readlines()[:5])
        cli("train", "--data", tdata, "--vocab", "16", "--d", "16", "--max-len", "8", "--readout", "3",
            "--layer", "attention:heads=2,head_size=8", "--layer", "feedforward:width=32",
            "--layer", "attention:heads=2,head_size=8", "--layer", "feedforward:width=32",
            "--loss", "ce", "--steps", "1500", "--lr", "0.01", "-o", tmodel)
        stages = []
        # The commands an earlier build runs too (the cases with a baseline key), without -q.
        shared = {"memorize": ["memorize", data, "-o", os.path.join(tmp, "m.json"), "--force"],
                  "analyse_trained": ["analyse", tmodel, tdata],
                  "analyse_region": ["analyse", tmodel, tdata5, *REGION]}

        def memorize():
            seconds = cli(*shared["memorize"], "--report", report)
            s = stats.load(report)["seconds"]
            stages.append({"certified": s["construct_and_certify"],  # from the start, contextual included
                           "min_bits_search": s["min_bits_search"]})
            return seconds

        def baseline(label, build):  # an earlier build's CLI, which may lack -q and --report
            old = os.path.join(build, "uatlab")
            return [(prefix + label, lambda a=shared[key]: timed([old, *a])) for key, _, _, prefix in CASES if prefix]
        rounds = stats.interleaved(
            [("memorize", memorize),
             ("analyse_1000", lambda: cli("analyse", model, data, "--labels", "values")),
             ("analyse_trained", lambda: cli(*shared["analyse_trained"])),
             ("analyse_region", lambda: cli(*shared["analyse_region"])),
             *[side for b in args.baseline for side in baseline(*labelled(b))],
             *stats.peak_sides(args.build, os.cpu_count(), 0.3)],
            args.reps, lambda r, t: print(f"round {r}/{t}", file=sys.stderr))
    finally:
        shutil.rmtree(tmp)
    return {"benchmark": "certify", "cores": os.cpu_count(), "reps": args.reps,
            "memorize_to_certified": [s["certified"] for s in stages], **rounds}


def table(doc):
    lines = [f"Certification, {doc['cores']} cores; seconds, median (min-max) of {doc['reps']} interleaved rounds\n",
             "| case | seconds | goal |", "|---|---|---|"]
    for key, name, goal, _ in CASES:
        if key in doc:  # (files of earlier runs lack the later cases)
            lines.append(f"| {name} | {stats.spread(stats.summary(doc[key]))} | "
                         f"{f'≤ {goal:g} s' if goal else '-'} |")
    baselines = [(k, name, key) for key, name, _, prefix in CASES if prefix for k in doc if k.startswith(prefix)]
    if baselines:
        lines += ["", "Earlier builds in the same rounds (whole processes):", "",
                  "| build | case | seconds | its time / BUILD_DIR's (median of the per-round ratios) |",
                  "|---|---|---|---|"]
        for k, name, ours in baselines:
            lines.append(f"| {k.split(':', 1)[1]} | {name} | {stats.spread(stats.summary(doc[k]))} | "
                         f"{stats.spread(stats.speedup(doc[k], doc[ours]))}× |")
    return "\n".join(lines)


def options(ap):
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--baseline", action="append", default=[],
                    help="[LABEL=]build folder of an earlier commit whose memorize, analyse trained and region are "
                         "timed in the same rounds")


if __name__ == "__main__":
    stats.cli(run, table, options, compares_torch=False)
