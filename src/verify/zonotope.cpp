// Affine forms through a network (zonotope.hpp).
//
// Why the result is sound, rounding included. A form's center and generators are whatever binary64
// computes, to nearest; its remainder r bounds, for every input of the box, the distance between
// the true value and c + G·e. Each step adds to r:
//  - what the step leaves out by design: the remainders it inherits (times the step's gain), the
//    products of two forms' deviations, the error of a nonlinear function's linearisation, the
//    radius of a weight or constant that is not a double;
//  - the rounding of the center and the generators: a sum of K products computed to nearest in any
//    order, with or without FMA, is within γ_K·P + K·2^-1074 of the exact sum, P the sum of the
//    products' absolute values and γ_K = K·u/(1 − K·u) ≤ 2K·u (u = 2^-53; the K·2^-1074 covers
//    underflow).
// These bounds are sums and products of non-negative numbers, computed under FE_UPWARD (this file
// is compiled with -frounding-math), so each is at least its exact value; they run on the calling
// thread only (lazyProduct, reductions), since another thread would round to nearest. A nonlinear
// function f is linearised in MPFI at the working precision over the enclosure [lo, hi] of its
// argument: f(x) = α·x + β + t, |t| ≤ ρ for every x in [lo, hi], α and β doubles.
#include "uatlab/verify/zonotope.hpp"

#include <mpfi.h>
#include <mpfr.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "../model/network_impl.hpp"  // hull_of_pieces, position_bias, rotary_table
#include "rounding.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/verify/affine.hpp"  // activation_pieces
#include "uatlab/verify/bounds.hpp"

