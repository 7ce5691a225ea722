"""How far below the truth are analyse's certified radii? (issue 42, docs/analyse.md)

For each sequence, `analyse(epsilon=...)` finds the largest ℓ∞ radius around the embedded tokens
at which plain interval propagation certifies every prediction: a lower bound on the sequence's
true robust radius. A projected-gradient attack (PGD, float64 PyTorch) finds perturbations that
change a prediction: the smallest radius at which it finds one is an upper bound (up to float64
rounding at the flip; the margins there are far from it). The truth lies between; the ratio says
how loose the certificate is at most. Both region methods are run: plain intervals and the
mean-value form (region_method="mean-value"), each timed.

Two models: the tour's causal model (examples/tour.ipynb section 6: token embedding, learned
positions, one pre-norm encoder layer with a final norm, tied head; trained here exactly as there)
and the 2-layer d 16 encoder of bench/run_certify.py (`uatlab train`, 1,500 steps, 3 classes per
token), on its first 20 sequences; all three region methods.

With --large, a third (issue 76's region goal, >= 1M trained weights, 5 sequences): a 1,646,084-weight
model trained by `uatlab train` (d 256, vocabulary 256, 2 x (attention of 4 heads of 64 + ReLU
feed-forward of 1024), 64 sequences of 16 ids with random classes in {0..3}, 300 steps), its first 5
sequences, by intervals (MPFI) and by the certified engine's balls; the mean-value form and the
zonotope are not run there (one MPFI backward pass per output; generators beyond the memory).

usage: /usr/bin/python3 scripts/region-gap.py BUILD_DIR [--large]
(PyTorch's attack on the large model needs an optimised BLAS: `bash scripts/bench-setup.sh` installs
OpenBLAS; with Debian's reference BLAS the attack had not finished when it was stopped, well past the
few minutes it takes with OpenBLAS.)
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

BUILD = sys.argv[1]
LARGE = "--large" in sys.argv[2:]
sys.path.insert(0, os.path.join(BUILD, "python"))
import uatlab  # noqa: E402
import uatlab.pytorch  # noqa: E402

# PyTorch sets the thread count of the OpenMP runtime it shares with uatlab, to what it counts as
# physical cores (1 on a 2-core VM): every core, for both.
torch.set_num_threads(os.cpu_count())


def pgd_radius(forward, z0, labels, eps_lo, restarts=3, steps=40, rounds=14, seed=0):
    """Per sequence, the smallest radius (within a factor 2^(1/8)) at which PGD finds a perturbation
    of the embedded tokens z0 (B, n, d) that changes a prediction away from `labels` (B, n):
    doubling from eps_lo, then bisection in log scale. inf where none is found up to 2^40·eps_lo."""
    gen = torch.Generator().manual_seed(seed)

    def attack(eps):  # (B,) bool: a flip found within eps (B,)
        found = torch.zeros(len(z0), dtype=torch.bool)
        e = eps.view(-1, 1, 1)
        for r in range(restarts):
            delta = (torch.rand(z0.shape, generator=gen, dtype=z0.dtype) * 2 - 1) * e if r else torch.zeros_like(z0)
            for _ in range(steps):
                delta.requires_grad_(True)
                y = forward(z0 + delta)                                   # (B, n, classes)
                true = y.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
                other = y.masked_fill(torch.nn.functional.one_hot(labels, y.shape[-1]).bool(), -torch.inf).amax(-1)
                worst = (other - true).amax(-1)                           # > 0: a prediction changed
                found |= (worst > 0).detach()
                grad, = torch.autograd.grad(worst.sum(), delta)
                with torch.no_grad():
                    delta = torch.maximum(torch.minimum(delta + e / 8 * grad.sign(), e), -e)
            with torch.no_grad():
                y = forward(z0 + delta)
                found |= (y.argmax(-1) != labels).any(-1)
        return found

    lo = eps_lo.clone()
    hi = torch.full_like(lo, torch.inf)
    for _ in range(40):  # doubling until the attack succeeds
        todo = torch.isinf(hi)
        if not todo.any():
            break
        trial = torch.where(todo, lo * 2, lo)
        ok = attack(trial) & todo
        hi = torch.where(ok, trial, hi)
        lo = torch.where(todo & ~ok, trial, lo)
    for _ in range(rounds):  # bisection in log scale, where bracketed
        mid = torch.sqrt(lo * hi)
        fin = torch.isfinite(hi)
        ok = attack(torch.where(fin, mid, lo))
        hi = torch.where(fin & ok, mid, hi)
        lo = torch.where(fin & ~ok, mid, lo)
    return hi


def tour_model():
    V, L, d = 6, 8, 16
    torch.manual_seed(1)
    emb, pos = torch.nn.Embedding(V, d).double(), torch.nn.Embedding(L, d).double()
    encoder = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True, norm_first=True), 1,
        norm=torch.nn.LayerNorm(d), enable_nested_tensor=False).double()
    causal = torch.nn.Transformer.generate_square_subsequent_mask(L).double()

    def lm(ids):
        return encoder(emb(ids) + pos.weight[: ids.shape[1]], mask=causal) @ emb.weight.t()
    ids = torch.stack([(s + 2 * torch.arange(L)) % V for s in torch.arange(V)])
    targets = (ids + 2) % V
    params = list(emb.parameters()) + list(pos.parameters()) + list(encoder.parameters())
    opt = torch.optim.Adam(params, lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(lm(ids).reshape(-1, V), targets.reshape(-1)).backward()
        opt.step()
    encoder.eval()
    net = uatlab.from_torch(encoder, embedding=emb, positions=pos, head=emb, causal=True)
    head = emb.weight.detach().clone()  # the box is on the embedded tokens; the tied head stays

    def forward(z):
        return encoder(z + pos.weight[: z.shape[1]].detach(), mask=causal) @ head.t()
    return ("tour, causal LM (d 16, 1 layer, 6 sequences of 8)", net, ids, targets, emb(ids).detach(), forward,
            ("intervals", "mean-value", "zonotope"), "1/10000000", 12)


def trained_model(tmp, name, vocab, n, d, heads, head_size, width, classes, rows, steps, lr, first):
    """`uatlab train` on random ids and classes (seed 1), two attention + ReLU feed-forward layers; the
    model, its float64 PyTorch module's forward from the embedded tokens, and its first `first` rows."""
    cli = os.path.join(BUILD, "uatlab")
    data, model = os.path.join(tmp, name + ".jsonl"), os.path.join(tmp, name + ".safetensors")
    rng = random.Random(1)
    rows = [([rng.randrange(vocab) for _ in range(n)], [rng.randrange(classes) for _ in range(n)]) for _ in range(rows)]
    with open(data, "w") as f:
        for x, y in rows:
            f.write(json.dumps({"tokens": x, "y": y}) + "\n")
    layers = []
    for _ in range(2):
        layers += ["--layer", f"attention:heads={heads},head_size={head_size}", "--layer", f"feedforward:width={width}"]
    subprocess.run([cli, "-q", "train", "--data", data, "--vocab", str(vocab), "--d", str(d), "--max-len", str(n),
                    "--readout", str(classes), *layers, "--loss", "ce", "--steps", str(steps), "--lr", str(lr),
                    "-o", model], check=True)
    net = uatlab.load(model)
    mod = uatlab.pytorch.load(model, torch.float64).eval()
    ids = torch.tensor([x for x, _ in rows[:first]])
    labels = torch.tensor([y for _, y in rows[:first]])

    def forward(z):
        z = z + mod.pe.weight[: z.shape[1]]
        for layer in mod.layers:
            z = layer(z)
        return mod.readout(z)
    with torch.no_grad():
        z0 = mod.embed(ids)
    return net, ids, labels, z0, forward


