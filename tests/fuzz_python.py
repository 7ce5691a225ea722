"""A fuzzer for the Python entry points' argument parsing (issue 38: "the fuzz targets also cover the
Python entry points' argument parsing").

Every public call of the module (ENTRIES) starts from a small valid call; each case replaces one to
three of its arguments with a hostile value (HOSTILE: wrong types, NaN, inf, huge and negative
integers, malformed text, NUL bytes, ragged and deeply nested lists) or mutates the data inside the
sequences. A case passes when the call returns or raises uatlab.Error; it fails on any other
exception (TypeError, AttributeError, ... from the module), a crash of the interpreter, or a call
still running 5 s after it was interrupted (SIGALRM at CALL_S: long work must stop). Cases are
seeded: case i of seed s is always the same call, printed with its arguments when it fails.

    fuzz_python.py BUILD_DIR [--cases N | --seconds S] [--seed S] [--case I]

The test suite runs 300 cases; scripts/fuzz.sh python SECONDS runs it for longer. Each batch runs
in a child interpreter under a 6 GiB address-space limit, so that a crash is a finding, not the end."""
import copy
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from fractions import Fraction

CALL_S = 10   # a call still running then is interrupted ...
GRACE_S = 5   # ... and must stop within this


def hostile_values(rng):
    """One hostile value (fresh each time: a case may mutate what it was given)."""
    import numpy as np
    pool = [
        None, True, False, -1, 0, 1, 2, 3, 2**31 - 1, 2**31, 2**63, -2**63 - 1, 10**30, 0.5, -0.0, 1e308,
        float("nan"), float("inf"), -float("inf"), "", " ", "abc", "1e999999", "-1", "0", "\x00", "1/0", "nan",
        "interval:0", "interval:-5", "interval:99999999999", "interval:", "rational", "float", "1/3", "1e-400",
        [], [[]], [1], [[1, 2], [3]], {}, {"a": 1}, object(), b"bytes", Fraction(1, 3), np.float64("nan"),
        np.int64(-1), np.array([]), np.zeros((2, 0)), np.zeros((1, 2, 3, 4)), complex(1, 1), "x" * 100000,
        lambda *a: None, print, Ellipsis, range(3), set(), (1, 2),
    ]
    nested = []
    for _ in range(400):
        nested = [nested]
    pool.append(nested)
    return pool[rng.randrange(len(pool))]


def mutate_sequences(X, rng):
    """X with one element broken: a token made ragged, a number made hostile, a row dropped."""
    X = copy.deepcopy(X)
    if not X:
        return X
    s = rng.randrange(len(X))
    kind = rng.randrange(5)
    if kind == 0 and isinstance(X[s], list) and X[s]:
        X[s][rng.randrange(len(X[s]))] = hostile_values(rng)
    elif kind == 1 and isinstance(X[s], list) and X[s]:
        tok = X[s][rng.randrange(len(X[s]))]
        if isinstance(tok, list) and tok:
            tok[rng.randrange(len(tok))] = hostile_values(rng)
    elif kind == 2 and isinstance(X[s], list) and X[s]:
        X[s].pop()
    elif kind == 3:
        X[s] = hostile_values(rng)
    else:
        X.append(hostile_values(rng))
    return X


