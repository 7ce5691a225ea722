// The forward pass, written once for every scalar type. Instantiated in network_<scalar>.cpp.
#pragma once

#include <mpfi.h>
#include <mpfr.h>
#include <algorithm>
#include <cmath>

#include "../simd/kernels.hpp"
#include "interval_product.hpp"
#include "sizes.hpp"
#include "uatlab/model/network.hpp"

namespace uatlab {

template <class S>
S constant(const std::string& text) {
  return Scalar<S>::from(parse_rational(text));
}

template <class S>
void check_evaluable(const Architecture& a) {
  if constexpr (!Scalar<S>::transcendental) {
    for (std::size_t i = 0; i < a.layers.size(); ++i)
      if (a.layers[i].needs_transcendental())
        throw Error(std::string(Scalar<S>::name) + " arithmetic cannot evaluate layer " + std::to_string(i) +
                    ": it needs exp, log, sqrt, cos or sin (softmax, log bias, 1/sqrt scaling, "
                    "layer norm or rotary positions); "
                    "use an MPFR precision or interval:BITS instead");
  } else {
    (void)a;
  }
}

template <class S>
Network<S>::Network(Architecture a) : arch(std::move(a)) {
  arch.validate();
  const int d = arch.d;
  auto zeros = [](Eigen::Index r, Eigen::Index c) { return Mat<S>(Mat<S>::Zero(r, c)); };
  if (arch.vocab > 0) embed = zeros(d, arch.vocab);
  if (arch.input > 0) {
    in_w = zeros(d, arch.input);
    in_b = zeros(d, 1);
  }
  if (arch.max_len > 0) pe = zeros(d, arch.max_len);
  if (arch.readout > 0) {
    readout_w = zeros(arch.readout, d);
    readout_b = zeros(arch.readout, 1);
  }
  for (const LayerSpec& s : arch.layers) {
    Layer<S> l;
    l.spec = s;
    if (s.pre_norm || s.kind == LayerKind::layernorm) {
      l.norm_w = Mat<S>::Ones(d, 1);
      l.norm_b = zeros(d, 1);
      if constexpr (Scalar<S>::transcendental) l.eps = constant<S>(s.eps);
    }
    if (s.kind == LayerKind::attention) {
      const int hs = s.heads * s.head_size;
      l.wq = zeros(hs, d);
      if (!s.tied_qkv) {
        l.wk = zeros(hs, d);
        l.wv = zeros(hs, d);
      }
      l.wo = zeros(d, hs);
      if (s.bias) {
        l.bq = zeros(hs, 1);
        if (!s.tied_qkv) {
          l.bk = zeros(hs, 1);
          l.bv = zeros(hs, 1);
        }
        l.bo = zeros(d, 1);
      }
      if (s.rpe == Rpe::lin || s.rpe == Rpe::log) l.rpe = zeros(s.heads, 1);
      if (s.rpe == Rpe::t5) l.rpe = zeros(s.heads, s.t5_buckets);
      l.score_scale = constant<S>(s.scale);
      if constexpr (Scalar<S>::transcendental)
        if (s.sqrt_scaling) l.score_scale = l.score_scale / Scalar<S>::sqrt(S(s.head_size));
    } else if (s.kind == LayerKind::bproj || s.kind == LayerKind::sepconv) {
      if (s.kind == LayerKind::bproj)
        l.wp = zeros(s.length, s.length);
      else
        l.filter = zeros(s.heads, s.kernel);
      l.wo = zeros(d, d);
      if (s.bias) l.bo = zeros(d, 1);
    } else if (s.kind == LayerKind::feedforward) {
      l.w1 = zeros(s.width, d);
      l.b1 = zeros(s.width, 1);
      l.w2 = zeros(d, s.width);
      l.b2 = zeros(d, 1);
      for (auto& b : s.activation.breakpoints)
        l.breakpoints.push_back(constant<S>(b));
      for (auto& [slope, icpt] : s.activation.pieces)
        l.pieces.emplace_back(constant<S>(slope), constant<S>(icpt));
    }
    layers.push_back(std::move(l));
  }
}

template <class S>
std::size_t Network<S>::parameter_count() const {
  std::size_t n = 0;
  for_each_tensor([&](const Mat<S>& m) { n += m.size(); });
  return n;
}

// ---- element-wise nonlinearities -------------------------------------------------------------

template <class S>
S relu(const S& x) {
  if constexpr (is_ball_v<S>) {
    return relu_ball(x);
  } else if constexpr (Scalar<S>::interval) {
    if (lower(x) >= 0) return x;
    if (upper(x) <= 0) return S(0);
    return Scalar<S>::hull(Mpfr(0), upper(x));
  } else {
    return x > 0 ? x : S(0);
  }
}

// The hull of a piecewise-linear function's images over the interval x: breakpoints c ascending,
// piece i on [c_{i−1}, c_i) (one more piece than breakpoints), and image(i, a, b, lo, hi) sets
// [lo, hi] ⊇ piece i's image over [a, b] (x clipped to the piece, widened by the breakpoints'
// enclosures), returning false when that image is empty. Every piece x touches counts, both
// sides of a breakpoint included: the pieces may jump.
template <class Image>
Mpfi hull_of_pieces(const std::vector<Mpfi>& c, std::size_t pieces, const Mpfi& x, Image&& image) {
  const Mpfr lo = lower(x), hi = upper(x);
  Mpfr rlo, rhi, ilo, ihi;
  bool any = false;
  for (std::size_t i = 0; i < pieces; ++i) {
    const bool has_left = i > 0, has_right = i < c.size();
    if (has_left && hi < lower(c[i - 1])) continue;
    if (has_right && lo >= upper(c[i])) continue;
    Mpfr a = has_left ? std::max(lo, Mpfr(lower(c[i - 1]))) : lo;
    Mpfr b = has_right ? std::min(hi, Mpfr(upper(c[i]))) : hi;
    if (a > b) std::swap(a, b);
    if (!image(i, a, b, ilo, ihi)) continue;
    if (!any || ilo < rlo) rlo = ilo;
    if (!any || ihi > rhi) rhi = ihi;
    any = true;
  }
  if (!any) throw Error("an enclosure met no piece of a piecewise-linear function (an internal error)");
  return hull(rlo, rhi);
}

// φ(x) = slope_i·x + intercept_i on the piece [c_{i−1}, c_i) that holds x; on an interval, the
// hull of the touched pieces' images.
template <class S>
S piecewise(const std::vector<S>& c, const std::vector<std::pair<S, S>>& pieces, const S& x) {
  if constexpr (is_ball_v<S> || is_arb_v<S>) {  // through MPFI, at the working precision
    std::vector<Mpfi> ci;
    std::vector<std::pair<Mpfi, Mpfi>> pi;
    for (const S& v : c)
      ci.push_back(to_mpfi(v));
    for (const auto& [slope, icpt] : pieces)
      pi.emplace_back(to_mpfi(slope), to_mpfi(icpt));
    const Mpfi y = piecewise(ci, pi, to_mpfi(x));
    return Scalar<S>::hull(lower(y), upper(y));
  } else if constexpr (Scalar<S>::interval) {
    return hull_of_pieces(c, pieces.size(), x,
                          [&](std::size_t i, const Mpfr& a, const Mpfr& b, Mpfr& lo, Mpfr& hi) {
                            const S img = pieces[i].first * hull(a, b) + pieces[i].second;
                            lo = lower(img), hi = upper(img);
                            return true;
                          });
  } else {
    std::size_t i = std::upper_bound(c.begin(), c.end(), x) - c.begin();  // #breakpoints <= x
    return pieces[i].first * x + pieces[i].second;
  }
}
template <class S>
S piecewise(const Layer<S>& l, const S& x) {
  return piecewise(l.breakpoints, l.pieces, x);
}

// ---- attention ----------------------------------------------------------------------------------

// Where the largest of a column of interval scores lies: [largest lower end, largest upper end].
template <class Col>
std::pair<Mpfr, Mpfr> max_enclosure(const Col& col) {
  Mpfr best = lower(col(0)), top = upper(col(0));
  for (Eigen::Index l = 1; l < col.size(); ++l)
    best = std::max(best, lower(col(l))), top = std::max(top, upper(col(l)));
  return {best, top};
}

// Normalise column k of the scores A over the keys it attends to (attended_keys: the one masking
// rule); masked entries become 0, and so does a column with no key at all. Column k is query
// first_query + k (training computes only the queries whose outputs count).
template <class S>
void normalise_columns(Mat<S>& A, const LayerSpec& spec, const EvalOptions& opt,
                       Eigen::Index first_query = 0) {
  const Eigen::Index n = A.rows();
  if constexpr (std::is_floating_point_v<S>) {
    if (spec.score == Score::softmax) {
      constexpr S kMasked = -std::numeric_limits<S>::infinity();
      const bool every_key = !spec.causal && spec.window == 0;  // attended_keys is [0, n) for all k
      for (Eigen::Index k = 0; k < A.cols() && !every_key; ++k) {
        const KeyRange r = attended_keys(spec, first_query + k, n);
        A.col(k).head(r.first).setConstant(kMasked);
        A.col(k).tail(n - r.end).setConstant(kMasked);
        if (r.first == r.end) A(0, k) = S(0);  // keeps the column finite; zeroed below
      }
      // The SIMD kernel (src/simd/kernels.cpp: Highway's exp, the instruction set chosen at run time).
      simd::softmax_columns(simd::Softmax<S>{A.data(), n, A.cols()});
      // A masked key's weight is 0, exactly, whatever the exp gives for −∞ (Eigen's packet exp, used
      // before, gave 5.6e-309 in double: times 1e300, a leak of 5.6e-9); the sums it entered are ≥ 1
      // (the largest key's exp(0)), which it did not move. A column with no key (first == end) is
      // zeroed whole by the two.
      for (Eigen::Index k = 0; k < A.cols() && !every_key; ++k) {
        const KeyRange r = attended_keys(spec, first_query + k, n);
        A.col(k).head(r.first).setZero();
        A.col(k).tail(n - r.end).setZero();
      }
      return;
    }
  }
  for (Eigen::Index k = 0; k < A.cols(); ++k) {
    const KeyRange r = attended_keys(spec, first_query + k, n);
    const Eigen::Index lo = r.first, cnt = r.end - r.first;
    A.col(k).head(lo).setZero();
    A.col(k).tail(n - r.end).setZero();
    if (cnt == 0) continue;
    auto col = A.col(k).segment(lo, cnt);
    switch (spec.score) {
      case Score::linear:
        break;
      case Score::softmax:
        if constexpr (Scalar<S>::interval) {
          // w_l = 1 / (1 + Σ_{j≠l} exp(a_j − a_l)): an enclosure without the max-subtraction's
          // dependency on a shared interval. With e_j = exp(a_j − M), M the largest upper end (a
          // point, exact), the sum is (Σ_{j≠l} e_j) / e_l: for positive intervals its ends are the
          // same reals, e^{lo_j − hi_l} summed below and e^{hi_j − lo_l} above, so the enclosure
          // differs from the pairwise one by rounding only, with one exponential per key instead
          // of one per pair (n³ per sequence was nearly all of a long sequence's certificate).
          // Σ_{j≠l} is a prefix plus a suffix sum.
          if (cnt == 1) {  // one key: all of the weight, exactly
            col(0) = S(1);
            break;
          }
          // Any point serves (it only keeps the exponentials in range): for balls the largest midpoint.
          S m;
          if constexpr (is_ball_v<S>)
            m = S(
                std::max_element(col.begin(), col.end(), [](const S& x, const S& y) { return x.m < y.m; })->m,
                0.0);
          else {
            const Mpfr top = max_enclosure(col).second;
            m = Scalar<S>::hull(top, top);
          }
          Vec<S> e(cnt), before(cnt), w(cnt);
          for (Eigen::Index l = 0; l < cnt; ++l)
            e(l) = Scalar<S>::exp(col(l) - m);
          S run(0);
          for (Eigen::Index l = 0; l < cnt; ++l)
            before(l) = run, run += e(l);
          run = S(0);
          for (Eigen::Index l = cnt - 1; l >= 0; --l) {
            // A ball's exponential can reach 0 (below double's range), or come so close to it that
            // Σ_{j≠l} e_j / e_l overflows (a sharp head of a trained model: e_l = e^-740 is
            // subnormal): then e_l / (e_l + Σ_{j≠l} e_j), whose denominator holds e_M ≈ 1; the
            // weight is within a radius of 0 either way.
            if constexpr (is_ball_v<S>)
              if (e(l).m <= static_cast<decltype(e(l).m)>(e(l).r) || e(l).m < 0x1p-900) {
                w(l) = e(l) / (e(l) + before(l) + run);
                run += e(l);
                continue;
              }
            w(l) = S(1) / (S(1) + (before(l) + run) / e(l));
            run += e(l);
          }
          col = w;
        } else if constexpr (Scalar<S>::transcendental) {
          S mx = col.maxCoeff(), sum(0);
          for (Eigen::Index l = 0; l < cnt; ++l)
            sum += (col(l) = Scalar<S>::exp(col(l) - mx));
          col /= sum;
        }
        break;
      case Score::hardmax: {
        std::vector<Eigen::Index> arg;
        if constexpr (Scalar<S>::interval) {
          const auto [best, top] = max_enclosure(col);  // the maximum lies in [best, top]
          if (opt.hardmax_tolerance > 0) {
            // Key l shares the weight iff its score ≥ max − tol: surely when lower(l) ≥ top − tol
            // (rounded up), surely not when upper(l) < best − tol (rounded down); else undecided.
            mpfr_t tol, in_at, out_below;
            mpfr_inits2(mpfr_get_prec(best.backend().data()) + 64, tol, in_at, out_below,
                        static_cast<mpfr_ptr>(nullptr));
            mpfr_set_d(tol, opt.hardmax_tolerance, MPFR_RNDN);  // exact: 64 bits more than the scores
            mpfr_sub(in_at, top.backend().data(), tol, MPFR_RNDU);
            mpfr_sub(out_below, best.backend().data(), tol, MPFR_RNDD);
            bool undecided = false;
            for (Eigen::Index l = 0; l < cnt; ++l) {
              if (mpfr_cmp(lower(col(l)).backend().data(), in_at) >= 0)
                arg.push_back(l);
              else if (!(mpfr_cmp(upper(col(l)).backend().data(), out_below) < 0))
                undecided = true;
            }
            mpfr_clears(tol, in_at, out_below, static_cast<mpfr_ptr>(nullptr));
            if (undecided || arg.empty())
              throw Error("hardmax with tolerance undecided in interval arithmetic (query " +
                          std::to_string(first_query + k) +
                          "): a score's enclosure straddles max - tolerance; raise the precision");
          } else {
            for (Eigen::Index l = 0; l < cnt; ++l)
              if (upper(col(l)) >= best) arg.push_back(l);
            for (auto l : arg)  // several candidates are fine only if they are the same point
              if (arg.size() > 1 && (lower(col(l)) != upper(col(l)) || lower(col(l)) != lower(col(arg[0]))))
                throw Error("hardmax argmax undecided in interval arithmetic (query " +
                            std::to_string(first_query + k) +
                            "): overlapping score enclosures; raise the precision");
          }
        } else {
          if constexpr (std::is_floating_point_v<S>)  // inf·0 or inf − inf: the argmax would be lost
            if (!col.allFinite())
              throw Error("hardmax scores of query " + std::to_string(first_query + k + 1) +
                          " are not finite in " + Scalar<S>::name +
                          " (MPFR and intervals have a wider range)");
          S mx = col.maxCoeff(), tol = scalar_cast<S>(opt.hardmax_tolerance);
          for (Eigen::Index l = 0; l < cnt; ++l)
            if (col(l) >= mx - tol) arg.push_back(l);
        }
        S w = S(1) / S(static_cast<long>(arg.size()));
        col.setZero();
        for (auto l : arg)
          col(l) = w;
        break;
      }
    }
  }
}

// A lin or log bias is the head's rate p times its slope at distance |l − k|: −dist (lin) or
// −log(dist) (log, 0 at dist 0), which is also ∂B/∂p (the backward pass's derivative).
template <class S>
S rpe_slope(Rpe r, long dist) {
  if (r == Rpe::lin) return S(-dist);
  if constexpr (Scalar<S>::transcendental)
    return dist == 0 ? S(0) : S(-Scalar<S>::log(S(dist)));
  else
    throw Error("a log-type position bias needs exp and log: not in " + std::string(Scalar<S>::name));
}

// Head h's relative-position bias by offset: entry o is the bias of offset l − k = o − (n − 1)
// (key l, query k), 2n − 1 values; B(l, k) depends on the offset alone.
template <class S>
Vec<S> bias_by_offset(const Layer<S>& L, int h, Eigen::Index n) {
  const LayerSpec& s = L.spec;
  Vec<S> by_offset(n > 0 ? 2 * n - 1 : 0);
  for (Eigen::Index o = 0; o < by_offset.size(); ++o) {
    const long offset = static_cast<long>(o - (n - 1)), dist = std::labs(offset);
    switch (s.rpe) {
      case Rpe::none:
        by_offset(o) = S(0);
        break;
      case Rpe::lin:
      case Rpe::log:
        by_offset(o) = L.rpe(h, 0) * rpe_slope<S>(s.rpe, dist);
        break;
      case Rpe::t5:
        by_offset(o) =
            L.rpe(h, t5_bucket(static_cast<int>(offset), !s.causal, s.t5_buckets, s.t5_max_distance));
        break;
    }
  }
  return by_offset;
}

// The bias as a matrix B_h (n×n, row = key l, column = query k): column k is the run of offsets
// 0 − k … n − 1 − k (the same values as one computation per entry, with n logarithms instead of n²
// for log-type heads).
template <class S>
Mat<S> position_bias(const Layer<S>& L, int h, Eigen::Index n) {
  const Vec<S> by_offset = bias_by_offset(L, h, n);
  Mat<S> B(n, n);
  for (Eigen::Index k = 0; k < n; ++k)
    B.col(k) = by_offset.segment(n - 1 - k, n);
  return B;
}

// A += the bias's columns first … first + A.cols() − 1 (queries), without the n×n matrix: each
// column is a run of the 2n − 1 values by offset (the same values and additions as
// A += position_bias(L, h, n).middleCols(first, A.cols())).
template <class S>
void add_position_bias(Mat<S>& A, const Layer<S>& L, int h, Eigen::Index first = 0) {
  const Eigen::Index n = A.rows();
  const Vec<S> by_offset = bias_by_offset(L, h, n);
  for (Eigen::Index k = 0; k < A.cols(); ++k)
    A.col(k) += by_offset.segment(n - 1 - first - k, n);
}

// Rotary positions (RoPE): cos and sin of t·θ_i for the positions t = 0 … n − 1 (columns) and the
// coordinate pairs i = 0 … s/2 − 1 of a head of size s (rows), θ_i = base^(−2i/s) = exp(−(2i/s)·log base).
// float's table is computed in double and rounded once; MPFR's and MPFI's at their own precision
// (MPFI's encloses the true values); float and double keep the thread's last table.
template <class S>
struct RotaryTable {
  int base = 0;
  Eigen::Index half = 0;
  Mat<S> c, s;
};
template <class S>
RotaryTable<S> rotary_table(const LayerSpec& spec, Eigen::Index n) {
  if constexpr (!Scalar<S>::transcendental) {
    (void)spec, (void)n;
    throw Error(std::string("rotary positions need cos and sin: not in ") + Scalar<S>::name);
  } else {
    using W = std::conditional_t<std::is_same_v<S, float>, double, S>;
    const Eigen::Index half = spec.head_size / 2;
    auto fill = [&](RotaryTable<S>& t) {
      t.base = spec.rope, t.half = half, t.c.resize(half, n), t.s.resize(half, n);
      const W log_base = Scalar<W>::log(W(spec.rope));
      for (Eigen::Index i = 0; i < half; ++i) {
        const W theta = Scalar<W>::exp(-(W(2 * i) / W(spec.head_size)) * log_base);
        for (Eigen::Index p = 0; p < n; ++p) {
          const W angle = W(p) * theta;
          t.c(i, p) = S(Scalar<W>::cos(angle));
          t.s(i, p) = S(Scalar<W>::sin(angle));
        }
      }
    };
    RotaryTable<S> t;
    if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
      thread_local RotaryTable<S> last;  // training asks for the same table at every step
      if (last.base != spec.rope || last.half != half || last.c.cols() < n) fill(last);
      t = last;
    } else {
      fill(t);  // at the precision in force
    }
    return t;
  }
}

