"""The certified engine against the float64 forward of the same file (issue 76), each case a whole
CLI process timed from start to exit, the two interleaved round by round (bench/stats.py).

usage: /usr/bin/python3 bench/run_engine.py BUILD_DIR [--reps 5] [--gpt2 TOKENS] [--json F]
       /usr/bin/python3 bench/run_engine.py --from-json F
The model: `uatlab init --d 256 --vocab 1000 --max-len 64 --readout 1000 --dtype F32 --seed 1` with
4 x (attention:heads=4,head_size=64 + feedforward:width=1024), 3,680,232 weights; one sequence of
64 token ids (seeded). Each round: `eval MODEL DATA` (double) and `eval MODEL DATA --precision
certified` (--max-width 1e-9, the default). Goals (issue 76): every output enclosed with width
<= 1e-9 * max(1, |y|), in <= 20x the float64 eval's time, peak memory <= 2 GiB. The certified run's
tiers, widths per layer and peak resident memory (the child's ru_maxrss) are kept beside the times.
--gpt2 TOKENS: GPT-2 small's layout instead (scripts/gpt2-124m.py's seeded checkpoint, 124M weights),
one sequence of TOKENS ids, --max-width 1e-6 --max-bits 1024; goals: <= 10 minutes, <= 8 GiB.
"""
import importlib.util
import decimal
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import stats

LAYERS = ["--layer", "attention:heads=4,head_size=64", "--layer", "feedforward:width=1024"] * 4
INIT = ["init", "--d", "256", "--vocab", "1000", "--max-len", "64", "--readout", "1000", "--dtype", "F32",
        "--seed", "1", *LAYERS]


def run(args):
    uatlab = os.path.join(args.build, "uatlab")
    tmp = tempfile.mkdtemp(prefix="uatlab-bench-engine-")
    env = stats.thread_env(os.cpu_count())
    kept = {}

    def timed(*argv, key=None):
        t0 = time.perf_counter()
        p = subprocess.Popen([uatlab, *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t0
        if status != 0:
            raise SystemExit(f"uatlab {' '.join(argv)}: exit status {status}")
        if key:
            kept.setdefault(key + "_peak_gib", []).append(usage.ru_maxrss / 2**20)
            kept[key + "_line"] = json.loads(out)
        return seconds
    certified = ["--precision", "certified"]
    try:
        model, data = os.path.join(tmp, "m.safetensors"), os.path.join(tmp, "seq.jsonl")
        rng = random.Random(3)
        if args.gpt2:
            model = os.path.join(tmp, "gpt2")
            os.makedirs(model)
            spec = importlib.util.spec_from_file_location(
                "gpt2", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "gpt2-124m.py"))
            gpt2 = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(gpt2)
            gpt2.write_checkpoint(model)
            ids = [rng.randrange(gpt2.V) for _ in range(args.gpt2)]
            certified += ["--max-width", "1e-6", "--max-bits", "1024"]
        else:
            subprocess.run([uatlab, *INIT, "-o", model], check=True, capture_output=True, env=env)
            ids = [rng.randrange(1000) for _ in range(64)]
        with open(data, "w") as f:
            f.write(json.dumps({"tokens": ids}) + "\n")
        rounds = stats.interleaved(
            [("double", lambda: timed("eval", model, data)),
             ("certified_eval", lambda: timed("eval", model, data, *certified, key="certified")),
             *stats.peak_sides(args.build, os.cpu_count(), 0.3)],
            args.reps, lambda r, t: print(f"round {r}/{t}", file=sys.stderr))
    finally:
        shutil.rmtree(tmp)
    line = kept["certified_line"]
    return {"benchmark": "engine", "model": f"gpt2, {args.gpt2} tokens" if args.gpt2 else "3.7M, 64 tokens",
            "cores": os.cpu_count(), "reps": args.reps, **rounds,
            "certified_peak_gib": kept["certified_peak_gib"],
            "certified": {k: line[k] for k in ("tier", "reached", "relative_width", "layer_widths", "tried")}}


def up(x, digits=3):
    """A width (an upper bound) as text rounded up to `digits` significant digits."""
    if isinstance(x, str):
        return x
    d = decimal.Decimal(x)
    if d == 0:
        return "0"
    q = decimal.Decimal(1).scaleb(d.adjusted() - digits + 1)
    return f"{d.quantize(q, rounding=decimal.ROUND_CEILING).normalize():E}".replace("E+0", "").replace("E", "e")


def table(doc):
    c = doc["certified"]
    gpt2 = doc.get("model", "").startswith("gpt2")
    width, goal = ("1e-6", "≤ 600 s, ≤ 8 GiB") if gpt2 else ("1e-9", "≤ 20×, ≤ 2 GiB")
    lines = [f"Certified engine against the float64 eval of the same file ({doc.get('model', '3.7M, 64 tokens')}), "
             f"{doc['cores']} cores; seconds, median (min-max) of {doc['reps']} interleaved rounds (whole processes)\n",
             "| case | seconds | / double (per round) | peak memory | goal |", "|---|---|---|---|---|",
             f"| eval, double | {stats.spread(stats.summary(doc['double']))} | 1 | | |",
             f"| eval, certified | {stats.spread(stats.summary(doc['certified_eval']))} | "
             f"{stats.spread(stats.speedup(doc['certified_eval'], doc['double']))}× | "
             f"{stats.number(max(doc['certified_peak_gib']))} GiB | {goal} |", "",
             f"Tier {c['tier']}, every width ≤ {width}·max(1, |y|): {c['reached']} (widest relative width "
             f"{up(c['relative_width'])}, rounded up); tried: {'; '.join(c['tried'])}.", "",
             "Widest enclosure of the residual stream (input, after each sub-layer, output; rounded up): " +
             ", ".join(up(w, 2) for w in c["layer_widths"])]
    return "\n".join(lines)


def options(ap):
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--gpt2", type=int, default=0, metavar="TOKENS")


if __name__ == "__main__":
    stats.cli(run, table, options, compares_torch=False)
