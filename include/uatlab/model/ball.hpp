// Ball arithmetic: a real x is enclosed as a midpoint m and a radius r, x ∈ [m − r, m + r].
//
// The certified engine's scalar (docs/certified.md). The midpoint is a binary float M, double
// (53 bits) or Quad (IEEE binary128, 113 bits), computed in the ordinary round-to-nearest mode;
// the radius is a double that bounds the midpoint's distance to the exact value, raised by every
// operation by an a-priori bound of that operation's rounding error. No rounding mode is switched:
// a bound computed in round-to-nearest is made an upper bound by one step up (up()), which holds
// for any correctly rounded operation whatever the mode (a mode other than nearest is refused by
// certified_forward, and a test checks that the kernels run in it). Matrix products of balls run
// as products of dense midpoint and radius matrices (model/interval_product.hpp), so that the
// engine's cost is a few float products; everything transcendental is enclosed by MPFI at the ends
// of the ball (Scalar<Ball<M>>::exp and the others).
//
// Ball<M> is a Scalar of the one model (scalar.hpp): Network<Ball<M>> and the one forward pass
// serve it as they serve Mpfi.
#pragma once

#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "uatlab/model/scalar.hpp"

namespace uatlab {

// binary128: long double where it is one (aarch64), else GCC's __float128 (x86-64).
#if LDBL_MANT_DIG == 113
using Quad = long double;
#else
using Quad = __float128;
#endif

// The rounding of one midpoint type: one operation's result m (round to nearest) is within
// u·|m| + eta of the exact value (eta: the spacing of the subnormals, an upper bound of the
// absolute error of an underflowing result, as a double).
template <class M>
struct MidTraits;
template <>
struct MidTraits<double> {
  static constexpr double u = 0x1p-53, eta = 0x1p-1074;
  static constexpr unsigned bits = 53;
};
template <>
struct MidTraits<Quad> {
  static constexpr double u = 0x1p-113, eta = 0x1p-1074;  // binary128's own eta is far below
  static constexpr unsigned bits = 113;
};

namespace ball {
// The next double up: an upper bound of the exact value of any one round-to-nearest operation
// whose result is x (its error is at most half the spacing above x); nonneg x stays nonneg.
inline double up(double x) {
  return std::nextafter(x, kInf);
}
inline double down(double x) {
  return std::nextafter(x, -kInf);
}
// |x| as a double, rounded up (mag: an upper bound) or down (mig: a lower bound, at least 0); a
// double midpoint is its own.
template <class M>
double abs_bound(M x, bool upward) {
  const double d = static_cast<double>(x < 0 ? -x : x);
  if constexpr (std::is_same_v<M, double>)
    return d;
  else
    return upward ? up(d) : d > 0 ? down(d) : 0.0;
}
template <class M>
double mag(M x) {
  return abs_bound(x, true);
}
template <class M>
double mig(M x) {
  return abs_bound(x, false);
}
// A bound of the rounding error of one operation whose result is m.
template <class M>
double rounding(M m) {
  return up(MidTraits<M>::u * mag(m) + MidTraits<M>::eta);
}

inline double sum_up(double a, double b) {  // a, b ≥ 0; a sum with 0 is exact
  return b == 0 ? a : a == 0 ? b : up(a + b);
}
inline double mul_up(double a, double b) {
  return a == 0 || b == 0 ? 0.0 : up(a * b);
}
// The rounding errors of one operation, exactly where an error-free transformation gives them (so
// that an exact operation, x − mean(x) of equal entries, adds no radius), else a-priori bounds.
// s = fl(a + b): Knuth's TwoSum is exact in round-to-nearest, barring overflow (then NaN: refused).
template <class M>
double sum_error(M a, M b, M s) {
  const M bb = s - a, e = (a - (s - bb)) + (b - bb);
  return e == 0 ? 0.0 : mag(e);
}
// p = fl(a·b): a double's error is fma(a, b, −p) exactly (barring underflow, covered by η); a
// binary128 one has no hardware FMA, so its a-priori bound.
template <class M>
double product_error(M a, M b, M p) {
  if constexpr (std::is_same_v<M, double>) {
    const double e = std::fma(a, b, -p);
    return e == 0 && std::abs(p) > 0x1p-960 ? 0.0 : up(std::abs(e) + MidTraits<M>::eta);
  } else {
    return a == 0 || b == 0 ? 0.0 : rounding(p);
  }
}
// q = fl(a / b): a double's remainder a − q·b is exact (fma), and |a/b − q| = |remainder|/|b|.
template <class M>
double quotient_error(M a, M b, M q) {
  if constexpr (std::is_same_v<M, double>) {
    const double rem = std::fma(-q, b, a);
    if (rem == 0 && std::abs(q) > 0x1p-960) return 0.0;
    return up(up(std::abs(rem) / std::abs(b)) + MidTraits<M>::eta);
  } else {
    return rounding(q);
  }
}
}  // namespace ball

template <class M>
struct Ball {
  M m{0};
  double r = 0;  // ≥ 0, +inf: no information

