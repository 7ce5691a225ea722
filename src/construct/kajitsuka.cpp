#include "uatlab/construct/kajitsuka.hpp"

#include "kajitsuka_parts.hpp"

#include "../chunks.hpp"
#include "uatlab/limits.hpp"

#include <mpfr.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "uatlab/construct/blocks.hpp"
#include "uatlab/construct/deep_value_map.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/verify/affine.hpp"
#include "uatlab/verify/bounds.hpp"
#include "uatlab/verify/evaluate.hpp"

namespace uatlab::kajitsuka {

using nlohmann::json;

namespace {

constexpr double kPi = 3.14159265358979323846;

Vec<double> to_double(const Vec<Rational>& x) {
  return x.unaryExpr([](const Rational& q) { return Scalar<Rational>::to_double(q); });
}

std::string listed(const std::vector<std::string>& items, std::size_t shown = 20) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < shown; ++i)
    s += "\n  " + items[i];
  if (items.size() > shown) s += "\n  ... and " + std::to_string(items.size() - shown) + " more";
  return s;
}

// log10 of a positive Mpfr that may be far outside double's range.
double log10_of(const Mpfr& x) {
  if (x <= 0) return -kInf;
  return Scalar<Mpfr>::to_double(mp::log10(x));
}

}  // namespace

// ---- building blocks, shared with the scale sweep (kajitsuka_parts.hpp) -------------------------

// Context ids F^SA(X)_{:,k} for one representative sequence of every vocabulary set, in S.
template <class S>
std::vector<Mat<S>> context_ids(const Network<Rational>& attention, const Facts& f) {
  const Network<S> net = network_cast<S>(attention);
  std::vector<Mat<S>> out(f.sets.size());
  parallel_for(static_cast<long>(f.sets.size()), [&](long s) {
    const auto& toks = f.tokens[f.first_with_set[s]];
    Mat<S> x(f.d, f.n);
    for (int k = 0; k < f.n; ++k)
      x.col(k) = f.vocab[toks[k]].unaryExpr([](const Rational& q) { return Scalar<S>::from(q); });
    out[s] = forward(net, x);
  });
  return out;
}

// Contexts grouped by token: for vocabulary index t, the list of (set, column) holding it.
std::vector<std::vector<std::pair<int, int>>> contexts_by_token(const Facts& f) {
  std::vector<std::vector<std::pair<int, int>>> by(f.vocab.size());
  for (std::size_t s = 0; s < f.sets.size(); ++s) {
    const auto& toks = f.tokens[f.first_with_set[s]];
    for (int k = 0; k < f.n; ++k)
      by[toks[k]].push_back({static_cast<int>(s), k});
  }
  return by;
}

// Smallest distance between two contexts of the same token, in double (the tuned-mode scan).
// The smallest squared distance between two contexts of the same token, computed in S (none when no
// token occurs in two vocabulary sets).
template <class S>
std::optional<S> smallest_same_token_sq(const Network<Rational>& attention, const Facts& f) {
  const auto z = context_ids<S>(attention, f);
  std::optional<S> best;
  for (const auto& g : contexts_by_token(f))
    for (std::size_t a = 0; a < g.size(); ++a)
      for (std::size_t b = a + 1; b < g.size(); ++b) {
        const S sq = (z[g[a].first].col(g[a].second) - z[g[b].first].col(g[b].second)).squaredNorm();
        if (!best || sq < *best) best = sq;
      }
  return best;
}

// The same in double, as a distance (the tuned-mode scan).
double same_token_delta_double(const Network<Rational>& attention, const Facts& f) {
  const std::optional<double> sq = smallest_same_token_sq<double>(attention, f);
  return sq ? std::sqrt(*sq) : kInf;
}

Network<Rational> attention_network(const Facts& f, const Vec<Rational>& v, const Rational& c,
                                    const Rational& wo_scale, bool tied) {
  return blocks::Builder(f.d)
      .add(blocks::rank1_attention(tied),
           [&](Layer<Rational>& L) { blocks::fill_rank1(L, v, c, wo_scale, tied); })
      .build();
}

// ---- stage 1: the hypotheses --------------------------------------------------------------------