// Turns the pairs (2i, 2i+1) of every head in M's columns col0 … col0 + count − 1, the first at
// position pos0: (x, y) → (x·c − y·s, x·s + y·c); inverse turns back (the transpose, which carries
// gradients from the turned coordinates to the projections).
template <class S>
void rotate(Mat<S>& M, const RotaryTable<S>& T, Eigen::Index col0, Eigen::Index count, Eigen::Index pos0,
            bool inverse) {
  const Eigen::Index half = T.half, heads = M.rows() / (2 * half);
  for (Eigen::Index j = 0; j < count; ++j) {
    auto col = M.col(col0 + j);
    for (Eigen::Index h = 0; h < heads; ++h)
      for (Eigen::Index i = 0; i < half; ++i) {
        const S& c = T.c(i, pos0 + j);
        const S s = inverse ? S(-T.s(i, pos0 + j)) : T.s(i, pos0 + j);
        S& x = col(h * 2 * half + 2 * i);
        S& y = col(h * 2 * half + 2 * i + 1);
        const S x0 = x;
        x = x0 * c - y * s;
        y = x0 * s + y * c;
      }
  }
}

template <class S>
Mat<S> layer_norm(const Mat<S>& Z, const Mat<S>& w, const Mat<S>& b, const S& eps) {
  Mat<S> out(Z.rows(), Z.cols());
  if constexpr (Scalar<S>::transcendental) {
    const S d(static_cast<long>(Z.rows()));
    for (Eigen::Index k = 0; k < Z.cols(); ++k) {
      S mean = Z.col(k).sum() / d;
      Vec<S> c = Z.col(k).array() - mean;
      S ss(0);  // Σ c_i², each a square (an interval's c_i·c_i would reach below 0)
      for (Eigen::Index i = 0; i < c.size(); ++i)
        ss += square(c(i));
      if constexpr (std::is_floating_point_v<S>)  // past the range the token would normalise to 0
        if (!std::isfinite(ss))
          throw Error(std::string("layer norm: a token's variance is beyond ") + Scalar<S>::name +
                      "'s range (MPFR and intervals have a wider one)");
      if constexpr (is_ball_v<S> || is_arb_v<S>)  // a sum of squares is ≥ 0, whatever its rounding
        ss = relu(ss);                            // bounds reach below
      S inv = S(1) / Scalar<S>::sqrt(ss / d + eps);
      out.col(k) = (c * inv).cwiseProduct(w.col(0)) + b.col(0);
    }
  }
  return out;
}

