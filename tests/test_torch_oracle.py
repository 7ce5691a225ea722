"""PyTorch oracle: every combination of attention options, in random networks written by
`uatlab init`, evaluated by `uatlab eval --precision double` and by python/uatlab_torch.py in
float64. Passes when the largest relative difference is <= 1e-12 for every network.

usage: /usr/bin/python3 tests/test_torch_oracle.py path/to/uatlab
"""
import itertools
import json
import os
import subprocess
import sys
import tempfile

import torch

# The PyTorch half of the package needs only torch: imported from its file, without the compiled module.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "uatlab"))
import pytorch as uatlab_torch  # noqa: E402

UATLAB = sys.argv[1]
TOL = 1e-12
PIECEWISE = {"type": "piecewise", "breakpoints": ["-1/2", "1/4"], "pieces": [[0, "1/3"], [2, 0], ["-1", "3/4"]]}


def architectures():
    scores = ["softmax", "hardmax", "linear"]
    rpes = [("none", False), ("lin", False), ("lin", True), ("log", False), ("log", True), ("t5", False), ("t5", True)]
    flags = list(itertools.product([False, True], repeat=5))  # causal, tied, bias, sqrt, pre_norm
    for i, (score, (rpe, dp_free), (causal, tied, bias, sqrt, pre_norm)) in enumerate(
            itertools.product(scores, rpes, flags)):
        attn = {"type": "attention", "heads": 2, "head_size": 2, "score": score, "scale": "3/4", "rpe": rpe,
                "dp_free": dp_free, "causal": causal, "strict_past": causal and i % 3 == 0,
                "window": 2 if causal and i % 5 == 1 else 0, "tied_qkv": tied, "bias": bias, "sqrt_scaling": sqrt,
                "pre_norm": pre_norm, "t5_buckets": 6, "t5_max_distance": 5}
        ff = {"type": "feedforward", "width": 5, "pre_norm": i % 5 == 0,
              "activation": PIECEWISE if i % 4 == 1 else "gelu" if i % 4 == 2 else "gelu_tanh" if i % 4 == 3 else "relu"}
        layers = [attn, ff] + ([{"type": "layernorm", "eps": "1/100"}] if i % 4 == 2 else [])
        arch = {"d": 3, "layers": layers, "readout": 2 if i % 2 else 0, "pool": "sum" if i % 13 == 6 else "none"}
        if i % 3 == 2:
            arch["vocab"], arch["max_len"] = 11, 8
        elif i % 7 == 0:
            arch["max_len"] = 8
        yield arch


def mixers():
    """Yun's cheaper token mixers, each option, before a feed-forward layer."""
    for i, (kind, causal, bias, pre_norm) in enumerate(itertools.product(["bproj", "sepconv"], [False, True],
                                                                          [False, True], [False, True])):
        m = {"type": kind, "causal": causal, "bias": bias, "pre_norm": pre_norm}
        m.update({"length": 8} if kind == "bproj" else {"heads": 2, "kernel": 3 if i % 2 == 0 else 1})
        if kind == "sepconv" and causal:
            m["kernel"] = 4
        yield {"d": 4, "layers": [m, {"type": "feedforward", "width": 5}], "readout": 2 if i % 2 else 0}


def rotary():
    """Rotary positions: both bases, head sizes 2 and 4, with and without a position bias, masks,
    biases and pre-norm, softmax and linear scores."""
    for i, (score, rpe, causal, bias, pre_norm) in enumerate(itertools.product(
            ["softmax", "linear"], ["none", "lin", "t5"], [False, True], [False, True], [False, True])):
        attn = {"type": "attention", "heads": 2, "head_size": 4 if i % 2 else 2, "score": score, "scale": "3/4",
                "rope": 7 if i % 3 == 0 else 10000, "rpe": rpe, "causal": causal, "window": 2 if causal and i % 4 == 1 else 0,
                "bias": bias, "pre_norm": pre_norm, "sqrt_scaling": i % 5 == 0, "t5_buckets": 6, "t5_max_distance": 5}
        arch = {"d": 3, "layers": [attn, {"type": "feedforward", "width": 4}], "readout": 2 if i % 2 else 0}
        if i % 3 == 2:
            arch["vocab"], arch["max_len"] = 11, 8
        yield arch