namespace uatlab {

namespace {

using Eigen::Index;
using Eigen::MatrixXd;
using Eigen::RowVectorXd;

constexpr double kU = 0x1p-53, kEta = 0x1p-1074;

// The rounding error of K-term sums of products (m of them, one per generator) whose absolute values
// sum to P in all: γ_K·P + K·m·2^-1074. Under FE_UPWARD.
double rounding_error(double K, double P, double m = 1) {
  return 2 * K * kU * P + K * m * kEta;
}

// A constant: the nearest double v and a radius ρ ≥ |value − v| for every value of the enclosure.
struct Constant {
  double v = 0, rad = 0;
};
Constant constant_of(const Mpfi& x) {
  const double lo = to_double_down(lower(x)), hi = to_double_up(upper(x));
  if (!std::isfinite(lo) || !std::isfinite(hi))
    throw Error("zonotope: a weight or constant beyond double's range");
  const double v = lo + (hi - lo) / 2;
  if (!std::isfinite(v)) throw Error("zonotope: a weight or constant beyond double's range");
  const Rounding up(FE_UPWARD);
  return {v, std::max(hi - v, v - lo)};
}
// A double as an MPFR number at the working precision, rounded down or up (exact from 53 bits on).
Mpfr mpfr_of(double x, mpfr_rnd_t rnd) {
  Mpfr y;
  mpfr_set_d(y.backend().data(), x, rnd);
  return y;
}
struct Constants {
  MatrixXd v, rad;
  bool exact = true;  // every radius 0
};
Constants constants_of(const Mat<Mpfi>& m) {
  Constants c{MatrixXd(m.rows(), m.cols()), MatrixXd(m.rows(), m.cols())};
  for (Index j = 0; j < m.size(); ++j) {
    const Constant k = constant_of(m(j));
    c.v(j) = k.v, c.rad(j) = k.rad;
    c.exact = c.exact && k.rad == 0;
  }
  return c;
}

// One affine form: c + g·e + t, |t| ≤ r.
struct Form {
  double c = 0, r = 0;
  RowVectorXd g;
  explicit Form(Index m = 0) : g(RowVectorXd::Zero(m)) {}
};
Form get(const Zonotope& z, Index i, Index k) {
  Form f;
  f.c = z.c(i, k), f.r = z.r(i, k), f.g = z.G.row(i + z.rows() * k);
  return f;
}
void put(Zonotope& z, Index i, Index k, const Form& f) {
  z.c(i, k) = f.c, z.r(i, k) = f.r, z.G.row(i + z.rows() * k) = f.g;
}
Zonotope zeros(Index rows, Index cols, Index m) {
  return {MatrixXd::Zero(rows, cols), MatrixXd::Zero(rows * cols, m), MatrixXd::Zero(rows, cols)};
}
// Forms meet only at one width (every symbol there is): Eigen does not check sizes in a release
// build, so a mismatch would read past a vector.
void check_width(const Form& f, Index m) {
  if (f.g.size() != m) throw Error("zonotope: forms over different symbols (an internal error)");
}
// Σ_j |g_j| and Σ_j |g_j| + r, under FE_UPWARD.
double generators_abs(const Form& f) {
  return f.g.cwiseAbs().sum();
}
double radius(const Form& f) {
  return generators_abs(f) + f.r;
}

// a'·x + b' for every a' within da of a and b' within db of b.
Form affine(const Form& x, double a, double da, double b, double db) {
  Form y;
  y.c = a * x.c + b;
  y.g = a * x.g;
  const Rounding up(FE_UPWARD);
  const double gx = generators_abs(x), m = static_cast<double>(x.g.size());
  y.r = std::abs(a) * x.r + da * (std::abs(x.c) + gx + x.r) + db +
        rounding_error(2, std::abs(a) * std::abs(x.c) + std::abs(b)) + rounding_error(1, std::abs(a) * gx, m);
  return y;
}

// Σ_t a_t·x_t + b, the a_t and b exact doubles.
Form combine(const std::vector<std::pair<double, const Form*>>& terms, double b, Index m) {
  Form y(m);
  y.c = b;
  for (const auto& [a, x] : terms)
    check_width(*x, m), y.c += a * x->c, y.g += a * x->g;
  const Rounding up(FE_UPWARD);
  double pc = std::abs(b), pg = 0, r = 0;
  for (const auto& [a, x] : terms)
    pc += std::abs(a) * std::abs(x->c), pg += std::abs(a) * generators_abs(*x), r += std::abs(a) * x->r;
  const double K = static_cast<double>(terms.size()) + 1;
  y.r = r + rounding_error(K, pc) + rounding_error(K, pg, static_cast<double>(m));
  return y;
}

// a·x + b·y for every a within a.rad of a.v and b within b.rad of b.v (a coordinate of a turned pair).
Form turned(const Form& x, const Form& y, Constant a, Constant b, Index m) {
  Form z = combine({{a.v, &x}, {b.v, &y}}, 0, m);
  const Rounding up(FE_UPWARD);
  z.r += a.rad * (std::abs(x.c) + radius(x)) + b.rad * (std::abs(y.c) + radius(y));
  return z;
}

// Σ_t x_t·y_t of forms: (cx + δx)(cy + δy) = cx·cy + cx·gy·e + cy·gx·e + [cx·ty + cy·tx + δx·δy],
// the bracket within |cx|·ry + |cy|·rx + Rx·Ry (R: a form's whole radius).
class Dot {
 public:
  explicit Dot(Index m) : f_(m) {}
  void add(const Form& x, const Form& y) {
    check_width(x, f_.g.size()), check_width(y, f_.g.size());
    f_.c += x.c * y.c;
    f_.g += x.c * y.g + y.c * x.g;
    const Rounding up(FE_UPWARD);
    const double gx = generators_abs(x), gy = generators_abs(y), ax = std::abs(x.c), ay = std::abs(y.c);
    rem_ += ax * y.r + ay * x.r + (gx + x.r) * (gy + y.r);
    pc_ += ax * ay, pg_ += ax * gy + ay * gx, ++K_;
  }
  Form done() {
    const Rounding up(FE_UPWARD);
    f_.r = rem_ + rounding_error(K_, pc_) + rounding_error(2 * K_, pg_, static_cast<double>(f_.g.size()));
    return f_;
  }