Facts analyse(const Dataset& ds, bool require_labels) {
  if (ds.token_input) throw Error("Theorem 2 needs continuous tokens (\"x\"), the dataset has token ids");
  if (ds.sequences.empty()) throw Error("the dataset is empty");
  if (require_labels && ds.sequence_labels)
    throw Error(
        "the dataset labels each sequence once (its last token); Theorem 2's memorization labels "
        "every token: memorize it with --setting next-token");
  Facts f;
  f.d = ds.d;
  f.n = static_cast<int>(ds.sequences[0].n());
  f.label_dim = ds.label_dim;
  std::vector<std::string> bad;
  std::map<std::vector<Rational>, int> index;
  std::map<std::vector<int>, int> set_index;
  for (std::size_t i = 0; i < ds.sequences.size(); ++i) {
    const Sequence& s = ds.sequences[i];
    const std::string seq = "sequence " + std::to_string(i + 1);
    if (static_cast<int>(s.n()) != f.n) {
      bad.push_back(seq + " has " + std::to_string(s.n()) + " tokens, sequence 1 has " + std::to_string(f.n) +
                    " (n must be equal)");
      f.tokens.emplace_back(), f.set_of.push_back(-1);
      continue;
    }
    std::vector<int> toks;
    for (int k = 0; k < f.n; ++k) {
      std::vector<Rational> key(s.x.col(k).data(), s.x.col(k).data() + f.d);
      auto [it, fresh] = index.emplace(key, static_cast<int>(f.vocab.size()));
      if (fresh) f.vocab.push_back(s.x.col(k));
      for (int l = 0; l < k; ++l)
        if (toks[l] == it->second)
          bad.push_back(seq + ": tokens " + std::to_string(l + 1) + " and " + std::to_string(k + 1) +
                        " are equal (no duplicates allowed)");
      if (s.x.col(k).squaredNorm() == 0)
        bad.push_back(seq + ", token " + std::to_string(k + 1) + ": the zero vector (r_min must be > 0)");
      toks.push_back(it->second);
    }
    std::vector<int> set = toks;
    std::sort(set.begin(), set.end());
    auto [it, fresh] = set_index.emplace(set, static_cast<int>(f.sets.size()));
    if (fresh) {
      f.sets.push_back(set);
      f.first_with_set.push_back(static_cast<int>(i));
    }
    f.tokens.push_back(std::move(toks));
    f.set_of.push_back(it->second);
  }
  if (f.vocab.size() < 2) bad.push_back("the vocabulary has fewer than two distinct tokens");
  if (require_labels) {
    if (ds.label_dim == 0)
      bad.push_back("the dataset has no labels (\"y\")");
    else {
      // (token, set) -> first (sequence, position) carrying it
      std::map<std::pair<int, int>, std::pair<std::size_t, int>> seen;
      for (std::size_t i = 0; i < ds.sequences.size(); ++i) {
        if (f.set_of[i] < 0) continue;
        for (int k = 0; k < f.n; ++k) {
          auto [it, fresh] = seen.emplace(std::make_pair(f.tokens[i][k], f.set_of[i]), std::make_pair(i, k));
          if (!fresh && ds.sequences[it->second.first].y.col(it->second.second) != ds.sequences[i].y.col(k))
            bad.push_back("inconsistent labels: sequence " + std::to_string(it->second.first + 1) +
                          " token " + std::to_string(it->second.second + 1) + " and sequence " +
                          std::to_string(i + 1) + " token " + std::to_string(k + 1) +
                          " are the same token with the same vocabulary set but different labels");
        }
      }
    }
  }
  if (!bad.empty())
    throw Error("the dataset violates the hypotheses of Kajitsuka & Sato's Theorem 2 (" +
                std::to_string(bad.size()) + " problem" + (bad.size() > 1 ? "s" : "") + "):" + listed(bad));
  f.r_min_sq = f.r_max_sq = f.vocab[0].squaredNorm();
  for (auto& x : f.vocab) {
    Rational q = x.squaredNorm();
    f.r_min_sq = std::min(f.r_min_sq, q);
    f.r_max_sq = std::max(f.r_max_sq, q);
  }
  f.eps_sq = (f.vocab[0] - f.vocab[1]).squaredNorm();
  for (std::size_t i = 0; i < f.vocab.size(); ++i)
    for (std::size_t j = i + 1; j < f.vocab.size(); ++j)
      f.eps_sq = std::min(f.eps_sq, Rational((f.vocab[i] - f.vocab[j]).squaredNorm()));
  auto root = [](const Rational& q) { return std::sqrt(Scalar<Rational>::to_double(q)); };
  f.r_min = root(f.r_min_sq);
  f.r_max = root(f.r_max_sq);
  f.eps = root(f.eps_sq);
  return f;
}

// ---- stage 2: Lemma 3's projection ---------------------------------------------------------------

// (vᵀΔ)² against κ²‖v‖²‖Δ‖² in MPFI at 128 bits, π enclosed by MPFI's constant.
bool lemma3_holds(const Facts& f, const Vec<Rational>& v) {
  const MpfrPrecision precision(128);
  std::vector<Vec<Mpfi>> pts;
  for (const auto& x : f.vocab)
    pts.push_back(x.unaryExpr([](const Rational& q) { return Scalar<Mpfi>::from(q); }));
  pts.push_back(Vec<Mpfi>::Constant(f.d, Mpfi(0)));
  const Vec<Mpfi> vi = v.unaryExpr([](const Rational& q) { return Scalar<Mpfi>::from(q); });
  const Mpfi N = Mpfi(static_cast<double>(f.vocab.size() + 1));
  Mpfi pi;
  mpfi_const_pi(pi.backend().data());
  const Mpfi k2v = 8 / (pi * f.d * N * N * N * N) * vi.squaredNorm();  // κ²‖v‖²
  for (std::size_t i = 0; i < pts.size(); ++i)
    for (std::size_t j = i + 1; j < pts.size(); ++j) {
      const Vec<Mpfi> diff = pts[i] - pts[j];
      const Mpfi dot = vi.dot(diff);
      if (!(lower(square(dot)) >= upper(Mpfi(k2v * diff.squaredNorm())))) return false;
    }
  return true;
}

Projection find_projection(const Facts& f, std::uint64_t seed, int max_tries) {
  std::vector<Vec<double>> pts;
  for (auto& x : f.vocab)
    pts.push_back(to_double(x));
  pts.push_back(Vec<double>::Zero(f.d));
  const double N = static_cast<double>(f.vocab.size() + 1);
  Projection p;
  p.required = std::sqrt(8 / (kPi * f.d)) / (N * N);
  Rng rng(seed);
  for (p.tries = 1; p.tries <= max_tries; ++p.tries) {
    Vec<double> v(f.d);
    for (int i = 0; i < f.d; ++i)
      v(i) = rng.gauss();
    v /= v.norm();
    double worst = kInf;
    for (std::size_t i = 0; i < pts.size(); ++i)
      for (std::size_t j = i + 1; j < pts.size(); ++j) {
        Vec<double> diff = pts[i] - pts[j];
        worst = std::min(worst, std::abs(v.dot(diff)) / diff.norm());
      }
    if (worst >= p.required) {
      p.v = v.unaryExpr([](double t) { return rational_of(t); });
      if (!lemma3_holds(f, p.v)) continue;  // measured in double only: certify it or try again
      p.achieved = worst;
      p.certified = true;
      return p;
    }
  }
  throw Error("no projection vector met Lemma 3's inequality in " + std::to_string(max_tries) +
              " seeded tries");
}

