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
ARCH_DEFAULTS = {"vocab": 0, "input": 0, "max_len": 0, "readout": 0, "pool": "none"}
LAYER_DEFAULTS = {
    "attention": {"heads": 1, "head_size": 1, "score": "softmax", "scale": "1", "sqrt_scaling": False,
                  "rpe": "none", "t5_buckets": 32, "t5_max_distance": 128, "dp_free": False, "causal": False,
                  "strict_past": False, "window": 0, "rope": 0, "tied_qkv": False, "bias": False, "pre_norm": False},
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

def rotary(x, sp):
    """Rotary positions on (B, H, n, s) queries or keys: the pairs (2i, 2i+1) at position t turned by
    t·θ_i, θ_i = exp(-(2i/s)·log base), angles and their cos/sin in float64 as uatlab computes them."""
    n, s = x.shape[-2], x.shape[-1]
    theta = torch.tensor([math.exp(-(2 * i / s) * math.log(sp["rope"])) for i in range(s // 2)],
                         dtype=torch.float64)
    angle = torch.arange(n, dtype=torch.float64).view(n, 1) * theta.view(1, -1)  # (n, s/2)
    c, sn = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * c - b * sn, a * sn + b * c), dim=-1).flatten(-2)


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
            if sp["rope"]:
                q, k = rotary(q, sp), rotary(k, sp)
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
        self.gelu = act if act in ("gelu", "gelu_tanh") else None
        self.piecewise = act not in ("relu", "gelu", "gelu_tanh")
        if self.piecewise:
            self.breakpoints = [number(c) for c in act["breakpoints"]]
            self.slopes = [number(a) for a, _ in act["pieces"]]
            self.intercepts = [number(b) for _, b in act["pieces"]]

    def act(self, h):
        if self.gelu:  # the exact erf form, or the tanh form
            return nn.functional.gelu(h, approximate="tanh" if self.gelu == "gelu_tanh" else "none")
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
        if arch.get("input", 0) > 0:
            self.input = nn.Linear(arch["input"], d)
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
        z = self.embed(x) if self.arch.get("vocab", 0) > 0 else self.input(x) if self.arch.get("input", 0) > 0 else x
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
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        import warnings
        warnings.warn("GELU(approximate='tanh') converts as its tanh form, which the layer computes in training "
                      "mode; PyTorch's fast path (eval mode without gradients) runs the erf form instead "
                      "(up to about 2e-4 apart): compare with the layer in training mode (dropout 0)",
                      stacklevel=3)
        return "gelu_tanh"
    raise ValueError(f"activation {act!r}: uatlab has ReLU and GELU in its erf and tanh forms "
                     "(other activations are refused, not approximated)")


class Binding:
    """One uatlab tensor and where PyTorch keeps it: `param` (a Parameter or tensor of the user's
    modules, in the same layout), rows `rows` of it (a slice: the q/k/v thirds of in_proj_weight)
    or all of it, and PyTorch's name for it."""

    def __init__(self, name, param, torch_name, rows=None, fixed=False):
        self.name, self.param, self.torch_name, self.rows, self.fixed = name, param, torch_name, rows, fixed

    def read(self):
        return self.param if self.rows is None else self.param[self.rows]

    def check(self, value):
        """Why value (float64) cannot be written here exactly, or None."""
        target = self.read()
        if tuple(value.shape) != tuple(target.shape):
            return f"{self.torch_name}: shape {tuple(target.shape)}, the network's {self.name} is {tuple(value.shape)}"
        if not torch.equal(value.to(target.dtype).double(), value):
            return (f"{self.torch_name} is {target.dtype}, which does not hold every value of {self.name} exactly: "
                    "convert the module first (module.double())")
        return None

    def write(self, value):
        with torch.no_grad():
            self.read().copy_(value.to(self.read().dtype))


def _encoder_layer(layer, i, d, prefix):
    """The uatlab sub-layers and bindings of one nn.TransformerEncoderLayer starting at index i;
    prefix: its PyTorch name ("layers.0.")."""
    mha = layer.self_attn
    if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("self-attention with separate q/k/v sizes, bias_k/bias_v or add_zero_attn is not supported")
    H = mha.num_heads
    bias = mha.in_proj_bias is not None
    pre = bool(layer.norm_first)
    eps1, eps2 = exact_float(layer.norm1.eps), exact_float(layer.norm2.eps)
    attn = {"type": "attention", "heads": H, "head_size": d // H, "sqrt_scaling": True, "bias": bias,
            "pre_norm": pre, "source": prefix + "self_attn"}
    ff = {"type": "feedforward", "width": layer.linear1.out_features, "activation": _activation(layer),
          "pre_norm": pre, "source": prefix + "linear1/linear2"}
    a, f = f"layers.{i}.", f"layers.{i + (1 if pre else 2)}."
    b = []
    for j, x in enumerate("qkv"):
        b.append(Binding(a + x + ".weight", mha.in_proj_weight, f"{prefix}self_attn.in_proj_weight[{j * d}:{(j + 1) * d}]",
                         slice(j * d, (j + 1) * d)))
    b.append(Binding(a + "o.weight", mha.out_proj.weight, prefix + "self_attn.out_proj.weight"))
    if bias:
        for j, x in enumerate("qkv"):
            b.append(Binding(a + x + ".bias", mha.in_proj_bias, f"{prefix}self_attn.in_proj_bias[{j * d}:{(j + 1) * d}]",
                             slice(j * d, (j + 1) * d)))
        b.append(Binding(a + "o.bias", mha.out_proj.bias, prefix + "self_attn.out_proj.bias"))
    for u, mod in (("fc1", "linear1"), ("fc2", "linear2")):
        for w in ("weight", "bias"):
            b.append(Binding(f"{f}{u}.{w}", getattr(getattr(layer, mod), w), f"{prefix}{mod}.{w}"))
    if pre:  # Z + f(LayerNorm(Z)), the norm inside each sub-layer
        attn["eps"], ff["eps"] = eps1, eps2
        for u, norm in ((a, "norm1"), (f, "norm2")):
            for w in ("weight", "bias"):
                b.append(Binding(f"{u}norm.{w}", getattr(getattr(layer, norm), w), f"{prefix}{norm}.{w}"))
        return [attn, ff], b
    n1, n2 = f"layers.{i + 1}.", f"layers.{i + 3}."  # post-norm: LayerNorm(Z + f(Z)) after each
    for u, norm in ((n1, "norm1"), (n2, "norm2")):
        for w in ("weight", "bias"):
            b.append(Binding(u + w, getattr(getattr(layer, norm), w), f"{prefix}{norm}.{w}"))
    return [attn, {"type": "layernorm", "eps": eps1, "source": prefix + "norm1"}, ff,
            {"type": "layernorm", "eps": eps2, "source": prefix + "norm2"}], b


def _position_table(positions, d):
    """The (max_len, d) tensor a positions argument adds: an nn.Embedding, a tensor or Parameter of
    shape (max_len, d), (1, max_len, d) or (max_len, 1, d) (the tutorials' sinusoidal buffer), or a
    module holding exactly one such tensor."""
    if isinstance(positions, nn.Embedding):
        return positions.weight, "positions.weight"
    if isinstance(positions, nn.Module):
        found = [(n, t) for n, t in list(positions.named_parameters()) + list(positions.named_buffers())
                 if t.dim() in (2, 3) and t.shape[-1] == d]
        if len(found) != 1:
            raise ValueError(f"positions: {type(positions).__name__} holds {len(found)} tensors ending in d = {d}; "
                             "pass the table itself (max_len × d)")
        return _squeeze_table(found[0][1], d), "positions." + found[0][0]
    if isinstance(positions, torch.Tensor):
        return _squeeze_table(positions, d), "positions"
    raise ValueError(f"positions must be an nn.Embedding, a (max_len, d) tensor or a module holding one, "
                     f"got {type(positions).__name__}")


def _squeeze_table(t, d):
    if t.dim() == 3 and 1 in t.shape[:2]:
        t = t.reshape(-1, d)
    if t.dim() != 2 or t.shape[1] != d:
        raise ValueError(f"positions: a table of shape {tuple(t.shape)}, expected (max_len, {d})")
    return t


def _linear_bindings(name, linear, torch_name):
    """An nn.Linear as uatlab's NAME.weight and NAME.bias (zeros, fixed, when it has no bias)."""
    bias = (Binding(name + ".bias", linear.bias, torch_name + ".bias") if linear.bias is not None else
            Binding(name + ".bias", torch.zeros(linear.out_features, dtype=linear.weight.dtype), "(no bias: zeros)",
                    fixed=True))
    return [Binding(name + ".weight", linear.weight, torch_name + ".weight"), bias]


def bindings(encoder, embedding=None, positions=None, head=None, causal=False):
    """(architecture, [Binding]) of the common composition: an optional token embedding
    (nn.Embedding) or input projection (nn.Linear of continuous tokens to d), optional learned or fixed positions added to it, an nn.TransformerEncoder (or one
    nn.TransformerEncoderLayer; its final norm included), and an optional head: an nn.Linear to the
    outputs, or the embedding itself (tied unembedding, logits = z·Eᵀ). causal: the network of
    encoder(x, mask=causal mask). The same bindings read the modules (from_torch) and fill them
    (Network.to_torch(into=...)); PyTorch's names are the encoder's own, under "embedding.",
    "positions" and "head."."""
    if not isinstance(encoder, (nn.TransformerEncoderLayer, nn.TransformerEncoder)):
        raise ValueError(f"encoder: expected an nn.TransformerEncoder or nn.TransformerEncoderLayer, got "
                         f"{type(encoder).__name__}")
    blocks = [encoder] if isinstance(encoder, nn.TransformerEncoderLayer) else list(encoder.layers)
    d = blocks[0].self_attn.embed_dim
    layers, bs = [], []
    for j, blk in enumerate(blocks):
        ls, b = _encoder_layer(blk, len(layers), d, f"layers.{j}." if isinstance(encoder, nn.TransformerEncoder) else "")
        layers += ls
        bs += b
    final = getattr(encoder, "norm", None) if isinstance(encoder, nn.TransformerEncoder) else None
    if final is not None:
        p = f"layers.{len(layers)}."
        layers.append({"type": "layernorm", "eps": exact_float(final.eps), "source": "norm"})
        bs += [Binding(p + "weight", final.weight, "norm.weight"), Binding(p + "bias", final.bias, "norm.bias")]
    if causal:
        for layer in layers:
            if layer["type"] == "attention":
                layer["causal"] = True
    arch = {"d": d, "layers": layers}
    if isinstance(embedding, nn.Linear):  # an input projection: continuous tokens of in_features numbers
        if embedding.out_features != d:
            raise ValueError(f"embedding: an nn.Linear to {embedding.out_features}, the encoder's d is {d}")
        arch["input"] = embedding.in_features
        bs += _linear_bindings("input", embedding, "embedding")
    elif embedding is not None:
        if not isinstance(embedding, nn.Embedding):
            raise ValueError(f"embedding: expected an nn.Embedding (token ids) or an nn.Linear (an input "
                             f"projection), got {type(embedding).__name__}")
        if embedding.max_norm is not None:
            raise ValueError("embedding: max_norm renormalises the rows at lookup, which uatlab does not do")
        if embedding.embedding_dim != d:
            raise ValueError(f"embedding: dimension {embedding.embedding_dim}, the encoder's d is {d}")
        arch["vocab"] = embedding.num_embeddings
        bs.append(Binding("embed.weight", embedding.weight, "embedding.weight"))
    if positions is not None:
        table, name = _position_table(positions, d)
        arch["max_len"] = table.shape[0]
        bs.append(Binding("pe.weight", table, name))
    if head is not None:
        if head is embedding and isinstance(embedding, nn.Embedding):  # tied: logits = z·Eᵀ, no bias
            arch["readout"] = embedding.num_embeddings
            bs.append(Binding("readout.weight", embedding.weight, "embedding.weight (tied head)", fixed=True))
            bs.append(Binding("readout.bias", torch.zeros(embedding.num_embeddings, dtype=embedding.weight.dtype),
                              "(no bias: zeros)", fixed=True))
        elif isinstance(head, nn.Linear):
            if head.in_features != d:
                raise ValueError(f"head: {head.in_features} inputs, the encoder's d is {d}")
            arch["readout"] = head.out_features
            bs += _linear_bindings("readout", head, "head")
        else:
            raise ValueError(f"head: expected an nn.Linear or the embedding (tied), got {type(head).__name__}")
    return arch, bs


def name_map(encoder, embedding=None, positions=None, head=None, causal=False):
    """{PyTorch name: uatlab tensor name} of the composition (bindings)."""
    return {b.torch_name: b.name for b in bindings(encoder, embedding, positions, head, causal)[1]}


def to_uatlab(module, architecture=None, embedding=None, positions=None, head=None, causal=False):
    """(architecture dict, {uatlab tensor name: tensor}) of a UatlabNet, of the composition of
    bindings() (an nn.TransformerEncoder or nn.TransformerEncoderLayer with an optional embedding,
    positions and head), or of a state_dict with its architecture."""
    parts = embedding is not None or positions is not None or head is not None
    if isinstance(module, UatlabNet) and not parts:
        return module.arch, {_uatlab_name(k): v for k, v in module.state_dict().items()}
    if isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerEncoder)):
        arch, bs = bindings(module, embedding, positions, head, causal)
        return arch, {b.name: b.read() for b in bs}
    if isinstance(module, dict) and not parts:
        if not isinstance(architecture, dict):
            raise ValueError("a state_dict needs the architecture it belongs to, as a dict (docs/formats.md); got "
                             f"{type(architecture).__name__}")
        for k, v in module.items():
            if not isinstance(k, str) or not isinstance(v, torch.Tensor):
                raise ValueError(f"a state_dict maps names to tensors; {k!r} holds a {type(v).__name__}")
        return architecture, {_uatlab_name(k): v for k, v in module.items()}
    raise ValueError(f"cannot convert {type(module).__name__}" + (" with embedding/positions/head" if parts else "") +
                     ": give a UatlabNet, an nn.TransformerEncoderLayer or nn.TransformerEncoder (with optional "
                     "embedding=, positions=, head=), or a state_dict with its architecture")


