"""Fang et al.: universality (error vs degree) and regression (test error vs sample size) plots.

usage: /usr/bin/python3 experiments/fang.py BUILD_DIR [--out docs]
Runs `uatlab polynomial --fit` and `--regression`, writes OUT/fang_fit.csv, OUT/fang_regression.csv
and OUT/img/fang_fit.png, OUT/img/fang_regression.png.
"""
import argparse
import csv
import os
import subprocess

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIT = "exp(x1)*sin(3*x2)"
POLY = "x1^3 - 2*x1*x2 + x2^2/2 + 1/4"


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    uatlab = os.path.join(args.build, "uatlab")
    os.makedirs(os.path.join(args.out, "img"), exist_ok=True)
    fit_csv, reg_csv = os.path.join(args.out, "fang_fit.csv"), os.path.join(args.out, "fang_regression.csv")
    subprocess.run([uatlab, "polynomial", "--fit", FIT, "--vars", "x1,x2", "--degree", "8", "--csv", fit_csv], check=True)
    subprocess.run([uatlab, "polynomial", "--regression", POLY, "--vars", "x1,x2", "--noise", "0.1", "--csv", reg_csv],
                   check=True)

    fit = rows(fit_csv)
    fig, ax = plt.subplots(figsize=(6, 4))
    deg = [int(r["degree"]) for r in fit]
    ax.semilogy(deg, [float(r["test_rmse"]) for r in fit], "o-", label="test RMSE")
    ax.semilogy(deg, [float(r["test_max_error"]) for r in fit], "s--", label="test max error")
    ax.set_xlabel("blocks N (= polynomial degree)")
    ax.set_ylabel("error")
    ax.set_title(f"Fixed blocks + least-squares readout: f = {FIT} on [-1,1]²")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "img", "fang_fit.png"), dpi=120)

    reg = rows(reg_csv)
    fig, ax = plt.subplots(figsize=(6, 4))
    blocks = sorted({int(r["blocks"]) for r in reg}, reverse=True)
    for b in blocks:
        pts = [(int(r["samples"]), float(r["test_mse"])) for r in reg if int(r["blocks"]) == b]
        ax.loglog([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{b} blocks" + (" (= degree)" if b == blocks[0] else ""))
    ref = [(int(r["samples"]), float(r["reference_sigma2_p_over_m"])) for r in reg if int(r["blocks"]) == blocks[0]]
    ax.loglog([p[0] for p in ref], [p[1] for p in ref], "k:", label="σ² p / m")
    ax.set_xlabel("training samples m")
    ax.set_ylabel("test MSE against the noiseless target")
    ax.set_title(f"Regression on {POLY} + N(0, 0.1²)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "img", "fang_regression.png"), dpi=120)


if __name__ == "__main__":
    main()
