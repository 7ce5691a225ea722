"""GPT-2 124M at its real size (issue 42): no download exists here, so a random checkpoint with
GPT-2 small's public layout and shapes (12 layers, d 768, 12 heads, vocab 50,257, 1,024
positions; 124,439,808 weights, F32, 498 MB) is written, then loaded by the CLI. Measured per
command: wall time and peak resident memory (the child's ru_maxrss). The file's own size is the
floor; "streamed" means the weights are converted from the file's bytes into the network without a
second full copy in between.

usage: /usr/bin/python3 scripts/gpt2-124m.py BUILD_DIR [TOKENS] [--mpfi] [--certified [WIDTH]]
  TOKENS: the sequence length of the evaluated sequence (default 8); --mpfi also evaluates it in
  MPFI at 53 bits (about 20 GiB: set UATLAB_MEMORY_GIB above it, on a machine that has it);
  --certified also encloses every logit with the certified engine (eval --precision certified
  --max-width WIDTH, default 1e-6, --max-bits 1024) and prints its tiers and the widest
  enclosure after each sub-layer (docs/certified.md).
Needs no numpy: each tensor repeats a seeded Gaussian block of 4,099 values (a prime length).
"""
import array
import json
import os
import random
import resource
import struct
import subprocess
import sys
import tempfile
import time

D, H, L, V, P = 768, 12, 12, 50257, 1024


def write_checkpoint(folder):
    """GPT-2 small's layout with seeded weights into folder (model.safetensors, config.json); also
    bench/run_engine.py --gpt2's model. Returns the number of weights."""
    rng = random.Random(0)
    shapes = {"wte.weight": (V, D), "wpe.weight": (P, D), "ln_f.weight": (D,), "ln_f.bias": (D,)}
    for i in range(L):
        h = f"h.{i}."
        shapes.update({h + "ln_1.weight": (D,), h + "ln_1.bias": (D,), h + "attn.c_attn.weight": (D, 3 * D),
                       h + "attn.c_attn.bias": (3 * D,), h + "attn.c_proj.weight": (D, D),
                       h + "attn.c_proj.bias": (D,), h + "ln_2.weight": (D,), h + "ln_2.bias": (D,),
                       h + "mlp.c_fc.weight": (D, 4 * D), h + "mlp.c_fc.bias": (4 * D,),
                       h + "mlp.c_proj.weight": (4 * D, D), h + "mlp.c_proj.bias": (D,)})
    numel = {name: 1 for name in shapes}
    for name, s in shapes.items():
        for k in s:
            numel[name] *= k
    header, offset = {}, 0
    for name, s in shapes.items():
        header[name] = {"dtype": "F32", "shape": list(s), "data_offsets": [offset, offset + 4 * numel[name]]}
        offset += 4 * numel[name]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    assert sys.byteorder == "little"
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in shapes:  # GPT-2's scale: weights ~ N(0, 0.02), the norms' gains near 1
            gain = 1.0 if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")) else 0.0
            block = array.array("f", [gain + 0.02 * rng.gauss(0, 1) for _ in range(4099)])
            f.write((block * (numel[name] // len(block) + 1))[:numel[name]].tobytes())
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"n_embd": D, "n_head": H, "n_layer": L, "n_positions": P, "vocab_size": V,
                   "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "model_type": "gpt2"}, f)
    return sum(numel.values())


def measured(what, args):
    uatlab = os.path.join(sys.argv[1], "uatlab")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.time()
    r = subprocess.run([uatlab] + args, capture_output=True, text=True)
    wall = time.time() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, the largest child so far
    if r.returncode != 0:
        sys.exit(f"{what}: exit {r.returncode}: {r.stderr.strip()}")
    note = "" if peak > before else " (peak not above an earlier command's)"
    print(f"{what:<34} {wall:8.1f} s   peak {peak / 2**20:6.2f} GiB{note}", flush=True)
    return r.stdout


def main():
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else 8
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "gpt2-124m")
        os.makedirs(folder)
        n = write_checkpoint(folder)
        size = os.path.getsize(os.path.join(folder, "model.safetensors"))
        print(f"checkpoint: {n:,} weights, {size / 1e6:.0f} MB (F32); sequence of {tokens} tokens")
        data = os.path.join(tmp, "one.jsonl")
        with open(data, "w") as f:
            f.write(json.dumps({"tokens": [(7 * i + 3) % V for i in range(tokens)]}) + "\n")
        info = measured("info", ["info", folder])
        assert f"parameters  {n + V * D + V}" in info, info  # + the readout: a copy of wte, zero bias
        measured("convert to uatlab's safetensors", ["convert", folder, os.path.join(tmp, "as-uatlab.safetensors")])
        os.remove(os.path.join(tmp, "as-uatlab.safetensors"))
        out = measured("eval, float64", ["eval", folder, data])
        y = json.loads(out)["y"]
        assert len(y) == tokens and len(y[0]) == V, "per-token logits"
        if "--certified" in sys.argv:
            at = sys.argv.index("--certified") + 1
            width = sys.argv[at] if at < len(sys.argv) and not sys.argv[at].startswith("--") else "1e-6"
            out = measured("eval, certified", ["eval", folder, data, "--precision", "certified",
                                                "--max-width", width, "--max-bits", "1024"])
            line = json.loads(out)
            assert len(line["lo"]) == tokens and len(line["lo"][0]) == V
            rw = line["relative_width"]
            print(f"  tier {line['tier']}, reached {line['reached']} (width {width}), widest relative width "
                  f"{rw}")  # the JSON's number itself: a bound, not rounded again
            for tried in line["tried"]:
                print(f"  tried {tried}")
            if line["layer_widths"]:
                print("  widest enclosure: input " + ", ".join(str(w) for w in line["layer_widths"]))
        if "--mpfi" in sys.argv:
            out = measured("eval, MPFI 53 bits", ["eval", folder, data, "--precision", "interval:53"])
            lo = json.loads(out)["lo"]
            assert len(lo) == tokens and len(lo[0]) == V


if __name__ == "__main__":
    main()
