"""GPT-2 checkpoints in their public layout (issue 42): a tiny random checkpoint (model.safetensors
with Conv1D weights, in × out, beside config.json) loads with uatlab.load(DIR) and the CLI, and
its per-token logits agree with an independent forward written here from GPT-2's definition (not
from uatlab's PyTorch module): pre-norm blocks, causal attention with biases and 1/sqrt(head size),
GELU's tanh form, ln_f, the head tied to wte. MPFI encloses the float64 logits.

usage: /usr/bin/python3 tests/test_gpt2.py BUILD_DIR
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

BUILD = sys.argv[1]
sys.path.insert(0, os.path.join(BUILD, "python"))
import uatlab  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, passed  # noqa: E402



def write_safetensors(path, tensors):
    """The safetensors format: an 8-byte little-endian header length, a JSON header, raw data."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def tiny_gpt2(folder, d=8, H=2, L=2, V=11, P=6, seed=0, prefix=""):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: (torch.randn(*s, generator=g) * 0.4).float()  # noqa: E731
    t = {"wte.weight": r(V, d), "wpe.weight": r(P, d), "ln_f.weight": 1 + r(d), "ln_f.bias": r(d)}
    for i in range(L):
        h = f"h.{i}."
        t.update({h + "ln_1.weight": 1 + r(d), h + "ln_1.bias": r(d), h + "attn.c_attn.weight": r(d, 3 * d),
                  h + "attn.c_attn.bias": r(3 * d), h + "attn.c_proj.weight": r(d, d), h + "attn.c_proj.bias": r(d),
                  h + "ln_2.weight": 1 + r(d), h + "ln_2.bias": r(d), h + "mlp.c_fc.weight": r(d, 4 * d),
                  h + "mlp.c_fc.bias": r(4 * d), h + "mlp.c_proj.weight": r(4 * d, d), h + "mlp.c_proj.bias": r(d),
                  h + "attn.bias": torch.tril(torch.ones(P, P)).view(1, 1, P, P)})  # the mask buffer
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"), {prefix + k: v for k, v in t.items()})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"n_embd": d, "n_head": H, "n_layer": L, "n_positions": P, "vocab_size": V,
                   "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "model_type": "gpt2"}, f)
    return {k: v.double() for k, v in t.items()}


