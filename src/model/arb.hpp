// Arb balls (FLINT's Arb library): the certified engine's tier past binary128 (docs/certified.md).
//
// A real is enclosed as an arbitrary-precision midpoint and a radius with its own exponent, so
// neither the precision nor the range runs out where the wrapping effect asks for hundreds of bits
// (GPT-2's 24 sub-layers need about 340). Arb rounds every operation outward itself and multiplies
// matrices of balls by exact integer products of their midpoints (arb_mat_mul), which at 384 bits
// cost about 40 ns a multiply-add on one core against MPFI's ~1 µs. The working precision is the
// MPFR scope's (MpfrPrecision): one number for the whole engine.
//
// Arb is a Scalar of the one model (scalar.hpp): Network<Arb> runs the same forward as Mpfi, through
// its interval branches (lower, upper, Scalar<Arb>::hull), with its products in arb_product.
#pragma once

#include <arb.h>

#include <string>
#include <type_traits>

#include "uatlab/model/scalar.hpp"

namespace uatlab {

inline slong arb_bits() {
  return static_cast<slong>(mpfr_bits());
}

class Arb {
 public:
  Arb() { arb_init(v_); }
  Arb(int x) : Arb() { arb_set_si(v_, x); }
  Arb(long x) : Arb() { arb_set_si(v_, x); }
  explicit Arb(double x) : Arb() { arb_set_d(v_, x); }  // exact (a NaN is refused by the file checks)
  Arb(const Arb& o) : Arb() { arb_set(v_, o.v_); }
  Arb(Arb&& o) noexcept : Arb() { arb_swap(v_, o.v_); }
  Arb& operator=(const Arb& o) {
    arb_set(v_, o.v_);
    return *this;
  }
  Arb& operator=(Arb&& o) noexcept {
    arb_swap(v_, o.v_);
    return *this;
  }
  ~Arb() { arb_clear(v_); }

  arb_ptr get() { return v_; }
  arb_srcptr get() const { return v_; }

  Arb& operator+=(const Arb& b) { return arb_add(v_, v_, b.v_, arb_bits()), *this; }
  Arb& operator-=(const Arb& b) { return arb_sub(v_, v_, b.v_, arb_bits()), *this; }
  Arb& operator*=(const Arb& b) { return arb_mul(v_, v_, b.v_, arb_bits()), *this; }
  Arb& operator/=(const Arb& b) { return arb_div(v_, v_, b.v_, arb_bits()), *this; }
  friend Arb operator+(Arb a, const Arb& b) { return a += b; }
  friend Arb operator-(Arb a, const Arb& b) { return a -= b; }
  friend Arb operator*(Arb a, const Arb& b) { return a *= b; }
  friend Arb operator/(Arb a, const Arb& b) { return a /= b; }
  friend Arb operator-(Arb a) { return arb_neg(a.v_, a.v_), a; }

 private:
  arb_t v_;
};

template <class S>
inline constexpr bool is_arb_v = std::is_same_v<S, Arb>;
template <>
struct HoldsDoubles<Arb> : std::true_type {};

// The ends as MPFR numbers of the working precision, rounded outward (±inf where the radius is).
Mpfr lower(const Arb& x);
Mpfr upper(const Arb& x);
Mpfi to_mpfi(const Arb& x);
Arb intersect(const Arb& a, const Arb& b);  // throws where they do not meet
Arb square(const Arb& x);                   // x², its lower end at least 0

template <>
struct Scalar<Arb> {
  static constexpr const char* name = "arb";
  static constexpr bool exact = false, interval = true, transcendental = true;
  static Arb from(const Rational& q);         // an enclosure at the working precision
  static Rational to_rational(const Arb& x);  // the midpoint
  static double to_double(const Arb& x);      // the midpoint, to nearest
  static std::string to_string(const Arb& x);
  static Arb exp(const Arb& x);
  static Arb log(const Arb& x);
  static Arb sqrt(const Arb& x);
  static Arb cos(const Arb& x);
  static Arb sin(const Arb& x);
  static Arb hull(const Mpfr& lo, const Mpfr& hi);  // [lo, hi], rounded outward
};
// GELU in both forms through MPFI's enclosures (scalar.hpp), as the balls do.
Arb gelu(const Arb& x);
Arb gelu_tanh(const Arb& x);

// A·B by Arb's matrix product at the working precision, its rows shared among the OpenMP threads.
Mat<Arb> arb_product(const Mat<Arb>& A, const Mat<Arb>& B);

}  // namespace uatlab

namespace Eigen {
template <>
struct NumTraits<uatlab::Arb> : GenericNumTraits<uatlab::Arb> {
  using Real = uatlab::Arb;
  using NonInteger = uatlab::Arb;
  using Literal = uatlab::Arb;
  using Nested = uatlab::Arb;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 1,
    ReadCost = 4,
    AddCost = 16,
    MulCost = 32
  };
  static inline Real epsilon() { return Real(0x1p-53); }
  static inline Real dummy_precision() { return Real(0x1p-53); }
  static inline int digits10() { return 15; }
};
}  // namespace Eigen
