"""uatlab for Python: the C++ library's constructions, certified evaluation and analysis.

    import uatlab
    net, report = uatlab.memorize(X, Y)              # Kajitsuka & Sato, certified in MPFI
    lo, hi = net.eval(X[0], precision="interval:128")
    module = net.to_torch()                          # an nn.Module computing the same function
    back = uatlab.from_torch(module)                 # exact in float64
    uatlab.analyse(back, X, Y)["memorization"]

Sequences are (n, d) arrays, tokens as rows, as in PyTorch (the papers' d x n matrix in memory);
a batch is a list of them or an (B, n, d) array; networks with an embedding take token ids
(n,) instead. Numbers may be floats (taken exactly: every double is a dyadic rational), ints,
fractions.Fraction or strings ("1/3", "1e-400"). Errors are raised as uatlab.Error with the
library's message. docs/python.md documents every call.
"""
import json as _json
from fractions import Fraction as _Fraction

import numpy as _np

from . import _core

Error = _core.Error
version = _core.version
simd_path = _core.simd_path

__all__ = ["Error", "Network", "load", "memorize", "contextual", "polynomial", "approximate", "train",
           "init", "analyse", "from_torch", "dataset", "task", "simd_path"]


def _digits(n):
    """str(n) for an int of any size (Python 3.11 converts at most 4,300 digits at once)."""
    if n < 0:
        return "-" + _digits(-n)
    if n < 10 ** 4000:
        return str(n)
    k = n.bit_length() * 3 // 20  # about half its digits
    high, low = divmod(n, 10 ** k)
    return _digits(high) + _digits(low).rjust(k, "0")


def _integer(text):
    """int(text) for decimal digits of any length."""
    if len(text) <= 4000:
        return int(text)
    k = len(text) // 2
    return _integer(text[:k]) * 10 ** (len(text) - k) + _integer(text[k:])


def _fraction(text):
    """The Fraction of an exact number as the core writes it ("p/q" or "p"), of any length."""
    num, _, den = text.partition("/")
    n = _integer(num.lstrip("-"))
    return _Fraction(-n if num.startswith("-") else n, _integer(den) if den else 1)


def _exact(v):
    """The exact text of one number."""
    if isinstance(v, (bool, _np.bool_)):
        raise Error(f"a boolean is not a number: {v!r}")
    if isinstance(v, (int, _np.integer)):
        return _digits(int(v))
    if isinstance(v, str):
        if not v.strip():  # "" would read as "not given" (analyse's epsilon: no region)
            raise Error("an empty string is not a number")
        return v
    if isinstance(v, _Fraction):
        return f"{_digits(v.numerator)}/{_digits(v.denominator)}"
    if isinstance(v, (float, _np.floating)):
        f = float(v)
        if f != f or f in (float("inf"), float("-inf")):
            raise Error(f"a number is not finite: {v!r}")
        q = _Fraction(f)  # exact
        return f"{q.numerator}/{q.denominator}"
    raise Error(f"not a number: {v!r}")


def _token(t):
    """A token id as the dataset reader checks it (the CLI's path): 1.9 or -0.5 is refused there,
    never truncated here."""
    if isinstance(t, (bool, _np.bool_)):
        raise Error(f"a boolean is not a token id: {t!r}")
    if isinstance(t, (int, _np.integer)):
        return int(t)
    if isinstance(t, (float, _np.floating)):
        return float(t)
    raise Error(f"not a token id: {t!r}")


def _tolist(a):
    return a.tolist() if hasattr(a, "tolist") and not isinstance(a, (str, _Fraction)) else a


def _depth(a):
    d = 0
    while isinstance(a, (list, tuple)):
        if not a:
            return d + 1
        a, d = a[0], d + 1
    return d


def _sequences(X, tokens):
    """(list of sequences, whether X was a single one)."""
    X = _rows(X, "X (the sequences)")
    if isinstance(X, (list, tuple)):
        X = [_tolist(x) for x in X]
    single = _depth(X) == (1 if tokens else 2)
    return ([X] if single else list(X)), single


def _rows(a, what):
    """a as a list, or uatlab.Error naming what was expected (not Python's TypeError)."""
    a = _tolist(a)
    if not isinstance(a, (list, tuple)):
        raise Error(f"{what}: expected a list, got {type(a).__name__}")
    return a