// Softmax and hardmax weights are ≥ 0 and sum to 1, so a query's output VA(:, k) lies, entry by
// entry, between the smallest and largest value of the keys it attends to. Interval weights do not
// know that they sum to 1 (each may span [0, 1] where steep scores straddle), so the enclosure
// V·A is clipped to that hull: no wider than the values, whatever the scale of the scores.
template <class S, class VM>
void within_values(Mat<S>& VA, const VM& V, const LayerSpec& spec, Eigen::Index first) {
  const Eigen::Index n = V.cols();
  for (Eigen::Index k = 0; k < VA.cols(); ++k) {
    const KeyRange r = attended_keys(spec, first + k, n);
    if (r.end <= r.first) continue;
    for (Eigen::Index i = 0; i < V.rows(); ++i) {
      Mpfr lo = lower(V(i, r.first)), hi = upper(V(i, r.first));
      for (Eigen::Index l = r.first + 1; l < r.end; ++l)
        lo = std::min(lo, lower(V(i, l))), hi = std::max(hi, upper(V(i, l)));
      VA(i, k) = intersect(VA(i, k), Scalar<S>::hull(lo, hi));
    }
  }
}

template <class S>
void attention(const Layer<S>& L, const Mat<S>& X, Mat<S>& Z, const EvalOptions& opt,
               std::vector<Mat<S>>* patterns = nullptr) {
  const LayerSpec& s = L.spec;
  const Eigen::Index n = X.cols(), hs = s.head_size;
  const Eigen::Index first = std::min<Eigen::Index>(std::max<Eigen::Index>(opt.first_query, 0), n),
                     m = n - first;
  if (patterns && first > 0) throw Error("attention: a capture of the patterns needs every query");
  const Mat<S>& wk = s.tied_qkv ? L.wq : L.wk;
  const Mat<S>& wv = s.tied_qkv ? L.wq : L.wv;
  const Mat<S>& bk = s.tied_qkv ? L.bq : L.bk;
  const Mat<S>& bv = s.tied_qkv ? L.bq : L.bv;
  Mat<S> V = product<S>(wv, X), A;
  if (s.bias) V.colwise() += bv.col(0);
  Mat<S> Q, K;
  if (!s.dp_free) {
    Q = product<S>(L.wq, X.rightCols(m));
    K = product<S>(wk, X);
    if (s.bias) {
      Q.colwise() += L.bq.col(0);
      K.colwise() += bk.col(0);
    }
    if (s.rope > 0) {
      const RotaryTable<S> T = rotary_table<S>(s, n);
      rotate(Q, T, 0, m, first, false);
      rotate(K, T, 0, n, 0, false);
    }
  }
  auto out = Z.rightCols(m);  // the queries computed (all of them unless first_query)
  for (int h = 0; h < s.heads; ++h) {
    if (s.dp_free)
      A = Mat<S>::Zero(n, m);
    else
      A = product<S>(K.middleRows(h * hs, hs).transpose(), Q.middleRows(h * hs, hs)) * L.score_scale;
    if (s.rpe != Rpe::none) add_position_bias(A, L, h, first);
    normalise_columns(A, s, opt, first);
    if (patterns) patterns->push_back(A.transpose());  // A(key, query): a query's weights are a column
    if constexpr (Scalar<S>::interval) {
      Mat<S> VA = product<S>(V.middleRows(h * hs, hs), A);
      // Balls serve tight widths, where the values' hull is wider than VA (skipped: no cost)
      if (s.score != Score::linear && !is_ball_v<S> && !is_arb_v<S>)
        within_values(VA, V.middleRows(h * hs, hs), s, first);
      out += product<S>(L.wo.middleCols(h * hs, hs), VA);  // the head's sum, then added (as Eigen's +=)
    } else {
      out.noalias() += L.wo.middleCols(h * hs, hs) * (V.middleRows(h * hs, hs) * A);
    }
  }
  if (s.bias) out.colwise() += L.bo.col(0);
}

