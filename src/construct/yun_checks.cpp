// The checks of Yun et al.'s construction (yun.hpp): Lemma 6 on the grid, exhaustively or on a
// seeded sample, and the Monte Carlo estimate of d_p(g, f) over the domain.
#include <algorithm>
#include <cmath>
#include <map>

#include "../chunks.hpp"
#include "uatlab/construct/yun.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab::yun {

namespace {

// Sub-layers [first, last) of a network (the others are not copied).
Network<Rational> truncated(const Network<Rational>& net, std::size_t first, std::size_t last, bool keep_pe) {
  Network<Rational> part;
  part.arch = net.arch;
  part.arch.layers.assign(net.arch.layers.begin() + first, net.arch.layers.begin() + last);
  part.layers.assign(net.layers.begin() + first, net.layers.begin() + last);
  part.embed = net.embed;
  part.readout_w = net.readout_w;
  part.readout_b = net.readout_b;
  if (keep_pe)
    part.pe = net.pe;
  else {
    part.arch.max_len = 0;
    part.pe.resize(net.arch.d, 0);
  }
  return part;
}

// The next digit (base `base`) of grid point number `code` when enumerating, else a seeded draw.
long next_digit(long& code, long base, bool enumerate, Rng& rng) {
  if (!enumerate) return std::min<long>(base - 1, static_cast<long>(rng.uniform() * base));
  const long k = code % base;
  code /= base;
  return k;
}

}  // namespace

Lemma6 check_lemma6(const Modified& m, const Target& f, long limit, std::uint64_t seed) {
  const Plan& p = m.plan;
  const int d = p.d, n = p.n, K = p.K;
  const std::size_t q0 = static_cast<std::size_t>(m.counts.quantization),
                    q1 = q0 + static_cast<std::size_t>(m.counts.attention);
  const Network<Rational> gc = truncated(m.net, q0, q1, false);
  Lemma6 r;
  // Entries of G_δ^+: the grid values of the column's position (PE: shifted by j) or the sentinel.
  const long per_entry = K + 1;
  double total = 1;
  for (int i = 0; i < d * n; ++i)
    total *= per_entry;
  r.exhaustive = total <= static_cast<double>(limit);
  const long count = r.exhaustive ? static_cast<long>(total) : limit;
  Rng rng(seed);
  std::map<Rational, std::string> owner;  // contextual value -> canonical input
  const Rational lo = p.t_l, hi = p.t_r;
  for (long t = 0; t < count; ++t) {
    Mat<Rational> L(d, n);
    bool sentinel = false;
    long code = t;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < d; ++i) {
        const long k = next_digit(code, per_entry, r.exhaustive, rng);
        if (k == K) {
          L(i, j) = -p.J;
          sentinel = true;
        } else
          L(i, j) = Rational(k, K) + (p.pe ? Rational(j) : Rational(0));
      }
    ++r.inputs;
    const Mat<Rational> Z = forward(gc, L);
    for (Eigen::Index i = 0; i < Z.size(); ++i)
      r.max_abs_gc = std::max(r.max_abs_gc, std::abs(Scalar<Rational>::to_double(Z(i))));
    const Mat<Rational> q = p.u.transpose() * Z;
    // Property 4 on G_δ^+ − G̃_δ (a sentinel entry, or two equal columns): the slides ask that q(L)
    // not lie in [t_l, t_r]^{1×n}; the value map needs more, every entry outside, checked here.
    const bool repeated = !sentinel && !distinct_columns(L);
    if (sentinel || repeated) {
      ++(sentinel ? r.with_sentinel : r.repeated);
      bool bad = false;
      for (int j = 0; j < n; ++j)
        bad |= q(0, j) >= lo && q(0, j) <= hi;
      r.violations[3] += bad;
      continue;
    }
    ++r.distinct;
    std::vector<std::string> cols;  // canonical form: the multiset of columns (PE: the sequence)
    for (int j = 0; j < n; ++j) {
      std::string c;
      for (int i = 0; i < d; ++i)
        c += L(i, j).str() + ",";
      cols.push_back(c);
    }
    if (!p.pe) std::sort(cols.begin(), cols.end());
    std::string key;
    for (const auto& c : cols)
      key += c + ";";
    bool p1 = true, p2 = true, p3 = true;
    for (int a = 0; a < n; ++a) {
      p3 &= q(0, a) >= lo && q(0, a) <= hi;
      for (int b = a + 1; b < n; ++b)
        p1 &= q(0, a) != q(0, b);
      auto [it, fresh] = owner.emplace(q(0, a), key);
      p2 &= fresh || it->second == key;
    }
    r.violations[0] += !p1;
    r.violations[1] += !p2;
    r.violations[2] += !p3;
  }
  // ḡ = f̄ on grid cubes: at the corner and at a random interior point of each.
  const long cubes_total = static_cast<long>(std::pow(static_cast<double>(K), d * n));
  const bool all_cubes = cubes_total <= limit;
  for (long t = 0; t < (all_cubes ? cubes_total : limit); ++t) {
    Mat<Rational> L0(d, n);
    long code = t;
    for (Eigen::Index i = 0; i < L0.size(); ++i)
      L0(i) = Rational(next_digit(code, K, all_cubes, rng), K);
    const bool distinct = p.pe || distinct_columns(L0);
    Mat<Rational> inner = L0;
    for (Eigen::Index i = 0; i < inner.size(); ++i)
      inner(i) += Rational(static_cast<long>(rng.uniform() * 1000000), 1000000L * K);
    const Mat<Rational> y0 = forward(m.net, L0), y1 = forward(m.net, inner);
    if (distinct) {
      ++r.cubes;
      const Mat<Rational> A =
          matrix_cast<Rational>(f.f((matrix_cast<double>(L0).array() + 0.5 / K).matrix()));
      // f is evaluated in double, so a permuted cube's f̄ may differ from its representative's in the last
      // bits.
      const double tol = 1e-12 * (1 + matrix_cast<double>(A).cwiseAbs().maxCoeff());
      r.cubes_equal += (matrix_cast<double>(y0) - matrix_cast<double>(A)).cwiseAbs().maxCoeff() <= tol &&
                       (matrix_cast<double>(y1) - matrix_cast<double>(A)).cwiseAbs().maxCoeff() <= tol;
    } else {
      ++r.repeated_cubes;
      r.repeated_zero += y0.isZero() && y1.isZero();
    }
  }
  return r;
}