def _shown(v):
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _whole(v, what, lo=-2**63, hi=2**63 - 1):
    """An integer argument within the C++ type it becomes (uatlab.Error, not pybind11's TypeError)."""
    if isinstance(v, (bool, _np.bool_)) or not isinstance(v, (int, _np.integer)):
        raise Error(f"{what} must be an integer, got {_shown(v)}")
    if not lo <= int(v) <= hi:
        raise Error(f"{what} = {int(v)} is outside [{lo}, {hi}]")
    return int(v)


def _seed(v):
    return _whole(v, "seed", 0, 2**64 - 1)


def _bits(v, what):
    return _whole(v, what, 0, 2**32 - 1)


def _small(v, what):  # a C++ int
    return _whole(v, what, -2**31, 2**31 - 1)


def _text(v, what):
    if not isinstance(v, str):
        raise Error(f"{what} must be a string, got {_shown(v)}")
    return v


def _flag(v, what):
    if not isinstance(v, (bool, _np.bool_)):
        raise Error(f"{what} must be True or False, got {_shown(v)}")
    return bool(v)


def _path(v, what="path"):
    import os
    p = os.fspath(v) if isinstance(v, (str, os.PathLike)) else None
    if not isinstance(p, str):
        raise Error(f"{what} must be a path (str or os.PathLike), got {_shown(v)}")
    return p


def _progress(v):
    if v is not None and not callable(v):
        raise Error(f"progress must be None or a callable, got {_shown(v)}")
    return v


