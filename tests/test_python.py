"""The Python module uatlab: exact inputs, every precision, constructions, training, analyse,
PyTorch both ways (nn.TransformerEncoderLayer with norm_first either way, ReLU and GELU, to 1e-12
in double; the round trip exact in float64), errors as exceptions, callbacks, the GIL released.

usage: /usr/bin/python3 tests/test_python.py BUILD_DIR
"""
import json
import os
import sys
import tempfile
import threading
import time
from fractions import Fraction

import numpy as np
import torch

sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import uatlab  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, passed  # noqa: E402

rng = np.random.default_rng(0)


def memorization_data():
    V = rng.normal(size=(8, 3))
    X = [V[rng.choice(8, 4, replace=False)] for _ in range(12)]
    Y = [2 * x + np.sort(x, axis=0).sum(axis=0) for x in X]  # consistent per (token, set)
    return X, Y


def test_numbers_and_precisions():
    # A linear-score network is exact in rationals: Fractions in, Fractions out, equal to numpy's math.
    net = uatlab.init({"d": 2, "layers": [{"type": "attention", "score": "linear", "heads": 1, "head_size": 2},
                                          {"type": "feedforward", "width": 3}]}, seed=4)
    X = [[Fraction(1, 3), "0.25"], [2, -0.5]]
    exact = net.eval(X, precision="rational")
    check(all(isinstance(v, Fraction) for tok in exact for v in tok), "rational results are Fractions")
    d = net.eval(X)
    check(np.abs(np.array(exact, dtype=float) - d).max() < 1e-15, "double agrees with rational")
    lo, hi = net.eval(X, precision="interval:100")
    e = np.array(exact, dtype=float)
    check(((lo <= e) & (e <= hi)).all() and (hi - lo).max() < 1e-15, "intervals enclose, tightly")
    m = net.eval(X, precision="300")
    check(all(isinstance(v, Fraction) for tok in m for v in tok), "MPFR results are exact dyadic Fractions")
    check(isinstance(net.eval([X, X]), list) and len(net.eval([X, X])) == 2, "a batch gives a list")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "n.json")
        net.save(path)
        back = uatlab.load(path)
        check(back.eval(X, precision="rational") == exact, "lossless .json round trip")
    t = net.exact_tensor("layers.0.q.weight")
    check(t.shape == (2, 2) and isinstance(t[0, 0], Fraction), "exact tensors as Fractions")
    lo, hi = net.eval(X, precision="certified")
    check(((lo <= e) & (e <= hi)).all() and ((hi - lo) <= 1e-9 * np.maximum(1, np.abs(e))).all(),
          "the certified engine encloses to its width")
    r = net.certify([X, X], max_width=1e-20)
    check(len(r) == 2 and r[0]["tier"] == "ball:113" and r[0]["reached"] and len(r[0]["layer_widths"]) == 4,
          "certify says which tier decided and the widths per layer")
    lo, hi = r[1]["y"]
    check(((lo <= e) & (e <= hi)).all(), "certify's enclosure holds")
    # Numbers past Python's 4,300-digit limit of int <-> str, both ways (issue 78: a ValueError).
    huge = Fraction(1, 3 ** 10000)  # 4,772 digits
    Xh = [[huge, 1], [2, -huge]]
    exact_h = net.eval(Xh, precision="rational")
    check(all(isinstance(v, Fraction) for tok in exact_h for v in tok), "a 4,772-digit input, exact results")
    check(abs(float(exact_h[0][0] - exact[0][0])) < 1 and exact_h != exact, "and they are its results")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "h.json")
        net.save(path)
        with open(path) as f:
            model = json.load(f)
        limit = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)  # the test writes the digits; uatlab reads them under the limit
        model["tensors"]["layers.0.q.weight"]["data"][0] = f"1/{3 ** 10000}"
        sys.set_int_max_str_digits(limit)
        with open(path, "w") as f:
            json.dump(model, f)
        check(uatlab.load(path).exact_tensor("layers.0.q.weight").flat[0] == huge, "a 4,772-digit weight, exactly")


