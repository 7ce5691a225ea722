#include "uatlab/verify/precision.hpp"

#include <mpfi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace uatlab {

Precision Precision::parse(const std::string& text) {
  Precision p;
  auto bits_of_text = [&](const std::string& s) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 8)
      throw Error("precision \"" + text +
                  "\": expected float, double, rational, certified, BITS, mpfr:BITS or interval:BITS");
    const unsigned long b = std::stoul(s);
    if (b < 2 || b > (1ul << 26))
      throw Error("precision \"" + text + "\": BITS must be from 2 to 67108864 (2^26)");
    return static_cast<unsigned>(b);
  };
  if (text == "float")
    p.kind = Kind::Float;
  else if (text == "double")
    p.kind = Kind::Double;
  else if (text == "rational")
    p.kind = Kind::Rational;
  else if (text == "certified")
    p.kind = Kind::Certified;
  else if (text.rfind("interval:", 0) == 0) {
    p.kind = Kind::Interval;
    p.bits = bits_of_text(text.substr(9));
  } else {  // BITS, or mpfr:BITS as name() prints it
    p.kind = Kind::Mpfr;
    p.bits = bits_of_text(text.rfind("mpfr:", 0) == 0 ? text.substr(5) : text);
  }
  return p;
}

std::string Precision::name() const {
  switch (kind) {
    case Kind::Float:
      return "float";
    case Kind::Double:
      return "double";
    case Kind::Rational:
      return "rational";
    case Kind::Certified:
      return "certified";
    case Kind::Mpfr:
      return "mpfr:" + std::to_string(bits);
    case Kind::Interval:
      return "interval:" + std::to_string(bits);
  }
  return "?";
}

std::unique_ptr<MpfrPrecision> precision_scope(const Precision& p) {
  if (p.kind != Precision::Kind::Mpfr && p.kind != Precision::Kind::Interval) return nullptr;
  return std::make_unique<MpfrPrecision>(p.bits);
}

unsigned min_certified_bits(unsigned certified_at, const std::function<bool(unsigned)>& checked,
                            unsigned guess) {
  unsigned lo = 2, hi = mpfr_carried_bits(certified_at);  // certified at hi, not at lo
  // Every probe timed: the slowest failing one and the last passing one.
  double slowest_fail = 0, last_pass = 0;
  auto certified = [&](unsigned b) {
    const auto t = std::chrono::steady_clock::now();
    const bool ok = checked(b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    (ok ? last_pass : slowest_fail) = ok ? s : std::max(slowest_fail, s);
    return ok;
  };
  // The precision MPFR carries just below hi (0: none above lo).
  auto below = [&](unsigned h) {
    unsigned b = h - 1;
    while (b > lo && mpfr_carried_bits(b) >= h)
      --b;
    return b > lo ? mpfr_carried_bits(b) : 0u;
  };
  // From the guess, one carried precision at a time: upwards while the probes fail, downwards while
  // they pass. A probe below the answer stops at its first failure (cheap when it starts with the
  // hardest sequences), so a guess one or two precisions off costs one or two passing probes.
  constexpr unsigned kSteps = 8;
  if (guess > 2 && mpfr_carried_bits(guess) < hi) {
    const unsigned g = mpfr_carried_bits(guess);
    if (certified(g)) {
      hi = g;
      for (unsigned step = 0, b = below(hi); b != 0 && step < kSteps; ++step, b = below(hi)) {
        if (!certified(b)) {
          lo = b;
          break;
        }
        hi = b;
      }
    } else {
      lo = g;
      for (unsigned step = 0, b = g + 1; b < hi && step < kSteps; ++step) {
        const unsigned c = mpfr_carried_bits(b);
        if (c >= hi) break;
        if (certified(c)) {
          hi = c;
          break;
        }
        lo = c, b = c + 1;
      }
    }
  }
  while (hi - lo > 1) {
    // When failing probes cost little beside a passing one (they stop at their first failure), the
    // precisions above lo one by one end the search with a single passing probe.
    unsigned between = 0;
    for (unsigned b = lo + 1; b < hi; b = mpfr_carried_bits(b) + 1)
      between += mpfr_carried_bits(b) < hi;
    if (last_pass > 0 && slowest_fail * between < last_pass / 2) {
      for (unsigned b = lo + 1; b < hi; b = mpfr_carried_bits(b) + 1) {
        const unsigned c = mpfr_carried_bits(b);
        if (c >= hi) break;
        if (certified(c)) return c;
        lo = c;
      }
      return hi;
    }
    const unsigned mid = (lo + hi) / 2, carried = mpfr_carried_bits(mid);
    if (carried >= hi)
      lo = mid;  // no precision MPFR carries between mid and hi
    else if (certified(carried))
      hi = carried;
    else
      lo = carried;  // fails at carried ≥ mid, so (more bits never hurt) below it too
  }
  return hi;
}

double enclosure_width(const Mpfi& x) {
  Mpfr w;
  mpfi_diam_abs(w.backend().data(), x.backend().data());
  return Scalar<Mpfr>::to_double(w);
}

double spare_bits(const Mpfr& margin, double width) {
  const double m = Scalar<Mpfr>::to_double(margin);
  if (!(m >= 0)) return -kInf;
  if (!(width > 0)) return kInf;
  return std::log2(1 + 2 * m / width);
}

std::vector<std::size_t> least_spare_first(const std::vector<double>& spare) {
  std::vector<std::size_t> order(spare.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  auto key = [&](std::size_t i) { return std::isnan(spare[i]) ? -kInf : spare[i]; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  return order;
}

void check_order(const std::vector<std::size_t>& order, std::size_t items, const std::string& what) {
  if (!order.empty() && order.size() != items)
    throw Error(what + ": the order names " + std::to_string(order.size()) + " items, the data has " +
                std::to_string(items));
}

unsigned guess_fewest_bits(const std::vector<double>& spare, unsigned bits) {
  double least = kInf;
  for (double s : spare) {
    if (std::isnan(s) || s == -kInf) return 0;  // an item not certified, or not checked
    least = std::min(least, s);
  }
  if (!std::isfinite(least)) return 0;
  const double guess = std::ceil(static_cast<double>(bits) - least);
  return guess >= 2 && guess < bits ? static_cast<unsigned>(guess) : 0;
}

Doubling certify_with_doubling(unsigned first, unsigned max_bits,
                               const std::function<bool(unsigned bits, unsigned& next)>& attempt) {
  for (unsigned bits = std::min(first, max_bits);;) {
    unsigned next = bits > max_bits / 2 ? max_bits : 2 * bits;
    if (attempt(bits, next)) return {bits, true};
    if (bits >= max_bits) return {bits, false};
    bits = std::min(std::max(next, bits + 1), max_bits);
  }
}

Doubling certify_with_doubling(unsigned first, unsigned max_bits,
                               const std::function<bool(unsigned bits)>& attempt) {
  return certify_with_doubling(first, max_bits, [&](unsigned bits, unsigned&) { return attempt(bits); });
}

StoredBits count_stored_bits(const Network<Rational>& net) {
  StoredBits b;
  net.for_each_tensor([&](const std::string&, const Mat<Rational>& m, Layout) {
    for (Eigen::Index i = 0; i < m.size(); ++i) {
      const long long bits = stored_bits(m(i));
      ++b.parameters;
      b.nonzero += bits > 0;
      b.non_dyadic += !is_dyadic(m(i));
      b.max_bits = std::max(b.max_bits, bits);
      b.total_bits += bits;
    }
  });
  return b;
}

}  // namespace uatlab