  Ball() = default;
  // Exact: every integer the model turns into a scalar (counts, positions) and every double when
  // the midpoint holds it (a double always fits a Quad; a double midpoint holds itself).
  Ball(int x) : m(static_cast<M>(x)) {}
  Ball(long x) : m(static_cast<M>(x)), r(x >= -(1L << 53) && x <= (1L << 53) ? 0.0 : ball::rounding(m)) {}
  explicit Ball(double x) : m(static_cast<M>(x)) {}
  Ball(M mid, double rad) : m(mid), r(rad) {}

  Ball& operator+=(const Ball& b) { return *this = *this + b; }
  Ball& operator-=(const Ball& b) { return *this = *this - b; }
  Ball& operator*=(const Ball& b) { return *this = *this * b; }
  Ball& operator/=(const Ball& b) { return *this = *this / b; }

  friend Ball operator-(const Ball& a) { return {-a.m, a.r}; }
  friend Ball operator+(const Ball& a, const Ball& b) {
    const M m = a.m + b.m;
    return {m, ball::sum_up(ball::sum_up(a.r, b.r), ball::sum_error(a.m, b.m, m))};
  }
  friend Ball operator-(const Ball& a, const Ball& b) { return a + (-b); }
  // |xy − a.m·b.m| ≤ |a.m|·b.r + a.r·|b.m| + a.r·b.r for x ∈ a, y ∈ b.
  friend Ball operator*(const Ball& a, const Ball& b) {
    using namespace ball;
    const M m = a.m * b.m;
    double r = sum_up(mul_up(mag(a.m), b.r), mul_up(a.r, mag(b.m)));
    return {m, sum_up(sum_up(r, mul_up(a.r, b.r)), product_error(a.m, b.m, m))};
  }
  // |x/y − a.m/b.m| ≤ (a.r + |a.m/b.m|·b.r) / (|b.m| − b.r) for x ∈ a, y ∈ b, when |b.m| > b.r;
  // a divisor that may be 0 gives an infinite radius.
  friend Ball operator/(const Ball& a, const Ball& b) {
    using namespace ball;
    const M m = a.m / b.m;
    const double gap = mig(b.m) > b.r ? down(mig(b.m) - b.r) : 0.0;
    if (!(gap > 0) || !std::isfinite(static_cast<double>(m))) return {m, kInf};
    const double q = sum_up(mag(m), rounding(m));  // ≥ |a.m/b.m|
    const double spread = sum_up(a.r, mul_up(q, b.r)), r = spread == 0 ? 0.0 : up(spread / gap);
    return {m, sum_up(r, quotient_error(a.m, b.m, m))};
  }
};

template <class M>
struct HoldsDoubles<Ball<M>> : std::true_type {};
template <class M>
struct IsBall : std::false_type {};
template <class M>
struct IsBall<Ball<M>> : std::true_type {};
template <class S>
inline constexpr bool is_ball_v = IsBall<S>::value;

// The ends of a ball as MPFR numbers of the working precision, rounded outward; a ball of MPFR
// ends, rounded outward to the midpoint type (an end past its range gives an infinite radius).
template <class M>
Mpfr lower(const Ball<M>& x);
template <class M>
Mpfr upper(const Ball<M>& x);
template <class M>
Ball<M> ball_hull(const Mpfr& lo, const Mpfr& hi);
template <class M>
Mpfi to_mpfi(const Ball<M>& x);
template <class M>
Ball<M> ball_of(const Mpfi& x);
// x², with a lower end of at least 0 (the hull [0, max|x|²] when x straddles 0).
template <class M>
Ball<M> square(const Ball<M>& x) {
  if (ball::mig(x.m) > x.r) return x * x;
  const double top = ball::sum_up(ball::mag(x.m), x.r), half = ball::up(ball::mul_up(top, top) / 2);
  return {static_cast<M>(half), half};  // [0, 2·half] ⊇ [0, top²]
}
template <class M>
Ball<M> intersect(const Ball<M>& a, const Ball<M>& b);
// max(x, 0) over the ball, exactly decided.
template <class M>
Ball<M> relu_ball(const Ball<M>& x) {
  if (x.m >= static_cast<M>(x.r)) return x;  // the whole ball is ≥ 0
  if (x.m <= -static_cast<M>(x.r)) return Ball<M>(0);
  const M end = x.m + static_cast<M>(x.r);  // rounded: the exact end is within rounding(end)
  const double half = ball::up(ball::sum_up(ball::mag(end), ball::rounding(end)) / 2);
  return {static_cast<M>(half), half};  // [0, 2·half]
}

// Every transcendental function of the model, over the whole ball: MPFI at the ends (its functions
// are the interval path's, scalar.hpp), the result as the smallest ball around that interval. The
// working MPFR precision must exceed the midpoint's bits (certified_forward opens the scope).
template <class M>
Ball<M> through_mpfi(const Ball<M>& x, Mpfi (*f)(const Mpfi&));
// An increasing function over the ball: f at the ends, rounded outward (MPFR's exp, log, sqrt).
template <class M>
Ball<M> ball_increasing(const Ball<M>& x, int (*f)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t));

