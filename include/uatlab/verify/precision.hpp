// The arithmetic a computation runs in, as a value: parsed without side effects, applied by
// whoever evaluates (an MpfrPrecision scope for the MPFR kinds), printed as it was asked.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "uatlab/model/network.hpp"
#include "uatlab/model/scalar.hpp"

namespace uatlab {

struct Precision {
  // Certified: the certified engine (verify/certified.hpp), tiers of ball arithmetic then MPFI.
  enum class Kind { Float, Double, Mpfr, Interval, Rational, Certified } kind = Kind::Double;
  unsigned bits = 0;  // Mpfr/Interval: the bits asked for (MPFR carries mpfr_carried_bits(bits))

  // "float", "double", "BITS" (MPFR), "interval:BITS" (MPFI), "rational", "certified"; BITS from 2
  // to 2^26.
  static Precision parse(const std::string& text);
  std::string name() const;  // "double", "mpfr:256", "interval:256", ... (the bits asked for)
};

// The one dispatch from a Precision to its scalar type: returns f(S{}) with S float, double, Mpfr,
// Mpfi or Rational. The MPFR working precision is the caller's to set (precision_scope), so that
// it can be opened where the work runs.
template <class F>
decltype(auto) with_scalar(const Precision& p, F&& f) {
  switch (p.kind) {
    case Precision::Kind::Float:
      return f(float{});
    case Precision::Kind::Double:
      return f(double{});
    case Precision::Kind::Mpfr:
      return f(Mpfr{});
    case Precision::Kind::Interval:
      return f(Mpfi{});
    case Precision::Kind::Rational:
      break;
    case Precision::Kind::Certified:
      throw Error("precision \"certified\" (the certified engine) serves eval; use interval:BITS here");
  }
  return f(Rational{});
}
// An MpfrPrecision at p.bits for the MPFR and interval kinds; none for the others.
std::unique_ptr<MpfrPrecision> precision_scope(const Precision& p);

// The smallest precision MPFR carries exactly (mpfr_carried_bits(b) == b) at which
// certified(b) holds, given that it holds at `certified_at`; a bisection that assumes more bits
// never hurt. Every call of certified runs at the bits it is given. A guess (0: none) is tried
// first, then the precisions MPFR carries above it, one by one (up to 8), until one passes; the
// bisection then continues below that one. When the guess is a little low, the failing probes are
// cheap (they stop at their first failure) and one passing probe settles the search, where the
// bisection alone ran five or six; under the same assumption the answer is the same. The probes are
// timed: once the failing ones together cost less than half a passing one, the bisection gives way
// to the precisions above the highest failure, one by one (one passing probe ends it).
unsigned min_certified_bits(unsigned certified_at, const std::function<bool(unsigned bits)>& certified,
                            unsigned guess = 0);

// Estimates that order the fewest-bits search (not certificates). An enclosure's width about doubles
// per bit taken away, so a check with margin m (how far its bound is inside the limit) over
// enclosures of total width w could lose about log2(1 + 2m/w) bits and still hold: spare_bits
// (−inf for a margin below 0 or NaN, +inf for w = 0). Over items (sequences), each with the least
// spare of its checks: the items from the least spare up (a probe below the fewest bits then fails
// at its first item), and the fewest bits they suggest at `bits` (0: no guess, when an item has no
// finite spare or the guess is out of [2, bits)).
double enclosure_width(const Mpfi& x);
double spare_bits(const Mpfr& margin, double width);
std::vector<std::size_t> least_spare_first(const std::vector<double>& spare);
unsigned guess_fewest_bits(const std::vector<double>& spare, unsigned bits);
// The item a pass starts n-th under such an order (empty: the items as stored), and the check that
// an order names `items` items (what: the caller, for the message).
inline std::size_t started_item(const std::vector<std::size_t>& order, std::size_t n) {
  return order.empty() ? n : order[n];
}
void check_order(const std::vector<std::size_t>& order, std::size_t items, const std::string& what);

// The precision search of every certificate that needs more bits than it starts with: attempt(bits)
// at bits = first, then twice the last, capped at max_bits, until attempt returns true (finished:
// certified, or failed in a way more bits cannot change) or max_bits has been tried. An attempt may
// ask for more than twice its bits by raising `next` (capped at max_bits). Returns the last bits
// tried and whether that attempt finished.
struct Doubling {
  unsigned bits = 0;
  bool finished = false;
};
Doubling certify_with_doubling(unsigned first, unsigned max_bits,
                               const std::function<bool(unsigned bits, unsigned& next)>& attempt);
Doubling certify_with_doubling(unsigned first, unsigned max_bits,
                               const std::function<bool(unsigned bits)>& attempt);

// The storage a network's exact weights need, each weight counted by stored_bits (scalar.hpp):
// the parameters, the non-zero ones, those that are not dyadic (no binary float holds them), the
// most bits of one weight and the sum over all weights. A memorization's bit budget beside its
// parameter count (Vardi, Yehudai & Shamir's trade-off: parameters × bits ≳ N).
struct StoredBits {
  std::size_t parameters = 0, nonzero = 0, non_dyadic = 0;
  long long max_bits = 0, total_bits = 0;
};
StoredBits count_stored_bits(const Network<Rational>& net);

}  // namespace uatlab
