// Kajitsuka & Sato's experiments: kajitsuka-delta (the measured separation δ of the context ids
// against Theorem 2's bound, over |V|) and kajitsuka-memorization (memorization.cpp).
#include <cmath>
#include <set>

#include "uatlab/experiment/contextual.hpp"

#include "registry.hpp"
#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/experiment/experiment.hpp"
#include "uatlab/experiment/memorization.hpp"
#include "uatlab/experiment/table.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/report.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/verify/bounds.hpp"

namespace uatlab::experiment {

namespace {

// Datasets placed to stress Theorem 2's hypotheses at |V| = 4, n = 3, d = 2: every 3-subset of the
// vocabulary as a sequence, in two orders (8 sequences).
//   clustered  four unit vectors 0.01 rad apart (exact rational points of the circle): ε ≈ 0.01
//   spread     norms 1, 2, 4, 8 on the axes: r_max/r_min = 8
//   antipodal  ±e1, ±e2: each token's negative is a token
//   collinear  k·(1, 1/2), k = 1…4: every token on one ray from the origin
const std::vector<std::string> kAdversarial = {"clustered", "spread", "antipodal", "collinear"};

// Four tokens of R² as a placed dataset: every 3-subset of them as a sequence, in two orders.
Dataset placed_dataset(const std::vector<Vec<Rational>>& v) {
  Dataset ds;
  ds.d = 2;
  for (int skip = 0; skip < 4; ++skip)
    for (int reverse = 0; reverse < 2; ++reverse) {
      Sequence s;
      s.x = Mat<Rational>(2, 3);
      for (int t = 0, k = 0; t < 4; ++t)
        if (t != skip) s.x.col(reverse ? 2 - k++ : k++) = v[static_cast<std::size_t>(t)];
      ds.sequences.push_back(s);
    }
  return ds;
}

Dataset adversarial_dataset(const std::string& name) {
  std::vector<Vec<Rational>> v;
  auto token = [&](const Rational& a, const Rational& b) {
    Vec<Rational> x(2);
    x << a, b;
    v.push_back(x);
  };
  for (int k = 0; k < 4; ++k) {
    if (name == "clustered") {  // t = k/200: ((1 − t²), 2t)/(1 + t²), at angle ≈ 2t
      const Rational t(k, 200);
      token((1 - t * t) / (1 + t * t), 2 * t / (1 + t * t));
    } else if (name == "spread") {
      const Rational r(1L << k);
      k % 2 ? token(0, r) : token(r, 0);
    } else if (name == "antipodal") {
      const Rational s(k < 2 ? 1 : -1);
      k % 2 ? token(0, s) : token(s, 0);
    } else if (name == "collinear") {
      token(Rational(k + 1), Rational(k + 1, 2));
    } else {
      throw Error("kajitsuka-delta: no dataset family \"" + name + "\"");
    }
  }
  return placed_dataset(v);
}

// The share of Theorem 2's bound that δ reaches, in decades: log10 δ / log10 bound (1 would meet it).
double bound_share(double log10_delta, double log10_bound) {
  return log10_delta / log10_bound;
}
double bound_share(const kajitsuka::Contextual& c) {
  return bound_share(c.separation.log10_delta, c.log10_delta_bound);
}

// The dataset with `base`'s sequences over the vocabulary v (token i of base becomes v[i]).
Dataset with_vocabulary(const Dataset& base, const kajitsuka::Facts& f, const std::vector<Vec<Rational>>& v) {
  Dataset ds = base;
  for (std::size_t s = 0; s < ds.sequences.size(); ++s)
    for (std::size_t k = 0; k < f.tokens[s].size(); ++k)
      ds.sequences[s].x.col(static_cast<Eigen::Index>(k)) = v[static_cast<std::size_t>(f.tokens[s][k])];
  return ds;
}

// A search for a dataset whose δ comes closer to the bound than any drawn: hill climbing on the
// vocabulary of a demo dataset (its sequences kept), from the demo seed given. Each step moves one
// coordinate of one token by a Gaussian step on a 1/1024 grid (seeded) and keeps the move when the
// share of the bound's decades (log10 δ / log10 bound, faithful, without the fewest-bits search)
// grows; the step halves after every 6 rejections in a row. Vocabularies the theorem does not cover
// (a zero or repeated token) and ones whose construction would run to hundreds of thousands of bits
// (ε < 0.1 or r_max/r_min > 4) are rejected unbuilt. `built` counts the datasets built.
Dataset searched_dataset(int V, std::uint64_t seed, int steps, const kajitsuka::ContextualOptions& opt,
                         int& built) {
  const Dataset base = demo_dataset(2 * V, 3, 2, V, seed);
  const kajitsuka::Facts facts = kajitsuka::analyse(base);
  Rng rng(seed);
  auto share = [&](const std::vector<Vec<Rational>>& v) {
    try {
      const kajitsuka::Facts f = kajitsuka::analyse(with_vocabulary(base, facts, v));
      if (f.eps < 0.1 || f.r_max > 4 * f.r_min) return -kInf;
      ++built;
      return bound_share(kajitsuka::build_contextual(f, opt));
    } catch (const Error&) {
      return -kInf;
    }
  };
  std::vector<Vec<Rational>> v = facts.vocab;
  double best = share(v), step = 0.25;
  for (int i = 0, rejected = 0; i < steps; ++i) {
    std::vector<Vec<Rational>> w = v;
    const auto which = static_cast<std::size_t>(rng.next() % v.size());
    const auto coord = static_cast<Eigen::Index>(rng.next() % 2);
    w[which](coord) += Rational(static_cast<long>(std::lround(step * rng.gauss() * 1024)), 1024);
    const double s = share(w);
    if (s > best) {
      best = s, v = w, rejected = 0;
    } else if (++rejected % 6 == 0) {
      step /= 2;
    }
  }
  return with_vocabulary(base, facts, v);
}

}  // namespace

// The demo family with n = 3, d = 2, N = 2|V|, seed 1, through build_contextual; faithful mode only
// up to |V| = 6 (7 in full mode): its precision grows like |V|^4 (187,011 bits at |V| = 6). Beside
// it, at |V| = 4, more demo seeds and the adversarial families above (faithful only: the bound is
// the faithful construction's).
Experiment kajitsuka_delta() {
  Experiment e;
  e.name = "kajitsuka-delta";
  e.serial = true;  // MPFR precision scopes (experiment.hpp)
  e.summary =
      "Kajitsuka & Sato Thm 2: certified context-id separation delta vs the theorem's bound over |V| "
      "(faithful and tuned)";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    for (int V :
         c.pick({4, 8}, {4, 5, 6, 8, 12, 16, 24, 32, 48, 64}, {4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64}))
      for (const char* mode : {"faithful", "tuned"})
        if (std::string(mode) == "tuned" || V <= c.pick(4, 6, 7)) {
          // The theorem's bound is about the faithful construction: more datasets where it is
          // cheap (|V| = 4), one where the precision runs to 10^5 bits.
          const int datasets = std::string(mode) == "faithful" && V == 4 ? c.pick(1, 5, 10) : 1;
          for (int seed = 1; seed <= datasets; ++seed)
            cells.push_back({{"V", V}, {"mode", mode}, {"seed", seed}, {"family", "demo"}});
        }
    for (const std::string& family : kAdversarial)
      cells.push_back({{"V", 4}, {"mode", "faithful"}, {"seed", 1}, {"family", family}});
    // The demo datasets' vocabularies moved by hill climbs toward the bound, one climb from each
    // faithful demo seed of |V| = 4 (seed 3, the closest draw, first): a multi-start search, since one
    // climb only finds the top of its own hill.
    for (int seed : c.pick({3}, {3, 1, 2, 4, 5}, {3, 1, 2, 4, 5, 6, 7, 8, 9, 10}))
      cells.push_back({{"V", 4},
                       {"mode", "faithful"},
                       {"seed", seed},
                       {"family", "searched"},
                       {"steps", c.pick(1, 60, 300)}});
    // The demo dataset, among `candidates` seeds from 101 on, whose δ comes closest to the bound.
    cells.push_back({{"V", 4},
                     {"mode", "faithful"},
                     {"seed", 101},
                     {"family", "worst-of-random"},
                     {"candidates", c.pick(4, 40, 200)}});
    return cells;
  };
  e.run = [](const json& cell, const Context&) {
    const int V = cell.at("V");
    const std::string family = cell.value("family", "demo");
    kajitsuka::ContextualOptions opt;
    opt.mode = kajitsuka::mode_names.parse(cell.at("mode"));
    std::uint64_t seed = cell.at("seed");
    kajitsuka::ContextualOptions quick = opt;  // for the searches: without the min-bits search
    quick.search_min_bits = false;
    if (family == "worst-of-random") {
      double worst = -1;
      const std::uint64_t first = seed;
      for (std::uint64_t k = first; k < first + cell.at("candidates").get<std::uint64_t>(); ++k) {
        const double share = bound_share(
            kajitsuka::build_contextual(kajitsuka::analyse(demo_dataset(2 * V, 3, 2, V, k)), quick));
        if (share > worst) worst = share, seed = k;
      }
    }
    json extra = json::object();
    Dataset ds;
    if (family == "searched") {
      int built = 0;
      ds = searched_dataset(V, seed, cell.at("steps").get<int>(), quick, built);
      json vocab = json::array();
      for (const Vec<Rational>& x : kajitsuka::analyse(ds).vocab)
        vocab.push_back({x(0).str(), x(1).str()});
      extra = {{"vocabulary", vocab}, {"datasets_built", built}};
    } else {
      ds = family == "demo" || family == "worst-of-random" ? demo_dataset(2 * V, 3, 2, V, seed)
                                                           : adversarial_dataset(family);
    }
    const kajitsuka::Facts f = kajitsuka::analyse(ds);
    const json r = kajitsuka::build_contextual(f, opt).report();
    json out{{"V", V},
             {"family", family},
             {"seed", seed},
             {"N", ds.sequences.size()},
             {"n", 3},
             {"d", 2},
             {"mode", cell.at("mode")},
             {"c", r.at("c")},
             {"c_theorem", r.at("c_theorem")},
             {"log10_delta", r.at("log10_delta")},
             {"log10_delta_bound", r.at("log10_delta_bound")},
             {"bits_used", r.at("bits_used")},
             {"min_bits", r.at("min_bits")},
             {"eps", f.eps},
             {"r_min", f.r_min},
             {"r_max", f.r_max}};
    out.update(extra);
    return out;
  };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    const Row header = {"V",
                        "family",
                        "seed",
                        "N",
                        "n",
                        "d",
                        "mode",
                        "c",
                        "c_theorem",
                        "log10_delta",
                        "log10_delta_bound",
                        "bits_used",
                        "min_bits",
                        "eps",
                        "r_min",
                        "r_max"};
    std::vector<Row> csv, md;
    Series bound{"Theorem 2 bound", {}, {}, {}}, faithful{"measured, faithful", {}, {}, {}},
        tuned{"measured, tuned", {}, {}, {}};
    std::set<int> bound_seen;
    int faithful_rows = 0, held = 0;
    double closest = 0;  // the largest share of the bound's decades a faithful row's δ reaches
    for (const json& l : lines) {
      const json& r = l.at("result");
      Row row;
      for (const std::string& k : header)
        row.push_back(label(r[k]));
      csv.push_back(row);
      // Decades of δ lost per unit of c: the bound's rate is 2 r_max² log10 e (its Boltzmann gap
      // e^{−2c r_max²}), so it follows the largest token norm, not |V|.
      const double c = r.at("c");
      const bool faithful_row = r.at("mode") == "faithful";
      const std::string family = r.value("family", "demo");
      const double share = bound_share(r.at("log10_delta"), r.at("log10_delta_bound"));
      md.push_back({r.at("V").dump(), family, r.at("seed").dump(), r.at("N").dump(), label(r.at("mode")),
                    fixed(c, 4), fixed(r.at("log10_delta"), 4), fixed(r.at("log10_delta_bound"), 4),
                    faithful_row ? fixed(-r.at("log10_delta").get<double>() / c, 3) : "",
                    faithful_row ? fixed(-r.at("log10_delta_bound").get<double>() / c, 3) : "",
                    faithful_row ? fixed(share, 3) : "", fixed(r.at("eps"), 4), fixed(r.at("r_min"), 4),
                    fixed(r.at("r_max"), 4), r.at("bits_used").dump(), r.at("min_bits").dump()});
      if (faithful_row) {
        ++faithful_rows, held += r.at("log10_delta") >= r.at("log10_delta_bound");
        closest = std::max(closest, share);
      }
      const double V = r.at("V");
      if (bound_seen.insert(r.at("V").get<int>()).second) {
        bound.x.push_back(V);
        bound.y.push_back(-r.at("log10_delta_bound").get<double>());
      }
      Series& s = r.at("mode") == "faithful" ? faithful : tuned;
      s.x.push_back(V), s.y.push_back(-r.at("log10_delta").get<double>());
    }
    write_file_atomic(out.path(".csv"), csv_text(header, csv));
    const std::string text =
        markdown_table({"\\|V\\|", "family", "seed", "N", "mode", "c", "log10 δ measured", "log10 δ bound",
                        "decades per unit c, measured", "decades per unit c, bound",
                        "share of the bound's decades", "ε", "r_min", "r_max", "bits used", "min bits"},
                       md) +
        "\nThe bound is the theorem's for its own c, so only the faithful rows test it (the tuned rows use "
        "another c and another network): measured δ at or above the bound on " +
        std::to_string(held) + " of " + std::to_string(faithful_rows) +
        " faithful datasets (a count of datasets, not a proof of the bound); the closest came to " +
        fixed(closest, 3) + " of the bound's decades (log10 δ measured / log10 δ bound; 1 would meet it).\n";
    write_file_atomic(out.path(".md"), text);
    LinePlot plot{"Context-id separation: measured vs Theorem 2's delta", "|V| (n = 3, d = 2, N = 2|V|)",
                  "-log10 delta (larger = closer contexts)"};
    plot.logx = plot.logy = true;
    plot.series = {bound, faithful, tuned};
    plot_png(out.path(".png"), plot);
    return text;
  };
  return e;
}