// ---- stage 3: the attention layer and its certificate ---------------------------------------------

Separation certify_separation(const Network<Rational>& attention, const Facts& f, unsigned bits,
                              bool decide_only) {
  const MpfrPrecision precision(bits);
  const auto z = context_ids<Mpfi>(attention, f);
  const auto by = contexts_by_token(f);
  Separation sep;
  // Largest attention term ‖z − x‖ and squared context norm, as upper ends of their enclosures.
  Mpfr t_max(0), nz_max(0);
  for (std::size_t t = 0; t < by.size(); ++t)
    for (auto [s, k] : by[t]) {
      Mpfi sq(0), nz(0);
      for (int i = 0; i < f.d; ++i) {
        Mpfi diff = z[s](i, k) - Scalar<Mpfi>::from(f.vocab[t](i));
        sq += square(diff);
        nz += square(z[s](i, k));
      }
      t_max = std::max(t_max, upper(mp::sqrt(sq)));
      nz_max = std::max(nz_max, upper(nz));
    }
  // The theorem's norm condition r ≤ r_max + ε/4, and contexts of different tokens at least
  // ε − 2·max‖z − x‖ apart (triangle inequality), both in intervals.
  const Mpfi eps = mp::sqrt(Scalar<Mpfi>::from(f.eps_sq));
  const Mpfr r = upper(mp::sqrt(point(nz_max)));
  sep.r = to_double_up(r);
  sep.r_within_bound = r <= lower(Mpfi(mp::sqrt(Scalar<Mpfi>::from(f.r_max_sq)) + eps / 4));
  const Mpfi cross_enclosure = eps - 2 * point(t_max);
  const Mpfr cross = lower(cross_enclosure);
  sep.cross_lower = to_double_down(cross);
  // Every pair of contexts of the same token.
  // Per token, over its pairs computed (seen): the least midpoint and the least lower end. No
  // value marks "none": a lower end may be 0, or below 0 for an enclosure that is not a square.
  std::vector<Mpfr> best_mid(by.size()), best_lo(by.size());
  std::vector<char> seen(by.size(), 0);
  std::vector<double> spare(by.size(), kInf);
  bool undecided = decide_only && !(cross > 0);  // decide_only: stop at the first failure
  // About 500,000 pairs at N = 1000: the same interval operations as sq += diff·diff, into numbers
  // each thread allocates once (a temporary per operation cost more than the arithmetic).
#pragma omp parallel
  {
    Mpfi sq, diff, term;
    Mpfr mid, lo, width;
#pragma omp for schedule(dynamic)
    for (long t = 0; t < static_cast<long>(by.size()); ++t) {
      const auto& g = by[t];
      for (std::size_t a = 0; a < g.size(); ++a)
        for (std::size_t b = a + 1; b < g.size(); ++b) {
          bool stop;
#pragma omp atomic read
          stop = undecided;
          if (stop) break;
          mpfi_set_ui(sq.backend().data(), 0);
          for (int i = 0; i < f.d; ++i) {
            mpfi_sub(diff.backend().data(), z[g[a].first](i, g[a].second).backend().data(),
                     z[g[b].first](i, g[b].second).backend().data());
            mpfi_sqr(term.backend().data(), diff.backend().data());  // ≥ 0, unlike diff·diff
            mpfi_add(sq.backend().data(), sq.backend().data(), term.backend().data());
          }
          mpfi_mid(mid.backend().data(), sq.backend().data());
          mpfi_get_left(lo.backend().data(), sq.backend().data());
          if (!seen[t] || mid < best_mid[t]) best_mid[t] = mid;
          if (!seen[t] || lo < best_lo[t]) best_lo[t] = lo;
          seen[t] = 1;
          mpfi_diam_abs(width.backend().data(), sq.backend().data());
          spare[t] = std::min(spare[t], spare_bits(lo, Scalar<Mpfr>::to_double(width)));
          if (decide_only && !(lo > 0)) {
#pragma omp atomic write
            undecided = true;
          }
        }
    }
  }
  Mpfr mid, lo;
  bool any = false;
  for (std::size_t t = 0; t < by.size(); ++t)
    if (seen[t]) {
      if (!any || best_mid[t] < mid) mid = best_mid[t];
      if (!any || best_lo[t] < lo) lo = best_lo[t];
      any = true;
    }
  // δ over every pair of different contexts: same-token pairs as computed, different-token pairs
  // by their certified lower bound.
  // The certified fields are rounded down (verify/bounds.hpp), the measured ones to nearest.
  const double log10_cross = cross > 0 ? log10_of(cross) : -kInf,
               log10_cross_lo = cross > 0 ? log10_down(cross) : -kInf;
  bool pairs = false;  // some token occurs in two vocabulary sets
  for (const auto& g : by)
    pairs = pairs || g.size() > 1;
  if (!pairs) {  // only the cross bound matters
    sep.log10_delta_same_token = kInf;
    sep.log10_delta = log10_cross;
    sep.log10_delta_lo = log10_cross_lo;
    sep.certified = cross > 0;
  } else if (!any) {  // decide_only stopped before any pair: the cross bound failed
    sep.log10_delta_same_token = sep.log10_delta = sep.log10_delta_lo = -kInf;
    sep.certified = false;
  } else {
    sep.log10_delta_same_token = log10_of(mid) / 2;
    sep.log10_delta = std::min(sep.log10_delta_same_token, log10_cross);
    sep.log10_delta_lo = std::min(lo > 0 ? log10_down(lo) / 2 : -kInf, log10_cross_lo);
    sep.certified = lo > 0 && cross > 0;
  }
  sep.spare_bits = std::min(spare_bits(cross, enclosure_width(cross_enclosure)),
                            *std::min_element(spare.begin(), spare.end()));
  return sep;
}