 private:
  Form f_;
  double rem_ = 0, pc_ = 0, pg_ = 0, K_ = 0;
};

// x²: c² + 2c·g·e + [2c·t + δ²], δ² in [0, R²]: the center moves by h ≈ R²/2 and the remainder
// keeps 2|c|·r + max(h, R² − h).
Form squared(const Form& x) {
  double R2;
  {
    const Rounding up(FE_UPWARD);
    const double R = radius(x);
    R2 = R * R;
  }
  const double h = R2 / 2;
  Form y;
  y.c = x.c * x.c + h;
  y.g = (2 * x.c) * x.g;
  const Rounding up(FE_UPWARD);
  const double ac = std::abs(x.c), gx = generators_abs(x);
  y.r = 2 * ac * x.r + std::max(h, R2 - h) + rounding_error(2, ac * ac + h) +
        rounding_error(1, 2 * ac * gx, static_cast<double>(x.g.size()));
  return y;
}

// A linearisation of f over [lo, hi]: f(x) − α·x lies in [β − ρ, β + ρ].
struct Linear {
  double alpha = 0, beta = 0, rho = 0;
};
Linear linear_of(double alpha, const Mpfi& rest) {
  const Constant b = constant_of(rest);
  return {alpha, b.v, b.rad};
}
// α a double near the chord's slope (f's derivative at the middle when the interval is a point).
template <class F, class D>
double chord_slope(F&& f, D&& derivative, const Mpfr& lo, const Mpfr& hi) {
  if (hi > lo) {
    const double s = Scalar<Mpfi>::to_double((f(point(hi)) - f(point(lo))) / (point(hi) - point(lo)));
    if (std::isfinite(s)) return s;
  }
  return Scalar<Mpfi>::to_double(derivative(hull(lo, hi)));
}

// f convex on [lo, hi]: g = f − α·x is convex, so it is at most max(g(lo), g(hi)) and at least
// g(m) − |f'(m) − α|·max(hi − m, m − lo) for any m in [lo, hi] (the tangent at m, its slope
// f'(m) − α); m is taken where f' = α (`where`, approximately), the best point.
template <class F, class D, class W>
Linear convex(const Mpfr& lo, const Mpfr& hi, F&& f, D&& derivative, W&& where) {
  const double alpha = chord_slope(f, derivative, lo, hi);
  double mid = where(alpha);
  if (!std::isfinite(mid)) mid = Scalar<Mpfi>::to_double(hull(lo, hi));
  Mpfr m(mid);
  m = std::min(std::max(m, lo), hi);
  const Mpfi a(alpha), M = point(m), L = point(lo), H = point(hi);
  auto g = [&](const Mpfi& x) { return Mpfi(f(x) - a * x); };
  const Mpfi glo = g(L), ghi = g(H);
  const Mpfr top = std::max(upper(glo), upper(ghi));
  const Mpfi reach = hull(Mpfr(0), std::max(upper(Mpfi(H - M)), upper(Mpfi(M - L))));
  const Mpfi tangent = g(M) - mp::abs(Mpfi(derivative(M) - a)) * reach;
  return linear_of(alpha, hull(lower(tangent), top));
}

// Any f with interval extensions of f and f': f(x) − α·x over X, by the mean-value form at the
// middle, within the natural extension f(X) − α·X.
template <class F, class D>
Linear smooth(const Mpfr& lo, const Mpfr& hi, F&& f, D&& derivative) {
  const double alpha = chord_slope(f, derivative, lo, hi);
  const Mpfi X = hull(lo, hi), a(alpha), m(Scalar<Mpfi>::to_double(X));
  const Mpfi mean_value = f(m) - a * m + (derivative(X) - a) * (X - m);
  return linear_of(alpha, intersect(mean_value, Mpfi(f(X) - a * X)));
}

// A piecewise-linear φ: g = φ − α·x is piecewise linear, so the hull of its pieces over [lo, hi]
// is its range; α is the chord's slope (ReLU across 0: hi/(hi − lo), the least-area choice).
Linear piecewise_linear(const Mpfr& lo, const Mpfr& hi, const std::vector<Mpfi>& c,
                        const std::vector<std::pair<Mpfi, Mpfi>>& pieces) {
  auto phi = [&](const Mpfi& x) { return piecewise(c, pieces, x); };
  // Any slope is sound; at a point (lo = hi) the range is a point whatever it is, so 0 there.
  const double alpha = chord_slope(
      phi, [](const Mpfi&) { return Mpfi(0); }, lo, hi);
  const Mpfi a(alpha);
  const Mpfi rest = hull_of_pieces(c, pieces.size(), hull(lo, hi),
                                   [&](std::size_t i, const Mpfr& x0, const Mpfr& x1, Mpfr& l, Mpfr& h) {
                                     const Mpfi img = (pieces[i].first - a) * hull(x0, x1) + pieces[i].second;
                                     l = lower(img), h = upper(img);
                                     return true;
                                   });
  return linear_of(alpha, rest);
}

// A form's enclosure [c − R, c + R], its ends rounded outward.
std::pair<Mpfr, Mpfr> range_of(const Form& x) {
  double below, above;
  {
    const Rounding up(FE_UPWARD);
    const double R = radius(x);
    below = -(R - x.c), above = x.c + R;
  }
  return {mpfr_of(below, MPFR_RNDD), mpfr_of(above, MPFR_RNDU)};
}

// f(x) as a form: the argument's enclosure, raised to `floor` where the true value is known to be at
// least that, linearised by `lin`.
template <class L>
Form unary(const Form& x, L&& lin, const Mpfr* floor = nullptr) {
  auto [lo, hi] = range_of(x);
  if (floor && lo < *floor) lo = *floor;
  if (!(lo <= hi)) throw Error("zonotope: an enclosure below a bound its value is known to meet");
  const Linear l = lin(lo, hi);
  return affine(x, l.alpha, 0, l.beta, l.rho);
}

Mpfi exp_of(const Mpfi& x) {
  return mp::exp(x);
}
Mpfi reciprocal(const Mpfi& x) {
  return Mpfi(1) / x;
}
Mpfi reciprocal_slope(const Mpfi& x) {
  return Mpfi(-1) / square(x);
}
Mpfi rsqrt(const Mpfi& x) {
  return Mpfi(1) / mp::sqrt(x);
}
Mpfi rsqrt_slope(const Mpfi& x) {
  return Mpfi(-0.5) / (x * mp::sqrt(x));
}

// The whole network, one sub-layer at a time.
class Forward {
 public:
  Forward(const Network<Mpfi>& net, Index m) : net_(net), m_(m) {}

