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
import sys
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


# Each Google Benchmark binary's "simd" context (bench_train, bench_forward: the SIMD path that ran), by its path.
SIMD = {}


def google_benchmark_seconds(cmd, name, env, min_time, counters=None):
    """Seconds per iteration of the Google Benchmark `name` (with or without /real_time), one
    repetition; its user counters are appended to `counters` when given."""
    pattern = "^" + name.replace(".", "\\.")  # the name may carry a /real_time suffix
    out = subprocess.run(cmd + [f"--benchmark_filter={pattern}", "--benchmark_format=json",
                                f"--benchmark_min_time={min_time}", "--benchmark_repetitions=1"],
                         check=True, capture_output=True, text=True, env=env).stdout
    doc = json.loads(out)
    if "simd" in doc["context"]:
        SIMD[cmd[0]] = doc["context"]["simd"]
    for b in doc["benchmarks"]:
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


# ---- The baseline at its best: which BLAS PyTorch runs on, and its own SGEMM in every round ----
#
# Debian's PyTorch calls whatever libblas.so.3 the system provides: the reference BLAS (about
# 2 GFLOP/s for a 1024^3 SGEMM) unless OpenBLAS is installed (scripts/bench-setup.sh), and OpenBLAS
# may misread a virtual CPU (it took an AVX-512 Xeon VM for a Prescott and ran SSE3 kernels).
# So before any round, choose_blas() probes PyTorch's BLAS in a child process, and when OpenBLAS
# runs a weaker kernel than the CPU's flags allow, sets OPENBLAS_CORETYPE to the kernel they allow
# once a probe shows that kernel multiplies correctly and faster. Every round then times PyTorch's
# own 1024^3 SGEMM beside uatlab's (peak_sides), and a run in which PyTorch's is below half of
# uatlab's prints no ratio and fails (crippled_baseline).

SGEMM_N = 1024
# OpenBLAS kernels by the CPU flags they need, best first.
CORE_TYPES = [("Cooperlake", {"avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512_bf16"}),
              ("SkylakeX", {"avx512f", "avx512vl", "avx512bw", "avx512dq"}),
              ("Haswell", {"avx2", "fma"}),
              ("Prescott", set())]


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def best_core_type(flags):
    """The best OpenBLAS kernel the CPU flags allow."""
    return next(name for name, needs in CORE_TYPES if needs <= flags)


def core_rank(name):
    """Position of an OpenBLAS core name in CORE_TYPES (lower is better); unknown names rank last."""
    names = [n for n, _ in CORE_TYPES]
    return names.index(name) if name in names else len(names)


def product_is_correct(a, b, c):
    """c = a·b (float32, k = a's columns) within the deterministic bound of any summation order,
    |c - a·b| <= gamma_k |a|·|b| with gamma_k = k u / (1 - k u), u = 2^-24, the exact product
    taken in float64 (its own error is below 2^-40 of the same scale)."""
    import torch
    k, u = a.shape[1], 2.0 ** -24
    gamma = k * u / (1 - k * u)
    exact = a.double() @ b.double()
    bound = gamma * (a.double().abs() @ b.double().abs()) * (1 + 2.0 ** -20)
    return bool(torch.all((c.double() - exact).abs() <= bound)) and bool(torch.isfinite(c).all())


PROBE = r"""
import ctypes, json, sys
import torch
sys.path.insert(0, sys.argv[2])
import stats
threads = int(sys.argv[1])
stats.set_torch_threads({"torch": threads, "blas": threads})
info = {"libraries": stats.blas_libraries(), "blas": "reference BLAS or unknown", "core": None}
lib = stats.openblas()
if lib is not None:
    lib.openblas_get_corename.restype = lib.openblas_get_config.restype = ctypes.c_char_p
    info.update(blas="OpenBLAS", core=lib.openblas_get_corename().decode(), config=lib.openblas_get_config().decode())
g = torch.Generator().manual_seed(0)
a = torch.rand(stats.SGEMM_N, stats.SGEMM_N, generator=g) * 2 - 1
b = torch.rand(stats.SGEMM_N, stats.SGEMM_N, generator=g) * 2 - 1
info["correct"] = stats.product_is_correct(a, b, a @ b)
info["gflops"] = 2 * stats.SGEMM_N ** 3 / stats.torch_sgemm_seconds(0.5) / 1e9
print(json.dumps(info))
"""