Projected projected(const Facts& f, const Vec<Rational>& vq) {
  const Vec<double> v = to_double(vq);
  std::vector<double> alpha;
  for (auto& x : f.vocab)
    alpha.push_back(v.dot(to_double(x)));
  std::sort(alpha.begin(), alpha.end());
  Projected p;
  for (std::size_t i = 0; i + 1 < alpha.size(); ++i)
    p.gap = std::min(p.gap, alpha[i + 1] - alpha[i]);
  for (double a : alpha)
    p.min_abs = std::min(p.min_abs, std::abs(a));
  p.range = alpha.back() - alpha.front();
  p.max_abs = std::max(std::abs(alpha.front()), std::abs(alpha.back()));
  return p;
}

// Precision: the scores of one query span c·max|α|·range nats, and the information sits in terms
// e^{-span} below the largest; start above that.
double bits_guess(const Facts& f, const Projected& p, double c) {
  return 64 + 1.25 * c * p.max_abs * p.range / std::log(2.0) - std::log2(f.eps / (4 * f.r_max));
}

// Certify from `bits` up, doubling, until certified or past max_bits (then .certified is false).
Separation certify_doubling(const Network<Rational>& net, const Facts& f, unsigned bits, unsigned max_bits,
                            const OnProgress& progress, unsigned& used) {
  Separation sep;
  certify_with_doubling(bits, max_bits, [&](unsigned b) {
    used = mpfr_carried_bits(b);
    report(progress, "contextual: certify the separation at " + std::to_string(used) + " bits", 0, 0);
    sep = certify_separation(net, f, used);
    return sep.certified;
  });
  return sep;
}

Rational wo_scale_of(const Facts& f) {
  return rational_of(f.eps / (4 * f.r_max) * (1 - 1e-15));  // ≤ ε/(4 r_max)
}

double c_floor_of(const Projected& p) {  // one query's scores span 1 nat: below, nearly mean pooling
  return 1 / (p.max_abs * p.range);
}

Contextual build_contextual(const Facts& f, const ContextualOptions& opt) {
  limits::check_count(opt.max_bits, 64, limits::kPrecisionBits, "--max-bits");
  Contextual out;
  out.mode = opt.mode;
  out.tied = opt.tied;
  out.projection = find_projection(f, opt.seed);
  const Projected pr = projected(f, out.projection.v);
  const double n = f.n, V1 = static_cast<double>(f.vocab.size() + 1), d = f.d;
  const double logn = std::log(n), G = 2 * logn + 3;
  out.c_theorem = G * kPi * d * std::pow(V1, 4) / (8 * f.eps * f.r_min);
  out.c_gap = G / (pr.min_abs * pr.gap);
  out.r_bound = f.r_max + f.eps / 4;
  // δ = [2 (log n)² ε² r_min / (r_max² (|V|+1)⁴ (2 log n + 3) π d)] · exp(−(|V|+1)⁴ (2 log n + 3) π d r_max²
  // / (4 ε r_min))
  out.log10_delta_bound = f.n < 2 ? -kInf
                                  : std::log10(2 * logn * logn * f.eps * f.eps * f.r_min /
                                               (f.r_max * f.r_max * std::pow(V1, 4) * G * kPi * d)) -
                                        std::pow(V1, 4) * G * kPi * d * f.r_max * f.r_max /
                                            (4 * f.eps * f.r_min) / std::log(10.0);
  const Rational wo_scale = wo_scale_of(f);

  double c = out.c_theorem * (1 + 1e-15);
  if (opt.mode == Mode::tuned) {
    // A halving grid from c_gap down to c_floor, scanned in double; the c with the largest
    // separation wins.
    const double c_floor = c_floor_of(pr);
    double best = -1;
    int since = 0;
    for (int k = 0; k <= 80 && since < 8; ++k) {
      const double ck = std::max(std::ldexp(out.c_gap, -k), c_floor);
      if (k > 0 && ck == c_floor && std::ldexp(out.c_gap, -k + 1) <= c_floor) break;
      const double delta = same_token_delta_double(
          attention_network(f, out.projection.v, rational_of(ck), wo_scale, opt.tied), f);
      if (delta > best * (1 + 1e-9)) {
        best = delta;
        c = ck;
        since = 0;
      } else if (best > 0)
        ++since;  // stop 8 halvings past the best, once anything separates
    }
  }
  out.net = attention_network(f, out.projection.v, rational_of(c), wo_scale, opt.tied);
  const Rational root = rational_of(std::sqrt(c));  // the tied form's √c, as attention_network rounds it
  out.c = opt.tied ? Rational(root * root) : rational_of(c);
  out.contexts = 0;
  for (auto& s : f.sets)
    out.contexts += s.size();

  const double guess = bits_guess(f, pr, c);
  if (guess > opt.max_bits)
    throw Error("the " + std::string(mode_names(opt.mode)) + " construction needs about " +
                std::to_string(static_cast<long>(guess)) + " bits (scores span " +
                std::to_string(c * pr.max_abs * pr.range) + " nats), more than --max-bits " +
                std::to_string(opt.max_bits));
  out.separation =
      certify_doubling(out.net, f, static_cast<unsigned>(guess), opt.max_bits, opt.progress, out.bits_used);
  if (!out.separation.certified)
    throw Error("context ids not certified separated at " + std::to_string(out.bits_used) +
                " bits (--max-bits); the data may have coinciding contexts");
  out.min_bits = out.bits_used;
  if (opt.search_min_bits) out.min_bits = contextual_min_bits(out, f, opt);
  return out;
}

unsigned contextual_min_bits(const Contextual& c, const Facts& f, const ContextualOptions& opt) {
  return min_certified_bits(
      c.bits_used,
      [&](unsigned b) {
        report(opt.progress,
               "contextual: smallest certified precision, trying " + std::to_string(b) + " bits", 0, 0);
        return certify_separation(c.net, f, b, true).certified;
      },
      guess_fewest_bits({c.separation.spare_bits}, c.bits_used));
}