def test_constructions():
    X, Y = memorization_data()
    calls = []
    net, rep = uatlab.memorize(X, Y, progress=lambda s, d, t: calls.append(s))
    check(rep["max_error_certified"] <= 1e-6 and rep["N"] == 12, "memorize certifies")
    check(len(calls) > 0, "the progress callback is called")
    lo, hi = net.eval(X[0], precision="interval:128")
    check(((lo <= Y[0] + 1e-6) & (hi >= Y[0] - 1e-6)).all(), "memorized outputs within the tolerance")
    rng = np.random.default_rng(5)
    V = np.round(rng.normal(size=(12, 4)), 3)
    sets = [sorted(rng.choice(12, 3, replace=False)) for _ in range(8)]
    Xd = [V[s] for s in sets]
    Yd = [[[(7 * t + sum(s)) % 3] for t in s] for s in sets]
    dnet, drep = uatlab.memorize(Xd, Yd, value_map="deep", blocks=3)
    check(drep["value_map"]["deep"]["blocks"] == 3 and drep["max_error_certified"] == 0,
          f"the deep value map memorizes exactly: {drep['value_map']['deep']}")
    ad = uatlab.analyse(dnet, Xd, Yd, labels="values", rounding=False, separation=False, affine=True)
    check(ad["memorization"]["certified"] == 24, f"analyse(affine=True) certifies the deep map: {ad['memorization']}")
    yd = dnet.eval(Xd[1], precision="512")
    check(all(abs(yd[k][0] - Yd[1][k][0]) < Fraction(1, 10**100) for k in range(3)), "deep: MPFR gives the labels")
    # Next-token: one integer label per sequence, the averaging attention and the deep map.
    Vn = np.round(rng.normal(size=(10, 4)), 3)
    Xn = [Vn[rng.choice(10, 5)] for _ in range(60)]
    Yn = [int(rng.integers(0, 3)) for _ in range(60)]
    nnet, nrep = uatlab.memorize(Xn, Yn, setting="next-token")
    check(nrep["max_error_certified"] == 0 and nrep["ids"]["delta_at_least_bound"] and nrep["ids"]["count"] == 60,
          f"next-token memorization certified: {nrep['ids']}")
    check(nrep["accounting"]["parameters_stored"] == nrep["accounting"]["parameters_plan"],
          "next-token: the plan's closed form is the stored count")
    yn = nnet.eval(Xn[7], precision="512")
    check(abs(yn[-1][0] - Yn[7]) < Fraction(1, 10**100), "next-token: MPFR gives the last token's label")
    for what, bad in [("value_map choose the contextual", lambda: uatlab.memorize(Xn, Yn, setting="next-token",
                                                                                  value_map="zhang")),
                      ("labels each sequence once", lambda: uatlab.memorize(Xn, Yn)),
                      ("setting must be", lambda: uatlab.memorize(Xn, Yn, setting="next"))]:
        try:
            bad()
            check(False, f"refused: {what}")
        except uatlab.Error as e:
            check(what in str(e), f"refused ({what}): {e}")
    att, crep = uatlab.contextual(X)
    check(crep["V"] == 8 and att.architecture["layers"][0]["type"] == "attention", "contextual")
    p, proof = uatlab.polynomial("x1^2*x2 - 1/3", ["x1", "x2"])
    check(proof["exact"], "polynomial proven exact")
    mod, std, arep = uatlab.approximate(lambda Z: np.sin(2 * np.pi * Z), 1, 2, 4, samples=500,
                                        samples_standard=50)
    check(arep["K"] == 4 and mod.parameter_count > 0 and std.parameter_count > 0, "approximate a callable")
    mod2, _, arep2 = uatlab.approximate("tokenwise-sin", 1, 2, 4, samples=500, samples_standard=50)
    close = lambda a, b: all(abs(a[k]["value"] - b[k]["value"]) <= 1e-12 * b[k]["value"] for k in b)
    check(close(arep["d_1"], arep2["d_1"]) and close(arep["d_2"], arep2["d_2"]),
          f"the callable sin(2 pi x) gives tokenwise-sin's d_p: {arep['d_1']} vs {arep2['d_1']}")

    def boom(Z):
        raise ValueError("boom")
    try:
        uatlab.approximate(boom, 1, 2, 4)
        check(False, "a failing target raises")
    except ValueError as e:
        check("boom" in str(e), "the target's own exception arrives")
    inner = uatlab.init({"d": 1, "layers": []})

    def nested(Z):  # a target that calls uatlab: in double it works, at MPFR precision it raises
        inner.eval(np.asarray(Z), precision="double")
        inner.eval(np.asarray(Z), precision="100")
        return np.sin(np.asarray(Z))
    try:  # deadlocked before (a worker waiting for the precision the outer call holds)
        uatlab.approximate(nested, 1, 2, 4, samples=50, samples_standard=10)
        check(False, "a nested MPFR call raises")
    except uatlab.Error as e:
        check("inside a target or progress callback" in str(e), f"a nested MPFR call is refused: {e}")
    tempered = uatlab.task("kernel-tempered", N=4, n=6, cutoff=2, seed=3)  # every task option, as the CLI has
    check(len(tempered) == 4, "task() takes cutoff, as the CLI's --task-cutoff")
    tok = uatlab.init({"d": 2, "vocab": 4, "readout": 2, "layers": [{"type": "attention"}]})
    check(len(tok.eval([1, 2])) == 2, "integer token ids are read")
    for ids in ([1.9, 2.7], [-0.5, 1]):  # truncated to [1, 2] and [0, 1] before; the CLI refuses them
        try:
            tok.eval(ids)
            check(False, f"token ids {ids} are refused")
        except uatlab.Error as e:
            check("token" in str(e), f"non-integer token ids are refused as the CLI refuses them: {e}")
    try:  # ran as yun before
        uatlab.approximate("tokenwise-sin", 1, 2, 4, construction="foo")
        check(False, "an unknown construction is refused")
    except uatlab.Error as e:
        check("expected yun or kajitsuka" in str(e), f"an unknown construction is named: {e}")
    try:  # returned networks whose own Lemma 6 check failed, where the CLI exits 1
        uatlab.approximate("tokenwise-sin", 1, 1, 2)
        check(False, "a failed Lemma 6 check is refused")
    except uatlab.Error as e:
        check("Lemma 6 does not hold" in str(e), f"a failed exact check raises: {e}")
    for bad in (lambda: uatlab.task("memorize", bogus=1), lambda: uatlab.train({"d": 2, "layers": []}, X,
                                                                                  Y, stepz=3)):
        try:
            bad()
            check(False, "an unknown option raises")
        except uatlab.Error as e:
            check("unknown option" in str(e), f"unknown options are refused: {e}")
    # Wrong argument types raise uatlab.Error naming the argument (they raised Python's TypeError
    # from inside the module before).
    net = uatlab.init({"d": 2, "readout": 3, "layers": []})
    for what, bad in [("model must be", lambda: uatlab.train(uatlab.task("memorize", N=4, n=2, d=2, V=4))),
                      ("expected a list, got str", lambda: uatlab.train(net, X=["ab"], Y=[1])),
                      ("expected a list, got NoneType", lambda: uatlab.memorize(None, None)),
                      ("seed must be an integer", lambda: uatlab.init({"d": 2, "layers": []}, "x")),
                      ("architecture must be a dict", lambda: uatlab.init(42))]:
        try:
            bad()
            check(False, f"{what}: raises")
        except uatlab.Error as e:
            check(what in str(e), f"a wrong argument type is a uatlab.Error: {e}")
    try:
        uatlab.memorize(X, [y + 1 if i == 0 else y for i, y in enumerate(Y)] + [Y[0]])
        check(False, "mismatched labels raise")
    except uatlab.Error as e:
        check("sequences" in str(e), "uatlab.Error with the message")