// H = relu(W1·X + b1) in MPFI, in place into H (resized, and rebuilt when the precision in force
// changed): no number is allocated per entry, and a row of W1 equal to the one before it reuses
// that row's products (Zhang's value map has W1 = 1aᵀ, q rows and one product per token). The
// operations and their order are the generic path's, so the enclosures are the same.
inline void relu_hidden(const Layer<Mpfi>& L, const Mat<Mpfi>& X, Mat<Mpfi>& H) {
  const Eigen::Index q = L.w1.rows(), n = X.cols(), d = X.rows();
  const mpfr_prec_t prec = mpfi_get_prec(Mpfi().backend().data());
  if (H.rows() != q || H.cols() != n || (H.size() && mpfi_get_prec(H(0, 0).backend().data()) != prec)) {
    H.resize(0, 0);
    H.resize(q, n);
  }
  auto same = [](mpfi_srcptr a, mpfi_srcptr b) {
    return mpfr_equal_p(&a->left, &b->left) && mpfr_equal_p(&a->right, &b->right);
  };
  std::vector<Mpfi> P(n);  // the products W1(i,:)·X(:,j) of the current run of equal rows
  mpfi_t t;
  mpfi_init2(t, prec);
  for (Eigen::Index i = 0; i < q; ++i) {
    bool repeat = i > 0;
    for (Eigen::Index k = 0; k < d && repeat; ++k)
      repeat = same(L.w1(i, k).backend().data(), L.w1(i - 1, k).backend().data());
    if (!repeat)
      for (Eigen::Index j = 0; j < n; ++j) {
        mpfi_ptr p = P[j].backend().data();
        mpfi_set_ui(p, 0);
        for (Eigen::Index k = 0; k < d; ++k) {
          mpfi_srcptr x = X(k, j).backend().data();
          if (mpfi_is_zero(x)) continue;
          mpfi_mul(t, L.w1(i, k).backend().data(), x);
          mpfi_add(p, p, t);
        }
      }
    for (Eigen::Index j = 0; j < n; ++j) {
      mpfi_ptr h = H(i, j).backend().data();
      mpfi_add(h, P[j].backend().data(), L.b1(i, 0).backend().data());
      if (mpfr_sgn(&h->left) >= 0) continue;  // relu: [l, u] with l < 0 becomes [0, max(u, 0)]
      if (mpfr_sgn(&h->right) <= 0)
        mpfi_set_ui(h, 0);
      else
        mpfr_set_ui(&h->left, 0, MPFR_RNDD);
    }
  }
  mpfi_clear(t);
}