def check_every_file_kind(tmp):
    """The loader reads what uatlab writes besides init's files: an architecture with every optional
    key omitted (its defaults agree with the C++ reader's), the lossless .json, and a training
    checkpoint (the model it holds); each computes what `uatlab eval` computes."""
    minimal = {"d": 2, "layers": [{"type": "attention", "heads": 2}, {"type": "feedforward", "width": 3},
                                  {"type": "layernorm"}, {"type": "feedforward", "width": 2, "pre_norm": True}],
               "readout": 3}
    st, js, ck = (os.path.join(tmp, n) for n in ("min.safetensors", "min.json", "ck.safetensors"))
    data = os.path.join(tmp, "min.jsonl")
    subprocess.run([UATLAB, "init", "--arch", json.dumps(minimal), "--seed", "3", "-o", st], check=True,
                   capture_output=True)
    canonical = json.loads(uatlab_torch.read_safetensors(st)[0]["uatlab"])
    canonical.pop("format")
    assert uatlab_torch.complete(canonical) == uatlab_torch.complete(minimal), "defaults differ from C++"
    subprocess.run([UATLAB, "convert", st, js], check=True, capture_output=True)
    subprocess.run([UATLAB, "train", "--task", "memorize", "--task-N", "8", "--task-n", "4", "--task-d", "2",
                    "--arch", json.dumps(minimal), "--steps", "2", "--checkpoint", ck, "--dtype", "double",
                    "-o", os.path.join(tmp, "trained.safetensors")], check=True, capture_output=True)
    x = torch.rand(2, 4, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with open(data, "w") as f:
        f.write("".join(json.dumps({"x": s.tolist()}) + "\n" for s in x))
    for path in (st, js, ck):
        out = subprocess.run([UATLAB, "eval", path, data, "--precision", "double"], check=True,
                             capture_output=True, text=True).stdout
        y = torch.tensor([json.loads(l)["y"] for l in out.splitlines()], dtype=torch.float64)
        with torch.no_grad():
            yt = uatlab_torch.load(path)(x)
        assert (y - yt).abs().max().item() <= TOL * yt.abs().max().item(), path
    print("torch loader: omitted keys, lossless .json and a checkpoint read like uatlab reads them")


def main():
    gen = torch.Generator().manual_seed(0)
    worst, count = 0.0, 0
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        check_every_file_kind(tmp)
        model, data = os.path.join(tmp, "m.safetensors"), os.path.join(tmp, "d.jsonl")
        for seed, arch in enumerate(itertools.chain(architectures(), mixers(), rotary())):
            subprocess.run([UATLAB, "init", "--arch", json.dumps(arch), "--seed", str(seed), "-o", model],
                           check=True, capture_output=True)
            tokens = arch.get("vocab", 0) > 0
            if tokens:
                x = torch.randint(0, arch["vocab"], (3, 6), generator=gen)
                lines = [{"tokens": s.tolist()} for s in x]
            else:
                x = torch.rand(3, 6, arch["d"], generator=gen, dtype=torch.float64) * 2 - 1
                lines = [{"x": s.tolist()} for s in x]
            with open(data, "w") as f:
                f.write("".join(json.dumps(l) + "\n" for l in lines))
            out = subprocess.run([UATLAB, "eval", model, data, "--precision", "double"],
                                 check=True, capture_output=True, text=True).stdout
            y = torch.tensor([json.loads(l)["y"] for l in out.splitlines()], dtype=torch.float64)
            net = uatlab_torch.load(model)
            with torch.no_grad():
                yt = net(x)
            rel = ((y - yt).abs().max() / yt.abs().max().clamp_min(1e-300)).item()
            worst, count = max(worst, rel), count + 1
            if not rel <= TOL:
                failures.append((rel, arch))
    for rel, arch in failures[:5]:
        print(f"FAIL rel {rel:.3e}: {json.dumps(arch)}")
    print(f"torch oracle: {count} networks, worst relative difference {worst:.3e} (tolerance {TOL:g})")
    print(f"{count - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
