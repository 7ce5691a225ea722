// Where a bound becomes text or a rounded number: a lower bound is printed rounded down and an upper
// bound rounded up, at the digits asked for, so that the printed number is still a bound; log10 of a
// bound is computed with directed rounding (MPFR) for the same reason. Every certified quantity
// that uatlab prints or writes goes through here.
#pragma once

#include <string>

#include "uatlab/model/scalar.hpp"

namespace uatlab {

// x at `digits` significant digits (printf's %g style), rounded toward −∞ (lower_text) or +∞
// (upper_text): the text, read back exactly, is ≤ x (≥ x). "inf", "-inf" and "nan" as such.
std::string lower_text(double x, int digits = 4);
std::string upper_text(double x, int digits = 4);
// An MPFR value as a double rounded toward −∞ (to_double_down) or +∞ (to_double_up): a bound that
// stays a bound (past double's range, ±inf; NaN stays NaN).
double to_double_down(const Mpfr& x);
double to_double_up(const Mpfr& x);
// A double ≤ log10(x) (≥ log10(x)); −inf at 0, NaN below 0 or at NaN.
double log10_down(double x);
double log10_up(double x);
double log10_down(const Mpfr& x);
double log10_up(const Mpfr& x);
// The ends of an interval as text: decimal_text(lower(x), MPFR_RNDD), decimal_text(upper(x),
// MPFR_RNDU) (model/scalar.hpp).

}  // namespace uatlab