def _options(options, what):
    """Keyword options as the JSON the C++ side parses: anything JSON cannot hold is refused here."""
    try:
        return _json.dumps(options, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise Error(f"{what}: {e}") from None


def _mask_entry(m, what):
    """A mask entry: a bool, or a number that is 0 or 1 (1.0 from a float array too)."""
    if isinstance(m, (bool, _np.bool_, int, float, _np.integer, _np.floating)) and m in (0, 1):
        return int(m)
    raise Error(f"{what}: entries are 0/1 or booleans, got {_shown(m)}")


def dataset(X, Y=None, mask=None, tokens=False):
    """A uatlab dataset from sequences X (each (n, d) numbers, or (n,) token ids with tokens=True),
    optional labels Y (per sequence: n labels, or (n, k) values; or one label for the sequence, its
    last token's: a number, or k != n numbers) and masks (n flags)."""
    xs, single = _sequences(X, _flag(tokens, "tokens"))
    ys = None if Y is None else [_tolist(Y)] if single else [_tolist(y) for y in _rows(Y, "Y (the labels)")]
    if ys is not None and len(ys) != len(xs):
        raise Error(f"{len(xs)} sequences but {len(ys)} label sequences")
    masks = [mask] if mask is not None and single else None if mask is None else _rows(mask, "mask")
    if masks is not None and len(masks) != len(xs):
        raise Error(f"{len(xs)} sequences but {len(masks)} masks")
    lines = []
    for i, x in enumerate(xs):
        at = f"sequence {i + 1}"
        x = _rows(x, at)
        line = {"tokens": [_token(t) for t in x]} if tokens else {
            "x": [[_exact(v) for v in _rows(tok, f"{at} token {j + 1}")] for j, tok in enumerate(x)]}
        if ys is not None and not isinstance(ys[i], list):  # one label, the last token's
            line["y"] = _exact(ys[i])
        elif ys is not None:
            y = _rows(ys[i], f"{at}: labels")
            line["y"] = [[_exact(v) for v in _tolist(t)] if isinstance(_tolist(t), list) else _exact(t) for t in y]
        if masks is not None:
            line["mask"] = [_mask_entry(m, f"{at}: mask") for m in _rows(masks[i], f"{at}: mask")]
        lines.append(_json.dumps(line))
    return _core.Dataset.parse("\n".join(lines) + "\n")


def _data(X, Y=None, mask=None, tokens=False):
    return X if isinstance(X, _core.Dataset) else dataset(X, Y, mask, tokens)


def task(name, **options):
    """A built-in task's dataset (uatlab train --task NAME), e.g. task("memorize", N=32, n=8, d=4, V=16);
    the options are those of the CLI's --task-KEY flags (docs/training.md)."""
    return _core.Dataset.task(_text(name, "task name"), _options(options, f"task {name!r}"))


class Network:
    """A network with exact weights, whatever it came from: held as rationals, or as doubles when every
    weight is one (a safetensors file or GPT-2 checkpoint, a random initialisation): GPT-2 124M
    loads in 2.6 s and 1.7 GiB so, where rationals took 57 s and 15 GiB."""

    def __init__(self, core):
        self._core = core

    @property
    def architecture(self):
        return _json.loads(self._core.architecture_json)

    @property
    def tensors(self):
        """{name: float64 numpy array in PyTorch's shape} (each exact weight rounded to nearest)."""
        return {n: self._core.tensor(n) for n in self._core.tensor_names()}

    def exact_tensor(self, name):
        """One tensor's exact values as a numpy object array of Fractions."""
        flat, shape = self._core.tensor(_text(name, "tensor name"), True)
        return _np.array([_fraction(v) for v in flat], dtype=object).reshape(shape)

    @property
    def parameter_count(self):
        return self._core.parameter_count

    def save(self, path, dtype="F64"):
        """Write a .json file (lossless) or safetensors (dtype F64 or F32), atomically."""
        self._core.save(_path(path), _text(dtype, "dtype"))

    def eval(self, X, precision="double", max_width=1e-9):
        """Evaluate sequences X in a precision: "float", "double" (numpy arrays), "BITS" (MPFR) or
        "rational" (Fractions, exact), "interval:BITS" ((lo, hi) numpy arrays rounded outward),
        "certified" (the certified engine: (lo, hi) as intervals, each output enclosed to
        max_width·max(1, |y|) where its tiers reach it; certify() says which tier decided and how
        wide each enclosure is). One result per sequence; a list for a batch."""
        if _text(precision, "precision").strip() == "certified":
            out = self.certify(X, max_width=max_width)
            return out["y"] if isinstance(out, dict) else [r["y"] for r in out]
        tokens = self.architecture.get("vocab", 0) > 0
        single = False
        if not isinstance(X, _core.Dataset):
            xs, single = _sequences(X, tokens)
            X = dataset(xs, tokens=tokens)
        out = self._core.eval(X, _text(precision, "precision"))
        p = precision.strip()
        if p.startswith("interval"):
            out = [tuple(t) for t in out]
        elif p not in ("float", "double"):
            out = [[[_fraction(v) for v in tok] for tok in y] for y in out]
        return out[0] if single else out

    def certify(self, X, max_width=1e-9, max_bits=256):
        """The certified engine (uatlab eval --precision certified, docs/certified.md) on sequences X:
        per sequence a dict with "y" ((lo, hi) numpy arrays (tokens, outputs), rounded outward),
        "tier" (the arithmetic that gave it: "ball:53", "ball:113", "arb:BITS" or "interval:BITS"), "reached"
        (every width ≤ max_width·max(1, |y|)), "relative_width" (the largest, rounded up),
        "layer_widths" (the widest enclosure of the residual stream before the first sub-layer,
        after each and at the output) and "tried" (each tier's width or error). A sequence that no
        tier up to Arb (or MPFI) at max_bits brings to the width keeps its narrowest enclosure, reached
        False. One dict for one sequence; a list for a batch."""
        tokens = self.architecture.get("vocab", 0) > 0
        single = False
        if not isinstance(X, _core.Dataset):
            xs, single = _sequences(X, tokens)
            X = dataset(xs, tokens=tokens)
        out = self._core.eval_certified(X, float(max_width), int(max_bits))
        for r in out:
            r["y"] = tuple(r["y"])
        return out[0] if single else out

    def run(self, X, precision="double"):
        """Evaluate X and capture the activations (uatlab eval --capture): per sequence a dict with
        "y" (as eval gives it), "resid" (the residual stream before the first sub-layer and after
        each: len(layers) + 1 entries, each (tokens, d)) and "pattern" ({sub-layer index: one
        (queries, keys) matrix per head}); every entry in the precision asked, intervals as (lo, hi).
        TransformerLens's names: docs/python.md. One dict for one sequence; a list for a batch."""
        tokens = self.architecture.get("vocab", 0) > 0
        single = False
        if not isinstance(X, _core.Dataset):
            xs, single = _sequences(X, tokens)
            X = dataset(xs, tokens=tokens)
        out = self._core.eval(X, _text(precision, "precision"), True)
        p = precision.strip()

        def convert(m):
            if p.startswith("interval"):
                return tuple(m)
            if p in ("float", "double"):
                return m
            return [[_fraction(v) for v in tok] for tok in m]
        out = [{"y": convert(o["y"]), "resid": [convert(r) for r in o["resid"]],
                "pattern": {int(k): [convert(h) for h in v] for k, v in o["pattern"].items()}} for o in out]
        return out[0] if single else out

    def to_torch(self, dtype=None, into=None, embedding=None, positions=None, head=None, causal=False):
        """An nn.Module (uatlab.pytorch.UatlabNet) with these weights, float64 unless told. With
        into=ENCODER (and the embedding, positions and head given to from_torch), the weights go
        back into the user's own modules instead: refused, with nothing written, unless they make
        the same architecture and their dtype holds every value exactly. Returns the modules' encoder."""
        from . import pytorch
        import torch
        if into is not None:
            try:
                pytorch.fill(self.architecture, self.tensors, into, embedding, positions, head, causal)
            except ValueError as e:
                raise Error(str(e)) from None
            return into
        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise Error(f"dtype must be a torch.dtype, got {_shown(dtype)}")
        dtype = dtype or torch.float64
        net = pytorch.UatlabNet(pytorch.complete(self.architecture)).to(dtype)
        state = {pytorch._torch_name(k): torch.from_numpy(v).to(dtype) for k, v in self.tensors.items()}
        net.load_state_dict(state, strict=True)
        return net

    def __repr__(self):
        a = self.architecture
        return f"uatlab.Network(d={a['d']}, layers={len(a['layers'])}, parameters={self.parameter_count})"


def load(path):
    """A model file (safetensors, lossless .json, or a training checkpoint)."""
    return Network(_core.Network.load(_path(path)))


def init(architecture, seed=1, gain=1.0):
    """A seeded random network (uatlab init): architecture as a dict (docs/formats.md)."""
    if not isinstance(architecture, dict):
        raise Error(f"architecture must be a dict (docs/formats.md), got {type(architecture).__name__}")
    if isinstance(gain, (bool, _np.bool_)) or not isinstance(gain, (int, float, _Fraction, _np.number)):
        raise Error(f"gain must be a number, got {gain!r}")
    try:
        gain = float(gain)
    except OverflowError:
        raise Error(f"gain {_shown(gain)} is beyond double's range") from None
    return Network(_core.init_random(_options(architecture, "architecture"), _seed(seed), gain))


def _pair(r):
    net, report = r
    return Network(net), _json.loads(report)


def contextual(X, mode="tuned", tied=False, seed=1, max_bits=1 << 16, progress=None):
    """Kajitsuka & Sato's contextual-mapping attention for the sequences X; (network, report)."""
    return _pair(_core.contextual(_data(X), _text(mode, "mode"), _flag(tied, "tied"), _seed(seed),
                                  _bits(max_bits, "max_bits"), _progress(progress)))


def memorize(X, Y, mode="tuned", tied=False, value_map=None, tolerance="1e-6", seed=1, max_bits=1 << 16,
             blocks=0, progress=None, setting="contextual"):
    """A memorization network for sequences X and labels Y, every counted output certified within the
    tolerance in MPFI; (network, report).

    setting "contextual" (Kajitsuka & Sato 2024): labels per token (each (n, k) values), the rank-1
    contextual mapping and a value map: "zhang" (default), "bounded" or "deep" (bit extraction,
    integer labels, d >= 4; blocks: its B, 0 for the fewest parameters).
    setting "next-token" (one integer label per sequence, its last token's; sqrt(N) parameters) or
    "seq-to-seq" (integer labels per token, positions; sqrt(nN); tokens of fewer than 4 numbers are
    lifted to 4 by an input projection [I; 0]): the averaging attention and the deep
    value map (docs/theory/optimal-capacity.md); mode, tied and value_map other than "deep" are refused.
    """
    if _text(setting, "setting") not in ("contextual", "next-token", "seq-to-seq"):
        raise Error(f"setting must be contextual, next-token or seq-to-seq, got {setting!r}")
    value_map = "zhang" if value_map is None and setting == "contextual" else value_map
    value_map = value_map if value_map is None else _text(value_map, "value_map")
    if setting != "contextual":
        if value_map not in (None, "deep") or _text(mode, "mode") != "tuned" or _flag(tied, "tied"):
            raise Error(f"setting {setting!r} builds the averaging attention and the deep value map; "
                        "mode, tied and value_map choose the contextual setting's")
        return _pair(_core.memorize_optimal(_data(X, Y), setting, _exact(tolerance), _seed(seed),
                                            _bits(max_bits, "max_bits"), _small(blocks, "blocks"), _progress(progress)))
    return _pair(_core.memorize(_data(X, Y), _text(mode, "mode"), _flag(tied, "tied"),
                                value_map, _exact(tolerance), _seed(seed),
                                _bits(max_bits, "max_bits"), _small(blocks, "blocks"), _progress(progress)))


def polynomial(expr, vars, box="1", variant="single-head", degree=0, seed=1):
    """Fang et al.'s blocks computing the polynomial exactly on [-box, box]^d; (network, proof)."""
    vars = [_text(v, "a variable name") for v in _rows(vars, "vars")]
    return _pair(_core.polynomial(_text(expr, "expr"), vars, _exact(box), _text(variant, "variant"),
                                  _small(degree, "degree"), _seed(seed)))


def approximate(target, d, n, K, construction="yun", pe=False, value_map="", certify=False, samples=20000,
                samples_standard=2000, seed=1, progress=None):
    """Yun et al.'s construction (or Kajitsuka's Proposition 1) for a target: a built-in name, an
    expression, or a Python callable mapping an (n, d) array to an (n, d) array.
    Returns (modified network, standard network, report)."""
    if not isinstance(target, str) and not callable(target):
        raise Error(f"target must be a name, an expression or a callable, got {_shown(target)}")
    mod, std, report = _core.approximate(target, _small(d, "d"), _small(n, "n"), _small(K, "K"),
                                         _text(construction, "construction"), _flag(pe, "pe"),
                                         _text(value_map, "value_map"), _flag(certify, "certify"),
                                         _whole(samples, "samples"), _whole(samples_standard, "samples_standard"),
                                         _seed(seed), _progress(progress))
    return Network(mod), Network(std), _json.loads(report)


def train(model, X=None, Y=None, data=None, validation=None, mask=None, dtype="double", progress=None,
          **config):
    """Train a network (a Network, or an architecture dict initialised with init_seed) on arrays
    X, Y or a dataset (uatlab.task(...)); config: every field of the C++ TrainConfig, as the CLI's
    flags name them: loss ("mse" or "ce"), steps, batch, lr, min_lr, warmup, weight_decay, clip,
    seed, freeze, nonnegative_rates, stop_at_full_accuracy, metrics, ... (docs/training.md).
    Returns (trained network, summary)."""
    if not isinstance(model, (Network, dict)):
        raise Error(f"train: model must be a uatlab.Network or an architecture dict, got {type(model).__name__}")
    if not isinstance(model, Network):
        model = init(model, config.pop("init_seed", 1), config.pop("gain", 1.0))
    tokens = model.architecture.get("vocab", 0) > 0
    data = data if data is not None else _data(X, Y, mask, tokens)
    for name, d in (("data", data), ("validation", validation)):
        if not isinstance(d, _core.Dataset) and not (name == "validation" and d is None):
            raise Error(f"{name} must be a uatlab dataset (uatlab.dataset(...) or uatlab.task(...)), got {_shown(d)}")
    return _pair(_core.train(model._core, data, validation, _options(config, "train options"),
                             _text(dtype, "dtype"), _progress(progress)))


def analyse(net, X, Y=None, labels="auto", tolerance="1e-6", bits=64, max_bits=4096, min_bits=True,
            rounding=True, separation=True, seed=1, plot=None, progress=None, summary=False, affine=False,
            direct_rounding=False, epsilon=None, epsilon_steps=16, region_method="intervals", engine=True):
    """What the network does on labelled data, certified (docs/analyse.md): the report as a dict
    (with summary=True, also the human summary). plot: a PNG path for the separation per layer.
    affine: feed-forward sub-layers as exact affine maps on the enclosures (the deep value map).
    direct_rounding: bfloat16/float16 weights rounded straight to the format, not through float32
    as PyTorch's module.to(dtype) makes them. epsilon: also certify every prediction over the ℓ∞
    box of that radius (exact: a number, Fraction or string) around each input vector (the
    embedding for token ids), with certified margins and each sequence's largest certified radius
    (report["region"]). region_method: "intervals" (the box through the network as intervals),
    "mean-value" (y(x0) + J(box)(x - x0), the Jacobian enclosed over the box: radii 1.6-1.8x larger
    on trained models, 19-29x slower; needs softmax/linear attention and ReLU/GELU, as training
    does), "zonotope" (affine forms over the box's coordinates, every rounding bounded: radii
    730-3,100x larger than the intervals' on trained models, a median 6.8-7.5x below an attack's, 7-21x
    slower; no hardmax or mixers) or "balls" (the box through the certified engine's ball tier: fast,
    radii 1.0-110x smaller than the intervals' on two trained 1.6M-weight models; report["region"]["predictions"]
    ["tier"]). engine: with min_bits=False (and no region by an MPFI method), the predictions are
    decided by the certified engine's balls where they decide every one (report["memorization"]
    ["tier"] says which decided), MPFI otherwise; engine=False: MPFI always."""
    if not isinstance(net, Network):
        raise Error(f"analyse: net must be a uatlab.Network, got {_shown(net)}")
    tokens = net.architecture.get("vocab", 0) > 0
    report, text = _core.analyse(net._core, _data(X, Y, tokens=tokens), _text(labels, "labels"), _exact(tolerance),
                                 _bits(bits, "bits"), _bits(max_bits, "max_bits"), _flag(min_bits, "min_bits"),
                                 _flag(rounding, "rounding"), _flag(separation, "separation"), _seed(seed),
                                 "" if plot is None else _path(plot, "plot"), _flag(affine, "affine"),
                                 _flag(direct_rounding, "direct_rounding"), "" if epsilon is None else _exact(epsilon),
                                 _small(epsilon_steps, "epsilon_steps"), _text(region_method, "region_method"),
                                 _flag(engine, "engine"), _progress(progress))
    return (_json.loads(report), text) if _flag(summary, "summary") else _json.loads(report)


def from_torch(module, architecture=None, causal=False, embedding=None, positions=None, head=None):
    """A uatlab Network from PyTorch: a uatlab.pytorch.UatlabNet, an nn.TransformerEncoderLayer or
    nn.TransformerEncoder (norm_first either way, ReLU or GELU, its final norm), or a state_dict with
    the architecture it belongs to. With an encoder, the common composition around it too:
    embedding (an nn.Embedding of token ids, or an nn.Linear: an input projection of continuous
    tokens to d), positions (an nn.Embedding, a (max_len, d) table such
    as the tutorials' sinusoidal buffer, or a module holding one; added to the embedded tokens), and
    head (an nn.Linear to the outputs, or the embedding itself for a tied unembedding). Every weight
    is kept exactly; what has no exact counterpart is refused. PyTorch passes a causal mask at call
    time, not in the module: causal=True gives the network of encoder(x, mask=causal), the default
    that of encoder(x). uatlab.pytorch.name_map(...) lists which PyTorch tensor became which
    uatlab tensor (docs/python.md); each sub-layer keeps PyTorch's name as its "source"."""
    from . import pytorch
    causal = _flag(causal, "causal")
    try:
        arch, state = pytorch.to_uatlab(module, architecture, embedding, positions, head, causal)
    except ValueError as e:  # what cannot be converted exactly is refused, as a uatlab.Error
        raise Error(str(e)) from None
    arch = _json.loads(_options(arch, "architecture"))  # a copy: the caller's dict stays as it was
    if causal:
        for layer in arch.get("layers", []) if isinstance(arch.get("layers"), list) else []:
            if isinstance(layer, dict) and layer.get("type") == "attention":
                layer["causal"] = True
    net = Network(_core.Network.zeros(_json.dumps(arch)))
    names = set(net._core.tensor_names())
    if set(state) != names:
        raise Error(f"tensors differ from the architecture's: missing {sorted(names - set(state))}, "
                    f"unexpected {sorted(set(state) - names)}")
    for name, t in state.items():
        net._core.set_tensor(name, t.detach().to("cpu").double().numpy())
    return net
