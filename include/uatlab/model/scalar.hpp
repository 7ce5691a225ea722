// Scalar types and the few operations the model needs from each of them.
//
// One model definition serves five arithmetics. Everything scalar-specific lives here, in one
// traits struct per type, so that the model code (network.hpp) reads like the papers' formulas:
//   float, double     IEEE binary32/64, the training and benchmark types
//   Mpfr              MPFR binary floats, precision chosen at run time (MpfrPrecision)
//   Mpfi              MPFI intervals: every result encloses the exact real value
//   Rational          GMP rationals: exact, for networks without exp/log/sqrt
#pragma once

#include "uatlab/model/eigen.hpp"  // first: boost/multiprecision/eigen.hpp includes Eigen

#include <boost/multiprecision/eigen.hpp>
#include <boost/multiprecision/gmp.hpp>
#include <boost/multiprecision/mpfi.hpp>
#include <boost/multiprecision/mpfr.hpp>

#include <limits>
#include <string>
#include <type_traits>

#include "uatlab/error.hpp"

namespace uatlab {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

namespace mp = boost::multiprecision;
using Mpfr = mp::number<mp::mpfr_float_backend<0>, mp::et_off>;
using Mpfi = mp::number<mp::mpfi_float_backend<0>, mp::et_off>;
using Rational = mp::number<mp::gmp_rational, mp::et_off>;

template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;

// MPFR/MPFI working precision, as a value. New Mpfr/Mpfi numbers (and every intermediate the
// model computes) carry the working precision in force; an MpfrPrecision sets it for its own
// lifetime and restores the previous one on exit, exceptions included. Boost 1.74 sets MPFR
// precision in decimal digits, so MPFR carries mpfr_carried_bits(bits): the smallest
// digit-derived precision >= bits (at most 4 bits more; 53 -> 55, 256 -> 257). uatlab reports
// the bits asked for; a precision that MPFR carries exactly (carried(b) == b) round-trips.
// The setting is process-wide (Boost keeps one default), so a scope also holds a process-wide
// recursive lock: scopes on different threads (the cells of a sweep) take turns, scopes nest
// freely on one thread, and the OpenMP workers of the holder compute at its precision. Never
// open a scope inside an OpenMP region run under another scope's holder (it would wait forever).
class MpfrPrecision {
 public:
  explicit MpfrPrecision(unsigned bits);  // throws Error below 2 bits
  ~MpfrPrecision();
  MpfrPrecision(const MpfrPrecision&) = delete;
  MpfrPrecision& operator=(const MpfrPrecision&) = delete;
  unsigned bits() const { return bits_; }  // as asked
  unsigned carried() const;                // what MPFR carries

