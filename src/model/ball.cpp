// The parts of ball arithmetic that go through MPFR: conversions, the ends of a ball, and the
// transcendental functions (enclosed by MPFI at the ends, then turned back into a ball).
#include "uatlab/model/ball.hpp"

#include <mpfi.h>
#include <mpfr.h>

#include <algorithm>

#if LDBL_MANT_DIG != 113
// MPFR's binary128 conversions, declared here because mpfr.h declares them only for C compilers
// that know _Float128 (the same type as GCC's __float128).
extern "C" {
int mpfr_set_float128(mpfr_ptr, __float128, mpfr_rnd_t);
__float128 mpfr_get_float128(mpfr_srcptr, mpfr_rnd_t);
}
#endif

namespace uatlab {

namespace {

// x into an MPFR number (exact at a precision of at least the midpoint's bits), and back, rounded.
inline void set_mid(mpfr_ptr v, double x) {
  mpfr_set_d(v, x, MPFR_RNDN);
}
#if LDBL_MANT_DIG == 113
inline void set_mid(mpfr_ptr v, long double x) {
  mpfr_set_ld(v, x, MPFR_RNDN);
}
#else
inline void set_mid(mpfr_ptr v, __float128 x) {
  mpfr_set_float128(v, x, MPFR_RNDN);
}
#endif
template <class M>
M get_mid(mpfr_srcptr v, mpfr_rnd_t rnd) {
  if constexpr (std::is_same_v<M, double>) return mpfr_get_d(v, rnd);
#if LDBL_MANT_DIG == 113
  else
    return mpfr_get_ld(v, rnd);
#else
  else
    return mpfr_get_float128(v, rnd);
#endif
}

// An MPFR scratch of `prec` bits (freed on exit).
struct BallTmp {
  mpfr_t v;
  explicit BallTmp(mpfr_prec_t prec) { mpfr_init2(v, prec); }
  ~BallTmp() { mpfr_clear(v); }
  BallTmp(const BallTmp&) = delete;
  BallTmp& operator=(const BallTmp&) = delete;
};

constexpr mpfr_prec_t kBallExact = 128;  // holds any midpoint exactly

// The exact value of an MPFR number as a Boost one (at its own precision).
Mpfr ball_copy_of(mpfr_srcptr v) {
  Mpfr e;
  mpfr_set_prec(e.backend().data(), mpfr_get_prec(v));
  mpfr_set(e.backend().data(), v, MPFR_RNDN);
  return e;
}

// m ∓ r rounded outward into an Mpfr of the working precision.
template <class M>
Mpfr ball_end_of(const Ball<M>& x, mpfr_rnd_t rnd) {
  if (!std::isfinite(x.r) || !std::isfinite(static_cast<double>(x.m)))  // no information
    return rnd == MPFR_RNDD ? Mpfr(-kInf) : Mpfr(kInf);
  BallTmp m(kBallExact);
  set_mid(m.v, x.m);
  Mpfr e;
  if (rnd == MPFR_RNDD)
    mpfr_sub_d(e.backend().data(), m.v, x.r, rnd);
  else
    mpfr_add_d(e.backend().data(), m.v, x.r, rnd);
  return e;
}

// Per-thread MPFR numbers for the ends and the midpoint (no allocation per operation).
struct BallScratch {
  mpfr_t mid, lo, hi, gap, other;
  BallScratch() {
    mpfr_inits2(2 * kBallExact, mid, lo, hi, static_cast<mpfr_ptr>(nullptr));
    mpfr_inits2(64, gap, other, static_cast<mpfr_ptr>(nullptr));
  }
  ~BallScratch() { mpfr_clears(mid, lo, hi, gap, other, static_cast<mpfr_ptr>(nullptr)); }
};
BallScratch& scratch() {
  thread_local BallScratch s;
  return s;
}

// The smallest ball (midpoint rounded to nearest, radius up) around [l, h].
template <class M>
Ball<M> hull_of_ends(mpfr_srcptr l, mpfr_srcptr h) {
  if (mpfr_nan_p(l) || mpfr_nan_p(h))
    throw Error(
        "ball arithmetic met a NaN: a square root or logarithm of a range that reaches below 0 "
        "(enclosures grown too wide to carry on, or an operation outside its domain)");
  if (mpfr_inf_p(l) || mpfr_inf_p(h)) return {M(0), kInf};
  BallScratch& t = scratch();
  mpfr_add(t.mid, l, h, MPFR_RNDN);  // not always exact: it only chooses the midpoint
  mpfr_div_2ui(t.mid, t.mid, 1, MPFR_RNDN);
  const M m = get_mid<M>(t.mid, MPFR_RNDN);
  if (!std::isfinite(static_cast<double>(m))) return {M(0), kInf};
  set_mid(t.mid, m);  // exact
  mpfr_sub(t.gap, t.mid, l, MPFR_RNDU);
  mpfr_sub(t.other, h, t.mid, MPFR_RNDU);
  mpfr_max(t.gap, t.gap, t.other, MPFR_RNDU);
  return {m, std::max(mpfr_get_d(t.gap, MPFR_RNDU), 0.0)};
}

}  // namespace

template <class M>
Ball<M> ball_increasing(const Ball<M>& x, int (*f)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t)) {
  if (!std::isfinite(x.r)) return {M(0), kInf};
  BallScratch& t = scratch();
  set_mid(t.mid, x.m);
  mpfr_sub_d(t.lo, t.mid, x.r, MPFR_RNDD);
  mpfr_add_d(t.hi, t.mid, x.r, MPFR_RNDU);
  f(t.lo, t.lo, MPFR_RNDD);
  f(t.hi, t.hi, MPFR_RNDU);
  return hull_of_ends<M>(t.lo, t.hi);
}