  Zonotope operator()(Zonotope Z) {
    const Architecture& a = net_.arch;
    if (a.input > 0) Z = linear(net_.in_w, &net_.in_b, Z);
    if (a.max_len > 0 && Z.cols() > a.max_len)
      throw Error("sequence length " + std::to_string(Z.cols()) +
                  " exceeds the positional encoding's max_len " + std::to_string(a.max_len));
    if (a.max_len > 0) add_constant(Z, constants_of(net_.pe.leftCols(Z.cols())));
    check(Z, "the input");
    for (std::size_t i = 0; i < net_.layers.size(); ++i) {
      const Layer<Mpfi>& L = net_.layers[i];
      if (L.spec.kind == LayerKind::layernorm) {
        Z = layer_norm(Z, L);
      } else {
        Zonotope in = L.spec.pre_norm ? layer_norm(Z, L) : Z;
        if (L.spec.pre_norm) fresh_symbols(in);
        Zonotope out = L.spec.kind == LayerKind::attention ? attention(L, in) : feedforward(L, in);
        grow(Z), grow(out);
        Z = sum(Z, out);
      }
      check(Z, "sub-layer " + std::to_string(i) + " (" + L.spec.describe() + ")");
      fresh_symbols(Z);
    }
    if (a.readout > 0) Z = linear(net_.readout_w, &net_.readout_b, Z);
    return Z;
  }

 private:
  const Network<Mpfi>& net_;
  Index m_;

  // Z's generators widened to the symbols there are now (the new ones have coefficient 0 in Z).
  void grow(Zonotope& Z) const {
    const Index m = Z.G.cols();
    if (m == m_) return;
    Z.G.conservativeResize(Eigen::NoChange, m_);
    Z.G.rightCols(m_ - m).setZero();
  }
  // Every remainder of Z becomes the coefficient of a symbol of its own: the value is then linear in
  // it, so the maps that follow keep what it shares between their outputs (a linear map of two
  // entries that share a symbol can cancel it; of two remainders, only add their sizes). The
  // matrices a step passes on after something nonlinear get them: the residual stream after each
  // sub-layer, layer norm's output before the projections that read it, the activations before W2,
  // the attention weights before they meet the values, the weighted values before W_O.
  void fresh_symbols(Zonotope& Z) {
    grow(Z);
    Index added = 0;
    for (Index j = 0; j < Z.r.size(); ++j)
      added += Z.r(j) > 0;
    Z.G.conservativeResize(Eigen::NoChange, m_ + added);
    Z.G.rightCols(added).setZero();
    for (Index j = 0; j < Z.r.size(); ++j)
      if (Z.r(j) > 0) Z.G(j, m_++) = Z.r(j), Z.r(j) = 0;
  }