template <class S>
void feedforward(const Layer<S>& L, const Mat<S>& X, Mat<S>& Z) {
  if constexpr (std::is_same_v<S, Mpfi>) {
    if (!L.spec.piecewise && !L.spec.gelu) {
      thread_local Mat<Mpfi> H;  // a wide layer's q·n intervals, allocated once per thread
      relu_hidden(L, X, H);
      add_product(Z, L.w2, H);
      Z.colwise() += L.b2.col(0);
      return;
    }
  }
  Mat<S> H = Mat<S>::Zero(L.w1.rows(), X.cols());
  add_product(H, L.w1, X);
  H.colwise() += L.b1.col(0);
  if (L.spec.piecewise)
    H = H.unaryExpr([&](const S& v) { return piecewise(L, v); });
  else if (L.spec.gelu) {
    if constexpr (Scalar<S>::transcendental) H = H.unaryExpr([&](const S& v) { return gelu_of(L.spec, v); });
  } else
    H = H.unaryExpr([](const S& v) { return relu(v); });
  add_product(Z, L.w2, H);
  Z.colwise() += L.b2.col(0);
}

// ---- the cheaper token mixers (Yun et al.) -------------------------------------------------------

// W_P's leading n×n block; causal: its entries (l, k) with l > k set to 0.
template <class S>
Mat<S> bproj_matrix(const Layer<S>& L, Eigen::Index n) {
  if (n > L.spec.length)
    throw Error("sequence length " + std::to_string(n) + " exceeds the bilinear projection's length " +
                std::to_string(L.spec.length));
  Mat<S> P = L.wp.topLeftCorner(n, n);
  if (L.spec.causal)
    for (Eigen::Index k = 0; k < n; ++k)
      for (Eigen::Index l = k + 1; l < n; ++l)
        P(l, k) = S(0);
  return P;
}

