// The certified separation of a network's outputs after each token-mixing sub-layer (analyse.hpp):
// bounds computed in double with directed rounding, so this file alone is compiled with
// -frounding-math (CMakeLists.txt).
#include <mpfi.h>
#include <mpfr.h>
#include <omp.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <exception>
#include <map>
#include <optional>
#include <queue>
#include <tuple>

#include "rounding.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/verify/analyse.hpp"
#include "uatlab/verify/bounds.hpp"
#include "uatlab/verify/evaluate.hpp"

namespace uatlab {

namespace {

struct Occurrence {
  std::vector<double> mid, err;  // the output's midpoint (double) and a bound on |value − mid|
  double err_norm = 0;           // ‖err‖₂, rounded up
  int token = 0, context = 0;
  std::size_t sequence = 0, position = 0;
};

// A lower bound on ‖a − b‖₂ for the values the occurrences enclose: ‖m_a − m_b‖ rounded down,
// less ‖e_a‖ + ‖e_b‖ rounded up (the triangle inequality). Called under FE_DOWNWARD (the caller
// sets it once for all its pairs: a mode switch costs as much as a pair), where the sum rounded
// up is −((−e_a) − e_b).
double distance_lower(const Occurrence& a, const Occurrence& b) {
  double sq = 0;
  for (std::size_t r = 0; r < a.mid.size(); ++r) {
    const double diff = a.mid[r] >= b.mid[r] ? a.mid[r] - b.mid[r] : b.mid[r] - a.mid[r];
    sq += diff * diff;
  }
  const double err_up = -(-a.err_norm - b.err_norm);
  return std::sqrt(sq) - err_up;
}

// The exact lower end of ‖a − b‖₂ in MPFI.
double distance_mpfi(const Mat<Mpfi>& A, Eigen::Index ka, const Mat<Mpfi>& B, Eigen::Index kb) {
  Mpfi sq(0), t;
  for (Eigen::Index r = 0; r < A.rows(); ++r) {
    const Mpfi diff = A(r, ka) - B(r, kb);
    mpfi_sqr(t.backend().data(), diff.backend().data());
    sq += t;
  }
  return to_double_down(lower(mp::sqrt(sq)));
}

// A certified lower bound on the least distance over a set of pairs: every pair's directed-
// rounding bound, and for the kExact pairs with the smallest such bound, the exact MPFI one.
struct MinDistance {
  static constexpr std::size_t kExact = 32;
  std::priority_queue<std::tuple<double, std::size_t, std::size_t>> smallest;  // max-heap of kExact + 1
  long long pairs = 0;
  void add(double bound, std::size_t a, std::size_t b) {
    if (std::isnan(bound)) throw Error("separation: a distance bound is not a number (an internal error)");
    ++pairs;
    keep(bound, a, b);
  }
  // Kept: the kExact + 1 smallest (bound, a, b) in lexicographic order, the same set whatever order
  // the pairs come in (ties between bounds included).
  void keep(double bound, std::size_t a, std::size_t b) {
    if (smallest.size() <= kExact || std::make_tuple(bound, a, b) < smallest.top()) {
      smallest.emplace(bound, a, b);
      if (smallest.size() > kExact + 1) smallest.pop();
    }
  }
  // Another thread's pairs: the kExact + 1 smallest of both are the smallest of the union.
  void merge(MinDistance other) {
    pairs += other.pairs;
    for (; !other.smallest.empty(); other.smallest.pop()) {
      const auto [bound, a, b] = other.smallest.top();
      keep(bound, a, b);
    }
  }
  // NaN without pairs; closest: the pair with the smallest bound.
  double certify(const std::vector<Occurrence>& occ, const std::vector<Mat<Mpfi>>& outputs,
                 std::size_t& closest_a, std::size_t& closest_b) const {
    if (pairs == 0) return std::nan("");
    auto heap = smallest;
    // Every pair left out has a bound at least the (kExact+1)-th smallest.
    double best = std::numeric_limits<double>::infinity();
    if (heap.size() > kExact) {
      best = std::max(0.0, std::get<0>(heap.top()));
      heap.pop();
    }
    double least = std::numeric_limits<double>::infinity();
    for (; !heap.empty(); heap.pop()) {
      const auto [bound, a, b] = heap.top();
      const Occurrence &A = occ[a], &B = occ[b];
      const double exact = distance_mpfi(outputs[A.sequence], static_cast<Eigen::Index>(A.position),
                                         outputs[B.sequence], static_cast<Eigen::Index>(B.position));
      best = std::min(best, std::max({0.0, bound, exact}));
      if (bound < least) least = bound, closest_a = a, closest_b = b;
    }
    return best;
  }
};

// The sub-layers 0..last of net (no readout, no pooling), in intervals.
Network<Mpfi> prefix(const Network<Rational>& net, std::size_t last) {
  Network<Rational> p = net;
  p.arch.layers.resize(last + 1);
  p.layers.resize(last + 1);
  p.arch.readout = 0, p.arch.pool = false;
  p.readout_w.resize(0, 0), p.readout_b.resize(0, 0);
  return network_cast<Mpfi>(p);
}

// Token identity (id, or the exact input column) and context (the set of a sequence's tokens).
void identify(const Dataset& ds, std::vector<std::vector<int>>& token, std::vector<int>& context) {
  std::map<std::string, int> ids;
  std::map<std::vector<int>, int> sets;
  for (const Sequence& s : ds.sequences) {
    std::vector<int> t;
    for (std::size_t k = 0; k < s.n(); ++k) {
      std::string key;
      if (ds.token_input)
        key = std::to_string(s.tokens[k]);
      else
        for (Eigen::Index r = 0; r < s.x.rows(); ++r)
          key += s.x(r, static_cast<Eigen::Index>(k)).str() + ",";
      t.push_back(ids.emplace(key, static_cast<int>(ids.size())).first->second);
    }
    std::vector<int> set = t;
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    context.push_back(sets.emplace(set, static_cast<int>(sets.size())).first->second);
    token.push_back(std::move(t));
  }
}

LayerSeparation separation(const Network<Rational>& net, const Dataset& ds, std::size_t layer, unsigned bits,
                           const std::vector<std::vector<int>>& token, const std::vector<int>& context,
                           std::uint64_t seed) {
  LayerSeparation L;
  L.layer = layer;
  L.source = net.arch.layers[layer].source;
  const MpfrPrecision precision(bits);
  const Network<Mpfi> pre = prefix(net, layer);
  const std::vector<Mat<Mpfi>> out = forward_dataset(pre, ds);  // an undecided enclosure throws, named
  std::vector<Occurrence> occ;
  for (std::size_t i = 0; i < out.size(); ++i)
    for (Eigen::Index k = 0; k < out[i].cols(); ++k) {
      Occurrence o;
      o.sequence = i, o.position = static_cast<std::size_t>(k);
      o.token = token[i][static_cast<std::size_t>(k)], o.context = context[i];
      for (Eigen::Index r = 0; r < out[i].rows(); ++r) {
        const Mpfi& y = out[i](r, k);
        const double m = Scalar<Mpfi>::to_double(y);
        Mpfr above = upper(y), below(m);
        mpfr_sub(above.backend().data(), above.backend().data(), Mpfr(m).backend().data(), MPFR_RNDU);
        mpfr_sub(below.backend().data(), below.backend().data(), lower(y).backend().data(), MPFR_RNDU);
        o.mid.push_back(m), o.err.push_back(std::max(to_double_up(above), to_double_up(below)));
        // Beyond double's range the midpoints and distances below would be inf or NaN, and a NaN
        // bound would be dropped (a false separation): refuse instead.
        if (!std::isfinite(o.mid.back()) || !std::isfinite(o.err.back()))
          throw Error("sequence " + std::to_string(i + 1) + " token " + std::to_string(k + 1) +
                      ": an output of " + "sub-layer " + std::to_string(layer) +
                      " lies beyond double's range (" + Scalar<Mpfi>::to_string(y).substr(0, 80) +
                      "); the separation is not certified there");
      }
      {
        const Rounding up_(FE_UPWARD);
        double sq = 0;
        for (double e : o.err)
          sq += e * e;
        o.err_norm = std::sqrt(sq);
      }
      occ.push_back(std::move(o));
    }
  // Every pair (quadratic: 32 million at 8,000 tokens), split over the threads, each with its own
  // rounding mode (a thread's) and its own smallest bounds, merged in thread order.
  MinDistance same, cross;
  const long count = static_cast<long>(occ.size());
  std::vector<std::pair<MinDistance, MinDistance>> parts(static_cast<std::size_t>(omp_get_max_threads()));
  std::exception_ptr failure;
#pragma omp parallel
  {
    auto& mine = parts[static_cast<std::size_t>(omp_get_thread_num())];
    MinDistance &my_same = mine.first,
                &my_cross = mine.second;  // (clang: no structured binding in an omp region)
    const Rounding down(FE_DOWNWARD);
#pragma omp for schedule(dynamic, 16)
    for (long ia = 0; ia < count; ++ia) {
      const auto a = static_cast<std::size_t>(ia);
      try {
        for (std::size_t b = a + 1; b < occ.size(); ++b) {
          const bool same_token = occ[a].token == occ[b].token;
          if (same_token && occ[a].context == occ[b].context) continue;
          (same_token ? my_same : my_cross).add(distance_lower(occ[a], occ[b]), a, b);
        }
      } catch (...) {  // a NaN bound: an exception must not leave the loop's thread
#pragma omp critical(uatlab_separation_failure)
        if (!failure) failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
  for (auto& [s, c] : parts)
    same.merge(std::move(s)), cross.merge(std::move(c));
  std::size_t ca = 0, cb = 0, xa = 0, xb = 0;
  L.same_token_pairs = same.pairs;
  L.delta = same.certify(occ, out, ca, cb);
  L.cross = cross.certify(occ, out, xa, xb);
  L.log10_delta = log10_down(L.delta), L.log10_cross = log10_down(L.cross);  // still lower bounds
  if (same.pairs == 0) return L;
  // The direction: the closest same-token pair's difference, or one of 32 seeded random ones,
  // whichever keeps the contexts of every token furthest apart along it.
  const std::size_t d = occ[0].mid.size();
  std::vector<std::vector<double>> candidates;
  std::vector<double> v0(d);
  for (std::size_t r = 0; r < d; ++r)
    v0[r] = occ[ca].mid[r] - occ[cb].mid[r];
  candidates.push_back(v0);
  Rng rng(seed);
  for (int c = 0; c < 32; ++c) {
    std::vector<double> v(d);
    for (double& x : v)
      x = rng.gauss();
    candidates.push_back(v);
  }
  L.projection_gap = -std::numeric_limits<double>::infinity();
  for (std::vector<double>& v : candidates) {
    double norm = 0;
    for (double x : v)
      norm += x * x;
    if (!(norm > 0)) continue;
    for (double& x : v)
      x /= std::sqrt(norm);
    // Per occurrence: vᵀ(value) lies in [lo, lo + width] (directed rounding); with one width W
    // for all, the closest pair of different contexts is adjacent in the order of lo.
    std::vector<std::tuple<int, double, int>> proj;  // (token, lo, context)
    double width = 0;
    for (const Occurrence& o : occ) {
      double lo = 0, hi = 0, e = 0;
      {
        const Rounding down(FE_DOWNWARD);
        for (std::size_t r = 0; r < d; ++r)
          lo += v[r] * o.mid[r];
      }
      {
        const Rounding up_(FE_UPWARD);
        for (std::size_t r = 0; r < d; ++r)
          hi += v[r] * o.mid[r], e += std::abs(v[r]) * o.err[r];
        hi += e;
      }
      {
        const Rounding down(FE_DOWNWARD);
        lo -= e;
      }
      const Rounding up_(FE_UPWARD);
      width = std::max(width, hi - lo);
      proj.emplace_back(o.token, lo, o.context);
    }
    // Projections past double's range (an infinite end or width) certify no gap along this v.
    if (!std::isfinite(width) ||
        std::any_of(proj.begin(), proj.end(), [](const auto& p) { return !std::isfinite(std::get<1>(p)); }))
      continue;
    std::sort(proj.begin(), proj.end());
    double gap = std::numeric_limits<double>::infinity();
    {
      const Rounding down(FE_DOWNWARD);
      for (std::size_t i = 1; i < proj.size(); ++i)
        if (std::get<0>(proj[i]) == std::get<0>(proj[i - 1]) &&
            std::get<2>(proj[i]) != std::get<2>(proj[i - 1]))
          gap = std::min(gap, (std::get<1>(proj[i]) - std::get<1>(proj[i - 1])) - width);
    }
    if (gap > L.projection_gap) L.projection_gap = gap, L.v = v;
  }
  L.projection_gap = std::max(0.0, L.projection_gap);
  return L;
}
}  // namespace

std::vector<LayerSeparation> layer_separations(const Network<Rational>& net, const Dataset& ds, unsigned bits,
                                               std::uint64_t seed, const OnProgress& progress) {
  std::vector<std::vector<int>> token;
  std::vector<int> context;
  identify(ds, token, context);
  std::vector<LayerSeparation> layers;
  for (std::size_t i = 0; i < net.arch.layers.size(); ++i)
    if (mixes_tokens(net.arch.layers[i].kind)) {
      report(progress, "analyse: separation after layer " + std::to_string(i), 0, 0);
      layers.push_back(separation(net, ds, i, bits, token, context, seed));
    }
  return layers;
}

}  // namespace uatlab