def trained_encoder(tmp):  # bench/run_certify.py's data and command
    return ("trained 2-layer d 16 encoder (bench/run_certify.py, 20 sequences of 8)",
            *trained_model(tmp, "trained", 16, 8, 16, 2, 8, 32, 3, 100, 1500, 0.01, 20),
            ("intervals", "mean-value", "zonotope"), "1/10000000", 12)


def trained_large(tmp):
    return ("trained 1,646,084-weight model (d 256, 2 layers, 5 sequences of 16)",
            *trained_model(tmp, "large", 256, 16, 256, 4, 64, 1024, 4, 64, 300, 0.001, 5),
            ("intervals", "balls"), "1/100000000", 16)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        models = (trained_large,) if LARGE else (tour_model, trained_encoder)
        for make in models:
            name, net, ids, labels, z0, forward, methods, epsilon, steps = make(tmp)
            seqs = [[int(t) for t in r] for r in ids]
            with torch.no_grad():
                assert (forward(z0).argmax(-1) == labels).all(), "every prediction right at the points"
            certified = {}
            for method in methods:
                t0 = time.time()
                rep = uatlab.analyse(net, seqs, labels.tolist(), min_bits=False, rounding=False, separation=False,
                                     epsilon=epsilon, epsilon_steps=steps,
                                     region_method=method)["region"]
                certified[method] = (np.array(rep["largest_epsilon_certified"], dtype=float), time.time() - t0)
            atk = pgd_radius(forward, z0, labels, torch.tensor(certified["intervals"][0], dtype=torch.float64)).numpy()
            print(name)
            for method, (cert, seconds) in certified.items():
                ratio = atk / cert
                print(f"  certified ({method}, {seconds:.1f} s): median {np.median(cert):.2g}, {cert.min():.2g} .. "
                      f"{cert.max():.2g}; attack / certified: median {np.median(ratio):.3g}, {ratio.min():.3g} .. "
                      f"{ratio.max():.3g}")
                assert (atk >= cert).all(), "an attack inside a certified box: the certificate would be false"
            print(f"  attack (PGD): median {np.median(atk):.2g}, {atk.min():.2g} .. {atk.max():.2g}", flush=True)


if __name__ == "__main__":
    main()