def test_torch_both_ways():
    x = torch.randn(3, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for norm_first in (False, True):
        for act in ("relu", "gelu"):
            layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation=act, norm_first=norm_first,
                                                     batch_first=True, dtype=torch.float64).eval()
            with torch.no_grad():
                for p in layer.parameters():  # away from the initialisation's zeros and ones
                    p.normal_(0, 0.3)
            net = uatlab.from_torch(layer)
            if act == "gelu" and not norm_first:  # once converted as exact GELU (1.7e-4 off), now its own form
                tanh_gelu = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True,
                                                             activation=torch.nn.GELU(approximate="tanh"),
                                                             dtype=torch.float64).eval()
                with torch.no_grad():
                    for p in tanh_gelu.parameters():
                        p.normal_(0, 0.3)
                    ref_tanh = tanh_gelu.train()(x).numpy()  # eval mode's fast path runs the erf form
                    fast = tanh_gelu.eval()(x).numpy()
                import warnings
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    got_tanh = np.stack(uatlab.from_torch(tanh_gelu).eval(x.numpy()))
                check(np.abs(got_tanh - ref_tanh).max() / np.abs(ref_tanh).max() < 1e-12,
                      "GELU(approximate='tanh') converts as gelu_tanh: the layer's own (training-mode) function")
                check(any("fast path" in str(w.message) for w in caught) and np.abs(fast - ref_tanh).max() > 1e-6,
                      "and a warning says that PyTorch's eval fast path computes the erf form instead")
                replaced = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
                replaced.activation = torch.tanh  # after construction: torch's fast-path flag still says ReLU
                try:
                    uatlab.from_torch(replaced)
                    check(False, f"activation {replaced.activation} is refused")
                except uatlab.Error as e:
                    check("activation" in str(e), f"an activation uatlab lacks is refused: {e}")
            n = x.shape[1]  # the causal mask PyTorch takes at call time: from_torch(causal=True)
            mask = torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), diagonal=1)
            with torch.no_grad():
                ref_causal = layer(x, src_mask=mask)
            got_causal = np.stack(uatlab.from_torch(layer, causal=True).eval(x.numpy()))
            err_c = np.abs(got_causal - ref_causal.numpy()).max() / np.abs(ref_causal.numpy()).max()
            check(err_c < 1e-12, f"causal=True matches layer(x, src_mask=causal): {err_c:.2e}")
            eps = [l["eps"] for l in net.architecture["layers"] if "eps" in l]
            check(eps and all(Fraction(e) == Fraction(1e-5) for e in eps),
                  f"LayerNorm eps kept as the float PyTorch uses, not the decimal 1e-05: {eps}")
            with torch.no_grad():
                ref = layer(x)
            got = np.stack(net.eval(x.numpy()))
            err = np.abs(got - ref.numpy()).max() / np.abs(ref.numpy()).max()
            check(err < 1e-12, f"TransformerEncoderLayer norm_first={norm_first} {act}: {err:.2e}")
            lo, hi = net.eval(x[0].numpy(), precision="interval:200")
            check(((lo <= ref[0].numpy()) & (ref[0].numpy() <= hi)).all() or err > 0,
                  "the interval result holds the float64 one up to its rounding")
            back = net.to_torch()
            with torch.no_grad():
                check(torch.equal(back(x), back(x)), "to_torch runs")
            again = uatlab.from_torch(back)
            check(all(np.array_equal(again.tensors[k], v) for k, v in net.tensors.items()),
                  "torch -> uatlab -> torch -> uatlab is exact in float64")
            state = {k: v.clone() for k, v in back.state_dict().items()}
            viasd = uatlab.from_torch(state, net.architecture)
            check(all(np.array_equal(viasd.tensors[k], v) for k, v in net.tensors.items()), "from a state_dict")
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 4, 12, dropout=0.0, batch_first=True,
                                                                       dtype=torch.float64), 2,
                                      norm=torch.nn.LayerNorm(8, dtype=torch.float64)).eval()
    net = uatlab.from_torch(enc)
    with torch.no_grad():
        ref = enc(x)
    check(np.abs(np.stack(net.eval(x.numpy())) - ref.numpy()).max() < 1e-12, "TransformerEncoder with a final norm")
    test_whole_models()