// The position tap j of a separable convolution reads: t − j (causal) or t + j − (kernel−1)/2.
inline Eigen::Index sepconv_offset(const LayerSpec& s, int j) {
  return s.causal ? -j : j - (s.kernel - 1) / 2;
}

// M(c, t) = Σ_j f_{h(c), j} X(c, t + offset(j)), zero outside the sequence.
template <class S>
Mat<S> sepconv_mix(const Layer<S>& L, const Mat<S>& X) {
  const LayerSpec& s = L.spec;
  const Eigen::Index d = X.rows(), n = X.cols(), per = d / s.heads;
  Mat<S> M = Mat<S>::Zero(d, n);
  for (int j = 0; j < s.kernel; ++j) {
    const Eigen::Index off = sepconv_offset(s, j);
    const Eigen::Index t0 = std::max<Eigen::Index>(0, -off), t1 = std::min<Eigen::Index>(n, n - off);
    if (t0 >= t1) continue;
    for (Eigen::Index c = 0; c < d; ++c)
      M.row(c).segment(t0, t1 - t0) += L.filter(c / per, j) * X.row(c).segment(t0 + off, t1 - t0);
  }
  return M;
}

// Z += W_O · mix(X) + b_O.
template <class S>
void mixer(const Layer<S>& L, const Mat<S>& X, Mat<S>& Z) {
  Mat<S> M;
  if (L.spec.kind == LayerKind::sepconv)
    M = sepconv_mix(L, X);
  else if constexpr (is_ball_v<S> || is_arb_v<S>)
    M = product<S>(X, bproj_matrix(L, X.cols()));
  else
    M = X * bproj_matrix(L, X.cols());
  add_product(Z, L.wo, M);
  if (L.spec.bias) Z.colwise() += L.bo.col(0);
}