template <class M>
Mpfr lower(const Ball<M>& x) {
  return ball_end_of(x, MPFR_RNDD);
}
template <class M>
Mpfr upper(const Ball<M>& x) {
  return ball_end_of(x, MPFR_RNDU);
}

template <class M>
Ball<M> ball_hull(const Mpfr& lo, const Mpfr& hi) {
  return hull_of_ends<M>(lo.backend().data(), hi.backend().data());
}

template <class M>
Mpfi to_mpfi(const Ball<M>& x) {
  return hull(lower(x), upper(x));
}
template <class M>
Ball<M> ball_of(const Mpfi& x) {
  return ball_hull<M>(lower(x), upper(x));
}

template <class M>
Ball<M> intersect(const Ball<M>& a, const Ball<M>& b) {
  const Mpfr lo = std::max(lower(a), lower(b)), hi = std::min(upper(a), upper(b));
  if (lo > hi) throw Error("two enclosures of the same value do not meet (one of them was not an enclosure)");
  const Ball<M> c = ball_hull<M>(lo, hi);
  return c.r < a.r && c.r < b.r ? c : (a.r <= b.r ? a : b);
}

template <class M>
Ball<M> through_mpfi(const Ball<M>& x, Mpfi (*f)(const Mpfi&)) {
  if (!std::isfinite(x.r)) return {M(0), kInf};
  return ball_of<M>(f(to_mpfi(x)));
}