def test_whole_models():
    """A whole model (issue 42): token embedding + learned or sinusoidal positions + encoder + final
    norm + Linear or tied head, causal or not; PyTorch names in reports; back into the user's own
    modules, exactly or refused with nothing written."""
    from uatlab import pytorch as up
    nn = torch.nn
    torch.manual_seed(3)
    d, V, L, H = 8, 10, 6, 2

    def encoder(heads=H):
        return nn.TransformerEncoder(nn.TransformerEncoderLayer(d, heads, 16, dropout=0.0, batch_first=True), 2,
                                     norm=nn.LayerNorm(d), enable_nested_tensor=False).double().eval()
    enc, emb, pos, head = encoder(), nn.Embedding(V, d).double(), nn.Embedding(L, d).double(), nn.Linear(d, 3).double()
    ids = torch.randint(0, V, (4, L))
    seqs = [[int(t) for t in r] for r in ids]
    mask = torch.triu(torch.full((L, L), float("-inf"), dtype=torch.float64), diagonal=1)
    sinus = torch.zeros(L, 1, d, dtype=torch.float64)  # the tutorials' buffer, (max_len, 1, d)
    position = torch.arange(L, dtype=torch.float64).unsqueeze(1)
    sinus[:, 0, 0::2] = torch.sin(position / 10000 ** (torch.arange(0, d, 2) / d))
    sinus[:, 0, 1::2] = torch.cos(position / 10000 ** (torch.arange(0, d, 2) / d))
    cases = [("learned positions, Linear head", dict(embedding=emb, positions=pos, head=head), False,
              lambda m: head(enc(emb(ids) + pos.weight[:L], mask=m))),
             ("sinusoidal table, tied head", dict(embedding=emb, positions=sinus, head=emb), False,
              lambda m: enc(emb(ids) + sinus[:L, 0], mask=m) @ emb.weight.t()),
             ("no positions, no head", dict(embedding=emb), False, lambda m: enc(emb(ids), mask=m))]
    for what, parts, _, torch_forward in cases:
        for causal in (False, True):
            net = uatlab.from_torch(enc, causal=causal, **parts)
            with torch.no_grad():
                ref = torch_forward(mask if causal else None).numpy()
            err = np.abs(np.stack(net.eval(seqs)) - ref).max() / np.abs(ref).max()
            check(err < 1e-13, f"whole model, {what}, causal={causal}: {err:.1e}")
    net = uatlab.from_torch(enc, embedding=emb, positions=pos, head=head)
    # Activations: the residual stream and each head's pattern, against PyTorch's own.
    x0 = emb(ids[:1]) + pos.weight[:L]
    layer0 = enc.layers[0]
    with torch.no_grad():
        attn_out, weights = layer0.self_attn(x0, x0, x0, need_weights=True, average_attn_weights=False)
        after_attn = x0 + attn_out
        after_norm = layer0.norm1(after_attn)
    got = net.run(seqs[0])
    check(len(got["resid"]) == len(net.architecture["layers"]) + 1 and sorted(got["pattern"]) == [0, 4],
          f"run: a residual per sub-layer and the input, patterns of the attention sub-layers {sorted(got['pattern'])}")
    for what, mine, theirs in (("input", got["resid"][0], x0[0]), ("after attention", got["resid"][1], after_attn[0]),
                               ("after norm1", got["resid"][2], after_norm[0]),
                               ("pattern head 1", got["pattern"][0][1], weights[0, 1]),
                               ("output", got["y"], head(enc(x0))[0].detach())):
        err = np.abs(mine - theirs.detach().numpy()).max()
        check(err < 1e-13, f"run: {what} as PyTorch computes it: {err:.1e}")
    check(np.allclose(got["pattern"][4][0].sum(axis=1), 1), "a pattern's rows (queries) sum to 1")
    lo, hi = net.run(seqs[0], precision="interval:80")["pattern"][0][0]
    check(((lo <= got["pattern"][0][0] + 1e-15) & (got["pattern"][0][0] - 1e-15 <= hi)).all() and (hi - lo).max() < 3e-16,
          "run in intervals encloses the pattern, to a double ulp (its ends are rounded outward)")
    sources = [l.get("source") for l in net.architecture["layers"]]
    check(sources[:4] == ["layers.0.self_attn", "layers.0.norm1", "layers.0.linear1/linear2", "layers.0.norm2"]
          and sources[-1] == "norm", f"each sub-layer keeps PyTorch's name: {sources}")
    names = up.name_map(enc, emb, pos, head)
    check(names["layers.1.self_attn.in_proj_weight[8:16]"] == "layers.4.k.weight" and
          names["embedding.weight"] == "embed.weight" and names["head.bias"] == "readout.bias",
          "name_map: PyTorch's names to uatlab's")
    rep = uatlab.analyse(net, [s for s in seqs], [[0] * L for _ in seqs], min_bits=False, rounding=False)
    check([l["source"] for l in rep["separation"]] == ["layers.0.self_attn", "layers.1.self_attn"],
          "analyse names the attention layers as PyTorch does")
    region = uatlab.analyse(net, seqs, [[0] * L for _ in seqs], min_bits=False, rounding=False, separation=False,
                            epsilon=Fraction(1, 10**6), epsilon_steps=4)["region"]
    check(region["epsilon"] == "1/1000000" and len(region["largest_epsilon_certified"]) == len(seqs) and
          len(region["margin_certified"][0]) == L and region["method"] == "intervals",
          f"analyse(epsilon=...) reports the region: {sorted(region)}")
    try:
        uatlab.analyse(net, seqs[:1], [[0] * L], min_bits=False, rounding=False, separation=False, epsilon="")
        check(False, "analyse(epsilon=\"\") is refused")
    except uatlab.Error as e:
        check("empty string" in str(e), f"analyse(epsilon=\"\") is refused: {e}")
    mv = uatlab.analyse(net, seqs[:2], [[0] * L for _ in seqs[:2]], min_bits=False, rounding=False, separation=False,
                        epsilon=Fraction(1, 10**6), epsilon_steps=4, region_method="mean-value")["region"]
    check(mv["method"] == "mean-value" and all(m >= p for m, p in zip(mv["largest_epsilon_certified"],
                                                                       region["largest_epsilon_certified"])),
          f"region_method='mean-value': radii {mv['largest_epsilon_certified']} (intervals: "
          f"{region['largest_epsilon_certified'][:2]})")
    # The network's own predictions as labels, so that the points are certified and the radii positive.
    own = [[int(c) for c in np.argmax(y, axis=-1)] for y in net.eval(seqs[:2])]
    radii = {m: uatlab.analyse(net, seqs[:2], own, min_bits=False, rounding=False, separation=False,
                               epsilon=Fraction(1, 10**9), epsilon_steps=4, region_method=m)["region"]
             for m in ("intervals", "zonotope")}
    check(radii["zonotope"]["method"] == "zonotope" and
          all(z > p > 0 for z, p in zip(radii["zonotope"]["largest_epsilon_certified"],
                                        radii["intervals"]["largest_epsilon_certified"])),
          f"region_method='zonotope': radii {radii['zonotope']['largest_epsilon_certified']} (intervals: "
          f"{radii['intervals']['largest_epsilon_certified']})")
    # Back into fresh modules of the same composition: the same numbers.
    enc2, emb2, pos2, head2 = encoder(), nn.Embedding(V, d).double(), nn.Embedding(L, d).double(), \
        nn.Linear(d, 3).double()
    net.to_torch(into=enc2, embedding=emb2, positions=pos2, head=head2)
    same = all(torch.equal(a, b) for a, b in zip(enc.state_dict().values(), enc2.state_dict().values()))
    check(same and torch.equal(emb.weight, emb2.weight) and torch.equal(pos.weight, pos2.weight) and
          torch.equal(head.bias, head2.bias), "to_torch(into=...) fills the user's own modules exactly")
    # Refusals leave the modules as they were: a value float32 cannot hold, another head count, a
    # tied head the network has untied.
    t = net.tensors["layers.0.q.weight"].copy()
    t[0, 0] = 1 / 3
    net._core.set_tensor("layers.0.q.weight", t)
    enc32 = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, H, 16, dropout=0.0, batch_first=True), 2,
                                  norm=nn.LayerNorm(d), enable_nested_tensor=False)
    before = [p.clone() for p in enc32.parameters()]
    for into, parts, needle in ((enc32, dict(embedding=nn.Embedding(V, d), positions=nn.Embedding(L, d),
                                             head=nn.Linear(d, 3)), "does not hold every value"),
                                (encoder(4), dict(embedding=emb2, positions=pos2, head=head2), "heads = 4")):
        try:
            net.to_torch(into=into, **parts)
            check(False, f"to_torch(into=...) refuses ({needle})")
        except uatlab.Error as e:
            check(needle in str(e), f"to_torch(into=...) refused: {e}")
    check(all(torch.equal(a, b) for a, b in zip(before, enc32.parameters())), "a refusal writes nothing")
    tied = uatlab.from_torch(enc, embedding=emb, head=emb)
    r = tied.tensors["readout.weight"].copy()
    r[0, 0] += 1
    tied._core.set_tensor("readout.weight", r)
    try:
        tied.to_torch(into=encoder(), embedding=nn.Embedding(V, d).double(), head=None)
        check(False, "a head the modules lack is refused")
    except uatlab.Error as e:
        check("readout" in str(e), f"a readout the modules lack is refused: {e}")
    emb3 = nn.Embedding(V, d).double()
    try:
        tied.to_torch(into=encoder(), embedding=emb3, head=emb3)
        check(False, "an untied head cannot go back into a tied embedding")
    except uatlab.Error as e:
        check("differs" in str(e), f"an untied head is refused: {e}")
    # An input projection (nn.Linear of continuous tokens to d) in front, with and without bias.
    xs = torch.randn(2, L, 3, dtype=torch.float64)
    for proj in (nn.Linear(3, d).double(), nn.Linear(3, d, bias=False).double()):
        net = uatlab.from_torch(enc, embedding=proj, positions=pos, head=head, causal=True)
        with torch.no_grad():
            ref = head(enc(proj(xs) + pos.weight[:L], mask=mask)).numpy()
        got = np.stack(net.eval([x.numpy() for x in xs]))
        err = np.abs(got - ref).max() / np.abs(ref).max()
        lo, hi = net.eval(xs[0].numpy(), precision="interval:80")
        check(err < 1e-13 and net.architecture["input"] == 3 and ((lo <= ref[0] + 1e-13) & (ref[0] <= hi + 1e-13)).all(),
              f"input projection (bias {proj.bias is not None}): {err:.1e} against PyTorch, MPFI encloses it")
        proj2 = nn.Linear(3, d, bias=proj.bias is not None).double()
        net.to_torch(into=encoder(), embedding=proj2, positions=nn.Embedding(L, d).double(), head=nn.Linear(d, 3).double(),
                     causal=True)
        check(torch.equal(proj2.weight, proj.weight), "to_torch(into=...) fills the input projection")
    check(up.name_map(enc, proj)["embedding.weight"] == "input.weight", "name_map of an input projection")
    for bad, needle in ((dict(embedding=nn.Linear(3, d + 1)), "the encoder's d"),
                        (dict(embedding=emb, positions=torch.zeros(L, d + 1)), "positions"),
                        (dict(embedding=emb, head=nn.Conv1d(d, 3, 1)), "head")):
        try:
            uatlab.from_torch(enc, **bad)
            check(False, f"refused: {needle}")
        except uatlab.Error as e:
            check(needle in str(e), f"from_torch refuses what it cannot convert exactly: {e}")