std::string write_scale_sweep(const kajitsuka::ScaleSweep& sw, const std::string& data_name,
                              const std::string& out_dir) {
  const Row header = {"c",         "log10_delta", "log10_delta_certified_lower", "log10_delta_same_token",
                      "certified", "bits"};
  std::vector<Row> rows;
  Series certified{"certified: -log10 of delta's lower bound", {}, {}, {}};
  double ymin = 1e300, ymax = 0;
  for (const auto& p : sw.points) {
    const auto& s = p.separation;
    rows.push_back({fixed(p.c, 6), fixed(s.log10_delta, 6), lower_text(s.log10_delta_lo, 6),
                    fixed(s.log10_delta_same_token, 6), s.certified ? "yes" : "no", std::to_string(p.bits)});
    if (s.certified && s.log10_delta_lo < 0) {
      certified.x.push_back(p.c), certified.y.push_back(-s.log10_delta_lo);
      ymin = std::min(ymin, -s.log10_delta_lo), ymax = std::max(ymax, -s.log10_delta_lo);
    }
  }
  make_dirs(out_dir);
  write_file_atomic(out_dir + "/sweep_c.csv", csv_text(header, rows));
  const std::string hard = !sw.hardmax_pairs                    ? "no token in two sets"
                           : std::isinf(sw.hardmax_log10_delta) ? "0"
                                                                : "10^" + fixed(sw.hardmax_log10_delta, 4);
  LinePlot plot{data_name + ": separation vs softmax scale (hardmax: delta = " + hard + ")", "c",
                "-log10 delta (larger = closer contexts)"};
  plot.logx = plot.logy = true;
  plot.series = {certified};
  if (!(ymin < ymax)) ymin = 0.5, ymax = 1;
  for (const auto& [name, c] : {std::pair<std::string, double>{"construction's c", sw.c_construction},
                                {"gap condition's c", sw.c_gap},
                                {"theorem's c", sw.c_theorem}}) {
    if (!(c >= sw.points.front().c && c <= sw.points.back().c)) continue;
    Series mark{name, {c, c}, {ymin, ymax}, {}};
    mark.style = Series::Style::lines;
    plot.series.push_back(mark);
  }
  plot_png(out_dir + "/sweep_c.png", plot);
  return markdown_table(header, rows);
}

