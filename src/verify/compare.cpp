#include "uatlab/verify/compare.hpp"

#include <cmath>

namespace uatlab {

template <class S>
std::vector<Rational> exact_output(const Network<Rational>& net, const Mat<Rational>& x, unsigned bits) {
  const MpfrPrecision precision(bits);
  const Mat<S> y = forward(network_cast<S>(net), matrix_cast<S>(x));
  std::vector<Rational> out;
  for (Eigen::Index i = 0; i < y.size(); ++i) {
    if constexpr (Scalar<S>::interval) {
      out.push_back(Scalar<Mpfr>::to_rational(lower(y(i))));
      out.push_back(Scalar<Mpfr>::to_rational(upper(y(i))));
    } else {
      out.push_back(Scalar<S>::to_rational(y(i)));
    }
  }
  return out;
}

template std::vector<Rational> exact_output<float>(const Network<Rational>&, const Mat<Rational>&, unsigned);
template std::vector<Rational> exact_output<double>(const Network<Rational>&, const Mat<Rational>&, unsigned);
template std::vector<Rational> exact_output<Mpfr>(const Network<Rational>&, const Mat<Rational>&, unsigned);
template std::vector<Rational> exact_output<Mpfi>(const Network<Rational>&, const Mat<Rational>&, unsigned);
template std::vector<Rational> exact_output<Rational>(const Network<Rational>&, const Mat<Rational>&,
                                                      unsigned);

std::vector<ArithmeticCheck> compare_arithmetics(const Network<Rational>& net, const Mat<Rational>& x,
                                                 unsigned reference_bits,
                                                 const std::vector<unsigned>& mpfr_bits,
                                                 unsigned interval_bits) {
  const std::vector<Rational> ref = exact_output<Mpfr>(net, x, reference_bits);
  // The comparisons: differences of exact values, rounded once at the reference precision.
  const MpfrPrecision precision(reference_bits);
  auto error = [&](const Rational& y, std::size_t i) {
    return std::abs(Scalar<Mpfr>::to_double(Scalar<Mpfr>::from(y - ref[i])));
  };
  std::vector<ArithmeticCheck> out;
  auto point = [&](const std::string& name, unsigned carried, const std::vector<Rational>& y) {
    ArithmeticCheck c{name, carried};
    for (std::size_t i = 0; i < y.size(); ++i)
      c.max_error = std::max(c.max_error, error(y[i], i));
    out.push_back(c);
  };
  point("float", 24, exact_output<float>(net, x, reference_bits));
  point("double", 53, exact_output<double>(net, x, reference_bits));
  for (unsigned bits : mpfr_bits)
    point("mpfr:" + std::to_string(bits), mpfr_carried_bits(bits), exact_output<Mpfr>(net, x, bits));
  if (interval_bits > 0) {
    const std::vector<Rational> y = exact_output<Mpfi>(net, x, interval_bits);
    ArithmeticCheck c{"interval:" + std::to_string(interval_bits), mpfr_carried_bits(interval_bits)};
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const Rational &lo = y[2 * i], &hi = y[2 * i + 1];
      c.encloses = c.encloses && lo <= ref[i] && ref[i] <= hi;
      c.max_error = std::max({c.max_error, error(lo, i), error(hi, i)});
      c.max_width = std::max(c.max_width, Scalar<Rational>::to_double(hi - lo));
    }
    out.push_back(c);
  }
  if (!net.arch.needs_transcendental()) point("rational", 0, exact_output<Rational>(net, x, reference_bits));
  return out;
}

}  // namespace uatlab