  static void check(const Zonotope& z, const std::string& where) {
    if (!z.c.allFinite() || !z.G.allFinite() || !z.r.allFinite())
      throw Error("zonotope: an affine form beyond double's range after " + where);
  }

  // W·X + b (W p×q): per token, the generators' block times W.
  Zonotope linear(const Mat<Mpfi>& w, const Mat<Mpfi>* b, const Zonotope& X) const {
    const Constants W = constants_of(w);
    const Index p = W.v.rows(), q = W.v.cols(), n = X.cols();
    if (q != X.rows()) throw Error("zonotope: a weight of the wrong width (an internal error)");
    Zonotope Y = zeros(p, n, X.G.cols());
    Y.c.noalias() = W.v * X.c;
    for (Index k = 0; k < n; ++k)
      Y.G.middleRows(p * k, p).noalias() = W.v * X.G.middleRows(q * k, q);
    Constants B;
    if (b) B = constants_of(*b), Y.c.colwise() += B.v.col(0);
    const Rounding up(FE_UPWARD);
    MatrixXd gx(q, n);
    for (Index k = 0; k < n; ++k)
      for (Index i = 0; i < q; ++i)
        gx(i, k) = X.G.row(i + q * k).cwiseAbs().sum();
    const MatrixXd absW = W.v.cwiseAbs(), absc = X.c.cwiseAbs();
    MatrixXd pc = absW.lazyProduct(absc);
    if (b) pc.colwise() += B.v.col(0).cwiseAbs();
    const MatrixXd pg = absW.lazyProduct(gx);
    Y.r = absW.lazyProduct(X.r);
    if (!W.exact) Y.r += W.rad.lazyProduct(MatrixXd(absc + gx + X.r));
    if (b) Y.r.colwise() += B.rad.col(0);
    const double K = static_cast<double>(q) + 1, m = static_cast<double>(X.G.cols());
    Y.r += (2 * K * kU) * pc + (2 * K * kU) * pg;
    Y.r.array() += K * (m + 1) * kEta;
    return Y;
  }

  static Zonotope sum(const Zonotope& A, const Zonotope& B) {
    if (A.G.cols() != B.G.cols() || A.c.rows() != B.c.rows() || A.c.cols() != B.c.cols())
      throw Error("zonotope: a sum over different symbols or shapes (an internal error)");
    Zonotope Y{A.c + B.c, A.G + B.G, MatrixXd()};
    const Rounding up(FE_UPWARD);
    Y.r = A.r + B.r;
    for (Index k = 0; k < Y.cols(); ++k)
      for (Index i = 0; i < Y.rows(); ++i) {
        const Index row = i + Y.rows() * k;
        const double p = std::abs(A.c(i, k)) + std::abs(B.c(i, k)) + A.G.row(row).cwiseAbs().sum() +
                         B.G.row(row).cwiseAbs().sum();
        Y.r(i, k) += rounding_error(1, p, static_cast<double>(A.G.cols()) + 1);
      }
    return Y;
  }

  static void add_constant(Zonotope& Z, const Constants& v) {
    const MatrixXd before = Z.c.cwiseAbs();
    Z.c += v.v;
    const Rounding up(FE_UPWARD);
    Z.r += v.rad + (2 * kU) * (before + v.v.cwiseAbs());
    Z.r.array() += kEta;
  }