def gpt2_forward(t, ids, d, H, L):
    """GPT-2's forward from its definition, in float64."""
    def ln(x, w, b):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * w + b

    def gelu_new(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    n, hs = len(ids), d // H
    x = t["wte.weight"][ids] + t["wpe.weight"][:n]
    for i in range(L):
        h = f"h.{i}."
        a = ln(x, t[h + "ln_1.weight"], t[h + "ln_1.bias"]) @ t[h + "attn.c_attn.weight"] + t[h + "attn.c_attn.bias"]
        q, k, v = a.split(d, dim=-1)
        heads = []
        for j in range(H):
            s = slice(j * hs, (j + 1) * hs)
            w = q[:, s] @ k[:, s].T / math.sqrt(hs)
            w = w.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
            heads.append(torch.softmax(w, -1) @ v[:, s])
        x = x + torch.cat(heads, -1) @ t[h + "attn.c_proj.weight"] + t[h + "attn.c_proj.bias"]
        m = gelu_new(ln(x, t[h + "ln_2.weight"], t[h + "ln_2.bias"]) @ t[h + "mlp.c_fc.weight"] + t[h + "mlp.c_fc.bias"])
        x = x + m @ t[h + "mlp.c_proj.weight"] + t[h + "mlp.c_proj.bias"]
    return ln(x, t["ln_f.weight"], t["ln_f.bias"]) @ t["wte.weight"].T


with tempfile.TemporaryDirectory() as tmp:
    d, H, L, V, P = 8, 2, 2, 11, 6
    folder = os.path.join(tmp, "gpt2-tiny")
    t = tiny_gpt2(folder, d, H, L, V, P)
    net = uatlab.load(folder)
    arch = net.architecture
    check(arch["vocab"] == V and arch["max_len"] == P and arch["readout"] == V and len(arch["layers"]) == 2 * L + 1,
          f"the architecture of config.json: {arch}")
    check(arch["layers"][1]["activation"] == "gelu_tanh" and arch["layers"][0]["causal"] and
          arch["layers"][0]["source"] == "h.0.attn", "gelu_new, causal, sources named as GPT-2 names them")
    for ids in ([3, 1, 4, 1, 5, 9], [0], [10, 2]):
        ref = gpt2_forward(t, ids, d, H, L).numpy()
        got = net.eval(ids)
        err = np.abs(got - ref).max() / np.abs(ref).max()
        check(err < 1e-13, f"logits of {ids} against GPT-2's definition: {err:.1e}")
        lo, hi = net.eval(ids, precision="interval:128")
        check(((lo <= ref + 1e-12) & (ref - 1e-12 <= hi)).all() and (hi - lo).max() < 1e-15,
              "MPFI encloses the logits")
    # Held as the file's doubles (not rationals), still exactly: every value is the F32 of the file.
    from fractions import Fraction
    got = net.exact_tensor("layers.0.q.weight")
    want = t["h.0.attn.c_attn.weight"][:, :d].T
    check(all(Fraction(got[i, j]) == Fraction(float(want[i, j])) for i in range(d) for j in range(d)),
          "exact_tensor: the file's values, exactly (Conv1D transposed)")
    f32, f64 = net.eval([1, 2], precision="float"), net.eval([1, 2])
    check(np.abs(f32 - f64).max() < 1e-4 * np.abs(f64).max(), "a network held in doubles evaluates in float too")
    # A "transformer." prefix, the file itself beside its config, and the CLI.
    tiny_gpt2(os.path.join(tmp, "prefixed"), d, H, L, V, P, prefix="transformer.")
    check(np.array_equal(uatlab.load(os.path.join(tmp, "prefixed", "model.safetensors")).eval([1, 2]), net.eval([1, 2])),
          "the same model with a transformer. prefix, loaded as the file beside its config.json")
    cli = os.path.join(BUILD, "uatlab")
    info = subprocess.run([cli, "info", folder], capture_output=True, text=True)
    check(info.returncode == 0 and "GELU (tanh form) [h.0.mlp]" in info.stdout, f"uatlab info DIR: {info.stdout}")
    data = os.path.join(tmp, "ids.jsonl")
    with open(data, "w") as f:
        f.write(json.dumps({"tokens": [3, 1, 4]}) + "\n")
    out = subprocess.run([cli, "eval", folder, data], capture_output=True, text=True)
    logits = np.array(json.loads(out.stdout.splitlines()[0])["y"])
    check(out.returncode == 0 and np.abs(logits - gpt2_forward(t, [3, 1, 4], d, H, L).numpy()).max() < 1e-12,
          "uatlab eval DIR gives the per-token logits")
    conv = subprocess.run([cli, "convert", folder, os.path.join(tmp, "as-uatlab.safetensors")], capture_output=True,
                          text=True)
    check(conv.returncode == 0 and np.array_equal(uatlab.load(os.path.join(tmp, "as-uatlab.safetensors")).eval([1, 2]),
                                                  net.eval([1, 2])), "uatlab convert DIR writes uatlab's own file")
    # Refusals: another activation, a missing tensor.
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    cfg["activation_function"] = "relu"
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    try:
        uatlab.load(folder)
        check(False, "an unknown activation_function is refused")
    except uatlab.Error as e:
        check("activation_function" in str(e), f"refused: {e}")
    # What a config or a file may say that would change the model, or that no model could hold
    # (issue 78, "GPT-2 folders"): refused, naming it, before the architecture is built.
    def refused(name, fragment, config=None, tensors=None, mask=None):
        bad = os.path.join(tmp, "bad-" + name)
        t = tiny_gpt2(bad, d, H, L, V, P)
        if config or tensors is not None or mask is not None:
            with open(os.path.join(bad, "config.json")) as f:
                cfg = json.load(f)
            cfg.update(config or {})
            with open(os.path.join(bad, "config.json"), "w") as f:
                json.dump(cfg, f)
            file = {k: v.float() for k, v in t.items()}
            if mask is not None:
                file["h.0.attn.bias"] = mask
            file.update(tensors or {})
            write_safetensors(os.path.join(bad, "model.safetensors"), file)
        r = subprocess.run([cli, "info", bad], capture_output=True, text=True, timeout=20)
        check(r.returncode == 1 and fragment in r.stderr, f"{name}: refused ({r.returncode}: {r.stderr.strip()})")
    refused("n_layer", "n_layer 1000000000 needs 12 tensors a block", {"n_layer": 10**9})
    refused("model_type", "model_type \"llama\"", {"model_type": "llama"})
    refused("untied", "tie_word_embeddings false", {"tie_word_embeddings": False})
    refused("eps-type", "\"layer_norm_epsilon\" must be a number", {"layer_norm_epsilon": "1e-5"})
    refused("flag-type", "\"scale_attn_weights\" must be true or false", {"scale_attn_weights": "no"})
    refused("twice", "are both GPT-2's \"wpe.weight\"", tensors={"transformer.wpe.weight": t["wpe.weight"].float()})
    refused("not-causal", "is not GPT-2's causal mask", mask=torch.ones(1, 1, P, P))
print(f"gpt2: {passed()} checks passed")
