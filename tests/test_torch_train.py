"""uatlab's hand-written backward and AdamW against PyTorch autograd and torch.optim.AdamW.

1. Gradients: random networks over every trainable option (`uatlab init`), labelled data with
   masks, `uatlab gradient` vs autograd through python/uatlab_torch.py in float64: the largest
   relative difference per tensor must be <= 1e-10.
2. Training: the same network and data trained 60 full-batch steps on both sides (AdamW with
   weight decay, warm-up + cosine, clipping, one frozen tensor) in float64: final training losses
   within 1e-6.

usage: /usr/bin/python3 tests/test_torch_train.py path/to/uatlab
"""
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

# The PyTorch half of the package needs only torch: imported from its file, without the compiled module.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "uatlab"))
import pytorch as uatlab_torch  # noqa: E402

UATLAB = sys.argv[1]
GRAD_TOL = 1e-10
TRAIN_TOL = 1e-6


def architectures():
    rpes = [("none", False), ("lin", False), ("log", False), ("t5", False), ("lin", True), ("t5", True)]
    flags = list(itertools.product([False, True], repeat=4))  # causal, tied, bias, pre_norm
    for i, ((rpe, dp_free), (causal, tied, bias, pre_norm)) in enumerate(itertools.product(rpes, flags)):
        attn = {"type": "attention", "heads": 2, "head_size": 2, "score": "linear" if i % 11 == 3 else "softmax",
                "scale": "3/4", "rpe": rpe, "dp_free": dp_free, "causal": causal, "tied_qkv": tied, "bias": bias,
                "sqrt_scaling": i % 2 == 1, "pre_norm": pre_norm, "t5_buckets": 6, "t5_max_distance": 5}
        ff = {"type": "feedforward", "width": 5, "pre_norm": i % 5 == 0, "activation": ("gelu", "gelu_tanh")[i % 4 // 2] if i % 2 else "relu"}
        layers = [attn, ff] + ([{"type": "layernorm", "eps": "1/100"}] if i % 4 == 2 else [])
        loss = "ce" if i % 3 == 0 else "mse"
        arch = {"d": 3, "layers": layers, "readout": 3 if loss == "ce" or i % 2 else 0}
        if i % 3 == 2:
            arch["vocab"], arch["max_len"] = 7, 8
        elif i % 7 == 0:
            arch["max_len"] = 8
        elif i % 5 == 1:  # an input projection (nn.Linear of 4 numbers to d)
            arch["input"] = 4
        yield arch, loss


def mixers():
    for i, (kind, causal, bias, pre_norm) in enumerate(itertools.product(["bproj", "sepconv"], [False, True],
                                                                          [False, True], [False, True])):
        m = {"type": kind, "causal": causal, "bias": bias, "pre_norm": pre_norm}
        m.update({"length": 8} if kind == "bproj" else {"heads": 3, "kernel": 4 if causal else 3})
        yield {"d": 3, "layers": [m, {"type": "feedforward", "width": 5}], "readout": 3}, "ce" if i % 2 else "mse"


def rotary():
    """Rotary positions: head sizes 2 and 4, with and without a position bias, masks and biases."""
    for i, (rpe, causal, bias) in enumerate(itertools.product(["none", "lin", "t5"], [False, True], [False, True])):
        attn = {"type": "attention", "heads": 2, "head_size": 4 if i % 2 else 2, "rope": 7 if i % 3 else 10000,
                "rpe": rpe, "causal": causal, "window": 3 if causal and i % 4 == 1 else 0, "bias": bias,
                "sqrt_scaling": True, "pre_norm": i % 3 == 0, "t5_buckets": 6, "t5_max_distance": 5}
        arch = {"d": 3, "layers": [attn, {"type": "feedforward", "width": 4}], "readout": 3}
        if i % 3 == 2:
            arch["vocab"], arch["max_len"] = 7, 8
        yield arch, "ce" if i % 2 else "mse"


def make_data(arch, loss, gen, path, count=4, n=6):
    out = arch["readout"] or arch["d"]
    lines, xs = [], []
    for s in range(count):
        line = {}
        if arch.get("vocab", 0):
            x = torch.randint(0, arch["vocab"], (n,), generator=gen)
            line["tokens"] = x.tolist()
        else:
            x = torch.rand(n, arch.get("input") or arch["d"], generator=gen, dtype=torch.float64) * 2 - 1
            line["x"] = x.tolist()
        xs.append(x)
        if loss == "ce":
            line["y"] = torch.randint(0, out, (n,), generator=gen).tolist()
        else:
            line["y"] = (torch.rand(n, out, generator=gen, dtype=torch.float64) * 2 - 1).tolist()
        line["mask"] = [0 if (s == 1 and k in (0, 3)) else 1 for k in range(n)]
        lines.append(line)
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    x = torch.stack(xs)
    y = torch.tensor([l["y"] for l in lines], dtype=torch.long if loss == "ce" else torch.float64)
    mask = torch.tensor([l["mask"] for l in lines], dtype=torch.bool)
    return x, y, mask


def torch_loss(net, x, y, mask, loss):
    out = net(x)
    if loss == "ce":
        return F.cross_entropy(out[mask], y[mask])
    return F.mse_loss(out[mask], y[mask])


def check_gradients(tmp, gen):
    worst, count, failures = 0.0, 0, []
    model, data, grad = (os.path.join(tmp, f) for f in ("m.safetensors", "d.jsonl", "g.safetensors"))
    for seed, (arch, loss) in enumerate(itertools.chain(architectures(), mixers(), rotary())):
        subprocess.run([UATLAB, "init", "--arch", json.dumps(arch), "--seed", str(seed), "--gain", "1.5", "-o", model],
                       check=True, capture_output=True)
        x, y, mask = make_data(arch, loss, gen, data)
        subprocess.run([UATLAB, "gradient", model, data, "--loss", loss, "-o", grad], check=True, capture_output=True)
        _, ours = uatlab_torch.read_safetensors(grad)
        net = uatlab_torch.load(model, dtype=torch.float64)
        torch_loss(net, x, y, mask, loss).backward()
        params = dict(net.named_parameters())
        theirs = {}
        for name, g in ours.items():
            t = params[uatlab_torch._torch_name(name)].grad
            theirs[name] = torch.zeros_like(g) if t is None else t
        # Relative to the tensor's own gradient; a tensor whose gradient is zero in exact arithmetic
        # (a key bias shifts every score of a query equally: softmax ignores it) is compared with
        # the network's largest gradient instead, since both sides hold only rounding noise there.
        scale = max(t.abs().max().item() for t in theirs.values())
        for name, g in ours.items():
            t = theirs[name]
            rel = ((g - t).abs().max() / max(t.abs().max().item(), 1e-6 * scale, 1e-300)).item()
            worst = max(worst, rel)
            if rel > GRAD_TOL:
                failures.append((seed, name, rel, json.dumps(arch)))
        count += 1
    print(f"gradients: {count} networks, worst relative difference {worst:.3g}")
    return failures


def lr_lambda(lr, min_lr, warmup, steps):
    def f(t):
        if t < warmup:
            return (t + 1) / warmup
        progress = min(1.0, (t - warmup) / max(1, steps - warmup))
        return (min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))) / lr
    return f


