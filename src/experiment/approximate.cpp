#include "uatlab/experiment/approximate.hpp"

#include "uatlab/limits.hpp"

#include <chrono>
#include <cmath>
#include <map>
#include <tuple>

#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/experiment/targets.hpp"
#include "uatlab/verify/domain.hpp"

#include "registry.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/io/report.hpp"
#include "uatlab/verify/bounds.hpp"
#include "uatlab/verify/precision.hpp"

namespace uatlab::experiment {

void require_checks_passed(const Approximation& r) {
  if (r.report.contains("lemma6") && !r.report["lemma6"]["ok"].get<bool>())
    throw Error("the exact check found that Lemma 6 does not hold for these d, n, K (violations " +
                r.report["lemma6"]["violations"].dump() + "); nothing written");
}

Approximation approximate(const yun::Target& f, int K, const ApproximateOptions& o) {
  const std::vector<int>& ps = o.ps;
  if (ps.empty() || ps.size() > 2) throw Error("d_p takes one or two exponents, e.g. 1,2");
  for (int p : ps)
    limits::check_count(p, 1, 16, "the exponent p of d_p");
  limits::check_count(o.samples, 2, limits::kSize, "samples");
  limits::check_count(o.samples_standard, 2, limits::kSize, "samples of the standard network");
  limits::check_count(o.check_limit, 1, 1LL << 40, "check limit");
  limits::check_count(o.max_layers, 1, 1LL << 40, "max layers");
  if (!o.pe && !yun::looks_equivariant(f, o.d, o.n, 20, o.seed))
    throw Error("target \"" + f.name +
                "\" is not permutation equivariant (f(XP) != f(X)P on a random input): use --pe (Theorem 3)");
  if (o.certify && !f.fi)  // refused before the construction, not after it
    throw Error(
        "target \"" + f.name +
        "\" has no interval form; the domain certificate (--certify) needs one (built-in targets have it)");
  if (o.construction != "yun" && o.construction != "kajitsuka")
    throw Error("construction \"" + o.construction + "\": expected yun or kajitsuka");
  const bool kaj = o.construction == "kajitsuka";
  if (!kaj && !o.value_map.empty())
    throw Error("--value-map applies to --construction kajitsuka (Yun's value map is its own)");
  report(o.progress, "approximate: build the " + o.construction + " construction, K = " + std::to_string(K),
         0, 0);
  yun::Modified m =
      kaj ? yun::build_kajitsuka(
                f, o.d, o.n, K, o.pe,
                kajitsuka::value_map_names.parse(o.value_map.empty() ? "bounded" : o.value_map), o.max_layers)
          : yun::build_modified(f, o.d, o.n, K, o.pe, o.max_layers);
  Approximation r;
  r.report = m.report();
  r.report["target"] = f.name;
  if (kaj && o.check) {  // softmax inside: checked in MPFR at the certificate's precision
    const MpfrPrecision precision(std::max(m.bits, 64u));  // network_cast rounds the weights at it
    r.report["grid_max_error"] =
        yun::grid_max_error(network_cast<Mpfr>(m.net), m.plan, f, o.check_limit, o.seed);
  }
  if (o.check) report(o.progress, "approximate: the exact check", 0, 0);
  if (!kaj && o.check) {
    const yun::Lemma6 c = yun::check_lemma6(m, f, o.check_limit, o.seed);
    r.report["lemma6"] = c.report();
    if (c.max_abs_gc > Scalar<Rational>::to_double(m.plan.M))
      throw Error("an entry of g_c exceeds the bound M: the value map would be wrong");
    // A network that failed its check is refused before anything is written (a sweep, which
    // writes no network, reports the failure instead).
    if (!o.out.empty() || !o.standard_out.empty()) require_checks_passed(r);
  }
  if (kaj && !o.lambda.empty())
    throw Error("--lambda: Proposition 1's attention is softmax already, there is no hardmax to replace");
  const Rational lambda = o.lambda.empty() ? yun::default_lambda(m.plan) : parse_rational(o.lambda);
  Rational eta = o.eta.empty() ? Rational(1, K) : parse_rational(o.eta);
  if (o.eta.empty())
    for (int k = 0; k < 40; ++k)
      eta /= 2;  // δ·2^-40: the ramps' measure is negligible
  const Network<Rational> g = yun::standardize(m.net, lambda, eta);
  const MpfrPrecision precision(std::max(m.bits + 64, yun::standard_bits(m.plan, eta)));
  const unsigned bits = precision.bits();
  r.report["standard"] = {{"lambda", kaj ? json("not used (no hardmax layer)") : json(lambda.str())},
                          {"eta", eta.str()},
                          {"parameters", g.parameter_count()},
                          {"mpfr_bits", bits},
                          {"max_ff_width", [&] {
                             int w = 0;
                             for (const auto& s : g.arch.layers)
                               w = std::max(w, s.width);
                             return w;
                           }()}};
  // The modified network in double where that reproduces it (Yun's always; Kajitsuka's when its
  // certificate says so), otherwise in MPFR.
  const Network<double> md = m.float64_ok ? network_cast<double>(m.net) : Network<double>();
  const Network<Mpfr> gd = network_cast<Mpfr>(g),
                      mm = m.float64_ok ? Network<Mpfr>() : network_cast<Mpfr>(m.net);
  report(o.progress, "approximate: d_p by Monte Carlo", 0, 0);
  for (std::size_t k = 0; k < ps.size(); ++k) {
    r.modified.push_back(m.float64_ok ? yun::distance(md, f, o.d, o.n, ps[k], o.samples, o.seed)
                                      : yun::distance(mm, f, o.d, o.n, ps[k], o.samples_standard, o.seed));
    r.standard.push_back(yun::distance(gd, f, o.d, o.n, ps[k], o.samples_standard, o.seed));
    auto js = [](const yun::Distance& x) {
      return json{{"value", x.value}, {"ci95", {x.lo, x.hi}}, {"samples", x.samples}};
    };
    r.report["d_" + std::to_string(ps[k])] = {{"modified", js(r.modified[k])},
                                              {"standard", js(r.standard[k])}};
  }
  if (o.certify) {
    DomainOptions dopt;
    dopt.ps = ps;
    dopt.max_boxes = o.certify_boxes;
    dopt.max_cells = o.certify_cells;
    dopt.progress = o.progress;
    json c;
    for (const auto& [name, net, b] : {std::tuple<const char*, const Network<Rational>*, unsigned>{
                                           "modified", &m.net, std::max(m.bits + 64, 128u)},
                                       {"standard", &g, bits}}) {
      report(o.progress, std::string("approximate: certify the ") + name + " network over the domain", 0, 0);
      dopt.bits = b;
      dopt.reference =
          std::string(name) == "standard" ? &m.net : nullptr;  // its ramps: where g's front differs
      c[name] = certify_domain(*net, f, o.d, o.n, dopt).report(ps);
    }
    r.report["certified_domain"] = c;
  }
  r.modified_net = m.net, r.standard_net = g;
  if (!o.out.empty()) save_network(m.net, o.out, "F64", "yun-modified");
  if (!o.standard_out.empty()) save_network(g, o.standard_out, "F64", "yun-standard");
  return r;
}

std::string sweep_delta(const yun::Target& f, const std::vector<int>& Ks, const ApproximateOptions& o,
                        const std::string& out_dir, const std::function<void(int K)>& progress) {
  const std::vector<int>& ps = o.ps;
  std::vector<Row> rows;
  std::vector<double> deltas;
  Series err_mod[2], err_std[2], layers{"layers (measured)", {}, {}, {}},
      params{"parameters (measured)", {}, {}, {}}, lay_formula{"layers (proof's formula)", {}, {}, {}};
  for (int K : Ks) {
    if (progress) progress(K);
    const Approximation r = approximate(f, K, o);
    const json& j = r.report;
    const double delta = 1.0 / K;
    const long total = j.at("layers").at("total");
    const long formula = j.at("layers_formula").at("quantization").get<long>() +
                         j.at("layers_formula").at("attention").get<long>() +
                         j.at("layers_formula").at("value_map").get<long>();
    Row row = {std::to_string(K),
               fixed(delta, 6),
               std::to_string(total),
               std::to_string(formula),
               std::to_string(j.at("parameters").get<long>()),
               std::to_string(j.at("standard").at("parameters").get<long>())};
    for (std::size_t k = 0; k < ps.size(); ++k) {
      for (const auto* x : {&r.modified[k], &r.standard[k]}) {
        row.push_back(fixed(x->value, 6));
        row.push_back(fixed(x->lo, 6));
        row.push_back(fixed(x->hi, 6));
      }
      err_mod[k].x.push_back(delta), err_mod[k].y.push_back(r.modified[k].value),
          err_mod[k].err.push_back((r.modified[k].hi - r.modified[k].lo) / 2);
      err_std[k].x.push_back(delta), err_std[k].y.push_back(r.standard[k].value),
          err_std[k].err.push_back((r.standard[k].hi - r.standard[k].lo) / 2);
    }
    if (j.contains("lemma6")) row.push_back(j.at("lemma6").at("ok").get<bool>() ? "yes" : "NO");
    if (j.contains("grid_max_error")) row.push_back(fixed(j.at("grid_max_error").get<double>(), 3));
    rows.push_back(row);
    layers.x.push_back(delta), layers.y.push_back(static_cast<double>(total));
    params.x.push_back(delta), params.y.push_back(j.at("parameters").get<double>());
    lay_formula.x.push_back(delta), lay_formula.y.push_back(static_cast<double>(formula));
    deltas.push_back(delta);
  }
  Row header = {"K", "delta", "layers", "layers_formula", "parameters_modified", "parameters_standard"};
  for (int p : ps)
    for (std::string w : {"modified", "standard"})
      for (std::string s : {"", "_lo", "_hi"})
        header.push_back("d" + std::to_string(p) + "_" + w + s);
  if (o.check) header.push_back(o.construction == "kajitsuka" ? "grid_max_error" : "exact_check_ok");
  make_dirs(out_dir);
  write_file_atomic(out_dir + "/sweep.csv", csv_text(header, rows));
  LinePlot e{"Yun et al. on \"" + f.name + "\" (d = " + std::to_string(o.d) + ", n = " + std::to_string(o.n) +
                 (o.pe ? ", PE" : "") + ")",
             "delta = 1/K", "d_p(f, g) (Monte Carlo, 95% CI)"};
  e.logx = e.logy = true;
  for (std::size_t k = 0; k < ps.size(); ++k) {
    err_mod[k].label = "d_" + std::to_string(ps[k]) + " modified (hardmax, Phi)";
    err_std[k].label = "d_" + std::to_string(ps[k]) + " standard (softmax, ReLU)";
    e.series.push_back(err_mod[k]), e.series.push_back(err_std[k]);
    // The proof's rate: d_p(f, f̄) = O(δ) for Lipschitz f, plus O(δ^{d/p}) from repeated columns.
    Series rate{"rate delta^{min(1, d/p)} (scaled)", {}, {}, {}};
    const double expo = std::min(1.0, static_cast<double>(o.d) / ps[k]);
    for (double dl : deltas) {
      rate.x.push_back(dl);
      rate.y.push_back(err_mod[k].y.front() * std::pow(dl / deltas.front(), expo));
    }
    rate.label = "d_" + std::to_string(ps[k]) + " proof's rate delta^" + fixed(expo, 2);
    e.series.push_back(rate);
  }
  plot_png(out_dir + "/error_vs_delta.png", e);
  LinePlot s{"Size of the construction", "delta = 1/K", "count"};
  s.logx = s.logy = true;
  s.series = {layers, lay_formula, params};
  plot_png(out_dir + "/size_vs_delta.png", s);
  if (o.construction == "kajitsuka") plot_value_maps(f, Ks.back(), o, out_dir + "/value_map.png");
  return markdown_table(header, rows);
}

void plot_value_maps(const yun::Target& f, int K, const ApproximateOptions& o, const std::string& path) {
  // Both value maps on the same attention (same seed, so the same direction a and the same t_i).
  LinePlot p{"Prop. 1's value map, " + f.name + ", K = " + std::to_string(K), "t = a^T z",
             "F2(t), first output row (MPFR)"};
  double lo = 0, hi = 0, reach = 0;
  for (const auto map : {kajitsuka::ValueMap::bounded, kajitsuka::ValueMap::zhang}) {
    const yun::Modified m = yun::build_kajitsuka(f, o.d, o.n, K, o.pe, map, o.max_layers);
    const auto& pr = m.profile;
    if (map == kajitsuka::ValueMap::bounded) {
      lo = pr.t.front(), hi = pr.t.back();
      for (double y : pr.target)
        reach = std::max(reach, std::abs(y));
      Series data{"fitted contexts (t_i, label - z)", pr.t, pr.target, {}};
      data.style = Series::Style::points;
      p.series.push_back(data);
    }
    const json& sup = m.extra.at("value_map").at("sup_abs_certified");
    Series c{std::string(kajitsuka::value_map_names(map)) + " (certified sup |F2| = " +
                 (sup.is_number() ? fixed(sup.get<double>(), 3) : std::string("inf")) + ")",
             {},
             {},
             {}};
    c.style = Series::Style::lines;
    const double margin = 0.25 * (hi - lo);
    for (int k = 0; k <= 2000; ++k)
      c.x.push_back(lo - margin + (hi - lo + 2 * margin) * k / 2000);
    c.y = kajitsuka::value_map_curve(m.value_map, 0, c.x, std::max(m.bits, 64u));
    p.series.push_back(c);
  }
  p.ymin = -3 * reach, p.ymax = 3 * reach;
  plot_png(path, p);
}

// Certified bounds over the whole domain against the Monte Carlo estimates, for the targets of
// docs/yun.md, both constructions, over K.
Experiment yun_certified() {
  Experiment e;
  e.name = "yun-certified";
  e.serial = true;  // MPFR precision scopes (experiment.hpp)
  e.summary =
      "Yun et al. / Kajitsuka Prop. 1: certified bounds on d_p and sup |g - f| over all of [0,1]^{d x n} "
      "beside Monte Carlo";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    const std::vector<std::pair<const char*, bool>> targets =
        c.mode == Mode::smoke ? std::vector<std::pair<const char*, bool>>{{"tokenwise-sin", false}}
                              : std::vector<std::pair<const char*, bool>>{
                                    {"tokenwise-sin", false}, {"center", false},     {"attention", false},
                                    {"max-pool", false},      {"prefix-mean", true}, {"reverse", true}};
    for (const auto& [target, pe] : targets)
      for (const char* construction : {"yun", "kajitsuka"})
        for (int K : c.pick({2, 4}, {4, 8, 16}, {4, 8, 16, 32}))
          cells.push_back({{"target", target}, {"pe", pe}, {"construction", construction}, {"K", K}});
    return cells;
  };
  e.run = [](const json& cell, const Context& c) {
    ApproximateOptions o;
    o.construction = cell.at("construction");
    o.pe = cell.at("pe");
    o.n = 2;
    o.certify = true;
    o.certify_boxes = c.pick(2000L, 100000L, 400000L);
    o.samples = c.pick(2000L, 20000L, 20000L);
    o.samples_standard = c.pick(200L, 1000L, 1000L);
    // Ramps of width δ·2^-800: their enclosure does not depend on η (domain.hpp), their measure
    // does, so at this width they add nothing visible to the whole domain's d_p (with positions
    // the ramps' bound reaches 3e98 at K = 16, which δ·2^-400 leaves visible in d_2).
    Rational eta(1, cell.at("K").get<long>());
    for (int k = 0; k < 800; ++k)
      eta /= 2;
    o.eta = eta.str();
    const auto t0 = std::chrono::steady_clock::now();
    const Approximation a = approximate(yun::builtin_target(cell.at("target")), cell.at("K"), o);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    json r = cell;
    for (const char* net : {"modified", "standard"}) {
      const json& d = a.report.at("certified_domain").at(net);
      const json& flat = d.at("regular_cells");
      const std::size_t i = std::string(net) == "modified" ? 0 : 1;
      const auto& mc1 = i ? a.standard[0] : a.modified[0];
      const auto& mc2 = i ? a.standard[1] : a.modified[1];
      r[net] = {{"mc_d1", mc1.value},
                {"mc_d1_hi", mc1.hi},
                {"mc_d2", mc2.value},
                {"mc_d2_hi", mc2.hi},
                {"cert_d1", d.at("d_1")},
                {"cert_d2", d.at("d_2")},
                {"cert_d1_regular_cells", flat.at("d_1")},
                {"cert_d2_regular_cells", flat.at("d_2")},
                {"excluded_measure", flat.at("excluded_measure")},
                {"sup_excluded", flat.at("excluded_ess_sup_abs_error")},
                {"sup", d.at("ess_sup_abs_error")},
                {"sup_distinct", d.at("ess_sup_abs_error_distinct_columns_regular")},
                {"cells", d.at("cells")},
                {"boxes", d.at("boxes")}};
    }
    r["seconds"] = secs;
    return r;
  };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    const Row header = {"target",
                        "construction",
                        "K",
                        "network",
                        "MC d_1",
                        "certified d_1 (regular cells)",
                        "MC d_2",
                        "certified d_2 (regular cells)",
                        "measure outside regular cells",
                        "certified ess sup |g-f| outside regular cells",
                        "certified d_1 (whole domain)",
                        "certified d_2 (whole domain)",
                        "certified ess sup |g-f| (regular distinct-column cells)",
                        "cells",
                        "boxes"};
    std::vector<Row> rows;
    std::map<std::string, Series> series;
    auto text = [](const json& x) {  // a certified upper bound: printed rounded up
      return x.is_number() ? upper_text(x.get<double>(), 4) : x.get<std::string>();
    };
    for (const json& l : lines) {
      const json& r = l.at("result");
      for (const char* net : {"modified", "standard"}) {
        const json& x = r.at(net);
        rows.push_back({r.at("target"), r.at("construction"), r.at("K").dump(), net, fixed(x.at("mc_d1"), 4),
                        text(x.at("cert_d1_regular_cells")), fixed(x.at("mc_d2"), 4),
                        text(x.at("cert_d2_regular_cells")), fixed(x.at("excluded_measure"), 3),
                        x.contains("sup_excluded") ? text(x.at("sup_excluded")) : "", text(x.at("cert_d1")),
                        text(x.at("cert_d2")), text(x.at("sup_distinct")), x.at("cells").dump(),
                        x.at("boxes").dump()});
        if (std::string(net) == "modified" && r.at("construction") == "yun" && x.at("cert_d1").is_number()) {
          Series& s = series[r.at("target").get<std::string>()];
          s.label = r.at("target").get<std::string>() + ", certified";
          s.x.push_back(1.0 / r.at("K").get<double>());
          s.y.push_back(x.at("cert_d1").get<double>());
          Series& mc = series["~Monte Carlo"];  // sorts last
          mc.label = "Monte Carlo estimates";
          mc.style = Series::Style::points;
          mc.x.push_back(1.0 / r.at("K").get<double>());
          mc.y.push_back(x.at("mc_d1").get<double>());
        }
      }
    }
    write_file_atomic(out.path(".csv"), csv_text(header, rows));
    const std::string md = markdown_table(header, rows);
    write_file_atomic(out.path(".md"), md);
    LinePlot plot{"Yun et al., modified networks: d_1 certified over the domain", "delta = 1/K", "d_1(f, g)"};
    plot.logx = plot.logy = true;
    for (auto& [k, s] : series)
      plot.series.push_back(s);
    plot_png(out.path(".png"), plot);
    return md;
  };
  return e;
}

}  // namespace uatlab::experiment