  Zonotope layer_norm(const Zonotope& Z, const Layer<Mpfi>& L) const {
    const Index d = Z.rows(), n = Z.cols();
    const Constant inv_d = constant_of(Mpfi(1) / Mpfi(static_cast<long>(d))), eps = constant_of(L.eps);
    const Constants w = constants_of(L.norm_w), b = constants_of(L.norm_b);
    const Mpfr floor = lower(L.eps);  // the variance is ≥ 0
    Zonotope Y = zeros(d, n, m_);
    for (Index k = 0; k < n; ++k) {
      std::vector<Form> z(static_cast<std::size_t>(d)), centred(static_cast<std::size_t>(d)),
          squares(static_cast<std::size_t>(d));
      std::vector<std::pair<double, const Form*>> terms;
      for (Index i = 0; i < d; ++i)
        z[static_cast<std::size_t>(i)] = get(Z, i, k),
        terms.emplace_back(1.0, &z[static_cast<std::size_t>(i)]);
      const Form mean = affine(combine(terms, 0, m_), inv_d.v, inv_d.rad, 0, 0);
      terms.clear();
      for (std::size_t i = 0; i < z.size(); ++i) {
        centred[i] = combine({{1.0, &z[i]}, {-1.0, &mean}}, 0, m_);
        squares[i] = squared(centred[i]);
        terms.emplace_back(1.0, &squares[i]);
      }
      const Form variance = affine(combine(terms, 0, m_), inv_d.v, inv_d.rad, eps.v, eps.rad);
      const Form inv = unary(
          variance,
          [](const Mpfr& lo, const Mpfr& hi) {
            return convex(lo, hi, rsqrt, rsqrt_slope, [](double a) { return std::pow(-2 * a, -2.0 / 3.0); });
          },
          &floor);
      for (Index i = 0; i < d; ++i) {
        Dot p(m_);
        p.add(centred[static_cast<std::size_t>(i)], inv);
        put(Y, i, k, affine(p.done(), w.v(i), w.rad(i), b.v(i), b.rad(i)));
      }
    }
    return Y;
  }

  Zonotope feedforward(const Layer<Mpfi>& L, const Zonotope& X) {
    Zonotope H = linear(L.w1, &L.b1, X);
    const LayerSpec& s = L.spec;
    std::vector<Mpfi> c;
    std::vector<std::pair<Mpfi, Mpfi>> pieces;
    if (!s.gelu) activation_pieces(L, c, pieces);
    for (Index k = 0; k < H.cols(); ++k)
      for (Index i = 0; i < H.rows(); ++i) {
        const Form h = get(H, i, k);
        put(H, i, k, unary(h, [&](const Mpfr& lo, const Mpfr& hi) {
              if (!s.gelu) return piecewise_linear(lo, hi, c, pieces);
              return smooth(
                  lo, hi, [&](const Mpfi& x) { return gelu_of(s, x); },
                  [&](const Mpfi& x) { return gelu_slope_of(s, x); });
            }));
      }
    fresh_symbols(H);
    return linear(L.w2, &L.b2, H);
  }

  // Rotary positions on Q or K: each pair of a head's coordinates at position k turned by the
  // enclosures of cos and sin of k·θ_i (the model's table in MPFI, as constants).
  static void rotate(Zonotope& Z, const Constants& cosines, const Constants& sines) {
    const Index m = Z.G.cols(), half = cosines.v.rows();
    for (Index k = 0; k < Z.cols(); ++k)
      for (Index row = 0; row < Z.rows(); row += 2) {
        const Index i = (row / 2) % half;
        const Constant c{cosines.v(i, k), cosines.rad(i, k)}, sn{sines.v(i, k), sines.rad(i, k)};
        const Form x = get(Z, row, k), y = get(Z, row + 1, k);
        put(Z, row, k, turned(x, y, c, {-sn.v, sn.rad}, m));
        put(Z, row + 1, k, turned(x, y, sn, c, m));
      }
  }

