"""One kernel, three ways of reaching the CPU's SIMD units (issue 77): bench/simd_paths.cpp's
blocked Y = W·X (float, 1,008 tokens, one core) compiled with Eigen for this CPU (-march=native, as
uatlab builds today), with Eigen for any x86-64 (portable flags: SSE2) and with Highway's run-time
dispatch (portable flags, the best target chosen at start-up). The three run interleaved, round by
round (bench/stats.py); prints GFLOP/s, median (min-max), and each against Eigen for this CPU.

usage: /usr/bin/python3 bench/run_simd_paths.py [--reps 7] [--json F]
Needs g++, Eigen and Highway (libhwy-dev, which scripts/setup.sh installs).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import stats

SHAPES = [(32, 32), (128, 128), (512, 128), (128, 512)]
TOKENS = 1008  # a multiple of six and of eight tokens: every token is computed
HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = [("eigen, -march=native", ["-march=native"]),
            ("eigen, portable", []),
            ("highway, portable, dispatched", ["-DSIMD_HIGHWAY", "-lhwy"])]


def build(folder):
    """The three binaries, compiled from the one source."""
    paths = []
    for i, (_, flags) in enumerate(VARIANTS):
        out = os.path.join(folder, f"simd_paths_{i}")
        subprocess.run(["g++", "-O3", "-DNDEBUG", "-std=c++17", "-isystem", "/usr/include/eigen3", "-I", HERE,
                        os.path.join(HERE, "simd_paths.cpp"), "-o", out, *flags], check=True)
        paths.append(out)
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", help="write the rounds here")
    args = ap.parse_args()
    doc = {"benchmark": "simd_paths", "tokens": TOKENS, "reps": args.reps, "rows": []}
    with tempfile.TemporaryDirectory() as folder:
        binaries = build(folder)
        targets = {}

        def timed(i, r, k):
            out = subprocess.run([binaries[i], str(r), str(k), str(TOKENS)], check=True,
                                 capture_output=True, text=True).stdout.split("\n")
            targets[VARIANTS[i][0]] = out[0]
            return float(out[1])

        for r, k in SHAPES:
            sides = [(name, lambda i=i: timed(i, r, k)) for i, (name, _) in enumerate(VARIANTS)]
            rounds = stats.interleaved(sides, args.reps, lambda n, t: print(f"{r}x{k}: round {n}/{t}", file=sys.stderr))
            doc["rows"].append({"r": r, "k": k, **rounds})
        doc["targets"] = targets
    doc["machine"] = stats.machine()
    if args.json:
        stats.save(args.json, doc)
    print(f"Y = W·X, float, {TOKENS} tokens, one core; GFLOP/s, median (min-max) of {args.reps} interleaved "
          f"rounds; {doc['machine']['cpu']}\n")
    print("| shape | " + " | ".join(f"{name} ({doc['targets'][name]})" for name, _ in VARIANTS) +
          " | portable / native | highway / native |")
    print("|---|" + "---|" * (len(VARIANTS) + 2))
    for row in doc["rows"]:
        flops = 2.0 * row["r"] * row["k"] * TOKENS
        gflops = [stats.spread(stats.summary([flops / s / 1e9 for s in row[name]])) for name, _ in VARIANTS]
        native = row[VARIANTS[0][0]]
        ratios = [stats.spread(stats.speedup(native, row[name])) for name, _ in VARIANTS[1:]]
        print(f"| {row['r']}×{row['k']} | " + " | ".join(gflops) + " | " + " | ".join(r + "×" for r in ratios) + " |")


if __name__ == "__main__":
    main()