json Facts::report() const {
  return {{"N", tokens.size()}, {"n", n},         {"d", d},    {"V", vocab.size()},
          {"r_min", r_min},     {"r_max", r_max}, {"eps", eps}};
}

json Contextual::report() const {
  auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  return {{"mode", mode_names(mode)},
          {"tied_qkv", tied},
          {"projection",
           {{"v",
             [&] {
               json a = json::array();
               for (int i = 0; i < projection.v.size(); ++i)
                 a.push_back(Scalar<Rational>::to_double(projection.v(i)));
               return a;
             }()},
            {"achieved_measured", projection.achieved},
            {"lemma3_required", projection.required},
            {"lemma3_certified", projection.certified},
            {"tries", projection.tries}}},
          {"c", Scalar<Rational>::to_double(c)},
          {"c_theorem", c_theorem},
          {"c_gap_condition", c_gap},
          {"contexts", contexts},
          {"r", separation.r},
          {"r_bound", r_bound},
          {"r_within_bound_certified", separation.r_within_bound},
          {"log10_delta", num(separation.log10_delta)},
          {"log10_delta_same_token", num(separation.log10_delta_same_token)},
          {"log10_delta_certified_lower", num(separation.log10_delta_lo)},
          {"log10_delta_bound", num(log10_delta_bound)},
          {"cross_token_lower_bound", separation.cross_lower},
          {"certified", separation.certified},
          {"bits_used", bits_used},
          {"min_bits", min_bits}};
}

// ---- stage 4: Zhang's feed-forward layer and the certificate of memorization -----------------------

double certified_max_error(const Network<Rational>& net, const Dataset& ds, unsigned bits, double stop_above,
                           const OnProgress& progress, bool dependency_free,
                           const std::vector<std::size_t>& order, std::vector<double>* spare,
                           double tolerance) {
  const MpfrPrecision precision(bits);
  const std::optional<AffineForward> affine =
      dependency_free ? std::optional<AffineForward>(std::in_place, net) : std::nullopt;
  const Network<Mpfi> ni = affine ? Network<Mpfi>() : network_cast<Mpfi>(net);  // one of the two
  const long N = static_cast<long>(ds.sequences.size());
  check_order(order, ds.sequences.size(), "certified_max_error");
  std::vector<double> worst(ds.sequences.size(), 0);
  if (spare) spare->assign(ds.sequences.size(), std::nan(""));
  const Mpfr tol(tolerance);
  // The tokens a label counts for (the mask's; every token without one): nothing counted certifies nothing.
  auto counted = [](const Sequence& s) {
    std::vector<Eigen::Index> c;
    for (Eigen::Index k = 0; k < static_cast<Eigen::Index>(s.n()); ++k)
      if (s.mask.empty() || s.mask[static_cast<std::size_t>(k)]) c.push_back(k);
    return c;
  };
  if (std::none_of(ds.sequences.begin(), ds.sequences.end(),
                   [&](const Sequence& s) { return !counted(s).empty(); }))
    throw Error("no token of the data has a label that counts (every mask is 0): nothing to certify");
  bool stop = false;
  auto one = [&](long started) {
    const auto i = static_cast<long>(started_item(order, static_cast<std::size_t>(started)));
    bool stopped;
#pragma omp atomic read
    stopped = stop;
    if (stopped) return;
    const Sequence& s = ds.sequences[i];
    const std::vector<Eigen::Index> cols = counted(s);
    if (cols.empty()) return;  // worst[i] stays 0: no label of it counts
    const Mat<Mpfi> x = matrix_cast<Mpfi>(s.x);
    const Mat<Mpfi> y = affine ? (*affine)(x, cols) : Mat<Mpfi>(forward(ni, x)(Eigen::all, cols));
    double w = 0, least = kInf;
    for (Eigen::Index k = 0; k < y.cols(); ++k)
      for (Eigen::Index r = 0; r < y.rows(); ++r) {
        Mpfi e = mp::abs(y(r, k) - Scalar<Mpfi>::from(s.y(r, cols[static_cast<std::size_t>(k)])));
        Mpfr hi = upper(e);
        w = std::max(w, mpfr_number_p(hi.backend().data()) ? to_double_up(hi) : kInf);
        if (spare) least = std::min(least, spare_bits(Mpfr(tol - hi), enclosure_width(y(r, k))));
      }
    worst[i] = w;
    if (spare) (*spare)[static_cast<std::size_t>(i)] = least;
    if (w > stop_above) {
#pragma omp atomic write
      stop = true;
    }
  };
  in_parallel_chunks(N, one, [&](long done) {
    report(progress, "certify", done, N);
    return !stop;
  });
  return *std::max_element(worst.begin(), worst.end());
}