def test_train_and_analyse():
    ds = uatlab.task("memorize", N=12, n=4, d=3, V=8, seed=3)
    arch = {"d": 3, "readout": 3, "layers": [{"type": "attention", "heads": 2, "head_size": 2},
                                             {"type": "feedforward", "width": 48, "activation": "gelu"}]}
    net, summary = uatlab.train(arch, data=ds, loss="ce", steps=3000, batch=6, lr=2e-2, warmup=50, seed=5,
                                stop_at_full_accuracy=True, nonnegative_rates=True)  # every TrainConfig field
    check(summary["train_accuracy"] == 1.0, "uatlab.train memorizes the task")
    path = uatlab.simd_path()
    check(path.split(" (")[0] in ("AVX3", "AVX3_DL", "AVX2", "SSE4", "SSSE3", "NEON", "EMU128", "SCALAR")
          and "vector registers" in path, "uatlab.simd_path names the kernels' instruction set: " + path)
    import subprocess
    env = dict(os.environ, UATLAB_SIMD="bogus", PYTHONPATH=os.path.join(sys.argv[1], "python"))
    r = subprocess.run([sys.executable, "-c", "import uatlab"], env=env, capture_output=True, text=True)
    check(r.returncode != 0 and "UATLAB_SIMD=bogus: unknown" in r.stderr,
          "a wrong UATLAB_SIMD fails the import with its message")
    env["UATLAB_SIMD"] = "scalar"
    r = subprocess.run([sys.executable, "-c", "import uatlab; print(uatlab.simd_path())"], env=env,
                       capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.split(" (")[0] in ("EMU128", "SCALAR"),
          "UATLAB_SIMD=scalar chooses the emulated path: " + r.stdout + r.stderr)
    rep = uatlab.analyse(net, ds)
    check(rep["memorization"]["all_certified"] and rep["memorization"]["labels"] == "classes",
          "analyse certifies a uatlab-trained model")
    # The same data trained in PyTorch (the uatlab module), brought back and analysed, and then one
    # label flipped: analyse must name it.
    lines = [l for l in ds.jsonl().splitlines() if l]
    import json
    seqs = [json.loads(l) for l in lines]
    X = torch.tensor([[[float(Fraction(v)) for v in tok] for tok in s["x"]] for s in seqs], dtype=torch.float64)
    Y = torch.tensor([[int(Fraction(v)) for v in s["y"]] for s in seqs])
    torch.manual_seed(0)
    model = uatlab.init(arch, seed=2).to_torch()
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    for step in range(2000):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X).reshape(-1, 3), Y.reshape(-1))
        loss.backward()
        opt.step()
        if (model(X).argmax(-1) == Y).all():
            break
    back = uatlab.from_torch(model)
    Xl = [s.numpy() for s in X]
    Yl = [y.tolist() for y in Y]
    rep = uatlab.analyse(back, Xl, Yl)
    check(rep["memorization"]["all_certified"], "analyse certifies a PyTorch-trained model")
    Yl[4][2] = (Yl[4][2] + 1) % 3
    rep, text = uatlab.analyse(back, Xl, Yl, rounding=False, summary=True)
    f = rep["memorization"]["failures"]
    check(len(f) == 1 and f[0]["sequence"] == 4 and f[0]["token"] == 2 and f[0]["kind"] == "wrong",
          "a wrong prediction is named")
    check("sequence 5 token 3: wrong" in text, "and shown in the summary")
    with tempfile.TemporaryDirectory() as tmp:
        png = os.path.join(tmp, "sep.png")
        uatlab.analyse(back, Xl, [y.tolist() for y in Y], plot=png, rounding=False, min_bits=False)
        check(os.path.getsize(png) > 1000, "the separation plot is drawn")