  Zonotope attention(const Layer<Mpfi>& L, const Zonotope& X) {
    const LayerSpec& s = L.spec;
    const Index n = X.cols(), hs = s.head_size;
    const Mat<Mpfi>& wk = s.tied_qkv ? L.wq : L.wk;
    const Mat<Mpfi>& wv = s.tied_qkv ? L.wq : L.wv;
    const Mat<Mpfi>* bq = s.bias ? &L.bq : nullptr;
    const Mat<Mpfi>* bk = s.bias ? (s.tied_qkv ? &L.bq : &L.bk) : nullptr;
    const Mat<Mpfi>* bv = s.bias ? (s.tied_qkv ? &L.bq : &L.bv) : nullptr;
    Zonotope V = linear(wv, bv, X);
    Zonotope Q, K;
    if (!s.dp_free) Q = linear(L.wq, bq, X), K = linear(wk, bk, X);
    if (s.rope > 0) {
      const RotaryTable<Mpfi> T = rotary_table<Mpfi>(s, n);
      const Constants cosines = constants_of(T.c), sines = constants_of(T.s);
      rotate(Q, cosines, sines), rotate(K, cosines, sines);
    }
    const Constant scale = constant_of(L.score_scale);
    Zonotope out;
    for (int h = 0; h < s.heads; ++h) {
      const Constants bias = s.rpe != Rpe::none ? constants_of(position_bias(L, h, n)) : Constants{};
      if (!s.dp_free) grow(Q), grow(K);  // the heads before added symbols
      Zonotope A = zeros(n, n, m_);      // A(l, k): key l's weight for query k (0 where masked)
      for (Index k = 0; k < n; ++k) {
        const KeyRange r = attended_keys(s, k, n);
        std::vector<Form> score;
        for (Index l = r.first; l < r.end; ++l) {
          Dot qk(m_);
          if (!s.dp_free)
            for (Index t = 0; t < hs; ++t)
              qk.add(get(K, h * hs + t, l), get(Q, h * hs + t, k));
          const Constant b = s.rpe != Rpe::none ? Constant{bias.v(l, k), bias.rad(l, k)} : Constant{};
          score.push_back(affine(qk.done(), scale.v, scale.rad, b.v, b.rad));
        }
        const std::vector<Form> weight = s.score == Score::softmax ? softmax(score) : score;
        for (Index l = r.first; l < r.end; ++l)
          put(A, l, k, weight[static_cast<std::size_t>(l - r.first)]);
      }
      fresh_symbols(A);
      grow(V);
      Zonotope VA = zeros(hs, n, m_);
      for (Index k = 0; k < n; ++k) {
        const KeyRange r = attended_keys(s, k, n);
        for (Index i = 0; i < hs; ++i) {
          Dot va(m_);
          for (Index l = r.first; l < r.end; ++l)
            va.add(get(V, h * hs + i, l), get(A, l, k));
          put(VA, i, k, va.done());
        }
      }
      fresh_symbols(VA);
      Zonotope part = linear(L.wo.middleCols(h * hs, hs), nullptr, VA);
      if (h > 0) grow(out);
      out = h == 0 ? std::move(part) : sum(out, part);
    }
    if (s.bias) add_constant(out, constants_of(L.bo.replicate(1, n)));
    return out;
  }

  // w_l = 1 / (1 + Σ_{j≠l} exp(s_j − s_l)), the form the intervals use too: the denominator is at
  // least 1, so 1/x is linearised on [1, ∞) whatever the exponentials' forms reach. Where a
  // difference may exceed 512 (a sharp head of a trained model), exp's chord would be steeper than
  // e^512 ≈ 2e222 and its forms would leave double's range: there w_l is at most
  // 1/(1 + e^lo), a constant form enclosing 1 / (1 + Σ_j exp(range of s_j − s_l)) in MPFI.
  std::vector<Form> softmax(const std::vector<Form>& score) const {
    static const Mpfr one(1), steep(512);
    std::vector<Form> w;
    for (std::size_t l = 0; l < score.size(); ++l) {
      std::vector<Form> diff, e;
      for (std::size_t j = 0; j < score.size(); ++j)
        if (j != l) diff.push_back(combine({{1.0, &score[j]}, {-1.0, &score[l]}}, 0, m_));
      if (std::any_of(diff.begin(), diff.end(), [](const Form& d) { return range_of(d).second > steep; })) {
        Mpfi denominator(1);
        for (const Form& d : diff) {
          const auto [lo, hi] = range_of(d);
          denominator += mp::exp(hull(lo, hi));
        }
        const Constant k = constant_of(Mpfi(Mpfi(1) / denominator));
        Form f(m_);
        f.c = k.v, f.r = k.rad;
        w.push_back(std::move(f));
        continue;
      }
      e.reserve(diff.size());
      for (const Form& d : diff)
        e.push_back(unary(d, [](const Mpfr& lo, const Mpfr& hi) {
          return convex(lo, hi, exp_of, exp_of, [](double a) { return std::log(a); });
        }));
      std::vector<std::pair<double, const Form*>> terms;
      for (const Form& f : e)
        terms.emplace_back(1.0, &f);
      w.push_back(unary(
          combine(terms, 1, m_),
          [](const Mpfr& lo, const Mpfr& hi) {
            return convex(lo, hi, reciprocal, reciprocal_slope, [](double a) { return 1 / std::sqrt(-a); });
          },
          &one));
    }
    return w;
  }
};

}  // namespace

Mpfi Zonotope::enclose(Eigen::Index i, Eigen::Index k, Eigen::Index j) const {
  double R;
  {
    const Rounding up(FE_UPWARD);
    const Index a = i + rows() * k;
    if (j < 0) {
      R = G.row(a).cwiseAbs().sum() + r(i, k);
    } else {
      const Index b = j + rows() * k;
      R = r(i, k) + r(j, k);
      for (Index e = 0; e < G.cols(); ++e)  // |x − y| as max − min: rounded up, never below
        R += std::max(G(a, e), G(b, e)) - std::min(G(a, e), G(b, e));
    }
  }
  const Mpfi center = j < 0 ? Mpfi(c(i, k)) : Mpfi(Mpfi(c(i, k)) - Mpfi(c(j, k)));
  const Mpfr reach = upper(Mpfi(R));  // Mpfi(double) encloses it at any precision
  return center + hull(Mpfr(-reach), reach);
}

void check_zonotope_supported(const Architecture& a) {
  if (a.pool) throw Error("zonotope: pooled networks are not supported");
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const LayerSpec& s = a.layers[i];
    const std::string where = "zonotope: sub-layer " + std::to_string(i) + " (" + s.describe() + ")";
    if (s.kind == LayerKind::bproj || s.kind == LayerKind::sepconv)
      throw Error(where + ": the mixers are not supported (intervals or mean-value)");
    if (s.kind == LayerKind::attention && s.score == Score::hardmax)
      throw Error(where + ": hardmax has no affine form (its weights jump); use the intervals");
  }
}

