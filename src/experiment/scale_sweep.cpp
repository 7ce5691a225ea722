// The softmax → hardmax transition of Kajitsuka & Sato's construction: the score scale c swept
// with the same projection and W_O, the separation certified at each c (contextual.hpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "../construct/kajitsuka_parts.hpp"
#include "uatlab/experiment/contextual.hpp"
#include "uatlab/limits.hpp"

namespace uatlab::kajitsuka {

ScaleSweep sweep_scale(const Facts& f, const ContextualOptions& opt, int points) {
  limits::check_count(points, 2, 1000, "--sweep-c points");
  ScaleSweep sw;
  const Contextual base = [&] {
    ContextualOptions o = opt;
    o.search_min_bits = false;
    return build_contextual(f, o);
  }();
  sw.projection = base.projection;
  sw.c_construction = Scalar<Rational>::to_double(base.c);
  sw.c_gap = base.c_gap;
  sw.c_theorem = base.c_theorem;
  const Projected pr = projected(f, base.projection.v);
  // From a hundredth of the point where softmax is nearly uniform to the largest c whose
  // certificate fits in 65,536 bits (or max_bits / 4 if lower; towards hardmax), at most 100 times
  // the theorem's c.
  const double lo = c_floor_of(pr) / 100, cap = std::min(opt.max_bits / 4.0, 65536.0);
  double hi = 100 * std::max(sw.c_theorem, sw.c_gap);
  while (hi > lo && bits_guess(f, pr, hi) > cap)
    hi /= 2;
  const Rational wo_scale = wo_scale_of(f);
  for (int k = 0; k < points; ++k) {
    ScalePoint p;
    p.c = lo * std::pow(hi / lo, static_cast<double>(k) / (points - 1));
    report(opt.progress, "contextual: sweep over c", k, points);
    const Network<Rational> net =
        attention_network(f, base.projection.v, rational_of(p.c), wo_scale, opt.tied);
    p.separation = certify_doubling(
        net, f, static_cast<unsigned>(std::min<double>(bits_guess(f, pr, p.c), opt.max_bits)), opt.max_bits,
        {}, p.bits);
    sw.points.push_back(p);
  }
  // Hardmax (c = ∞) with the same weights, exactly in rationals: the smallest same-token distance.
  Network<Rational> hard = attention_network(f, base.projection.v, Rational(1), wo_scale, opt.tied);
  hard.arch.layers[0].score = Score::hardmax;
  hard.layers[0].spec.score = Score::hardmax;
  const std::optional<Rational> best = smallest_same_token_sq<Rational>(hard, f);
  sw.hardmax_pairs = best.has_value();
  sw.hardmax_log10_delta = !best        ? std::numeric_limits<double>::infinity()
                           : *best == 0 ? -std::numeric_limits<double>::infinity()
                                        : std::log10(Scalar<Rational>::to_double(*best)) / 2;
  return sw;
}

}  // namespace uatlab::kajitsuka