void write_contextual_plots(const kajitsuka::Contextual& c, const kajitsuka::Facts& f,
                            const std::string& out_dir) {
  // The head is rank 1: query q = W_Q x, key k = W_K x (tied: W_K = W_Q), value vᵀx.
  const Layer<Rational>& L = c.net.layers[0];
  auto dbl = [](const Vec<Rational>& x) {
    return Vec<double>(x.unaryExpr([](const Rational& q) { return Scalar<Rational>::to_double(q); }));
  };
  const Vec<double> wq = matrix_cast<double>(L.wq).row(0).transpose(),
                    wk = matrix_cast<double>(c.tied ? L.wq : L.wk).row(0).transpose(),
                    v = dbl(c.projection.v);
  auto weights = [&](const std::vector<int>& toks) {  // n×n: row = query, column = key
    const int n = static_cast<int>(toks.size());
    Mat<double> A(n, n);
    for (int k = 0; k < n; ++k) {
      const Vec<double> xk = dbl(f.vocab[toks[k]]);
      double mx = -1e300;
      for (int l = 0; l < n; ++l)
        mx = std::max(mx, A(k, l) = wq.dot(xk) * wk.dot(dbl(f.vocab[toks[l]])));
      for (int l = 0; l < n; ++l)
        A(k, l) = std::exp(A(k, l) - mx);
      A.row(k) /= A.row(k).sum();
    }
    return A;
  };
  make_dirs(out_dir);
  LinePlot cv{"Context values: where the head moves each token along v", "token's projection v^T x",
              "softmax-weighted mean of v^T x over its sequence"};
  const std::size_t shown = std::min<std::size_t>(f.sets.size(), 7);  // gnuplot cycles 8 colours
  Series rest{"other vocabulary sets", {}, {}, {}};
  rest.style = Series::Style::points;
  for (std::size_t s = 0; s < f.sets.size(); ++s) {
    const auto& toks = f.tokens[f.first_with_set[s]];
    const Mat<double> A = weights(toks);
    Series one{"set " + std::to_string(s + 1), {}, {}, {}};
    one.style = Series::Style::points;
    for (std::size_t k = 0; k < toks.size(); ++k) {
      double mean = 0;
      for (std::size_t l = 0; l < toks.size(); ++l)
        mean += A(static_cast<Eigen::Index>(k), static_cast<Eigen::Index>(l)) * v.dot(dbl(f.vocab[toks[l]]));
      Series& into = s < shown ? one : rest;
      into.x.push_back(v.dot(dbl(f.vocab[toks[k]]))), into.y.push_back(mean);
    }
    if (s < shown) cv.series.push_back(one);
  }
  if (!rest.x.empty()) cv.series.push_back(rest);
  plot_png(out_dir + "/context_values.png", cv);
  HeatMap am;
  am.title =
      "Attention weights of the constructed head (c = " + fixed(Scalar<Rational>::to_double(c.c), 4) + ")";
  am.xlabel = "key position";
  am.ylabel = "vocabulary set : query position";
  am.cblabel = "weight";
  for (int l = 0; l < f.n; ++l)
    am.xtics.push_back(std::to_string(l + 1));
  for (std::size_t s = 0; s < std::min<std::size_t>(f.sets.size(), 6); ++s) {
    const Mat<double> A = weights(f.tokens[f.first_with_set[s]]);
    for (int k = 0; k < f.n; ++k) {
      am.ytics.push_back(std::to_string(s + 1) + ":" + std::to_string(k + 1));
      std::vector<double> row;
      std::vector<std::string> labels;
      for (int l = 0; l < f.n; ++l)
        row.push_back(A(k, l)), labels.push_back(fixed(A(k, l), 2));
      am.values.push_back(row), am.labels.push_back(labels);
    }
  }
  plot_png(out_dir + "/attention.png", am);
}

}  // namespace uatlab::experiment
