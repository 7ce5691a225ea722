"""uatlab networks in PyTorch, both ways (torch only; no safetensors package needed).

    from uatlab import pytorch
    net = pytorch.load("model.safetensors")       # an nn.Module, float64 if the file is F64
    net = pytorch.load("model.json")              # lossless JSON: each exact value rounded to float64
    net = pytorch.load("checkpoint.safetensors")  # a training checkpoint: the model it holds
    y = net(x)          # x: (batch, n, d) floats, or (batch, n) token ids  ->  (batch, n, out)
    arch, tensors = pytorch.to_uatlab(nn.TransformerEncoderLayer(...))   # the other way

This file needs only torch: it works without the compiled module (tests/test_torch_oracle.py).

The module computes exactly what uatlab's C++ model computes (docs/ARCHITECTURE.md): tokens are
rows here (PyTorch's (n, d) layout is the paper's d x n matrix in memory), attention normalises
each query's scores over the keys, every sub-layer is residual.
"""
import json
import math
import struct
from fractions import Fraction

import torch
from torch import nn

DTYPES = {"F64": torch.float64, "F32": torch.float32}


def read_safetensors(path):
    """Return (metadata, {name: tensor}) following the format exactly."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        buf = bytearray(raw[8 + n + begin:8 + n + end])
        t = torch.frombuffer(buf, dtype=DTYPES[e["dtype"]]) if buf else torch.empty(0, dtype=DTYPES[e["dtype"]])
        tensors[name] = t.reshape(e["shape"]).clone()
    return metadata, tensors


def number(text):
    return float(Fraction(str(text)))


def exact_float(x):
    """The exact value of a Python float as text (1e-5 is 0.00001000000000000000081803...; the
    decimal "1e-05" would be another number): what PyTorch computes with, kept exactly."""
    q = Fraction(float(x))
    return f"{q.numerator}/{q.denominator}"


# The values of the architecture keys a file may omit: the C++ reader's defaults
# (Architecture::from_json); tests/test_torch_oracle.py checks that the two agree.
ARCH_DEFAULTS = {"vocab": 0, "max_len": 0, "readout": 0, "pool": "none"}
LAYER_DEFAULTS = {
    "attention": {"heads": 1, "head_size": 1, "score": "softmax", "scale": "1", "sqrt_scaling": False,
                  "rpe": "none", "t5_buckets": 32, "t5_max_distance": 128, "dp_free": False, "causal": False,
                  "strict_past": False, "window": 0, "tied_qkv": False, "bias": False, "pre_norm": False},
    "feedforward": {"activation": "relu", "pre_norm": False},
    "layernorm": {"eps": "1e-5"},
    "bproj": {"causal": False, "bias": False, "pre_norm": False},
    "sepconv": {"heads": 1, "causal": False, "bias": False, "pre_norm": False},
}


def complete(arch):
    """The architecture with every omitted key at its default (a new dict)."""
    out = dict(ARCH_DEFAULTS, **arch)
    out["layers"] = [dict(LAYER_DEFAULTS.get(l.get("type"), {}), **l) for l in arch["layers"]]
    for l in out["layers"]:
        if l.get("pre_norm") or l["type"] == "layernorm":
            l.setdefault("eps", "1e-5")
    return out


def read_json_model(path):
    """(architecture, {name: float64 tensor}) of a lossless .json model; values are exact rationals."""
    with open(path) as f:
        j = json.load(f)
    if j.get("format") != "uatlab-model-1":
        raise ValueError(f"{path}: not a uatlab model file (expected \"format\": \"uatlab-model-1\")")
    tensors = {name: torch.tensor([number(v) for v in t["data"]], dtype=torch.float64).reshape(t["shape"])
               for name, t in j["tensors"].items()}
    return j["architecture"], tensors


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """T5's bucket of key - query = rel, computed in double (as uatlab does)."""
    offset = 0
    if bidirectional:
        num_buckets //= 2
        if rel > 0:
            offset = num_buckets
        n = abs(rel)
    else:
        n = max(-rel, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return offset + n
    b = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return offset + min(b, num_buckets - 1)



def attended_keys(sp, n):
    """(query, key) -> whether the query attends to the key: the masking rule of C++'s
    attended_keys (include/uatlab/model/architecture.hpp), keys [first, end) for query k."""
    k = torch.arange(n).view(n, 1)
    l = torch.arange(n).view(1, n)
    end = k + 1 - (1 if sp.get("strict_past") else 0) if sp["causal"] else torch.full_like(k, n)
    window = sp.get("window", 0)
    first = (k - window).clamp(min=0) if window > 0 else torch.zeros_like(k)
    return (l >= first) & (l < end)

class Attention(nn.Module):
    def __init__(self, spec, d):
        super().__init__()
        self.spec = spec
        h, s = spec["heads"], spec["head_size"]
        P = lambda *shape: nn.Parameter(torch.zeros(*shape))
        names = ["qkv"] if spec["tied_qkv"] else ["q", "k", "v"]
        self.proj = nn.ModuleDict({p: nn.Linear(d, h * s, bias=spec["bias"]) for p in names})
        self.o = nn.Linear(h * s, d, bias=spec["bias"])
        if spec["rpe"] in ("lin", "log"):
            self.rpe = nn.ParameterDict({"p": P(h)})
        elif spec["rpe"] == "t5":
            self.rpe = nn.ParameterDict({"table": P(h, spec["t5_buckets"])})
        self.scale = number(spec["scale"]) / (math.sqrt(s) if spec["sqrt_scaling"] else 1.0)
        self.hardmax_tolerance = 0.0

    def bias(self, n, dtype):
        sp = self.spec
        q = torch.arange(n).view(n, 1)  # query k (rows here)
        k = torch.arange(n).view(1, n)  # key l
        dist = (k - q).abs().to(dtype)
        if sp["rpe"] == "lin":
            return -self.rpe["p"].view(-1, 1, 1) * dist
        if sp["rpe"] == "log":
            return -self.rpe["p"].view(-1, 1, 1) * torch.where(dist > 0, dist.log(), torch.zeros_like(dist))
        idx = torch.tensor([[t5_bucket(l - kk, not sp["causal"], sp["t5_buckets"], sp["t5_max_distance"])
                             for l in range(n)] for kk in range(n)])
        return self.rpe["table"][:, idx]  # (H, n_query, n_key)

    def forward(self, z):
        sp = self.spec
        B, n, _ = z.shape
        H, s = sp["heads"], sp["head_size"]
        split = lambda t: t.view(B, n, H, s).transpose(1, 2)  # (B, H, n, s)
        p = self.proj
        v = split(p["qkv" if sp["tied_qkv"] else "v"](z))
        if sp["dp_free"]:
            scores = torch.zeros(B, H, n, n, dtype=z.dtype)
        else:
            q = split(p["qkv" if sp["tied_qkv"] else "q"](z))
            k = split(p["qkv" if sp["tied_qkv"] else "k"](z))
            scores = (q @ k.transpose(-1, -2)) * self.scale  # (B, H, query, key)
        if sp["rpe"] != "none":
            scores = scores + self.bias(n, z.dtype)
        allowed = attended_keys(sp, n)
        some = allowed.any(dim=-1, keepdim=True)  # a query with no key at all gets weights 0
        if sp["score"] == "softmax":
            w = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            w = torch.where(some, w, torch.zeros_like(w))
        elif sp["score"] == "hardmax":
            masked = scores.masked_fill(~allowed, float("-inf"))
            top = masked.max(dim=-1, keepdim=True).values
            hit = (masked >= top - self.hardmax_tolerance) & allowed
            w = hit.to(z.dtype) / hit.sum(dim=-1, keepdim=True).clamp(min=1).to(z.dtype)
        else:  # linear
            w = scores.masked_fill(~allowed, 0.0)
        out = (w @ v).transpose(1, 2).reshape(B, n, H * s)
        return self.o(out)


class FeedForward(nn.Module):
    def __init__(self, spec, d):
        super().__init__()
        self.fc1 = nn.Linear(d, spec["width"])
        self.fc2 = nn.Linear(spec["width"], d)
        act = spec["activation"]
        self.gelu = act == "gelu"
        self.piecewise = act not in ("relu", "gelu")
        if self.piecewise:
            self.breakpoints = [number(c) for c in act["breakpoints"]]
            self.slopes = [number(a) for a, _ in act["pieces"]]
            self.intercepts = [number(b) for _, b in act["pieces"]]

    def act(self, h):
        if self.gelu:
            return nn.functional.gelu(h)  # the exact erf form
        if not self.piecewise:
            return torch.relu(h)
        c = torch.tensor(self.breakpoints, dtype=h.dtype)
        i = torch.bucketize(h, c, right=True)  # number of breakpoints <= h
        return torch.tensor(self.slopes, dtype=h.dtype)[i] * h + torch.tensor(self.intercepts, dtype=h.dtype)[i]

    def forward(self, z):
        return self.fc2(self.act(self.fc1(z)))


class Mixer(nn.Module):
    """Yun et al.'s cheaper token mixers: bproj (Z + W_O Z W_P) and sepconv (a depth-wise
    convolution whose `heads` filters are shared by d/heads dimensions each, then W_O)."""

    def __init__(self, spec, d):
        super().__init__()
        self.spec = spec
        if spec["type"] == "bproj":
            self.p = nn.ParameterDict({"weight": nn.Parameter(torch.zeros(spec["length"], spec["length"]))})
        else:
            self.filter = nn.Parameter(torch.zeros(spec["heads"], spec["kernel"]))
        self.o = nn.Linear(d, d, bias=spec["bias"])

    def forward(self, z):
        sp = self.spec
        B, n, d = z.shape
        if sp["type"] == "bproj":
            if n > sp["length"]:
                raise ValueError(f"sequence length {n} exceeds the bilinear projection's length {sp['length']}")
            P = self.p["weight"][:n, :n]
            if sp["causal"]:
                P = torch.triu(P)  # entry (l, k) with l > k unused: token k mixes tokens l <= k
            m = torch.einsum("lk,bld->bkd", P, z)
        else:
            k = sp["kernel"]
            f = self.filter.repeat_interleave(d // sp["heads"], dim=0)  # (d, kernel)
            m = torch.zeros_like(z)
            for j in range(k):
                off = -j if sp["causal"] else j - (k - 1) // 2  # tap j reads position t + off
                t0, t1 = max(0, -off), min(n, n - off)
                if t0 < t1:
                    m[:, t0:t1, :] = m[:, t0:t1, :] + f[:, j] * z[:, t0 + off:t1 + off, :]
        return self.o(m)


class Layer(nn.Module):
    def __init__(self, spec, d):
        super().__init__()
        self.kind = spec["type"]
        self.pre_norm = spec.get("pre_norm", False)
        self.eps = number(spec.get("eps", "1e-5"))
        if self.kind == "layernorm":
            self.weight = nn.Parameter(torch.ones(d))
            self.bias = nn.Parameter(torch.zeros(d))
            return
        if self.pre_norm:
            self.norm = nn.LayerNorm(d, eps=self.eps)
        self.body = (Attention(spec, d) if self.kind == "attention" else
                     FeedForward(spec, d) if self.kind == "feedforward" else Mixer(spec, d))

    def forward(self, z):
        if self.kind == "layernorm":
            return nn.functional.layer_norm(z, z.shape[-1:], self.weight, self.bias, self.eps)
        return z + self.body(self.norm(z) if self.pre_norm else z)


class UatlabNet(nn.Module):
    def __init__(self, arch):
        super().__init__()
        self.arch = arch
        d = arch["d"]
        if arch.get("vocab", 0) > 0:
            self.embed = nn.Embedding(arch["vocab"], d)
        if arch.get("max_len", 0) > 0:
            self.pe = nn.Embedding(arch["max_len"], d)
        self.layers = nn.ModuleList(Layer(s, d) for s in arch["layers"])
        if arch.get("readout", 0) > 0:
            self.readout = nn.Linear(d, arch["readout"])

    def set_hardmax_tolerance(self, tol):
        for l in self.layers:
            if l.kind == "attention":
                l.body.hardmax_tolerance = tol

    def forward(self, x):
        z = self.embed(x) if self.arch.get("vocab", 0) > 0 else x
        if self.arch.get("max_len", 0) > 0:
            z = z + self.pe.weight[: z.shape[1]]
        for layer in self.layers:
            z = layer(z)
        if self.arch.get("pool", "none") == "sum":
            z = z.sum(dim=1, keepdim=True)
        return self.readout(z) if self.arch.get("readout", 0) > 0 else z


# uatlab tensor names -> this module's parameter names.
def _torch_name(name):
    parts = name.split(".")
    if parts[0] == "layers" and parts[2] in ("q", "k", "v", "qkv"):
        return ".".join(parts[:2] + ["body", "proj"] + parts[2:])
    if parts[0] == "layers" and parts[2] in ("o", "fc1", "fc2", "rpe", "p", "filter"):
        return ".".join(parts[:2] + ["body"] + parts[2:])
    return name


def load(path, dtype=None):
    """Build the network a model file describes (safetensors, lossless .json or a training
    checkpoint) and load its weights."""
    if path.endswith(".json"):
        arch, tensors = read_json_model(path)
    else:
        metadata, tensors = read_safetensors(path)
        if "uatlab" not in metadata:
            raise ValueError(f"{path}: no \"uatlab\" architecture in __metadata__")
        arch = json.loads(metadata["uatlab"])
        # A checkpoint also holds networks under the prefixes it lists (the optimizer's moments).
        extras = [p.strip() for p in metadata.get("uatlab_extras", "").split(",") if p.strip()]
        tensors = {k: v for k, v in tensors.items() if not any(k.startswith(p) for p in extras)}
    net = UatlabNet(complete(arch))
    dtype = dtype or (next(iter(tensors.values())).dtype if tensors else torch.float64)
    net.to(dtype)
    state = {_torch_name(k): v.to(dtype) for k, v in tensors.items()}
    net.load_state_dict(state, strict=True)
    return net


# This module's parameter names -> uatlab tensor names (the inverse of _torch_name).
def _uatlab_name(name):
    return name.replace(".body.proj.", ".").replace(".body.", ".")


def _activation(layer):
    """The layer's activation, read from the callable it runs (never from torch's fast-path flag,
    which keeps its construction-time value when the activation is replaced and does not tell
    tanh-GELU from GELU)."""
    act = layer.activation
    if act in (nn.functional.relu, torch.relu) or isinstance(act, nn.ReLU):
        return "relu"
    if act is nn.functional.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    raise ValueError(f"activation {act!r}: uatlab has ReLU and GELU in its exact erf form "
                     "(tanh-approximated GELU and other activations are refused, not approximated)")


def _encoder_layer(layer, i, d):
    """The uatlab sub-layers and tensors of one nn.TransformerEncoderLayer starting at index i."""
    mha = layer.self_attn
    if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("self-attention with separate q/k/v sizes, bias_k/bias_v or add_zero_attn is not supported")
    H = mha.num_heads
    bias = mha.in_proj_bias is not None
    pre = bool(layer.norm_first)
    eps1, eps2 = exact_float(layer.norm1.eps), exact_float(layer.norm2.eps)
    attn = {"type": "attention", "heads": H, "head_size": d // H, "sqrt_scaling": True, "bias": bias,
            "pre_norm": pre}
    ff = {"type": "feedforward", "width": layer.linear1.out_features, "activation": _activation(layer),
          "pre_norm": pre}
    t = {}
    a, f = f"layers.{i}.", f"layers.{i + (1 if pre else 2)}."
    q, k, v = mha.in_proj_weight.chunk(3)
    t.update({a + "q.weight": q, a + "k.weight": k, a + "v.weight": v, a + "o.weight": mha.out_proj.weight})
    if bias:
        bq, bk, bv = mha.in_proj_bias.chunk(3)
        t.update({a + "q.bias": bq, a + "k.bias": bk, a + "v.bias": bv, a + "o.bias": mha.out_proj.bias})
    t.update({f + "fc1.weight": layer.linear1.weight, f + "fc1.bias": layer.linear1.bias,
              f + "fc2.weight": layer.linear2.weight, f + "fc2.bias": layer.linear2.bias})
    if pre:  # Z + f(LayerNorm(Z)), the norm inside each sub-layer
        attn["eps"], ff["eps"] = eps1, eps2
        t.update({a + "norm.weight": layer.norm1.weight, a + "norm.bias": layer.norm1.bias,
                  f + "norm.weight": layer.norm2.weight, f + "norm.bias": layer.norm2.bias})
        return [attn, ff], t
    n1, n2 = f"layers.{i + 1}.", f"layers.{i + 3}."  # post-norm: LayerNorm(Z + f(Z)) after each
    t.update({n1 + "weight": layer.norm1.weight, n1 + "bias": layer.norm1.bias,
              n2 + "weight": layer.norm2.weight, n2 + "bias": layer.norm2.bias})
    return [attn, {"type": "layernorm", "eps": eps1}, ff, {"type": "layernorm", "eps": eps2}], t


def to_uatlab(module, architecture=None):
    """(architecture dict, {uatlab tensor name: tensor}) of a UatlabNet, an nn.TransformerEncoderLayer,
    an nn.TransformerEncoder (its final norm included), or a state_dict with its architecture."""
    if isinstance(module, UatlabNet):
        return module.arch, {_uatlab_name(k): v for k, v in module.state_dict().items()}
    if isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerEncoder)):
        blocks = [module] if isinstance(module, nn.TransformerEncoderLayer) else list(module.layers)
        d = blocks[0].self_attn.embed_dim
        layers, tensors = [], {}
        for b in blocks:
            ls, t = _encoder_layer(b, len(layers), d)
            layers += ls
            tensors.update(t)
        final = getattr(module, "norm", None) if isinstance(module, nn.TransformerEncoder) else None
        if final is not None:
            p = f"layers.{len(layers)}."
            layers.append({"type": "layernorm", "eps": exact_float(final.eps)})
            tensors.update({p + "weight": final.weight, p + "bias": final.bias})
        return {"d": d, "layers": layers}, tensors
    if isinstance(module, dict):
        if architecture is None:
            raise ValueError("a state_dict needs the architecture it belongs to")
        return architecture, {_uatlab_name(k): v for k, v in module.items()}
    raise ValueError(f"cannot convert {type(module).__name__}: give a UatlabNet, an nn.TransformerEncoderLayer, "
                     "an nn.TransformerEncoder, or a state_dict with its architecture")