namespace {

// The context ids in MPFI at the precision in force, projected on a seeded random direction a
// (doubles, so dyadic) and sorted by t = aᵀz; false unless consecutive t are certified apart.
struct Projection1d {
  struct Ctx {  // one context per (token, set); its label from a sequence holding that set
    Mpfi t;
    int set, col;
  };
  Vec<Rational> a;
  std::vector<Mat<Mpfi>> z;
  std::vector<Ctx> cs;
};
bool project_contexts(const Facts& f, const Network<Rational>& attention, std::uint64_t seed,
                      Projection1d& p) {
  p.z = context_ids<Mpfi>(attention, f);
  Rng rng(seed ^ 0x5a17ULL);
  p.a = Vec<Rational>(f.d);
  for (int i = 0; i < f.d; ++i)
    p.a(i) = rational_of(rng.gauss());
  const Vec<Mpfi> ai = p.a.unaryExpr([](const Rational& x) { return Scalar<Mpfi>::from(x); });
  p.cs.clear();
  for (std::size_t s = 0; s < f.sets.size(); ++s)
    for (int k = 0; k < f.n; ++k)
      p.cs.push_back({Mpfi(ai.dot(p.z[s].col(k))), static_cast<int>(s), k});
  std::sort(p.cs.begin(), p.cs.end(),
            [](const auto& x, const auto& y) { return mp::median(x.t) < mp::median(y.t); });
  for (std::size_t i = 0; i + 1 < p.cs.size(); ++i)
    if (!(upper(p.cs[i].t) < lower(p.cs[i + 1].t))) return false;
  return true;
}

// The value map on the context ids, F(z) = z + W2 ReLU(1 aᵀz − b) + b2, on the sorted projections
// t_i = aᵀz_i. Row r of W2 interpolates T_{r,i} = label_{r,i} − z_{r,i} at the t_i.
//   zhang    Zhang et al.: biases interleaving the t_i (b_0 = t_0 − g, b_i = (t_{i−1} + t_i)/2),
//            W2 from the triangular system Σ_{j≤i} w_j (t_i − b_j) = T_i by running sums. The
//            slopes alternate and grow like ΔT/g, and the last one continues to infinity.
//   bounded  knots at the data, b_i = t_i: b2 = T_0, unit j < q−1 carries the slope change at
//            t_j of the piecewise-linear interpolant, and unit q−1 cancels the final slope, so
//            F − z stays within [min T, max T] everywhere (the same q units).
void value_map_layer(const Facts& f, const Dataset& ds, const Projection1d& p, ValueMap kind,
                     Layer<Rational>& ff, ValueMapProfile& profile) {
  const auto& cs = p.cs;
  const auto& z = p.z;
  const Vec<Rational>& a = p.a;
  const std::size_t q = cs.size();
  Mpfr g = -1;
  for (std::size_t i = 0; i + 1 < q; ++i) {
    Mpfr gi = mp::median(cs[i + 1].t) - mp::median(cs[i].t);
    if (g < 0 || gi < g) g = gi;
  }
  if (g < 0) g = 1;
  std::vector<Mpfr> t(q), b(q);
  std::vector<Rational> bq(q);
  for (std::size_t i = 0; i < q; ++i)
    t[i] = mp::median(cs[i].t);
  for (std::size_t i = 0; i < q; ++i) {
    if (kind == ValueMap::bounded)
      b[i] = t[i];
    else
      b[i] = i == 0 ? Mpfr(t[0] - g) : Mpfr((t[i - 1] + t[i]) / 2);
    bq[i] = Scalar<Mpfr>::to_rational(b[i]);
    b[i] = Scalar<Mpfr>::from(bq[i]);
  }
  ff.w1 = Mat<Rational>(q, f.d);
  ff.b1 = Mat<Rational>(q, 1);
  ff.w2 = Mat<Rational>::Zero(f.d, q);
  ff.b2 = Mat<Rational>::Zero(f.d, 1);
  for (std::size_t j = 0; j < q; ++j) {
    ff.w1.row(j) = a.transpose();
    ff.b1(j, 0) = -bq[j];
  }
  auto target = [&](int r, std::size_t i) {
    const Sequence& seq = ds.sequences[f.first_with_set[cs[i].set]];
    return Mpfr(Scalar<Mpfr>::from(seq.y(r, cs[i].col)) - mp::median(z[cs[i].set](r, cs[i].col)));
  };
  profile.t.resize(q), profile.target.resize(q);
  for (std::size_t i = 0; i < q; ++i)
    profile.t[i] = Scalar<Mpfr>::to_double(t[i]), profile.target[i] = Scalar<Mpfr>::to_double(target(0, i));
  // With S = Σ w_j and P = Σ w_j b_j over the units already set, the value at t_i is t_i S − P.
  for (int r = 0; r < f.label_dim; ++r) {
    Mpfr S(0), P(0);
    if (kind == ValueMap::zhang)
      for (std::size_t i = 0; i < q; ++i) {  // unit i is the last one active at t_i
        Mpfr w = (target(r, i) - (t[i] * S - P)) / (t[i] - b[i]);
        S += w, P += w * b[i];
        ff.w2(r, i) = Scalar<Mpfr>::to_rational(w);
      }
    else {
      const Mpfr T0 = target(r, 0);
      ff.b2(r, 0) = Scalar<Mpfr>::to_rational(T0);
      Rational slope(0);                     // exact, so that the last unit cancels it exactly
      for (std::size_t i = 1; i < q; ++i) {  // unit i − 1 sets the slope on [t_{i−1}, t_i]
        Mpfr w = (target(r, i) - T0 - (t[i] * S - P)) / (t[i] - b[i - 1]);
        S += w, P += w * b[i - 1];
        ff.w2(r, i - 1) = Scalar<Mpfr>::to_rational(w);
        slope += ff.w2(r, i - 1);
      }
      ff.w2(r, q - 1) = -slope;  // flat beyond t_{q−1}
    }
  }
}

}  // namespace