def test_gil_released():
    X, Y = memorization_data()
    X, Y = X * 20, Y * 20
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)
    t = threading.Thread(target=tick)
    t.start()
    start = time.time()
    net = uatlab.init({"d": 3, "layers": [{"type": "attention", "heads": 2, "head_size": 2}]})
    for _ in range(5):
        net.eval(X, precision="interval:2000")
    took = time.time() - start
    stop.set()
    t.join()
    # With the GIL held through the C++ call the other thread would tick about once per call (5).
    check(took > 0.1 and len(ticks) > 50, f"another thread ran during the call ({len(ticks)} ticks in {took:.2f}s)")


def test_ctrl_c_stops_training():
    # Python's SIGINT handler only sets a flag; the training checks it at each log step (it ran on
    # for the whole call before).
    import signal
    ds = uatlab.task("memorize", N=64, n=4, d=4, V=16)
    arch = {"d": 4, "readout": 3, "layers": [{"type": "attention", "heads": 2, "head_size": 2},
                                             {"type": "feedforward", "width": 64}]}
    metrics = os.path.join(tempfile.mkdtemp(), "m.csv")
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.time()
    try:
        uatlab.train(arch, data=ds, loss="ce", steps=2_000_000, metrics=metrics)
        check(False, "Ctrl-C stops uatlab.train")
    except KeyboardInterrupt:
        check(time.time() - start < 10, f"KeyboardInterrupt after {time.time() - start:.1f} s")
        check(not os.path.exists(metrics), "an interrupted run writes no metrics file (its lines are in .partial)")