// The input tokens in R^d: x itself, or W_in x + b_in through an input projection.
template <class S>
Mat<S> project_input(const Network<S>& net, const Mat<S>& x) {
  if (net.arch.input <= 0) return x;
  Mat<S> z = Mat<S>::Zero(net.arch.d, x.cols());
  add_product(z, net.in_w, x);
  z.colwise() += net.in_b.col(0);
  return z;
}

template <class S>
Mat<S> forward(const Network<S>& net, const Mat<S>& x, const EvalOptions& opt, Activations<S>* capture) {
  const Architecture& a = net.arch;
  check_evaluable<S>(a);
  a.check_width(x.rows());
  if (x.cols() < 1) throw Error("input sequence is empty");
  Mat<S> Z = project_input(net, x);
  if (a.max_len > 0) {
    if (x.cols() > a.max_len)
      throw Error("sequence length " + std::to_string(x.cols()) +
                  " exceeds the positional encoding's max_len " + std::to_string(a.max_len));
    Z += net.pe.leftCols(x.cols());
  }
  // In float and double a value past the range stops the evaluation, named, instead of flowing
  // on as inf or NaN (or vanishing in a later layer norm).
  auto check_range = [&](std::size_t i) {
    if constexpr (is_ball_v<S>)
      for (const S& v : Z.reshaped())
        if (!std::isfinite(v.r) || !std::isfinite(static_cast<double>(v.m)))
          throw Error("sub-layer " + std::to_string(i) + " (" + net.arch.layers[i].describe() +
                      "): an enclosure beyond the range of " + Scalar<S>::name +
                      " (a value or its radius past 1.8e308)");
    if constexpr (is_arb_v<S>)
      for (const S& v : Z.reshaped())
        if (!arb_is_finite(v.get()))
          throw Error("sub-layer " + std::to_string(i) + " (" + net.arch.layers[i].describe() +
                      "): an enclosure that is not finite (no information left)");
    if constexpr (std::is_floating_point_v<S>)
      if (!Z.allFinite())
        throw Error("sub-layer " + std::to_string(i) + " (" + net.arch.layers[i].describe() +
                    "): a value beyond " + Scalar<S>::name +
                    "'s range (MPFR and intervals have a wider one)");
  };
  if (capture) {
    capture->residual.assign(1, Z);
    capture->pattern.assign(net.layers.size(), {});
  }
  auto sub_layer = [&](std::size_t i) {
    const Layer<S>& L = net.layers[i];
    const LayerSpec& s = L.spec;
    if (s.kind == LayerKind::layernorm) {
      Z = layer_norm(Z, L.norm_w, L.norm_b, L.eps);
      return;
    }
    // The branch reads its input completely before it adds to Z, so `in` may alias Z.
    Mat<S> normed;
    if (s.pre_norm) normed = layer_norm(Z, L.norm_w, L.norm_b, L.eps);
    const Mat<S>& in = s.pre_norm ? normed : Z;
    if (s.kind == LayerKind::attention)
      attention(L, in, Z, opt, capture ? &capture->pattern[i] : nullptr);
    else if (s.kind == LayerKind::feedforward)
      feedforward(L, in, Z);
    else
      mixer(L, in, Z);
  };
  for (std::size_t i = 0; i < net.layers.size(); ++i) {
    if constexpr (is_ball_v<S> || is_arb_v<S>) {  // a ball's error (a NaN, an operation outside its
                                                  // domain) names the sub-layer
      try {
        sub_layer(i);
      } catch (const Error& e) {
        throw Error("sub-layer " + std::to_string(i) + " (" + net.arch.layers[i].describe() +
                    "): " + e.what());
      }
    } else {
      sub_layer(i);
    }
    check_range(i);
    if (capture) capture->residual.push_back(Z);
    if (opt.after_layer) opt.after_layer(i);
  }
  if (a.pool) {
    Mat<S> pooled = Z.rowwise().sum();
    Z = std::move(pooled);
  }
  if (a.readout > 0) {
    Mat<S> y;
    if constexpr (is_ball_v<S> || is_arb_v<S>)
      y = product<S>(net.readout_w, Z);
    else
      y = net.readout_w * Z;
    y.colwise() += net.readout_b.col(0);
    return y;
  }
  return Z;
}

