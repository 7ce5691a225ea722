"""Every flag of every command against hostile values (a class test, not a list of reproducers).

For each subcommand, a small valid invocation runs first; then every option the command's --help
lists is given each hostile value of its type in turn. Whatever the value, uatlab must end within
the time limit, in bounded memory, with status 0, 1 or 2, never by a signal; a non-zero status
must come with "uatlab: error:" on stderr; a zero status must not print NaN or null values; and a
refused command must not have written its output file.

usage: test_hostile_flags.py UATLAB [--only CMD] [--jobs J]
"""

import argparse
import concurrent.futures
import os
import re
import resource
import subprocess
import sys
import tempfile

LIMIT_S = 30
PROGRESS_S = 3  # a run still going after this long, having printed progress, is long work (accepted)
WORK = None  # the fixture folder: every run's working directory, so relative outputs land there
MEMORY = 6 << 30  # address space per run
PROGRESS = re.compile(r"\b(step|\d+/\d+)")  # what a progress line holds

HOSTILE = {
    "INT": ["-1", "0", "2147483647", "99999999999999999999", "1e999999999", "x"],
    "UINT": ["-1", "0", "4294967295", "99999999999999999999", "x"],
    "FLOAT": ["-1", "0", "nan", "inf", "1e999999999", "x"],
    "TEXT": ["", "/nonexistent/dir/x", "[[[[[[[[", "1e999999999", "-5"],
}

# One fast, valid invocation per command; {t} is the fixture folder, {o} the output file.
BASE = {
    "info": "{t}/net.safetensors",
    "eval": "{t}/net.safetensors {t}/data.jsonl --out {o}",
    "analyse": "{t}/net.safetensors {t}/labelled4.jsonl --report {o}",
    "convert": "{t}/net.safetensors {o}.json",
    "init": "--d 2 --layer attention:heads=1,head_size=1 --layer ff:width=2 --out {o}",
    "demo": "",
    "contextual": "{t}/labelled.jsonl --report {o}",
    "memorize": "{t}/labelled.jsonl --out {o}.json",
    "hardmax-counterexample": "--draws 3 --report {o}",
    "make-data": "--out {o}",
    "train": "--task memorize --task-N 8 --task-n 4 --d 4 --layer attention --steps 3 --out {o}",
    "gradient": "{t}/net.safetensors {t}/labelled4.jsonl --loss mse --out {o}",
    "polynomial": "x1^2-x2 --vars x1,x2 --report {o}",
    "fang-fit": "x1 --vars x1 --degree 2 --samples 20 --test 10 --csv {o}",
    "fang-regression": "x1^2 --vars x1 --sizes 8,16 --repeats 2 --csv {o}",
    "approximate": "tokenwise-sin --d 1 --n 2 --K 2 --samples 50 --samples-standard 10 --report {o}",
    "reproduce": "fang-fit --mode smoke --out-dir {o}",
    "sweep": '{{"N":[8],"n":[4],"steps":3}} --out-dir {o}',
}


def options(uatlab, cmd):
    """(flag, type) for every option of a command, from its --help."""
    text = subprocess.run([uatlab, cmd, "--help"], capture_output=True, text=True).stdout
    out = []
    for m in re.finditer(r"^\s+(?:-\w,)?(--[\w-]+)(?:,-\w)?\s+(INT|UINT|FLOAT|TEXT)\b", text, re.M):
        if m.group(1) != "--help":
            out.append((m.group(1), m.group(2)))
    return out