def test_ctrl_c_stops_memorize():
    # Without a progress callback too: the memorization of 3,000 sequences takes about 70 s here;
    # Ctrl-C at 1 s stops it at its next report outside a parallel region (it ran to the end before).
    import signal
    ds = uatlab.task("memorize", N=3000, n=8, d=4, V=64, seed=1)
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.time()
    try:
        uatlab.memorize(ds, None)
        check(False, "Ctrl-C stops uatlab.memorize")
    except KeyboardInterrupt:
        check(time.time() - start < 15, f"memorize: KeyboardInterrupt after {time.time() - start:.1f} s")
    # eval: 400 sequences at interval:2048 take about 64 s here; it stops between chunks.
    arch = {"d": 16, "readout": 3, "layers": [{"type": "attention", "heads": 2, "head_size": 8},
                                              {"type": "layernorm"}, {"type": "feedforward", "width": 32}]}
    net = uatlab.init(arch, seed=1)
    X = [np.random.default_rng(0).uniform(-1, 1, (16, 16)) for _ in range(400)]
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.time()
    try:
        net.eval(X, precision="interval:2048")
        check(False, "Ctrl-C stops net.eval")
    except KeyboardInterrupt:
        check(time.time() - start < 15, f"eval: KeyboardInterrupt after {time.time() - start:.1f} s")
    # analyse's certified pass over the same sequences (about 70 s here) and approximate's domain
    # certificate (about 10 s) stop between chunks too (they reported inside their parallel loops
    # before, where no exception may leave, and ran to the end of the pass).
    Y = [[0] * 16 for _ in X]
    calls = [("analyse", lambda: uatlab.analyse(net, X, Y, labels="classes", bits=2048, min_bits=False,
                                                 rounding=False, separation=False, engine=False)),
             ("approximate --certify", lambda: uatlab.approximate("center", 1, 2, 16, construction="kajitsuka",
                                                                  certify=True))]
    for what, call in calls:
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        start = time.time()
        try:
            call()
            check(False, f"Ctrl-C stops {what}")
        except KeyboardInterrupt:
            check(time.time() - start < 5, f"{what}: KeyboardInterrupt after {time.time() - start:.1f} s")


for test in (test_numbers_and_precisions, test_constructions, test_torch_both_ways, test_train_and_analyse,
             test_gil_released, test_ctrl_c_stops_training, test_ctrl_c_stops_memorize):
    test()
    print(f"{test.__name__}: ok")
print(f"python module: {passed()} checks passed")