template <class S>
Mat<S> embed_tokens(const Network<S>& net, const std::vector<int>& ids) {
  if (net.arch.vocab <= 0) throw Error("this network takes continuous inputs, not token ids");
  Mat<S> x(net.arch.d, static_cast<Eigen::Index>(ids.size()));
  for (std::size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0 || ids[k] >= net.arch.vocab)
      throw Error("token id " + std::to_string(ids[k]) + " at position " + std::to_string(k) +
                  " is outside the vocabulary [0, " + std::to_string(net.arch.vocab) + ")");
    x.col(k) = net.embed.col(ids[k]);
  }
  return x;
}

template <class S>
Mat<S> forward_tokens(const Network<S>& net, const std::vector<int>& ids, const EvalOptions& opt,
                      Activations<S>* capture) {
  return forward(net, embed_tokens(net, ids), opt, capture);
}

#define UATLAB_INSTANTIATE_NETWORK(S)                                                                \
  template struct Network<S>;                                                                        \
  template Mat<S> forward<S>(const Network<S>&, const Mat<S>&, const EvalOptions&, Activations<S>*); \
  template Mat<S> embed_tokens<S>(const Network<S>&, const std::vector<int>&);                       \
  template Mat<S> forward_tokens<S>(const Network<S>&, const std::vector<int>&, const EvalOptions&,  \
                                    Activations<S>*);                                                \
  template void check_evaluable<S>(const Architecture&);

}  // namespace uatlab
