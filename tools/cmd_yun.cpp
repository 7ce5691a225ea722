// uatlab approximate: Yun et al.'s universal-approximation construction for a target
// f: [0,1]^{d×n} → R^{d×n} (built in, or an expression), checked exactly and measured.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <muParser.h>
#include <sstream>

#include "commands.hpp"
#include "uatlab/construct/yun.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/io/report.hpp"

namespace uatlab::cli {

using nlohmann::json;

namespace {

struct Opts {
  std::string construction = "yun", target = "tokenwise-sin", out, standard_out, report, sweep, out_dir = "results/yun";
  int d = 1, n = 2, K = 4;
  bool pe = false, no_check = false;
  long samples = 20000, samples_standard = 2000, check_limit = 200000, max_layers = 20000;
  std::string lambda, eta, ps = "1,2";
  std::uint64_t seed = 1;
};

// An expression for entry (i, j) of f(X): variables x (that entry), i, j (1-based), d, n, mean /
// max / min (of row i over the tokens) and every entry as x<i>_<j>.
yun::Target expression_target(const std::string& expr, int d, int n) {
  auto eval = [expr, d, n](const Mat<double>& X) {
    mu::Parser p;
    double x = 0, i = 0, j = 0, dd = d, nn = n, mean = 0, mx = 0, mn = 0;
    Mat<double> copy = X;
    try {
      p.DefineVar("x", &x), p.DefineVar("i", &i), p.DefineVar("j", &j), p.DefineVar("d", &dd), p.DefineVar("n", &nn);
      p.DefineVar("mean", &mean), p.DefineVar("max", &mx), p.DefineVar("min", &mn);
      for (int r = 0; r < d; ++r)
        for (int c = 0; c < n; ++c) p.DefineVar("x" + std::to_string(r + 1) + "_" + std::to_string(c + 1), &copy(r, c));
      p.SetExpr(expr);
      Mat<double> Y(d, n);
      for (int r = 0; r < d; ++r) {
        mean = X.row(r).mean(), mx = X.row(r).maxCoeff(), mn = X.row(r).minCoeff();
        for (int c = 0; c < n; ++c) {
          x = X(r, c), i = r + 1, j = c + 1;
          Y(r, c) = p.Eval();
          if (!std::isfinite(Y(r, c))) throw Error("target \"" + expr + "\" is not finite at a point of [0,1]^{d×n}");
        }
      }
      return Y;
    } catch (mu::Parser::exception_type& e) {
      throw Error("target \"" + expr + "\": " + e.GetMsg());
    }
  };
  return {expr, eval};
}

yun::Target target_of(const std::string& t, int d, int n) {
  for (const auto& b : yun::builtin_targets())
    if (b == t) return yun::builtin_target(t);
  return expression_target(t, d, n);
}

struct Measured {
  json report;
  yun::Distance modified[2], standard[2];
};

Measured measure(const Opts& o, const yun::Target& f, int K, const std::vector<int>& ps) {
  if (!o.pe && !yun::looks_equivariant(f, o.d, o.n, 20, o.seed))
    throw Error("target \"" + f.name + "\" is not permutation equivariant (f(XP) != f(X)P on a random input): use --pe (Theorem 3)");
  const bool kaj = o.construction == "kajitsuka";
  if (kaj && o.pe) throw Error("--construction kajitsuka covers permutation-equivariant targets only (no --pe)");
  yun::Modified m = kaj ? yun::build_kajitsuka(f, o.d, o.n, K, o.max_layers) : yun::build_modified(f, o.d, o.n, K, o.pe, o.max_layers);
  Measured r;
  r.report = m.report();
  r.report["target"] = f.name;
  if (kaj && !o.no_check) {  // softmax inside: checked in MPFR at the certificate's precision
    const MpfrPrecision precision(std::max(m.bits, 64u));  // network_cast rounds the weights at it
    r.report["grid_max_error"] = yun::grid_max_error(network_cast<Mpfr>(m.net), m.plan, f, o.check_limit, o.seed);
  }
  if (!kaj && !o.no_check) {
    const yun::Lemma6 c = yun::check_lemma6(m, f, o.check_limit, o.seed);
    r.report["lemma6"] = c.report();
    if (c.max_abs_gc > Scalar<Rational>::to_double(m.plan.M)) throw Error("an entry of g_c exceeds the bound M: the value map would be wrong");
    if (!c.ok()) std::fprintf(stderr, "warning: the exact check found violations: %s\n", c.report().dump().c_str());
  }
  const Rational lambda = o.lambda.empty() ? yun::default_lambda(m.plan) : parse_rational(o.lambda);
  Rational eta = o.eta.empty() ? Rational(1, K) : parse_rational(o.eta);
  if (o.eta.empty())
    for (int k = 0; k < 40; ++k) eta /= 2;  // δ·2^-40: the ramps' measure is negligible
  const Network<Rational> g = yun::standardize(m.net, lambda, eta);
  const MpfrPrecision precision(std::max(m.bits + 64, yun::standard_bits(m.plan, eta)));
  const unsigned bits = precision.bits();
  r.report["standard"] = {{"lambda", lambda.str()}, {"eta", eta.str()}, {"parameters", g.parameter_count()}, {"mpfr_bits", bits},
                          {"max_ff_width", [&] {
                             int w = 0;
                             for (const auto& s : g.arch.layers) w = std::max(w, s.width);
                             return w;
                           }()}};
  // The modified network in double where that reproduces it (Yun's always; Kajitsuka's when its
  // certificate says so), otherwise in MPFR.
  const Network<double> md = m.float64_ok ? network_cast<double>(m.net) : Network<double>();
  const Network<Mpfr> gd = network_cast<Mpfr>(g), mm = m.float64_ok ? Network<Mpfr>() : network_cast<Mpfr>(m.net);
  for (std::size_t k = 0; k < ps.size(); ++k) {
    r.modified[k] = m.float64_ok ? yun::distance(md, f, o.d, o.n, ps[k], o.samples, o.seed)
                                 : yun::distance(mm, f, o.d, o.n, ps[k], o.samples_standard, o.seed);
    r.standard[k] = yun::distance(gd, f, o.d, o.n, ps[k], o.samples_standard, o.seed);
    auto js = [](const yun::Distance& x) { return json{{"value", x.value}, {"ci95", {x.lo, x.hi}}, {"samples", x.samples}}; };
    r.report["d_" + std::to_string(ps[k])] = {{"modified", js(r.modified[k])}, {"standard", js(r.standard[k])}};
  }
  if (!o.out.empty()) save_network(m.net, o.out, "F64", "yun-modified");
  if (!o.standard_out.empty()) save_network(g, o.standard_out, "F64", "yun-standard");
  return r;
}

std::vector<int> ints(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) {
    if (x.empty() || x.find_first_not_of("0123456789") != std::string::npos) throw Error("expected a comma-separated list of integers, got \"" + s + "\"");
    v.push_back(std::stoi(x));
  }
  return v;
}

int cmd_approximate(const Opts& o) {
  const yun::Target f = target_of(o.target, o.d, o.n);
  std::vector<int> ps = ints(o.ps);
  if (ps.empty() || ps.size() > 2) throw Error("--p takes one or two exponents, e.g. 1,2");
  if (o.sweep.empty()) {
    const Measured r = measure(o, f, o.K, ps);
    if (!o.report.empty()) write_output(o.report, r.report.dump(2) + "\n");
    std::cout << r.report.dump(2) << "\n";
    return 0;
  }
  // --sweep-delta: the same target over several K = 1/δ; CSV and plots.
  std::vector<Row> rows;
  std::vector<double> deltas;
  Series err_mod[2], err_std[2], layers{"layers (measured)", {}, {}, {}}, params{"parameters (measured)", {}, {}, {}},
      lay_formula{"layers (proof's formula)", {}, {}, {}};
  for (int K : ints(o.sweep)) {
    std::fprintf(stderr, "K = %d ...\n", K);
    const Measured r = measure(o, f, K, ps);
    const json& j = r.report;
    const double delta = 1.0 / K;
    const long total = j["layers"]["total"];
    const long formula = j["layers_formula"]["quantization"].get<long>() + j["layers_formula"]["attention"].get<long>() + j["layers_formula"]["value_map"].get<long>();
    Row row = {std::to_string(K), fixed(delta, 6), std::to_string(total), std::to_string(formula), std::to_string(j["parameters"].get<long>()),
               std::to_string(j["standard"]["parameters"].get<long>())};
    for (std::size_t k = 0; k < ps.size(); ++k) {
      for (const auto* x : {&r.modified[k], &r.standard[k]}) row.push_back(fixed(x->value, 6)), row.push_back(fixed(x->lo, 6)), row.push_back(fixed(x->hi, 6));
      err_mod[k].x.push_back(delta), err_mod[k].y.push_back(r.modified[k].value), err_mod[k].err.push_back((r.modified[k].hi - r.modified[k].lo) / 2);
      err_std[k].x.push_back(delta), err_std[k].y.push_back(r.standard[k].value), err_std[k].err.push_back((r.standard[k].hi - r.standard[k].lo) / 2);
    }
    if (j.contains("lemma6")) row.push_back(j["lemma6"]["ok"].get<bool>() ? "yes" : "NO");
    rows.push_back(row);
    layers.x.push_back(delta), layers.y.push_back(static_cast<double>(total));
    params.x.push_back(delta), params.y.push_back(j["parameters"].get<double>());
    lay_formula.x.push_back(delta), lay_formula.y.push_back(static_cast<double>(formula));
    deltas.push_back(delta);
  }
  Row header = {"K", "delta", "layers", "layers_formula", "parameters_modified", "parameters_standard"};
  for (int p : ps)
    for (std::string w : {"modified", "standard"})
      for (std::string s : {"", "_lo", "_hi"}) header.push_back("d" + std::to_string(p) + "_" + w + s);
  if (!o.no_check) header.push_back("exact_check_ok");
  make_dirs(o.out_dir);
  write_file_atomic(o.out_dir + "/sweep.csv", csv_text(header, rows));
  LinePlot e{"Yun et al. on \"" + f.name + "\" (d = " + std::to_string(o.d) + ", n = " + std::to_string(o.n) + (o.pe ? ", PE" : "") + ")",
             "delta = 1/K", "d_p(f, g) (Monte Carlo, 95% CI)"};
  e.logx = e.logy = true;
  for (std::size_t k = 0; k < ps.size(); ++k) {
    err_mod[k].label = "d_" + std::to_string(ps[k]) + " modified (hardmax, Phi)";
    err_std[k].label = "d_" + std::to_string(ps[k]) + " standard (softmax, ReLU)";
    e.series.push_back(err_mod[k]), e.series.push_back(err_std[k]);
    // The proof's rate: d_p(f, f̄) = O(δ) for Lipschitz f, plus O(δ^{d/p}) from repeated columns.
    Series rate{"rate delta^{min(1, d/p)} (scaled)", {}, {}, {}};
    const double expo = std::min(1.0, static_cast<double>(o.d) / ps[k]);
    for (double dl : deltas) rate.x.push_back(dl), rate.y.push_back(err_mod[k].y.front() * std::pow(dl / deltas.front(), expo));
    rate.label = "d_" + std::to_string(ps[k]) + " proof's rate delta^" + fixed(expo, 2);
    e.series.push_back(rate);
  }
  plot_png(o.out_dir + "/error_vs_delta.png", e);
  LinePlot s{"Size of the construction", "delta = 1/K", "count"};
  s.logx = s.logy = true;
  s.series = {layers, lay_formula, params};
  plot_png(o.out_dir + "/size_vs_delta.png", s);
  std::cout << markdown_table(header, rows);
  return 0;
}

}  // namespace

