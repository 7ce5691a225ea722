"""Benchmark statistics shared by the bench/ scripts.

Both sides run interleaved in one process tree, round by round (A B A B ...), so that a slow
spell of a shared machine hits both; every figure is the median over the rounds with its
spread (min and max), and the speed-up is the median of the per-round ratios (paired: the two
sides of one round ran back to back). Each script can write its rounds as JSON (--json FILE) and
print its Markdown table again from such a file (--from-json FILE) without running anything.
"""
import argparse
import json
import os
import statistics
import subprocess
import time

MIN_REPS = 5


def interleaved(sides, reps, progress=None):
    """sides: [(name, fn)], fn() -> seconds per operation for one timed repetition.
    Returns {name: [seconds per round]}, the sides alternating within every round."""
    if reps < MIN_REPS:
        raise SystemExit(f"--reps {reps}: at least {MIN_REPS} repetitions")
    out = {name: [] for name, _ in sides}
    for r in range(reps):
        for name, fn in sides:
            out[name].append(fn())
        if progress:
            progress(r + 1, reps)
    return out


def summary(values):
    """median, min, max and the number of rounds."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "reps": len(values)}


def speedup(theirs, ours):
    """The per-round ratios theirs/ours, summarised."""
    return summary([t / o for t, o in zip(theirs, ours)])


def number(v):
    """Three significant digits, never in exponent form below 10^7."""
    a = abs(v)
    return f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.3g}"


def spread(s, scale=1.0):
    """'median (min-max)' of a summary, scaled."""
    return f"{number(s['median'] * scale)} ({number(s['min'] * scale)}-{number(s['max'] * scale)})"


def google_benchmark_seconds(cmd, name, env, min_time, counters=None):
    """Seconds per iteration of the Google Benchmark `name` (with or without /real_time), one
    repetition; its user counters are appended to `counters` when given."""
    pattern = "^" + name.replace(".", "\\.")  # the name may carry a /real_time suffix
    out = subprocess.run(cmd + [f"--benchmark_filter={pattern}", "--benchmark_format=json",
                                f"--benchmark_min_time={min_time}", "--benchmark_repetitions=1"],
                         check=True, capture_output=True, text=True, env=env).stdout
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") != "aggregate" and b["name"] in (name, name + "/real_time"):
            if counters is not None:
                counters.append({k: v for k, v in b.items() if k.startswith("s_")})
            return b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
    raise SystemExit(f"benchmark {name} did not run")


def thread_env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads))


def machine():
    """Where the rounds ran: CPU model, cores, AVX-512 or not, date (the VM changes between runs)."""
    model, avx512 = "unknown", False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    avx512 = avx512 or " avx512f" in line
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "avx512": avx512,
            "date": time.strftime("%Y-%m-%d", time.gmtime())}


def save(path, doc):
    doc.setdefault("machine", machine())
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def load(path):
    with open(path) as f:
        return json.load(f)


def google_benchmark_options(ap):
    """The options of the scripts that time a Google Benchmark binary beside PyTorch."""
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--reps", type=int, default=7)


def cli(run, table, options):
    """The command line every bench script shares: BUILD_DIR, its own options (options(parser)),
    --json FILE to keep the rounds, --from-json FILE to print the table of an earlier run."""
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?")
    options(ap)
    ap.add_argument("--json", help="write the rounds here")
    ap.add_argument("--from-json", help="print the table of an earlier run")
    args = ap.parse_args()
    if args.from_json:
        doc = load(args.from_json)
    else:
        if not args.build:
            ap.error("BUILD_DIR or --from-json")
        doc = run(args)
        if args.json:
            save(args.json, doc)
    print(table(doc))
