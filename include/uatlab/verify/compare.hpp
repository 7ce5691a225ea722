// One network on one input in every arithmetic, each result compared (exactly, through
// rationals) with an MPFR reference at higher precision: what each arithmetic costs in accuracy,
// and whether the interval result encloses the reference. `uatlab demo` prints it.
#pragma once

#include <string>
#include <vector>

#include "uatlab/model/network.hpp"

namespace uatlab {

struct ArithmeticCheck {
  std::string arithmetic;     // "float", "double", "mpfr:BITS", "interval:BITS", "rational"
  unsigned carried_bits = 0;  // MPFR/MPFI: the bits MPFR carried (mpfr_carried_bits)
  double max_error = 0;       // max |y - y_ref| (intervals: of either bound)
  bool encloses = true;       // intervals: lo <= y_ref <= hi everywhere
  double max_width = 0;       // intervals: the widest enclosure
};

// The output of `net` on x computed in S (MPFR kinds at `bits`), as exact rationals: one per
// entry (column-major), or (lower, upper) per entry for intervals.
template <class S>
std::vector<Rational> exact_output(const Network<Rational>& net, const Mat<Rational>& x, unsigned bits);

// float, double, MPFR at each of mpfr_bits, MPFI at interval_bits (0: none), and rationals when
// the network needs no exp/log/sqrt; the reference is MPFR at reference_bits.
std::vector<ArithmeticCheck> compare_arithmetics(const Network<Rational>& net, const Mat<Rational>& x,
                                                 unsigned reference_bits,
                                                 const std::vector<unsigned>& mpfr_bits,
                                                 unsigned interval_bits);

}  // namespace uatlab