template <class M>
Ball<M> Scalar<Ball<M>>::from(const Rational& q) {
  // A dyadic of at most 53 significant bits in double's normal range (every weight of a float or
  // double file) is its own midpoint: no MPFR temporaries and no rational arithmetic, which took
  // most of the conversion of a 3.7M-weight network (4 s of 5).
  const mpz_srcptr num = mpq_numref(q.backend().data()), den = mpq_denref(q.backend().data());
  if (mpz_sgn(num) == 0) return {M(0), 0.0};
  const long bits = static_cast<long>(mpz_sizeinbase(num, 2)), twos = static_cast<long>(mpz_scan1(den, 0));
  if (static_cast<long>(mpz_sizeinbase(den, 2)) == twos + 1 && bits <= 53 && bits - twos <= 1024 &&
      bits - twos >= -1021)  // |q| in [2^(bits−twos−1), 2^(bits−twos)): a normal double, exactly
    return {M(std::ldexp(mpz_get_d(num), static_cast<int>(-twos))), 0.0};
  BallTmp v(MidTraits<M>::bits);
  mpfr_set_q(v.v, q.backend().data(), MPFR_RNDN);
  const M m = get_mid<M>(v.v, MPFR_RNDN);
  if (!std::isfinite(static_cast<double>(m)))
    throw Error("the number " + q.str().substr(0, 40) + " is beyond the range of " + name);
  BallTmp exact(kBallExact);
  set_mid(exact.v, m);
  Rational gap = q - Scalar<Mpfr>::to_rational(ball_copy_of(exact.v));
  if (gap == 0) return {m, 0.0};
  BallTmp g(64);
  mpfr_set_q(g.v, gap.backend().data(), MPFR_RNDU);
  mpfr_abs(g.v, g.v, MPFR_RNDU);
  return {m, mpfr_get_d(g.v, MPFR_RNDU)};
}

template <class M>
Rational Scalar<Ball<M>>::to_rational(const Ball<M>& x) {
  BallTmp exact(kBallExact);
  set_mid(exact.v, x.m);
  return Scalar<Mpfr>::to_rational(ball_copy_of(exact.v));
}

template <class M>
std::string Scalar<Ball<M>>::to_string(const Ball<M>& x) {
  return "[" + decimal_text(lower(x), MPFR_RNDD) + "," + decimal_text(upper(x), MPFR_RNDU) + "]";
}

template <class M>
Ball<M> Scalar<Ball<M>>::exp(const Ball<M>& x) {
  return ball_increasing(x, mpfr_exp);
}
template <class M>
Ball<M> Scalar<Ball<M>>::log(const Ball<M>& x) {
  return ball_increasing(x, mpfr_log);
}
template <class M>
Ball<M> Scalar<Ball<M>>::sqrt(const Ball<M>& x) {
  return ball_increasing(x, mpfr_sqrt);
}
template <class M>
Ball<M> Scalar<Ball<M>>::cos(const Ball<M>& x) {
  return through_mpfi(
      x, +[](const Mpfi& v) { return Scalar<Mpfi>::cos(v); });
}
template <class M>
Ball<M> Scalar<Ball<M>>::sin(const Ball<M>& x) {
  return through_mpfi(
      x, +[](const Mpfi& v) { return Scalar<Mpfi>::sin(v); });
}
template <class M>
Ball<M> gelu(const Ball<M>& x) {
  return through_mpfi(
      x, +[](const Mpfi& v) { return gelu(v); });
}
template <class M>
Ball<M> gelu_tanh(const Ball<M>& x) {
  return through_mpfi(
      x, +[](const Mpfi& v) { return gelu_tanh(v); });
}

#define UATLAB_INSTANTIATE_BALL(M)                                                              \
  template struct Scalar<Ball<M>>;                                                              \
  template Mpfr lower(const Ball<M>&);                                                          \
  template Mpfr upper(const Ball<M>&);                                                          \
  template Ball<M> ball_hull<M>(const Mpfr&, const Mpfr&);                                      \
  template Ball<M> ball_increasing(const Ball<M>&, int (*)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t)); \
  template Mpfi to_mpfi(const Ball<M>&);                                                        \
  template Ball<M> ball_of<M>(const Mpfi&);                                                     \
  template Ball<M> intersect(const Ball<M>&, const Ball<M>&);                                   \
  template Ball<M> through_mpfi(const Ball<M>&, Mpfi (*)(const Mpfi&));                         \
  template Ball<M> gelu(const Ball<M>&);                                                        \
  template Ball<M> gelu_tanh(const Ball<M>&);
UATLAB_INSTANTIATE_BALL(double)
UATLAB_INSTANTIATE_BALL(Quad)

}  // namespace uatlab