def without(args, flag):
    """The base arguments without `flag` and its value."""
    words, out, skip = args.split(), [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w == flag:
            skip = True
            continue
        out.append(w)
    return out


def limit():
    if "ASAN_OPTIONS" not in os.environ:  # AddressSanitizer reserves terabytes of address space
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run(uatlab, args):
    """(status, or None for a run killed while still going, stdout, stderr). A run still going after
    PROGRESS_S that has printed progress is long work a valid value asked for: it is stopped there
    (status None); one that is silent gets LIMIT_S in all."""
    with tempfile.TemporaryFile("w+", errors="surrogateescape") as o, \
            tempfile.TemporaryFile("w+", errors="surrogateescape") as e:
        p = subprocess.Popen([uatlab] + args, stdout=o, stderr=e, text=True, errors="surrogateescape",
                             preexec_fn=limit, cwd=WORK)
        try:
            p.wait(timeout=PROGRESS_S)
        except subprocess.TimeoutExpired:
            e.seek(0)
            if not PROGRESS.search(e.read()):
                try:
                    p.wait(timeout=LIMIT_S - PROGRESS_S)
                except subprocess.TimeoutExpired:
                    pass
            if p.poll() is None:
                p.kill()
                p.wait()
                o.seek(0), e.seek(0)
                return None, o.read(), e.read()
        o.seek(0), e.seek(0)
        return p.returncode, o.read(), e.read()


def fixtures(uatlab, t):
    subprocess.run([uatlab, "init", "--d", "4", "--layer", "attention:heads=2,head_size=1",
                    "--layer", "feedforward:width=8", "--seed", "7", "-o", f"{t}/net.safetensors"], check=True,
                   capture_output=True)
    with open(f"{t}/data.jsonl", "w") as f:
        f.write('{"x": [[0.5, 1, 2, 3], [1, 2, 3, 4]]}\n')
    with open(f"{t}/labelled.jsonl", "w") as f:
        f.write('{"x": [[0.5, 1, 2, 3], [1, 2, 3, 4]], "y": [1, 0]}\n'
                '{"x": [[0.25, 1, 2, 3], [1, 2, -3, 4]], "y": [0, 1]}\n')
    with open(f"{t}/labelled4.jsonl", "w") as f:  # one label per output of net.safetensors
        f.write('{"x": [[0.5, 1, 2, 3], [1, 2, 3, 4]], "y": [[1, 0, 0, 1], [0, 1, 1, 0]]}\n')


def check(uatlab, t, cmd, flag, value, n):
    o = f"{t}/out{n}"
    base = BASE[cmd].format(t=t, o=o)
    args = [cmd] + (without(base, flag) if flag else base.split()) + ([flag, value] if flag else [])
    code, out, err = run(uatlab, args)
    what = f"{cmd} {flag or ''} {value!r}" if flag else f"{cmd} (base)"
    if code is None:  # long work that a valid value asked for must say how far it is
        return None if PROGRESS.search(err) else f"{what}: silent after {LIMIT_S} s"
    if code < 0 or code > 2:
        return f"{what}: exit status {code} ({err.strip()[-200:]})"
    if flag is None and code != 0:
        return f"{what}: the valid invocation failed: {err.strip()[-300:]}"
    if code != 0 and "uatlab: error:" not in err:
        return f"{what}: status {code} without 'uatlab: error:' ({err.strip()[-200:]})"
    if code != 0 and "/nonexistent/" not in value and os.path.exists(o) and not os.path.isdir(o):
        return f"{what}: refused, but wrote {o}"
    if re.search("[\udc80-\udcff]", out + err):  # bytes that are not UTF-8 (kept as surrogates)
        return f"{what}: bytes that are not UTF-8 on stdout or stderr: {(out + err)[:300].encode('utf-8', 'backslashreplace')!r}"
    if code == 0 and re.search(r"\b(nan|-nan|null)\b", out + err, re.I):
        return f"{what}: status 0 with a NaN or null in the output"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("uatlab")
    ap.add_argument("--only")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    uatlab = os.path.abspath(a.uatlab)
    global WORK
    with tempfile.TemporaryDirectory() as t:
        WORK = t
        fixtures(uatlab, t)
        cases = []
        for cmd in BASE:
            if a.only and cmd != a.only:
                continue
            cases.append((cmd, None, None))
            for flag, kind in options(uatlab, cmd):
                for v in HOSTILE[kind]:
                    cases.append((cmd, flag, v))
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            failures = [f for f in pool.map(lambda c: check(uatlab, t, *c[1], c[0]), enumerate(cases)) if f]
    for f in failures:
        print("FAIL", f)
    print(f"{len(cases)} invocations, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