def check_training(tmp, gen):
    arch = {"d": 4, "readout": 3, "max_len": 8, "layers": [
        {"type": "attention", "heads": 2, "head_size": 2, "rpe": "lin", "causal": True, "bias": True, "pre_norm": True},
        {"type": "feedforward", "width": 16},
        {"type": "attention", "heads": 1, "head_size": 3, "tied_qkv": True},
        {"type": "feedforward", "width": 8}]}
    model, data, out = (os.path.join(tmp, f) for f in ("tm.safetensors", "td.jsonl", "to.safetensors"))
    subprocess.run([UATLAB, "init", "--arch", json.dumps(arch), "--seed", "11", "-o", model], check=True, capture_output=True)
    x, y, mask = make_data(arch, "ce", gen, data, count=6, n=7)
    steps, lr, min_lr, warmup, wd, clip = 60, 0.02, 0.002, 5, 0.01, 0.5
    frozen = "layers.2.qkv.weight"
    res = subprocess.run([UATLAB, "train", "--data", data, "--init", model, "--dtype", "double", "--loss", "ce",
                          "--steps", str(steps), "--batch", "6", "--lr", str(lr), "--min-lr", str(min_lr),
                          "--warmup", str(warmup), "--weight-decay", str(wd), "--clip", str(clip),
                          "--freeze", frozen, "--log-every", "1000", "-o", out],
                         check=True, capture_output=True, text=True)
    ours = json.loads(res.stdout.strip().splitlines()[-1])["train_loss"]
    net = uatlab_torch.load(model, dtype=torch.float64)
    params = dict(net.named_parameters())
    params[uatlab_torch._torch_name(frozen)].requires_grad_(False)
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=wd)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(lr, min_lr, warmup, steps))
    for _ in range(steps):
        opt.zero_grad()
        torch_loss(net, x, y, mask, "ce").backward()
        torch.nn.utils.clip_grad_norm_([p for p in net.parameters() if p.requires_grad], clip)
        opt.step()
        sched.step()
    with torch.no_grad():
        theirs = torch_loss(net, x, y, mask, "ce").item()
    print(f"training: {steps} AdamW steps, uatlab loss {ours:.12f}, PyTorch loss {theirs:.12f}, "
          f"difference {abs(ours - theirs):.3g}")
    return [] if abs(ours - theirs) <= TRAIN_TOL else [("training", ours, theirs)]


def main():
    gen = torch.Generator().manual_seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        failures = check_gradients(tmp, gen) + check_training(tmp, gen)
    for f in failures[:20]:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