 private:
  unsigned bits_, saved_digits10_, saved_interval_digits10_;
};
unsigned mpfr_carried_bits(unsigned bits);
// x as the shortest decimal that reads back to it ("1.25e-3", "inf", "nan"), rounded by rnd: RNDN
// for a value, RNDD for a lower bound and RNDU for an upper one (the printed decimal is then still
// a bound). Scalar<Mpfr>::to_string is the RNDN case; an interval's ends print RNDD and RNDU.
std::string decimal_text(const Mpfr& x, mpfr_rnd_t rnd);
unsigned mpfr_bits();  // bits a freshly made Mpfr/Mpfi carries now
// The bits an MPFR number carries (for an interval, its bounds').
unsigned bits_of(const Mpfr& x);
unsigned bits_of(const Mpfi& x);

// The bits an exact weight needs. stored_bits: 0 for zero; for a dyadic w = ±a·2^e (a odd) the
// bits of a, the significand a binary float needs to hold w exactly (its exponent aside); any
// other w has no binary float and needs its exact fraction, fraction_bits: the bits of its
// numerator and of its denominator.
long long fraction_bits(const Rational& w);
long long stored_bits(const Rational& w);
bool is_dyadic(const Rational& w);

// Exact parsing: "3", "-2/6", "0.125", "1e-400", "-1.5E+3". Throws Error naming the text.
Rational parse_rational(const std::string& text);

// Exact rational value of a double (every finite double is a dyadic rational); set_rational
// writes it into q's own storage (no temporary: data sets fill millions of entries this way).
Rational rational_of(double x);
void set_rational(Rational& q, double x);

// q as an integer when it is one in [0, count) (a class label), else -1; no temporaries.
long class_label(const Rational& q, long count);

template <class S>
struct Scalar;

template <>
struct Scalar<float> {
  static constexpr const char* name = "float";
  static constexpr bool exact = false, interval = false, transcendental = true;
  static float from(const Rational& q);  // round to nearest; throws Error beyond the range of float
  static Rational to_rational(float x) { return rational_of(x); }
  static double to_double(float x) { return x; }
  static std::string to_string(float x);  // shortest text that reads back to x
  static float exp(float x) { return std::exp(x); }
  static float log(float x) { return std::log(x); }
  static float sqrt(float x) { return std::sqrt(x); }
  static float cos(float x) { return std::cos(x); }
  static float sin(float x) { return std::sin(x); }
};

template <>
struct Scalar<double> {
  static constexpr const char* name = "double";
  static constexpr bool exact = false, interval = false, transcendental = true;
  static double from(const Rational& q);  // round to nearest; throws Error beyond the range
  static Rational to_rational(double x) { return rational_of(x); }
  static double to_double(double x) { return x; }
  static std::string to_string(double x);
  static double exp(double x) { return std::exp(x); }
  static double log(double x) { return std::log(x); }
  static double sqrt(double x) { return std::sqrt(x); }
  static double cos(double x) { return std::cos(x); }
  static double sin(double x) { return std::sin(x); }
};

template <>
struct Scalar<Mpfr> {
  static constexpr const char* name = "mpfr";
  static constexpr bool exact = false, interval = false, transcendental = true;
  static Mpfr from(const Rational& q);
  static Rational to_rational(const Mpfr& x);  // exact
  static double to_double(const Mpfr& x);
  static std::string to_string(const Mpfr& x);  // reads back exactly at the same precision
  static Mpfr exp(const Mpfr& x) { return mp::exp(x); }
  static Mpfr log(const Mpfr& x) { return mp::log(x); }
  static Mpfr sqrt(const Mpfr& x) { return mp::sqrt(x); }
  static Mpfr cos(const Mpfr& x) { return mp::cos(x); }
  static Mpfr sin(const Mpfr& x) { return mp::sin(x); }
};

template <>
struct Scalar<Mpfi> {
  static constexpr const char* name = "interval";
  static constexpr bool exact = false, interval = true, transcendental = true;
  static Mpfi from(const Rational& q);          // the tightest enclosure at the working precision
  static Rational to_rational(const Mpfi& x);   // the midpoint
  static double to_double(const Mpfi& x);       // the midpoint
  static std::string to_string(const Mpfi& x);  // "[lo,hi]"
  static Mpfi exp(const Mpfi& x) { return mp::exp(x); }
  static Mpfi log(const Mpfi& x) { return mp::log(x); }
  static Mpfi sqrt(const Mpfi& x) { return mp::sqrt(x); }
  static Mpfi cos(const Mpfi& x) { return mp::cos(x); }
  static Mpfi sin(const Mpfi& x) { return mp::sin(x); }
  static Mpfi hull(const Mpfr& lo, const Mpfr& hi);  // [lo, hi] (uatlab::hull)
};

template <>
struct Scalar<Rational> {
  static constexpr const char* name = "rational";
  static constexpr bool exact = true, interval = false, transcendental = false;
  static Rational from(const Rational& q) { return q; }
  static Rational to_rational(const Rational& x) { return x; }
  static double to_double(const Rational& x);
  static std::string to_string(const Rational& x) { return x.str(); }
  // No exp/log/sqrt/cos/sin: networks that need them are rejected before evaluation.
};

// Interval bounds (exact Mpfr values); for point types both are the value itself.
Mpfr lower(const Mpfi& x);
Mpfr upper(const Mpfi& x);
Mpfi hull(const Mpfr& lo, const Mpfr& hi);
// x as an interval (outward if the working precision cannot hold it). Boost 1.74's Mpfi(x) from an
// Mpfr is NaN for some values (every one tried in [2^61, 2^62), Scalar.MpfrBecomesAnIntervalAtAnyValue):
// convert through here.
Mpfi point(const Mpfr& x);
// x², enclosed as a square: MPFI's product x·x of an interval that straddles 0 has a negative
// lower end (−lo·hi), which a sum of squares or its square root must not inherit.
Mpfi square(const Mpfi& x);
template <class S>
S square(const S& x) {
  return x * x;
}
// The intersection of two enclosures of the same value; one with a NaN end gives the other. Throws
// Error if they do not meet (one of them was not an enclosure).
Mpfi intersect(const Mpfi& a, const Mpfi& b);

// GELU(x) = x·Φ(x) = x/2·(1 + erf(x/√2)) (PyTorch's exact, erf form) and its derivative
// Φ(x) + x·φ(x). The interval form encloses GELU over the whole interval, tightly: GELU falls on
// (−∞, x*] and rises on [x*, ∞), x* ≈ −0.7518 ∈ [−0.76, −0.74] (docs/theory/gelu.md), so an
// interval on one side is enclosed by its endpoint values (erf rounded outward, MPFR's directed
// rounding), and one that meets the bracket by the mean-value form there.
float gelu(float x);
double gelu(double x);
Mpfr gelu(const Mpfr& x);
Mpfi gelu(const Mpfi& x);
float gelu_derivative(float x);
double gelu_derivative(double x);
Mpfr gelu_derivative(const Mpfr& x);
Mpfi gelu_derivative(const Mpfi& x);  // natural interval extension

// GELU's tanh form (PyTorch's GELU(approximate="tanh"), GPT-2's "gelu_new"):
// x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))), and its derivative. The interval form encloses it over
// the whole interval: u = √(2/π)(x + 0.044715x³) and tanh are increasing, so 1 + tanh(u) is enclosed
// by its endpoint values (directed rounding), then multiplied by the interval x/2 (the natural
// extension of that product: sound for any interval, tight for a thin one).
float gelu_tanh(float x);
double gelu_tanh(double x);
Mpfr gelu_tanh(const Mpfr& x);
Mpfi gelu_tanh(const Mpfi& x);
float gelu_tanh_derivative(float x);
double gelu_tanh_derivative(double x);
Mpfr gelu_tanh_derivative(const Mpfr& x);
Mpfi gelu_tanh_derivative(const Mpfi& x);  // natural interval extension

// Scalar types that hold every float and double as itself (the balls of ball.hpp): a weight of a
// file becomes one without a detour through its rational value.
template <class T>
struct HoldsDoubles : std::false_type {};

// Conversion between any two scalar types through the exact rational value.
template <class T, class S>
T scalar_cast(const S& x) {
  if constexpr (std::is_same_v<T, S>)
    return x;
  else if constexpr (std::is_same_v<S, double> && (std::is_same_v<T, float> || std::is_same_v<T, double>))
    return static_cast<T>(x);
  else if constexpr (std::is_same_v<S, float> && std::is_same_v<T, double>)
    return x;
  else if constexpr (HoldsDoubles<T>::value && (std::is_same_v<S, float> || std::is_same_v<S, double>))
    return T(static_cast<double>(x));
  else
    return Scalar<T>::from(Scalar<S>::to_rational(x));
}

template <class T, class S>
Mat<T> matrix_cast(const Mat<S>& m) {
  return m.unaryExpr([](const S& x) { return scalar_cast<T>(x); });
}

}  // namespace uatlab