void add_yun_commands(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<Opts>();
  auto* a = app.add_subcommand("approximate", "Yun et al.: compile f: [0,1]^{d x n} -> R^{d x n} into a Transformer, check it exactly, measure d_p");
  std::string names;
  for (const auto& n : yun::builtin_targets()) names += (names.empty() ? "" : ", ") + n;
  a->add_option("target", o->target, "Built-in (" + names + ") or an expression in x, i, j, d, n, mean, max, min, x<i>_<j>")->capture_default_str();
  a->add_option("--construction", o->construction, "yun (Yun et al.'s proof) or kajitsuka (Proposition 1: FF, one rank-1 softmax head, FF)")
      ->capture_default_str()->check(CLI::IsMember({"yun", "kajitsuka"}));
  a->add_option("--d", o->d, "Token dimension")->capture_default_str();
  a->add_option("--n", o->n, "Sequence length")->capture_default_str();
  a->add_option("--K", o->K, "Grid size: delta = 1/K")->capture_default_str();
  a->add_flag("--pe", o->pe, "Positional encoding (Theorem 3): targets need not be permutation equivariant");
  a->add_option("--p", o->ps, "Exponents of d_p")->capture_default_str();
  a->add_option("--samples", o->samples, "Monte Carlo samples for d_p")->capture_default_str();
  a->add_option("--samples-standard", o->samples_standard, "Monte Carlo samples for the standard network (evaluated in MPFR)")->capture_default_str();
  a->add_option("--seed", o->seed, "Seed of the Monte Carlo samples and sampled checks")->capture_default_str();
  a->add_option("--lambda", o->lambda, "Softmax scale of the standard network (default: from the grid's score gaps)");
  a->add_option("--eta", o->eta, "Ramp width of the four-ReLU replacement (default: delta * 2^-40)");
  a->add_option("--check-limit", o->check_limit, "Exact check: exhaustive up to this many inputs, else this many samples")->capture_default_str();
  a->add_flag("--no-check", o->no_check, "Skip the exact Lemma 6 / grid check");
  a->add_option("--max-layers", o->max_layers, "Refuse constructions with more layers")->capture_default_str();
  a->add_option("--out,-o", o->out, "Write the modified network (hardmax, Phi) as safetensors");
  a->add_option("--standard-out", o->standard_out, "Write the standard network (softmax, ReLU) as safetensors");
  a->add_option("--report", o->report, "Write the JSON report here");
  a->add_option("--sweep-delta", o->sweep, "Comma-separated K values: CSV + PNG of error and size against delta");
  a->add_option("--out-dir", o->out_dir, "Folder of the sweep's CSV and plots")->capture_default_str();
  commands.push_back({a, [o] { return cmd_approximate(*o); }});
}

}  // namespace uatlab::cli
