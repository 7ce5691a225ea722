"""Every bound the CLI prints, checked where it came from (issue 38: "a test parses every printed bound of
every command and checks it against the interval it came from").

Each certifying command runs with a JSON report. Every "<=" or ">=" in its text must be claimed by a rule
of RULES (an unclaimed one fails: a new printed bound needs a rule), and each rule checks the printed
number against the report's number with exact rational arithmetic: a lower bound printed at or below the
value it came from, an upper bound at or above. The reports are then checked against the truth, enclosed
independently: the written model evaluated in 300-bit MPFI (`eval --capture -p interval:300`), from which
this file recomputes |y - label|, margins and the separation of attention outputs (δ, different tokens,
the gap along v) with Python's exact fractions. A bound that cannot hold for any value in the 300-bit
enclosure fails. Usage: test_printed_bounds.py PATH_TO_UATLAB"""
import decimal
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from fractions import Fraction

UATLAB = os.path.abspath(sys.argv[1])
NUM = r"([-+]?(?:inf|\d+(?:\.\d*)?(?:e[-+]?\d+)?))"
failures = []
checked = {"text": 0, "truth": 0}


def check(ok, what):
    if not ok:
        failures.append(what)


def run(*args, cwd):
    r = subprocess.run([UATLAB, "-q", *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (args, r.stderr[-2000:])
    return r.stdout


def exact(text):
    """A printed number or a JSON double as an exact rational (inf as None)."""
    if isinstance(text, str) and text.lstrip("+-") == "inf":
        return float(text)
    return Fraction(text) if isinstance(text, str) else Fraction(float(text))


def at(report, path):
    """The number at path; memorize's report holds contextual's numbers under "contextual"."""
    if path[0] not in report and "contextual" in report:
        report = report["contextual"]
    for key in path:
        report = report[key]
    return report


def least(report, path):  # the least of a nested list of numbers
    def flat(x):
        return [v for y in x for v in flat(y)] if isinstance(x, list) else [x]
    return min(flat(at(report, path)))


# One rule per kind of printed bound: a regular expression whose groups are printed numbers, and for
# each group the direction ("lower": printed <= the report's, "upper": >=) and where the report holds
# the number it came from (a path, or a function of the report and the match).
RULES = [
    # memorize and contextual (Kajitsuka & Sato)
    (r"r <= " + NUM + r" \(certified\)", [("upper", ["r"])]),
    (r"\(certified >= " + NUM + ";", [("lower", ["log10_delta_certified_lower"])]),
    (r"contexts of different tokens >= " + NUM + " apart", [("lower", ["cross_token_lower_bound"])]),
    (r"achieved " + NUM + r" \(measured\) >= required " + NUM, "holds >="),  # a printed comparison
    (r"max \|y - label\| <= " + NUM + r" \(MPFI", [("upper", ["max_error_certified"])]),
    (r"sup over all inputs of \|value map\| <= " + NUM + r" \(certified\)",
     [("upper", ["value_map", "sup_abs_certified"])]),
    # memorize --setting next-token | seq-to-seq (docs/theory/optimal-capacity.md)
    (r"draw \d+: delta >= 10\^" + NUM + r" \(certified", [("lower", ["ids", "log10_delta_certified"])]),
    (r"<= 10\^" + NUM + r", delta >= it \(certified\)", [("upper", ["ids", "log10_delta_bound"])]),
    (r"gamma \(tokens on v\) >= 10\^" + NUM, [("lower", ["ids", "log10_gamma"])]),
    (r"stores >= " + NUM + " bits", [("lower", ["accounting", "information_bits_lower"])]),
    # polynomial (Fang et al.): the degree propagated exactly, compared with N
    (r"in x <= " + NUM + r" \(propagated through the layers\), N = " + NUM + ": yes", "holds <="),
    # analyse
    (r"same token, different contexts >= 10\^" + NUM, [("lower", ["separation", 0, "log10_delta_certified"])]),
    (r"different tokens >= 10\^" + NUM, [("lower", ["separation", 0, "log10_cross_token_certified"])]),
    (r"along v >= " + NUM, [("lower", ["separation", 0, "projection_gap_certified"])]),
    (r"least margin " + NUM, [("lower", lambda r, m: least(r, ["region", "margin_certified"]))]),
    (r"bisection steps\): least " + NUM, [("lower", lambda r, m: least(r, ["region", "largest_epsilon_certified"]))]),
    # approximate --certify (docs/yun.md)
    (r"(modified|standard): (d_\d+) <= " + NUM + ", (d_\d+) <= " + NUM + r", ess sup \|g - f\| <= " + NUM,
     [("form", None), ("form", None), ("upper", lambda r, m: r["certified_domain"][m.group(1)][m.group(2)]),
      ("form", None), ("upper", lambda r, m: r["certified_domain"][m.group(1)][m.group(4)]),
      ("upper", lambda r, m: r["certified_domain"][m.group(1)]["ess_sup_abs_error"])]),
    (r"(modified|standard), its \d+ regular cells: (d_\d+) <= " + NUM + ", (d_\d+) <= " + NUM +
     r", ess sup \|g - f\| <= " + NUM + "; the other cells measure <= " + NUM + r", ess sup \|g - f\| <= " + NUM,
     [("form", None), ("form", None), ("upper", lambda r, m: r["certified_domain"][m.group(1)]["regular_cells"][m.group(2)]),
      ("form", None), ("upper", lambda r, m: r["certified_domain"][m.group(1)]["regular_cells"][m.group(4)])] +
     [("upper", (lambda key: lambda r, m: r["certified_domain"][m.group(1)]["regular_cells"][key])(k))
      for k in ["ess_sup_abs_error", "excluded_measure", "excluded_ess_sup_abs_error"]]),
]


def check_text(name, text, report):
    """Every <=/>= of the text claimed by a rule; every claimed number on the right side of its source."""
    for line in text.splitlines():
        claimed = []
        for pattern, groups in RULES:
            for m in re.finditer(pattern, line):
                claimed.append(m.span())
                if isinstance(groups, str):  # a printed comparison, which must hold as printed
                    a, b = exact(m.group(1)), exact(m.group(2))
                    check(a >= b if groups == "holds >=" else a <= b, "%s: %s" % (name, line))
                    continue
                for g, (kind, where) in enumerate(groups, start=1):
                    if kind == "form":
                        continue
                    value = where(report, m) if callable(where) else at(report, where)
                    printed, came_from = exact(m.group(g)), exact(value)
                    checked["text"] += 1
                    ok = printed <= came_from if kind == "lower" else printed >= came_from
                    check(ok, "%s: printed %s bound %s, the report's is %r (%s)" % (name, kind, m.group(g), value, line))
        for op in re.finditer(r"[<>]=", line):
            check(any(a <= op.start() < b for a, b in claimed),
                  "%s: a printed bound no rule of RULES checks: %r" % (name, line.strip()))


# --- the truth, from 300-bit enclosures -------------------------------------------------------------
class Enclosure:
    """One token's vector as exact [lo, hi] per coordinate."""

    def __init__(self, lo, hi):
        self.lo, self.hi = [Fraction(v) for v in lo], [Fraction(v) for v in hi]


def enclose(model, data, cwd):
    """Per sequence: the outputs and, per sub-layer, the residual stream, as Enclosures per token."""
    out = run("eval", model, data, "--capture", "-p", "interval:300", cwd=cwd)
    seqs = []
    for line in out.splitlines():
        r = json.loads(line)
        y = [Enclosure(lo, hi) for lo, hi in zip(r["lo"], r["hi"])]
        resid = [[Enclosure(lo, hi) for lo, hi in zip(s["lo"], s["hi"])] for s in r["resid"]]
        seqs.append({"y": y, "resid": resid})
    return seqs


def labels_of(data, cwd):
    rows = []
    with open(os.path.join(cwd, data)) as f:
        for line in f:
            r = json.loads(line)
            x = [tuple(Fraction(v) for v in t) if isinstance(t, list) else Fraction(t) for t in r["x"]]
            y = r["y"] if isinstance(r["y"], list) else [r["y"]]  # a next-token line: one label
            rows.append((x, [[Fraction(v) for v in (t if isinstance(t, list) else [t])] for t in y]))
    return rows


def abs_lo(lo, hi):  # the least |v| over v in [lo, hi]
    return Fraction(0) if lo <= 0 <= hi else min(abs(lo), abs(hi))


def abs_hi(lo, hi):
    return max(abs(lo), abs(hi))


def check_max_error(name, report, seqs, rows, last_only=False):
    """The certified max |y - label| is at least the least it can be, token by token."""
    worst = Fraction(0)
    for s, (x, labels) in zip(seqs, rows):
        tokens = [len(s["y"]) - 1] if last_only else range(len(s["y"]))
        for t, label in zip(tokens, labels if not last_only else labels[-1:]):
            e = s["y"][t]
            for i, v in enumerate(label):
                worst = max(worst, abs_lo(e.lo[i] - v, e.hi[i] - v))
    checked["truth"] += 1
    check(exact(report["max_error_certified"]) >= worst,
          "%s: max |y - label| <= %r, but it is at least %s" % (name, report["max_error_certified"], float(worst)))


def separation_truth(seqs, rows, layer):
    """Upper bounds on δ², the different-token distance² and the per-pair gaps of Kajitsuka's separation
    after sub-layer `layer`: a certified lower bound above them is false."""
    tokens = []
    for s, (x, _) in zip(seqs, rows):
        context = frozenset(x)
        for t, tok in enumerate(x):
            tokens.append((tok, context, s["resid"][layer + 1][t]))
    def d2_hi(a, b):
        return sum(max(ah - bl, bh - al) ** 2 for al, ah, bl, bh in zip(a.lo, a.hi, b.lo, b.hi))
    same = cross = None
    pairs = []
    for i in range(len(tokens)):
        for j in range(i):
            (ti, ci, ei), (tj, cj, ej) = tokens[i], tokens[j]
            if ti == tj and ci == cj:
                continue
            d = d2_hi(ei, ej)
            if ti == tj:
                same = d if same is None else min(same, d)
                pairs.append((ei, ej))
            else:
                cross = d if cross is None else min(cross, d)
    return same, cross, pairs


def below_root_of(log10_bound, square):
    """10^log10_bound <= sqrt(square), to 60 digits (the bounds checked are far coarser)."""
    with decimal.localcontext() as c:
        c.prec = 80
        lhs = decimal.Decimal(10) ** (2 * decimal.Decimal(repr(float(log10_bound))))
        rhs = decimal.Decimal(square.numerator) / decimal.Decimal(square.denominator)
        return lhs <= rhs * (1 + decimal.Decimal("1e-60"))


def check_separation(name, sep, seqs, rows):
    same, cross, pairs = separation_truth(seqs, rows, sep["layer"])
    checked["truth"] += 3
    check(below_root_of(sep["log10_delta_certified"], same), "%s: δ >= 10^%r is false" % (name, sep["log10_delta_certified"]))
    check(exact(sep["delta_certified"]) ** 2 <= same, "%s: δ >= %r is false" % (name, sep["delta_certified"]))
    check(below_root_of(sep["log10_cross_token_certified"], cross), "%s: different tokens >= 10^%r is false" % (name, sep["log10_cross_token_certified"]))
    v = [Fraction(c) for c in sep["projection"]]

    def along(e):  # vᵀx over the enclosure e: (least, greatest)
        return (sum(vi * (l if vi >= 0 else h) for vi, l, h in zip(v, e.lo, e.hi)),
                sum(vi * (h if vi >= 0 else l) for vi, l, h in zip(v, e.lo, e.hi)))

    def largest_gap(ea, eb):  # vᵀ(a − b) lies in [a_lo − b_hi, a_hi − b_lo]
        (alo, ahi), (blo, bhi) = along(ea), along(eb)
        return abs_hi(alo - bhi, ahi - blo)
    gap_hi = min(largest_gap(ea, eb) for ea, eb in pairs)
    check(exact(sep["projection_gap_certified"]) <= gap_hi, "%s: the gap along v >= %r is false" % (name, sep["projection_gap_certified"]))


def check_eval_interval(name, text, seqs):
    """eval --precision interval:128's printed ends against the 300-bit enclosures."""
    for line, s in zip(text.splitlines(), seqs):
        r = json.loads(line)
        for t, e in enumerate(s["y"]):
            for i in range(len(e.lo)):
                lo, hi = Fraction(r["lo"][t][i]), Fraction(r["hi"][t][i])
                checked["text"] += 1
                check(lo <= hi and lo <= e.hi[i] and hi >= e.lo[i],
                      "%s: [%s, %s] cannot enclose a value of [%s, %s]" % (name, r["lo"][t][i], r["hi"][t][i], float(e.lo[i]), float(e.hi[i])))


def main():
    tmp = tempfile.mkdtemp(prefix="uatlab-bounds-")
    try:
        checks(tmp)
    finally:
        shutil.rmtree(tmp)
    for f in failures:
        print("FAIL", f)
    print("printed bounds: %d checked against their reports, %d reports against 300-bit enclosures; %d failures"
          % (checked["text"], checked["truth"], len(failures)))
    sys.exit(1 if failures else 0)


def checks(tmp):
    run("make-data", "--demo-d", "4", "-o", "data.jsonl", cwd=tmp)
    run("make-data", "--demo-N", "3", "--demo-n", "2", "--demo-d", "2", "--demo-V", "3", "-o", "tiny.jsonl", cwd=tmp)
    run("make-data", "--demo-N", "60", "--demo-n", "6", "--demo-d", "4", "--demo-V", "32", "-o", "d60.jsonl", cwd=tmp)
    rows = labels_of("data.jsonl", tmp)

    def report(*args, name):
        text = run(*args, "--report", name + ".report.json", cwd=tmp)
        with open(os.path.join(tmp, name + ".report.json")) as f:
            r = json.load(f)
        check_text(name, text, r)
        return text, r

    # memorize, each value map: text against report, report against the model's 300-bit outputs
    for vm in ["zhang", "bounded", "deep"]:
        _, r = report("memorize", "data.jsonl", "--value-map", vm, "-o", vm + ".json", name="memorize-" + vm)
        seqs = enclose(vm + ".json", "data.jsonl", tmp)
        check_max_error("memorize-" + vm, r, seqs, rows)
        if vm == "zhang":
            same, cross, _ = separation_truth(seqs, rows, 0)
            checked["truth"] += 1
            check(below_root_of(r["contextual"]["log10_delta_certified_lower"], min(same, cross)),
                  "memorize: contextual δ >= 10^%r is false" % r["contextual"]["log10_delta_certified_lower"])
    rows60 = labels_of("d60.jsonl", tmp)
    for setting in ["next-token", "seq-to-seq"]:
        _, r = report("memorize", "d60.jsonl", "--setting", setting, "-o", setting + ".json", name=setting)
        check_max_error(setting, r, enclose(setting + ".json", "d60.jsonl", tmp), rows60, last_only=setting == "next-token")
    report("contextual", "tiny.jsonl", "--mode", "faithful", name="contextual-faithful")
    report("contextual", "data.jsonl", name="contextual-tuned")

    # analyse: the memorizer's values (points, then boxes); a random classifier's class margins
    run("init", "--d", "4", "--layer", "attention:heads=2,head_size=2", "--layer", "feedforward:width=8", "--readout",
        "3", "--seed", "7", "-o", "cls.safetensors", cwd=tmp)
    seqs = enclose("zhang.json", "data.jsonl", tmp)
    for name, model, extra in [
            ("analyse", "zhang.json", []),
            ("analyse-region", "zhang.json", ["--labels", "values", "--epsilon", "1e-12", "--no-min-bits", "--no-rounding"]),
            ("analyse-class", "cls.safetensors", ["--labels", "classes", "--no-rounding"])]:
        _, r = report("analyse", model, "data.jsonl", *extra, name=name)
        enclosed = seqs if model == "zhang.json" else enclose(model, "data.jsonl", tmp)
        check_separation(name, r["separation"][0], enclosed, rows)
        for part in ["memorization", "region"]:  # a margin is at most the point's (a box's: its centre's)
            if part not in r:
                continue
            for s, (x, labels), margins in zip(enclosed, rows, r[part]["margin_certified"]):
                for e, label, m in zip(s["y"], labels, margins):
                    if r["memorization"]["labels"] == "classes":
                        k = int(label[0])
                        hi = e.hi[k] - max(e.lo[i] for i in range(len(e.lo)) if i != k)
                    else:
                        hi = Fraction(1, 10**6) - abs_lo(e.lo[0] - label[0], e.hi[0] - label[0])
                    checked["truth"] += 1
                    check(exact(m) <= hi, "%s: %s margin %r above %s" % (name, part, m, float(hi)))
    check_eval_interval("eval-interval", run("eval", "zhang.json", "data.jsonl", "-p", "interval:128", cwd=tmp), seqs)

    # the commands without a report: every printed bound claimed, every comparison true as printed
    for args in [["demo"], ["hardmax-counterexample"], ["polynomial", "x1^2*x2 - 1/3", "--vars", "x1,x2"]]:
        check_text(args[0], run(*args, cwd=tmp), {})

    # approximate --certify: text against report; the certified d_p at least the Monte Carlo CI's low end
    # (and every exponent asked is printed: --p 2,4 on n = 3)
    for extra, ps in [([], ["d_1", "d_2"]), (["--n", "3", "--p", "2,4", "--samples", "2000"], ["d_2", "d_4"])]:
        _, r = report("approximate", "center", "--construction", "kajitsuka", "--K", "4", "--certify", "--certify-boxes",
                      "20000", *extra, name="approximate")
        for form in ["modified", "standard"]:
            for p in ps:
                checked["truth"] += 1
                check(exact(r["certified_domain"][form][p]) >= exact(r[p][form]["ci95"][0]),
                      "approximate: certified %s of %s below the Monte Carlo interval" % (p, form))


main()