void check_zonotope_memory(const Architecture& a, Eigen::Index n, Eigen::Index in_rows, int threads) {
  // The largest generator matrix, a few copies alive: its rows per token (the widest matrix, the
  // attention weights n per token) times the tokens times the symbols, the input's m and at most
  // one per entry of each matrix given fresh symbols (Forward::fresh_symbols).
  using limits::saturating_add, limits::saturating_mul;
  const long long d = a.d, tokens = n;
  long long rows = std::max<long long>({d, a.in_dim(), a.readout, tokens}), symbols = in_rows * tokens;
  for (const LayerSpec& s : a.layers) {
    rows = std::max<long long>({rows, s.width, 3LL * s.heads * s.head_size});
    const long long stream = saturating_mul(d, tokens);
    long long added = s.pre_norm ? saturating_mul(2, stream) : stream;  // the residual stream, the norm
    if (s.kind == LayerKind::attention)  // the weights and the weighted values, per head
      added = saturating_add(added, saturating_mul(s.heads, saturating_mul(tokens, tokens + s.head_size)));
    if (s.kind == LayerKind::feedforward) added = saturating_add(added, saturating_mul(s.width, tokens));
    symbols = saturating_add(symbols, added);
  }
  // ... per thread of the team that runs the forms (analyse's passes run one sequence per thread).
  const long long copies = saturating_mul(4, threads);
  const long long doubles = saturating_mul(saturating_mul(rows, tokens), saturating_mul(symbols, copies));
  if (static_cast<double>(doubles) * 8 > static_cast<double>(limits::memory_budget()))
    throw Error("zonotope: " + std::to_string(n) + " tokens of " + std::to_string(in_rows) +
                " numbers need about " + std::to_string(doubles / (1LL << 27)) +
                " GiB of generators, over the memory budget (fewer tokens, or the intervals)");
}

Zonotope zonotope_forward(const Network<Mpfi>& net, const Mat<Mpfi>& x0, const Rational& e) {
  const Architecture& a = net.arch;
  check_zonotope_supported(a);
  if (e < 0) throw Error("zonotope: the radius must be >= 0, got " + e.str());
  const Index n = x0.cols(), m = x0.size();
  check_zonotope_memory(a, n, x0.rows(), omp_get_num_threads());
  const Constant eps = constant_of(Scalar<Mpfi>::from(e));
  double radius;
  {
    const Rounding up(FE_UPWARD);
    radius = eps.v + eps.rad;
  }
  Zonotope z = zeros(x0.rows(), n, m);
  for (Index j = 0; j < m; ++j) {
    const Constant x = constant_of(x0(j));
    z.c(j) = x.v, z.r(j) = x.rad, z.G(j, j) = radius;
  }
  return Forward(net, m)(std::move(z));
}

}  // namespace uatlab