double grid_max_error(const Network<Mpfr>& g, const Plan& p, const Target& f, long limit,
                      std::uint64_t seed) {
  const MpfrPrecision precision(weight_bits(g));
  const int d = p.d, n = p.n, K = p.K;
  const double cubes = std::pow(static_cast<double>(K), d * n);
  const bool all = cubes <= static_cast<double>(limit);
  Rng rng(seed);
  double worst = 0;
  for (long t = 0; t < (all ? static_cast<long>(cubes) : limit); ++t) {
    Mat<double> L0(d, n);
    long code = t;
    for (Eigen::Index i = 0; i < L0.size(); ++i)
      L0(i) = static_cast<double>(next_digit(code, K, all, rng)) / K;
    if (!p.pe && !distinct_columns(L0)) continue;
    const Mat<double> A = f.f((L0.array() + 0.5 / K).matrix());
    Mat<double> inner = L0;
    for (Eigen::Index i = 0; i < inner.size(); ++i)
      inner(i) += rng.uniform() / K;
    for (const Mat<double>* x : {&L0, &inner})
      worst =
          std::max(worst, (matrix_cast<double>(forward(g, matrix_cast<Mpfr>(*x))) - A).cwiseAbs().maxCoeff());
  }
  return worst;
}

template <class S>
Distance distance(const Network<S>& g, const Target& f, int d, int n, int p, long samples,
                  std::uint64_t seed) {
  if (p < 1 || samples < 2) throw Error("distance needs p >= 1 and at least 2 samples");
  std::vector<double> v(static_cast<std::size_t>(samples));
  std::optional<MpfrPrecision> precision;  // an MPFR network is evaluated at its own precision
  if constexpr (!std::is_floating_point_v<S>) precision.emplace(weight_bits(g));
  const std::string what = "d_" + std::to_string(p) + " by Monte Carlo: ";
  try {
    parallel_for(
        samples,
        [&](long s) {
          Rng rng(seed * 0x9e3779b97f4a7c15ULL +
                  static_cast<std::uint64_t>(s));  // per sample: independent of threads
          Mat<double> X(d, n);
          for (Eigen::Index i = 0; i < X.size(); ++i)
            X(i) = rng.uniform();
          const Mat<double> y = matrix_cast<double>(forward(g, matrix_cast<S>(X)));
          v[static_cast<std::size_t>(s)] = (y - f.f(X)).array().abs().pow(p).sum();
          if (!std::isfinite(v[static_cast<std::size_t>(s)]))
            throw Error(
                "|g - f|^p is beyond the range of double at a sample point: the target's values are too "
                "large for this estimate");
        },
        16);
  } catch (const Error& e) {
    throw Error(what + e.what());
  }
  double mean = 0, sq = 0;
  for (double x : v)
    mean += x;
  mean /= static_cast<double>(samples);
  for (double x : v)
    sq += (x - mean) * (x - mean);
  const double se = std::sqrt(sq / static_cast<double>(samples - 1) / static_cast<double>(samples));
  Distance r;
  r.samples = samples;
  r.value = std::pow(mean, 1.0 / p);
  r.lo = std::pow(std::max(0.0, mean - 1.96 * se), 1.0 / p);
  r.hi = std::pow(mean + 1.96 * se, 1.0 / p);
  return r;
}

template Distance distance<double>(const Network<double>&, const Target&, int, int, int, long, std::uint64_t);
template Distance distance<Mpfr>(const Network<Mpfr>&, const Target&, int, int, int, long, std::uint64_t);

}  // namespace uatlab::yun