namespace {

// The units of a value-map layer as (knot b_j, weight w_j of output row `row`), sorted by knot:
// F(t) = b2 + Σ_j w_j ReLU(t − b_j).
std::vector<std::pair<Rational, Rational>> sorted_units(const Layer<Rational>& ff, int row) {
  std::vector<std::pair<Rational, Rational>> units;
  for (Eigen::Index j = 0; j < ff.b1.rows(); ++j)
    units.push_back({Rational(-ff.b1(j, 0)), ff.w2(row, j)});
  std::sort(units.begin(), units.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  return units;
}

}  // namespace

ValueMapBound value_map_bound(const Layer<Rational>& ff, int row, unsigned bits) {
  // F(t) = b2 + Σ_j w_j ReLU(t − b_j) is piecewise linear with knots b_j: its supremum over R is at a
  // knot, or infinite unless the final slope Σ w_j is 0 (exact, in rationals). The values at the
  // knots come from running sums over the sorted knots, in MPFI.
  const MpfrPrecision precision(bits);
  const auto units = sorted_units(ff, row);
  Rational slope(0);
  for (const auto& u : units)
    slope += u.second;
  ValueMapBound r;
  Mpfi S(0), P(0);
  const Mpfi b2 = Scalar<Mpfi>::from(ff.b2(row, 0));
  for (const auto& [bj, wj] : units) {
    const Mpfi knot = Scalar<Mpfi>::from(bj), w = Scalar<Mpfi>::from(wj);
    const Mpfr hi = upper(mp::abs(b2 + S * knot - P));  // the value at b_j (the units before it)
    r.sup = std::max(r.sup, mpfr_number_p(hi.backend().data()) ? to_double_up(hi) : kInf);
    S += w, P += w * knot;
  }
  r.final_slope = Scalar<Rational>::to_double(slope);
  if (slope != 0) r.sup = kInf;
  return r;
}

std::vector<double> value_map_curve(const Layer<Rational>& ff, int row, const std::vector<double>& ts,
                                    unsigned bits) {
  const MpfrPrecision precision(bits);
  const auto units = sorted_units(ff, row);
  std::vector<Mpfr> S(units.size() + 1, Mpfr(0)), P(units.size() + 1, Mpfr(0));  // over the first k
  for (std::size_t k = 0; k < units.size(); ++k) {
    S[k + 1] = S[k] + Scalar<Mpfr>::from(units[k].second);
    P[k + 1] = P[k] + Scalar<Mpfr>::from(units[k].second) * Scalar<Mpfr>::from(units[k].first);
  }
  std::vector<double> out;
  for (double t : ts) {
    const Rational tq = rational_of(t);
    const std::size_t k = static_cast<std::size_t>(
        std::upper_bound(units.begin(), units.end(), tq,
                         [](const Rational& x, const auto& u) { return x < u.first; }) -
        units.begin());  // the units with b_j ≤ t are on
    out.push_back(Scalar<Mpfr>::to_double(Scalar<Mpfr>::from(ff.b2(row, 0)) + Mpfr(t) * S[k] - P[k]));
  }
  return out;
}

Memorized memorize(const Dataset& ds, const MemorizeOptions& opt) {
  const Facts f = analyse(ds, true);
  if (f.label_dim > f.d)
    throw Error("labels have " + std::to_string(f.label_dim) + " numbers per token but tokens have d = " +
                std::to_string(f.d) + "; the residual stream carries at most d");
  const Rational tol_q = [&] {
    try {
      return parse_rational(opt.tolerance);
    } catch (const Error& e) {
      throw Error(std::string("tolerance: ") + e.what());
    }
  }();
  if (tol_q <= 0) throw Error("tolerance must be positive, got " + opt.tolerance);
  {  // A tolerance of 2^-b needs about b bits of MPFR to certify: refused before any work past --max-bits.
    using Int = mp::number<mp::gmp_int, mp::et_off>;
    const long long needed = static_cast<long long>(mp::msb(Int(mp::denominator(tol_q)))) -
                             static_cast<long long>(mp::msb(Int(mp::numerator(tol_q))));
    if (needed > static_cast<long long>(opt.contextual.max_bits))
      throw Error("tolerance " + limits::excerpt(opt.tolerance) + " needs about " + std::to_string(needed) +
                  " bits to certify, more than --max-bits " + std::to_string(opt.contextual.max_bits));
  }
  const bool deep = opt.value_map == ValueMap::deep;
  if (deep) {
    if (f.label_dim != 1) throw Error("the deep value map needs one label per token");
    for (std::size_t i = 0; i < ds.sequences.size(); ++i)
      for (Eigen::Index c = 0; c < ds.sequences[i].y.cols(); ++c) {
        const Rational& y = ds.sequences[i].y(0, c);
        if (class_label(y, 1L << 20) < 0)
          throw Error("the deep value map needs integer labels in [0, 2^20): sequence " +
                      std::to_string(i + 1) + " token " + std::to_string(c + 1) + " has " + y.str());
      }
  }
  Memorized m;
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  ContextualOptions contextual = opt.contextual;
  contextual.search_min_bits = false;  // after the model is certified, below
  m.contextual = build_contextual(f, contextual);
  m.seconds_contextual = since(t0);
  std::vector<double> spare;  // per sequence, from the certified pass: the search's guess and order
  std::vector<std::size_t> order;
  const int d = f.d, k = f.label_dim;

  const unsigned max_bits = opt.contextual.max_bits;
  double tol = 0;  // tol_q rounded down at the attempt's precision
  const Doubling found = certify_with_doubling(
      std::max(m.contextual.bits_used, 64u), max_bits, [&](unsigned asked, unsigned& next) {
        const unsigned bits = mpfr_carried_bits(asked);
        const MpfrPrecision precision(bits);  // zhang_layer computes the contexts at it
        report(opt.contextual.progress,
               "memorize: the feed-forward layer at " + std::to_string(bits) + " bits", 0, 0);
        Projection1d proj;
        bool ok = false;
        for (int dir = 0; dir < 3 && !ok; ++dir)
          ok = project_contexts(f, m.contextual.net, opt.contextual.seed + dir, proj);
        m.hidden = proj.cs.size();
        if (ok) {
          Network<Rational> net;
          if (deep) {
            std::vector<deep::Point> pts;
            for (const auto& c : proj.cs) {
              const Rational y = ds.sequences[f.first_with_set[c.set]].y(0, c.col);
              pts.push_back({Scalar<Mpfr>::to_rational(lower(c.t)), Scalar<Mpfr>::to_rational(upper(c.t)),
                             static_cast<long>(Scalar<Rational>::to_double(y))});
            }
            const deep::Plan plan = deep::plan(m.contextual.net, pts, opt.blocks);
            m.deep_plan = plan.report();
            // The payload's P bits must be carried exactly: below that, start again higher.
            const long long need = plan.payload_bits + 32;
            if (bits < need && bits < max_bits) {
              next = static_cast<unsigned>(std::min<long long>(need, max_bits));
              return false;
            }
            net = deep::build(m.contextual.net, proj.a, pts, plan);
          } else {
            Layer<Rational> ff;
            value_map_layer(f, ds, proj, opt.value_map, ff, m.profile);
            // Stages: the contextual map, the value map, and a readout of the first k coordinates.
            blocks::Builder b(d);
            b.append(m.contextual.net)
                .add(blocks::feedforward(static_cast<int>(m.hidden)),
                     [&](Layer<Rational>& L) { L.w1 = ff.w1, L.b1 = ff.b1, L.w2 = ff.w2, L.b2 = ff.b2; });
            if (k < d)
              b.readout(k, [&](Mat<Rational>& w, Mat<Rational>&) {
                for (int i = 0; i < k; ++i)
                  w(i, i) = 1;
              });
            net = b.build();
          }
          tol = to_double_down(
              lower(Scalar<Mpfi>::from(tol_q)));  // ≤ tol_q, so max_error (rounded up) ≤ tol is sound
          const std::string at = " at " + std::to_string(bits) + " bits";
          m.max_error = certified_max_error(
              net, ds, bits, kInf,
              [&](const std::string&, long long i, long long n) {
                report(opt.contextual.progress, "memorize: certify every sequence" + at, i, n);
              },
              true, {}, &spare, tol);  // AffineForward: deep steps exact, one-direction maps by prefix sums
          if (m.max_error <= tol) {
            m.net = std::move(net);
            m.bits_used = bits;
            order = least_spare_first(spare);
            return true;
          }
        }
        return false;
      });
  if (!found.finished)
    throw Error("memorization not certified within " + std::to_string(mpfr_carried_bits(found.bits)) +
                " bits (--max-bits)");
  m.seconds_construct_certify = since(t0);
  // The fewest bits: the contextual map's (its search waits until the model is certified), then the
  // whole network's, from the guess of the certified pass's margins, least margin first.
  const auto t1 = std::chrono::steady_clock::now();
  if (opt.contextual.search_min_bits)
    m.contextual.min_bits = contextual_min_bits(m.contextual, f, opt.contextual);
  m.min_bits = min_certified_bits(
      m.bits_used,
      [&](unsigned b) {
        report(opt.contextual.progress,
               "memorize: smallest certified precision, trying " + std::to_string(b) + " bits", 0, 0);
        return certified_max_error(m.net, ds, b, tol, {}, true, order) <= tol;
      },
      guess_fewest_bits(spare, m.bits_used));
  m.seconds_min_bits = since(t1);
  // float64: the weights rounded to double, evaluated in double.
  try {
    const Network<double> nd = network_cast<double>(m.net);
    double worst = 0;
    for (const auto& s : ds.sequences) {
      Mat<double> y = forward(nd, matrix_cast<double>(s.x)) - matrix_cast<double>(s.y);
      double e = y.cwiseAbs().maxCoeff();
      worst = std::isfinite(e) ? std::max(worst, e) : kInf;
    }
    m.float64_max_error = worst;
  } catch (const Error&) {  // a weight beyond the range of double
    m.float64_max_error = kInf;
  }
  m.float64_works = m.float64_max_error <= Scalar<Rational>::to_double(tol_q);
  auto count = [](const Network<Rational>& net, const std::string& prefix) {
    std::size_t c = 0;
    net.for_each_tensor([&](const std::string& name, const Mat<Rational>& t, Layout) {
      if (name.rfind(prefix, 0) == 0) c += t.size();
    });
    return c;
  };
  m.params_attention = count(m.net, "layers.0.");
  m.params_total = m.net.parameter_count();
  m.params_ff = deep ? m.params_total - m.params_attention : count(m.net, "layers.1.");
  const std::size_t q = m.hidden;
  m.zhang_form_attention = opt.contextual.tied ? 2 * d : 4 * d;
  m.zhang_form_ff = d + q + d * q;
  m.zhang_form_total = m.zhang_form_attention + m.zhang_form_ff;
  m.value_map = opt.value_map;
  if (deep)
    m.value_map_sup = std::numeric_limits<double>::quiet_NaN();  // no one-layer map to bound
  else
    for (int r = 0; r < k; ++r)
      m.value_map_sup = std::max(m.value_map_sup, value_map_bound(m.net.layers[1], r, m.bits_used).sup);
  for (double x : m.profile.target)
    m.target_max = std::max(m.target_max, std::abs(x));
  return m;
}

json Memorized::report() const {
  return {
      {"contextual", contextual.report()},
      {"hidden_width", hidden},
      {"max_error_certified", max_error},
      {"seconds",
       {{"contextual", seconds_contextual},
        {"construct_and_certify", seconds_construct_certify},
        {"min_bits_search", seconds_min_bits}}},
      {"bits_used", bits_used},
      {"min_bits", min_bits},
      {"float64_works", float64_works},
      {"float64_max_error", std::isfinite(float64_max_error) ? json(float64_max_error) : json(nullptr)},
      {"parameters", {{"attention", params_attention}, {"feedforward", params_ff}, {"total", params_total}}},
      {"parameters_zhang_form",
       {{"attention", zhang_form_attention}, {"feedforward", zhang_form_ff}, {"total", zhang_form_total}}},
      {"value_map",
       {{"form", value_map_names(value_map)},
        {"sup_abs_certified", std::isnan(value_map_sup)      ? json(nullptr)
                              : std::isfinite(value_map_sup) ? json(value_map_sup)
                                                             : json("inf")},
        {"max_abs_target_row0", target_max},
        {"deep", deep_plan}}}};
}

template std::optional<Rational> smallest_same_token_sq<Rational>(const Network<Rational>&, const Facts&);

}  // namespace uatlab::kajitsuka