# The architecture keys that decide what a network computes (a layer's "source" is only its name).
_SAME = ("d", "vocab", "input", "max_len", "readout", "pool")
_SAME_LAYER = ("type", "heads", "head_size", "score", "scale", "sqrt_scaling", "rpe", "dp_free", "causal",
               "strict_past", "window", "rope", "tied_qkv", "bias", "pre_norm", "width", "activation")


def fill(architecture, tensors, encoder, embedding=None, positions=None, head=None, causal=False):
    """Write a network (its architecture and {uatlab name: float64 tensor}) into the user's modules,
    the composition of bindings(); refused, with nothing written, unless the composition computes
    the same architecture and every value fits the modules' dtype exactly."""
    arch, bs = bindings(encoder, embedding, positions, head, causal)
    mine, theirs = complete(architecture), complete(arch)
    for k in _SAME:
        if mine.get(k) != theirs.get(k):
            raise ValueError(f"the modules have {k} = {theirs.get(k)}, the network {mine.get(k)}")
    if len(mine["layers"]) != len(theirs["layers"]):
        raise ValueError(f"the modules make {len(theirs['layers'])} sub-layers, the network has {len(mine['layers'])}")
    for i, (a, b) in enumerate(zip(mine["layers"], theirs["layers"])):
        for k in _SAME_LAYER:
            if a.get(k) != b.get(k):
                raise ValueError(f"sub-layer {i} ({b.get('source', '')}): the modules have {k} = {b.get(k)}, "
                                 f"the network {a.get(k)}")
        if "eps" in a and Fraction(str(a["eps"])) != Fraction(str(b["eps"])):
            raise ValueError(f"sub-layer {i} ({b.get('source', '')}): layer-norm eps differs")
    values = {b.name: torch.as_tensor(tensors[b.name], dtype=torch.float64) for b in bs}
    # Every check before any write, so that a refusal leaves the modules as they were. A fixed
    # binding (a head without bias, a tied head) holds what another binding writes, or what the
    # modules hold already: the network's value must equal it.
    for b in bs:
        why = b.check(values[b.name])
        if why:
            raise ValueError(why)
        if b.fixed:
            twin = next((o for o in bs if not o.fixed and o.param is b.param and o.rows == b.rows), None)
            held = values[twin.name] if twin else b.read().double()
            if not torch.equal(held, values[b.name]):
                raise ValueError(f"the network's {b.name} differs from {b.torch_name}, which the modules cannot "
                                 "hold otherwise")
    for b in bs:
        if not b.fixed:
            b.write(values[b.name])