template <class M>
struct Scalar<Ball<M>> {
  static constexpr const char* name = MidTraits<M>::bits == 53 ? "ball:53" : "ball:113";
  static constexpr bool exact = false, interval = true, transcendental = true;
  static Ball<M> from(const Rational& q);         // the nearest midpoint, the exact gap as radius
  static Rational to_rational(const Ball<M>& x);  // the midpoint
  static double to_double(const Ball<M>& x) { return static_cast<double>(x.m); }
  static std::string to_string(const Ball<M>& x);  // "[lo,hi]", ends rounded outward
  static Ball<M> exp(const Ball<M>& x);
  static Ball<M> log(const Ball<M>& x);
  static Ball<M> sqrt(const Ball<M>& x);
  static Ball<M> cos(const Ball<M>& x);
  static Ball<M> sin(const Ball<M>& x);
  static Ball<M> hull(const Mpfr& lo, const Mpfr& hi) { return ball_hull<M>(lo, hi); }
};
template <class M>
Ball<M> gelu(const Ball<M>& x);
template <class M>
Ball<M> gelu_tanh(const Ball<M>& x);

// Exact conversions from the file's numbers (a float or double weight fits either midpoint).
template <class M>
Ball<M> ball_from_double(double x) {
  return Ball<M>(x);
}

using Ball53 = Ball<double>;
using Ball113 = Ball<Quad>;

extern template struct Scalar<Ball53>;
extern template struct Scalar<Ball113>;

}  // namespace uatlab

namespace Eigen {
template <class M>
struct NumTraits<uatlab::Ball<M>> : GenericNumTraits<uatlab::Ball<M>> {
  using Real = uatlab::Ball<M>;
  using NonInteger = uatlab::Ball<M>;
  using Literal = uatlab::Ball<M>;
  using Nested = uatlab::Ball<M>;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 2,
    AddCost = 8,
    MulCost = 12
  };
  static inline Real epsilon() { return Real(uatlab::MidTraits<M>::u); }
  static inline Real dummy_precision() { return Real(uatlab::MidTraits<M>::u); }
  static inline int digits10() { return uatlab::MidTraits<M>::bits == 53 ? 15 : 33; }
};
}  // namespace Eigen