def mutate_dict(d, rng):
    """d with one value, at any depth, or a new key made hostile."""
    d = copy.deepcopy(d)
    node = d
    while True:
        keys = sorted(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys or rng.random() < 0.4:
            break
        key = keys[rng.randrange(len(keys))]
        if not isinstance(node[key], (dict, list)) or rng.random() < 0.3:
            node[key] = hostile_values(rng)
            return d
        node = node[key]
    if isinstance(node, dict):
        node[["N", "n", "d", "V", "type", "heads", "bogus"][rng.randrange(7)]] = hostile_values(rng)
    else:
        node.append(hostile_values(rng))
    return d


def entries(uatlab, tmp):
    """name -> (function, valid keyword arguments). Small sizes: a valid call takes milliseconds."""
    X = [[[0.5, -1.0], [1.5, 0.25], [-0.75, 2.0]], [[1.5, 0.25], [0.5, -1.0], [3.0, -2.0]]]
    Y = [[0, 1, 2], [1, 2, 0]]
    ids = [[1, 2, 3], [3, 2, 0]]
    arch = {"d": 2, "readout": 3, "layers": [{"type": "attention", "heads": 1, "head_size": 2},
                                            {"type": "feedforward", "width": 4}]}
    tok_arch = dict(arch, vocab=5, max_len=4)
    net, tok_net = uatlab.init(arch, seed=3), uatlab.init(tok_arch, seed=3)
    saved = os.path.join(tmp, "net.json")
    net.save(saved)
    e = {
        "dataset": (uatlab.dataset, dict(X=X, Y=Y, mask=None, tokens=False)),
        "memorize": (uatlab.memorize, dict(X=X, Y=Y, mode="tuned", tied=False, value_map=None, tolerance="1e-6",
                                           seed=1, max_bits=4096, blocks=0, setting="contextual")),
        "memorize_optimal": (uatlab.memorize, dict(X=[[[1, 0, 0, 0], [0, 1, 0, 0]], [[0, 0, 1, 0], [0, 0, 0, 1]]],
                                                   Y=[1, 0], seed=1, max_bits=4096, blocks=0,
                                                   setting="next-token")),
        "contextual": (uatlab.contextual, dict(X=X, mode="tuned", tied=False, seed=1, max_bits=4096)),
        "polynomial": (uatlab.polynomial, dict(expr="x1^2 - 1/3", vars=["x1"], box="1", variant="single-head",
                                               degree=0, seed=1)),
        "approximate": (uatlab.approximate, dict(target="tokenwise-sin", d=1, n=2, K=2, construction="yun",
                                                 pe=False, value_map="", certify=False, samples=50,
                                                 samples_standard=5, seed=1)),
        "init": (uatlab.init, dict(architecture=arch, seed=1, gain=1.0)),
        "train": (uatlab.train, dict(model=arch, X=X, Y=Y, steps=3, lr=0.01, batch=2, seed=1, loss="ce")),
        "analyse": (uatlab.analyse, dict(net=net, X=X, Y=Y, labels="auto", tolerance="1e-6", bits=64,
                                         max_bits=256, min_bits=False, rounding=False, separation=True, seed=1,
                                         epsilon=None, epsilon_steps=2, region_method="intervals")),
        "eval": (net.eval, dict(X=X, precision="double")),
        "eval_tokens": (tok_net.eval, dict(X=ids, precision="interval:64")),
        "run": (net.run, dict(X=X, precision="rational")),
        "save": (net.save, dict(path=os.path.join(tmp, "out.json"), dtype="F64")),
        "load": (uatlab.load, dict(path=saved)),
        "exact_tensor": (net.exact_tensor, dict(name=net._core.tensor_names()[0])),
        "task": (lambda name, options: uatlab.task(name, **options),
                 dict(name="memorize", options={"N": 4, "n": 3, "d": 2, "V": 5})),
    }
    try:
        import torch
        layer = torch.nn.TransformerEncoderLayer(2, 1, dim_feedforward=4, dropout=0.0, batch_first=True)
        e["from_torch"] = (uatlab.from_torch, dict(module=layer, architecture=None, causal=False, embedding=None,
                                                  positions=None, head=None))
        e["to_torch"] = (net.to_torch, dict(dtype=None, into=None))
        state = {k: torch.from_numpy(v) for k, v in net.tensors.items()}
        e["from_state_dict"] = (uatlab.from_torch, dict(module=state, architecture=arch, causal=True))
    except ImportError:
        pass
    return e


def case(entries_, index, seed):
    """Case `index`: (entry name, keyword arguments, what was changed)."""
    rng = random.Random(seed * 1_000_003 + index)
    names = sorted(entries_)
    name = names[rng.randrange(len(names))]
    fn, valid = entries_[name]
    kwargs = dict(valid)
    changed = []
    for _ in range(1 + rng.randrange(3)):
        key = sorted(kwargs)[rng.randrange(len(kwargs))]
        if key in ("X", "Y") and isinstance(kwargs[key], list) and rng.random() < 0.5:
            kwargs[key] = mutate_sequences(kwargs[key], rng)
        elif key == "options" or isinstance(kwargs[key], dict) and rng.random() < 0.5:
            kwargs[key] = mutate_dict(kwargs[key], rng)  # keyword options (task(name, **options)), architectures
        else:
            kwargs[key] = hostile_values(rng)
        changed.append(key)
    return name, fn, kwargs, changed


class _Interrupted(BaseException):
    pass


def _alarm(signum, frame):
    raise _Interrupted()


def child(build, first, count, seed, report):
    """Run cases first .. first+count-1; one line per case to `report` before it runs (a crash names it),
    one FAIL line per failure."""
    sys.path.insert(0, os.path.join(build, "python"))
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    import uatlab
    tmp = tempfile.mkdtemp(prefix="uatlab-fuzz-py-")
    os.chdir(tmp)  # what a hostile path writes lands here, removed at the end
    e = entries(uatlab, tmp)
    signal.signal(signal.SIGALRM, _alarm)
    with open(report, "a") as out:
        for i in range(first, first + count):
            name, fn, kwargs, changed = case(e, i, seed)
            out.write("CASE %d %s %s\n" % (i, name, changed))
            out.flush()
            start = time.monotonic()
            signal.alarm(CALL_S)
            try:
                fn(**kwargs)
                outcome = "ok"
            except uatlab.Error:
                outcome = "error"
            except _Interrupted:
                outcome = "stopped"
            except BaseException as ex:  # anything else escaped the module's validation
                signal.alarm(0)
                shown = {k: (repr(v)[:80]) for k, v in kwargs.items() if k in changed}
                out.write("FAIL %d %s(%s): %s: %s\n" % (i, name, shown, type(ex).__name__,
                                                       " ".join(str(ex)[:300].split())))
                out.flush()
                continue
            finally:
                signal.alarm(0)
            seconds = time.monotonic() - start
            if seconds > CALL_S + GRACE_S:
                out.write("FAIL %d %s %s: ran %.1f s, %.1f s after it was interrupted\n"
                          % (i, name, changed, seconds, seconds - CALL_S))
            out.write("DONE %d %s\n" % (i, outcome))
            out.flush()
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cases", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--case", type=int, help="run only this case")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    build, seed = os.path.abspath(a.build), a.seed
    if a.child:
        child(build, int(a.child[0]), int(a.child[1]), seed, a.child[2])
        return
    cases = a.cases or (10**9 if a.seconds else 300)
    deadline = time.monotonic() + (a.seconds or 10**9)
    first = a.case or 0
    if a.case is not None:
        cases = 1
    report = tempfile.mktemp(prefix="uatlab-fuzz-py-", suffix=".log")
    failures, outcomes, i, end = [], {}, first, first + cases
    while i < end and time.monotonic() < deadline:
        batch = min(50, end - i)
        open(report, "w").close()
        try:
            r = subprocess.run([sys.executable, __file__, build, "--seed", str(seed), "--child", str(i), str(batch),
                                report], capture_output=True, text=True, timeout=batch * (CALL_S + 2 * GRACE_S))
            died = r.returncode != 0 and "returned %d: %s" % (r.returncode, r.stderr[-500:])
        except subprocess.TimeoutExpired:
            died = "hung past its interruption"
        lines = open(report).read().splitlines()
        last = None
        for line in lines:
            word, _, rest = line.partition(" ")
            if word == "CASE":
                last = rest
            elif word == "DONE":
                outcomes[rest.split()[1]] = outcomes.get(rest.split()[1], 0) + 1
                last = None
            elif word == "FAIL":
                failures.append(rest)
        if died and last is not None:  # the case that was running took the interpreter with it
            failures.append("%s: the interpreter %s" % (last, died))
            i = int(last.split()[0]) + 1
        elif died:
            failures.append("the batch at %d: %s" % (i, died))
            i += batch
        else:
            i += batch
    os.unlink(report)
    for f in failures:
        print("FAIL", f)
    print("python fuzz: %d cases (seed %d) from %d: %s; %d failures"
          % (i - first, seed, first, ", ".join("%d %s" % (n, k) for k, n in sorted(outcomes.items())), len(failures)))
    sys.exit(1 if failures else 0)


main()
