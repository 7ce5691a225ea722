#include "uatlab/verify/precision.hpp"

#include <algorithm>

namespace uatlab {

Precision Precision::parse(const std::string& text) {
  Precision p;
  auto bits_of_text = [&](const std::string& s) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 8)
      throw Error("precision \"" + text +
                  "\": expected float, double, rational, BITS, mpfr:BITS or interval:BITS");
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

unsigned min_certified_bits(unsigned certified_at, const std::function<bool(unsigned)>& certified) {
  unsigned lo = 2, hi = mpfr_carried_bits(certified_at);  // certified at hi
  while (hi - lo > 1) {
    const unsigned mid = (lo + hi) / 2, carried = mpfr_carried_bits(mid);
    if (carried < hi && certified(carried))
      hi = carried;
    else
      lo = mid;
  }
  return hi;
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