def probe_blas(threads, core_type=None):
    """What PyTorch's BLAS is in a fresh process (OPENBLAS_CORETYPE = core_type when given): its
    libraries, kind, OpenBLAS core, whether its SGEMM is correct, and its GFLOP/s."""
    env = dict(os.environ)
    if core_type:
        env["OPENBLAS_CORETYPE"] = core_type
    out = subprocess.run([sys.executable, "-c", PROBE, str(threads), os.path.dirname(os.path.abspath(__file__))],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def choose_blas(threads):
    """Run once before any round: probe PyTorch's BLAS and, when OpenBLAS runs a weaker kernel than
    the CPU allows, re-run this script with OPENBLAS_CORETYPE set to the better kernel, after a probe
    shows that it multiplies correctly and faster. Returns what was found and chosen (kept in the
    JSON as "blas")."""
    if "UATLAB_BENCH_BLAS" in os.environ:  # the re-run: the choice is made
        return json.loads(os.environ["UATLAB_BENCH_BLAS"])
    found = probe_blas(threads)
    if not found["correct"]:
        raise SystemExit(f"PyTorch's SGEMM ({found['blas']}, core {found['core']}) gives wrong products")
    choice = dict(found, chosen_by="as found")
    if found["blas"] == "OpenBLAS":
        best = best_core_type(cpu_flags())
        if core_rank(best) < core_rank(found["core"]):
            tried = probe_blas(threads, best)
            print(f"OpenBLAS runs the {found['core']} kernel ({found['gflops']:.0f} GFLOP/s); the CPU allows "
                  f"{best}: {tried['gflops']:.0f} GFLOP/s, products {'correct' if tried['correct'] else 'WRONG'}",
                  file=sys.stderr)
            if tried["correct"] and tried["gflops"] > found["gflops"]:
                choice = dict(tried, chosen_by=f"OPENBLAS_CORETYPE={best}, as OpenBLAS read the CPU as {found['core']}",
                              found=found)
                env = dict(os.environ, OPENBLAS_CORETYPE=best, UATLAB_BENCH_BLAS=json.dumps(choice))
                os.execve(sys.executable, [sys.executable] + sys.argv, env)
    return choice


def blas_libraries():
    """The BLAS shared libraries this process has loaded (from /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "blas" in line.lower() and ".so" in line})


def openblas():
    """The OpenBLAS that PyTorch loaded (a ctypes handle), or None."""
    import ctypes
    for path in blas_libraries():
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_set_num_threads  # noqa: B018 (present only in OpenBLAS)
            return lib
        except (OSError, AttributeError):
            continue
    return None


def set_torch_threads(split):
    """PyTorch's two thread pools: its own (intra-op, OpenMP) and OpenBLAS's (pthreads). Both spin
    while they wait, so on a small machine both at full width fight over the cores."""
    import torch
    torch.set_num_threads(split["torch"])
    lib = openblas()
    if lib is not None:
        lib.openblas_set_num_threads(split["blas"])


def torch_at_best(seconds, threads, min_time):
    """PyTorch as its best user would run it on `threads` cores: the thread split (PyTorch's own
    pool, OpenBLAS's pool, each 1 or `threads`) under which seconds(min_time) is fastest, chosen by
    the median of 3 timings of each split before the rounds. On this project's 2-core VM the
    medium train step took 41-83 ms with both pools at 2 threads and 13 ms with PyTorch's at 1.
    Returns the side's function (it sets the split before every timing, since the SGEMM side sets
    its own) and the split chosen."""
    widths = sorted({1, threads})
    splits = [{"torch": t, "blas": b} for t in widths for b in (widths if openblas() is not None else [threads])]
    best = None
    for split in splits:
        set_torch_threads(split)
        t = statistics.median(seconds(min_time) for _ in range(3))
        if best is None or t < best[0]:
            best = (t, split)
    split = best[1]

    def side():
        set_torch_threads(split)
        return seconds(min_time)
    return side, split


def split_label(row):
    """'PyTorch's own threads / OpenBLAS threads' of a row, as chosen by torch_at_best."""
    split = row.get("torch_threads")
    return f"{split['torch']}/{split['blas']} threads" if split else "threads not recorded"


def torch_sgemm_seconds(min_time):
    """Seconds per 1024^3 float32 product in PyTorch, at torch's current thread count."""
    import torch
    a, b = torch.rand(SGEMM_N, SGEMM_N), torch.rand(SGEMM_N, SGEMM_N)
    c = a @ b  # warm up
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_time:
        torch.matmul(a, b, out=c)
        reps += 1
    return (time.perf_counter() - start) / reps


def peak_sides(build, threads, min_time):
    """The two SGEMM sides of every round: uatlab's (Eigen, bench_train's sgemm_peak) and PyTorch's."""
    cmd, env = [os.path.join(build, "bench", "bench_train")], thread_env(threads)
    full = {"torch": threads, "blas": threads}

    def theirs():
        set_torch_threads(full)
        return torch_sgemm_seconds(min_time)
    return [("sgemm", lambda: google_benchmark_seconds(cmd, "sgemm_peak", env, min_time)), ("torch_sgemm", theirs)]


def sgemm_gflops(seconds):
    return 2 * SGEMM_N ** 3 / statistics.median(seconds) / 1e9


def sgemm_rounds(doc):
    """All rounds' SGEMM seconds of a run (top level or per row): (uatlab's, PyTorch's)."""
    parts = [doc] + doc.get("rows", [])
    return ([s for p in parts for s in p.get("sgemm", [])], [s for p in parts for s in p.get("torch_sgemm", [])])


def crippled_baseline(doc):
    """Why this run's PyTorch baseline is not at its best (a message naming the BLAS), or None."""
    ours, theirs = sgemm_rounds(doc)
    blas = doc.get("blas", {})
    name = f"{blas.get('blas', 'an unrecorded BLAS')}" + (f", core {blas['core']}" if blas.get("core") else "")
    if not ours or not theirs:
        return "this run did not time PyTorch's SGEMM beside uatlab's (taken before the baseline check)"
    if sgemm_gflops(theirs) < 0.5 * sgemm_gflops(ours):
        return (f"PyTorch's 1024^3 SGEMM ran at {sgemm_gflops(theirs):.1f} GFLOP/s on {name}, below half of "
                f"uatlab's {sgemm_gflops(ours):.1f}: bash scripts/bench-setup.sh installs OpenBLAS")
    return None


def peaks_line(doc):
    """One line: both SGEMMs of the run and PyTorch's BLAS."""
    ours, theirs = sgemm_rounds(doc)
    blas = doc.get("blas", {})
    return (f"1024^3 SGEMM in the same rounds: uatlab (Eigen) {spread(summary([2 * SGEMM_N ** 3 / s / 1e9 for s in ours]))}"
            f" GFLOP/s, PyTorch {spread(summary([2 * SGEMM_N ** 3 / s / 1e9 for s in theirs]))} GFLOP/s on "
            f"{blas.get('blas', '?')}" + (f" {blas['core']}" if blas.get("core") else "") +
            (f"; {blas['chosen_by']}" if blas.get("chosen_by", "as found") != "as found" else ""))


def cli(run, table, options, compares_torch=True):
    """The command line every bench script shares: BUILD_DIR, its own options (options(parser)),
    --json FILE to keep the rounds, --from-json FILE to print the table of an earlier run. A script
    that prints ratios against PyTorch (compares_torch) refuses a run whose PyTorch SGEMM was below
    half of uatlab's: the rounds are still written to --json, the table is not printed, exit 1."""
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
        blas = choose_blas(getattr(args, "threads", os.cpu_count()))
        doc = run(args)
        doc["blas"] = blas
        if args.json:
            save(args.json, doc)
    why = crippled_baseline(doc) if compares_torch else None
    if why:
        raise SystemExit(f"no ratio printed: {why}")
    print(table(doc))
    print("\n" + peaks_line(doc))
