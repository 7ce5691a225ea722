// analyse: the certified predictions (predictions.cpp), their fewest bits, the formats they survive,
// the separation per layer (separation.cpp), and the report in JSON, text and a plot.
#include "uatlab/verify/analyse.hpp"
#include "uatlab/verify/bounds.hpp"

#include <mpfi.h>
#include <mpfr.h>
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <map>
#include <optional>
#include <queue>
#include <sstream>

#include "uatlab/io/report.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/verify/affine.hpp"
#include "uatlab/verify/evaluate.hpp"
#include "uatlab/verify/precision.hpp"

namespace uatlab {

using nlohmann::json;

namespace {

// analyse --epsilon: the predictions over the boxes of radius ε, then per sequence the largest
// radius found certified: doubling from ε while a sequence stays certified (up to 2^20·ε), then
// bisection, all sequences in lockstep (one pass over the data per step, each sequence at its own
// radius). A radius counts only when a pass certified every prediction of the sequence at it.
Region certify_region(const Network<Rational>& net, const Dataset& ds, LabelKind kind, const Rational& tol,
                      unsigned bits, const AnalyseOptions& o, const std::string& tier) {
  limits::check_count(o.epsilon_steps, 0, 64, "epsilon steps");
  const Rational eps = parse_rational(o.epsilon);
  // From 2^-1000 on, the radii the search reaches (up to 2^20·ε) print as normal doubles; a radius of
  // 0 is the points themselves, which the memorization part certifies.
  if (eps < Rational(1, mp::mpz_int(1) << 1000))
    throw Error("analyse: --epsilon must be at least 2^-1000 (about 9.3e-302), got " + o.epsilon +
                (eps == 0 ? " (a box of radius 0 is the points themselves)" : ""));
  Region r;
  r.epsilon = o.epsilon, r.steps = o.epsilon_steps, r.method = o.region_method;
  const std::size_t N = ds.sequences.size();
  // The boxes in the engine's ball tier (RegionMethod::balls; tier empty: the method's MPFI at bits).
  std::optional<Network<Ball53>> b53;
  std::optional<Network<Ball113>> b113;
  if (tier == Scalar<Ball53>::name) b53 = network_cast<Ball53>(net);
  if (tier == Scalar<Ball113>::name) b113 = network_cast<Ball113>(net);
  auto pass = [&](const std::vector<Rational>& radii, const std::string& what) {
    report(o.progress, "analyse: region, " + what, 0, 0);
    const Predictions p = b53    ? engine_region_predictions(*b53, ds, kind, tol, radii)
                          : b113 ? engine_region_predictions(*b113, ds, kind, tol, radii)
                                 : certify_predictions(net, ds, kind, tol, bits, {}, false, o.affine, {},
                                                       radii, o.region_method);
    std::vector<bool> all(N, true);
    for (const PredictionFailure& f : p.failures)
      all[f.sequence] = false;
    return std::make_pair(p, all);
  };
  auto [at_eps, ok] = pass(std::vector<Rational>(N, eps), "epsilon " + o.epsilon);
  r.predictions = at_eps;
  std::vector<Rational> lo(N), hi(N);  // certified at lo (0 stands for "none found"), not at hi
  std::vector<bool> found(N, false), bounded(N, false);
  for (std::size_t i = 0; i < N; ++i) {
    if (ok[i])
      lo[i] = eps, found[i] = true, hi[i] = 2 * eps;
    else
      hi[i] = eps, bounded[i] = true;
  }
  for (int doubling = 0; doubling < 20; ++doubling) {
    std::vector<Rational> radii(N);
    bool any = false;
    for (std::size_t i = 0; i < N; ++i)
      radii[i] = bounded[i] ? lo[i] : hi[i], any = any || !bounded[i];
    if (!any) break;
    const auto [p, certified] = pass(radii, "doubling the radius");
    for (std::size_t i = 0; i < N; ++i)
      if (!bounded[i]) {
        if (certified[i])
          lo[i] = hi[i], found[i] = true, hi[i] *= 2;
        else
          bounded[i] = true;
      }
  }
  for (int step = 0; step < o.epsilon_steps; ++step) {
    std::vector<Rational> mid(N);
    for (std::size_t i = 0; i < N; ++i)
      mid[i] = (lo[i] + hi[i]) / 2;
    const auto [p, certified] = pass(mid, "bisection step " + std::to_string(step + 1));
    for (std::size_t i = 0; i < N; ++i) {
      if (!bounded[i]) continue;  // certified at 2^20·ε and beyond: left there
      if (certified[i])
        lo[i] = mid[i], found[i] = true;
      else
        hi[i] = mid[i];
    }
  }
  r.largest_epsilon.resize(N);
  for (std::size_t i = 0; i < N; ++i) {
    r.largest_epsilon[i] = found[i] ? to_double_down(lower(Scalar<Mpfi>::from(lo[i]))) : 0;
    r.at_cap += !bounded[i];
  }
  return r;
}

}  // namespace

Analysis analyse(const Network<Rational>& net, const Dataset& ds, const AnalyseOptions& o) {
  limits::check_count(o.bits, 2, 1 << 20, "bits");
  limits::check_count(o.max_bits, o.bits, 1 << 20, "max bits");
  if (ds.sequences.empty()) throw Error("analyse: the dataset has no sequences");
  if (o.epsilon.empty() && o.region_method != RegionMethod::intervals)
    throw Error("analyse: a region method without --epsilon (no region to certify)");
  const Rational tol = parse_rational(o.tolerance);
  if (tol < 0) throw Error("analyse: the tolerance must be >= 0");
  const LabelKind kind = label_kind(o.labels, ds, net.arch.out_dim());
  Analysis a;
  auto undecided = [](const Predictions& p) {
    return std::any_of(p.failures.begin(), p.failures.end(),
                       [](const PredictionFailure& f) { return f.kind == FailureKind::undecided; });
  };
  // Without the fewest-bits search, the certified engine first: where its balls decide every
  // prediction, no MPFI pass is needed (the separation then runs at o.bits). A region by an MPFI
  // method needs the precision that certified the points: then MPFI decides them.
  const bool engine =
      o.engine && !o.min_bits && (o.epsilon.empty() || o.region_method == RegionMethod::balls);
  if (engine) a.predictions = engine_predictions(net, ds, kind, tol, o.progress);
  // Else MPFI, doubling the bits while some are undecided. A first pass stops at the first
  // failure (a run with no failure is complete); the full list is computed where the doubling ends.
  if (!engine || undecided(a.predictions))
    certify_with_doubling(o.bits, o.max_bits, [&](unsigned bits) {
      a.predictions = certify_predictions(net, ds, kind, tol, bits, o.progress, true, o.affine);
      if (a.predictions.all()) return true;
      if (a.predictions.failures.front().kind == FailureKind::undecided && bits < o.max_bits) return false;
      a.predictions = certify_predictions(net, ds, kind, tol, bits, o.progress, false, o.affine);
      return !undecided(a.predictions);
    });
  if (a.predictions.tokens == 0)  // zero checked predictions certify nothing
    throw Error("analyse: no prediction to check: every token of the data is masked out");
  const bool by_engine = a.predictions.bits == 0;
  const unsigned bits = by_engine ? o.bits : a.predictions.bits;
  // The fewest bits: a guess from the margins at `bits` first, then the bisection; every probe
  // starts with the sequences of least margin, so a failing one stops at once.
  const std::vector<std::size_t> order = a.predictions.hardest_first();
  if (o.min_bits && a.predictions.all()) {
    a.min_bits = min_certified_bits(
        bits,
        [&](unsigned b) {
          report(o.progress, "analyse: fewest bits, trying " + std::to_string(b), 0, 0);
          return certify_predictions(net, ds, kind, tol, b, {}, true, o.affine, order).all();
        },
        a.predictions.guess_min_bits());
    // The same word in a b-bit machine's sense: the network evaluated at b bits, round to nearest.
    auto rounded = [&](unsigned b) {
      report(o.progress, "analyse: fewest bits rounding to nearest, trying " + std::to_string(b), 0, 0);
      return labels_at_rounded_bits(net, ds, kind, tol, b);
    };
    const Doubling found = certify_with_doubling(a.min_bits, o.max_bits, rounded);
    if (found.finished) a.rounded_bits = mpfr_carried_bits(min_certified_bits(found.bits, rounded, 0));
  }
  // Regions by balls in the tier that decided the points (ball:113 if it decided any, or where
  // MPFI did); by the other methods in MPFI at the points' bits.
  const std::string region_tier = o.region_method != RegionMethod::balls ? ""
                                  : by_engine && a.predictions.tier.find("ball:113") == std::string::npos
                                      ? Scalar<Ball53>::name
                                      : Scalar<Ball113>::name;
  if (!o.epsilon.empty()) a.region = certify_region(net, ds, kind, tol, bits, o, region_tier);
  if (o.rounding) {
    a.direct_rounding = o.direct_rounding;
    for (const WeightFormat& f : kWeightFormats) {
      const char* format = f.name;
      Network<Rational> r = net;
      long long overflow = 0, changed = 0;
      r.for_each_tensor([&](const std::string&, Mat<Rational>& m, Layout) {
        for (Eigen::Index i = 0; i < m.size(); ++i) {
          bool over = false;
          const Rational w = round_weight(m(i), format, o.direct_rounding, over);
          overflow += over, changed += w != m(i);
          m(i) = w;
        }
      });
      a.overflow.emplace_back(format, overflow);
      report(o.progress, "analyse: weights rounded " + rounding_path(format, o.direct_rounding), 0, 0);
      // Weights the format holds already (a model trained in float32) make the same network: its
      // verdict is the one above, at the same bits.
      if (overflow == 0)
        a.rounded.emplace_back(format, changed == 0 ? a.predictions
                                       : by_engine  ? engine_predictions(r, ds, kind, tol)
                                                    : certify_predictions(r, ds, kind, tol, bits, {},
                                                                          o.stop_early, o.affine, order));
    }
  }
  if (o.separation) {
    long long tokens = 0;
    for (const Sequence& s : ds.sequences)
      tokens += static_cast<long long>(s.n());
    if (tokens > o.max_separation_tokens) {
      a.separation_note = std::to_string(tokens) + " tokens, over the limit of " +
                          std::to_string(o.max_separation_tokens) + " for the pairwise distances";
    } else {
      try {
        a.layers = layer_separations(net, ds, bits, o.seed, o.progress);
      } catch (const Error& e) {  // e.g. a hardmax whose argmax the enclosures cannot decide
        a.layers.clear();
        a.separation_note = std::string("evaluation failed: ") + e.what();
      }
      if (a.layers.empty() && a.separation_note.empty())
        a.separation_note = "the network has no token-mixing sub-layer (attention, bproj, sepconv)";
    }
  }
  return a;
}

namespace {
json predictions_json(const Predictions& p) {
  json f = json::array();
  for (const PredictionFailure& x : p.failures)
    f.push_back({{"sequence", x.sequence},
                 {"token", x.token},
                 {"kind", failure_kind_names(x.kind)},
                 {"label", x.label},
                 {"predicted", x.predicted}});
  json r = {{"labels", label_kind_names(p.kind)},
            {"tokens", p.tokens},
            {"certified", p.certified},
            {"all_certified", p.all()},
            {"failures", f}};
  if (p.bits == 0)  // the certified engine's balls decided
    r["tier"] = p.tier;
  else
    r["tier"] = "interval:" + std::to_string(mpfr_carried_bits(p.bits)),
    r["bits"] = mpfr_carried_bits(p.bits);
  return r;
}
json number(double x) {
  return std::isfinite(x) ? json(x) : std::isnan(x) ? json(nullptr) : json(x > 0 ? "inf" : "-inf");
}
}  // namespace

json Analysis::report() const {
  json r = {{"memorization", predictions_json(predictions)}};
  if (min_bits > 0) r["min_bits"] = min_bits;
  if (rounded_bits > 0) r["rounded_bits"] = rounded_bits;
  json rounding = json::object();
  for (const auto& [name, over] : overflow) {
    rounding[name] = {{"overflowing_weights", over}, {"path", rounding_path(name, direct_rounding)}};
    for (const auto& [n2, p] : rounded)
      if (n2 == name) {
        rounding[name]["all_certified"] = p.all();
        if (!p.all()) {  // the search stops at a failure: one is shown, not a count
          const PredictionFailure& f = p.failures.front();
          rounding[name]["a_failure"] = {
              {"sequence", f.sequence}, {"token", f.token}, {"kind", failure_kind_names(f.kind)}};
        }
      }
  }
  if (!overflow.empty()) r["rounded_weights"] = rounding;
  json ls = json::array();
  for (const LayerSeparation& l : layers)
    ls.push_back({{"layer", l.layer},
                  {"source", l.source},
                  {"same_token_pairs", l.same_token_pairs},
                  {"delta_certified", number(l.delta)},
                  {"log10_delta_certified", number(l.log10_delta)},
                  {"cross_token_certified", number(l.cross)},
                  {"log10_cross_token_certified", number(l.log10_cross)},
                  {"projection", l.v},
                  {"projection_gap_certified", number(l.projection_gap)}});
  r["separation"] = ls;
  if (!separation_note.empty()) r["separation_note"] = separation_note;
  // Per sequence, per counted token: its certified margin (rounded down when it became a double).
  auto margins = [&](const Predictions& p) {
    json all = json::array();
    for (const auto& m : p.margin) {
      json row = json::array();
      for (double v : m)
        row.push_back(number(v));
      all.push_back(row);
    }
    return all;
  };
  if (region) {
    json largest = json::array();
    for (double e : region->largest_epsilon)
      largest.push_back(number(e));
    r["region"] = {{"epsilon", region->epsilon},
                   {"method", region_method_names(region->method)},
                   {"norm", "linf"},
                   {"predictions", predictions_json(region->predictions)},
                   {"margin_certified", margins(region->predictions)},
                   {"largest_epsilon_certified", largest},
                   {"sequences_at_cap", region->at_cap},
                   {"bisection_steps", region->steps}};
  }
  r["memorization"]["margin_certified"] = margins(predictions);
  return r;
}

std::string Analysis::summary() const {
  std::ostringstream s;
  const Predictions& p = predictions;
  s << "memorization  " << p.certified << " of " << p.tokens << " predictions certified ("
    << (p.kind == LabelKind::classes ? "argmax" : "|y - label| within the tolerance") << ", "
    << (p.bits == 0 ? "the certified engine's " + p.tier
                    : "MPFI at " + std::to_string(mpfr_carried_bits(p.bits)) + " bits")
    << ")\n";
  std::size_t shown = 0;
  for (const PredictionFailure& f : p.failures) {
    if (shown++ == 10) {
      s << "              ... " << p.failures.size() - 10 << " more in the report\n";
      break;
    }
    // Counted from 1, as every message of uatlab counts them (the report's fields are 0-based).
    s << "              sequence " << f.sequence + 1 << " token " << f.token + 1 << ": "
      << failure_kind_names(f.kind) << " (label " << f.label << ", predicted " << f.predicted << ")\n";
  }
  if (region) {
    const Predictions& q = region->predictions;
    double least = kInf, smallest_eps = kInf;
    for (const auto& m : q.margin)
      for (double v : m)
        least = std::min(least, v);
    for (double e : region->largest_epsilon)
      smallest_eps = std::min(smallest_eps, e);
    s << "region        epsilon " << region->epsilon << " (linf box around every input vector, "
      << region_method_names(region->method) << (q.bits == 0 ? " in the certified engine's " + q.tier : "")
      << "): " << q.certified << " of " << q.tokens
      << " predictions certified for every input in it; least margin " << lower_text(least, 4) << "\n";
    s << "              largest epsilon certified per sequence (" << region->steps
      << " bisection steps): least " << lower_text(smallest_eps, 4) << " (every sequence's in the report)\n";
    if (region->at_cap > 0)
      s << "              " << region->at_cap
        << " sequences still certified where the search stops (2^20 times epsilon): a larger --epsilon "
           "finds more\n";
  }
  if (min_bits > 0)
    s << "bits          every prediction certified at " << min_bits
      << " bits (tested; the fewest found by a search that assumes more bits never hurt)\n";
  if (rounded_bits > 0)
    s << "              the network run at " << rounded_bits
      << " bits, rounding to nearest at every operation, gives every label (measured: MPFR, the same "
         "search)\n";
  else if (min_bits > 0)
    s << "              the network run rounding to nearest gives some label wrong at every precision "
         "tried\n";
  for (const auto& [name, over] : overflow) {
    s << "rounded       " << rounding_path(name, direct_rounding) << ": ";
    if (over > 0) {
      s << over << " weights overflow\n";
      continue;
    }
    for (const auto& [n2, q] : rounded)
      if (n2 == name)
        s << (q.all()
                  ? "every prediction kept (certified)"
                  : "not every prediction kept: sequence " + std::to_string(q.failures.front().sequence + 1) +
                        " token " + std::to_string(q.failures.front().token + 1) + " " +
                        failure_kind_names(q.failures.front().kind))
          << "\n";
  }
  for (const LayerSeparation& l : layers) {
    auto bound = [](double log10) {
      if (std::isnan(log10)) return std::string("(no pair)");
      if (std::isinf(log10)) return std::string("0 (not separated)");
      return ">= 10^" + lower_text(log10, 3);  // log10 rounded down, then printed rounded down
    };
    const std::string gap = ">= " + lower_text(l.projection_gap, 3);
    s << "separation    layer " << l.layer << (l.source.empty() ? "" : " [" + l.source + "]")
      << ": same token, different contexts " << bound(l.log10_delta) << " (" << l.same_token_pairs
      << " pairs); different tokens " << bound(l.log10_cross) << "; along v "
      << (l.same_token_pairs > 0 ? gap : std::string("(no pair)")) << "\n";
  }
  if (!separation_note.empty()) s << "separation    not computed: " << separation_note << "\n";
  return s.str();
}

void plot_separation(const Analysis& a, const std::string& path) {
  LinePlot plot("certified separation per token-mixing layer", "sub-layer", "log10 (certified lower bound)");
  Series same{"same token, different contexts (delta)", {}, {}, {}}, cross{"different tokens", {}, {}, {}},
      along{"along the projection v", {}, {}, {}};
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const LayerSeparation& l = a.layers[i];
    plot.xtics.push_back(std::to_string(l.layer));
    auto add = [&](Series& s, double v) {
      if (std::isfinite(v)) s.x.push_back(static_cast<double>(i)), s.y.push_back(v);
    };
    add(same, l.log10_delta);
    add(cross, l.log10_cross);
    add(along, std::log10(l.projection_gap));  // 0 gives -inf, skipped
  }
  plot.series = {same, cross, along};
  for (Series& s : plot.series)
    s.style = Series::Style::points;
  plot_png(path, plot);
}

}  // namespace uatlab
