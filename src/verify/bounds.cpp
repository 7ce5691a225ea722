#include "uatlab/verify/bounds.hpp"

#include <mpfr.h>

#include <vector>

namespace uatlab {

namespace {

// x as an MPFR number of 53 bits (exact), for the directed operations below.
struct Exact53 {
  mpfr_t v;
  explicit Exact53(double x) {
    mpfr_init2(v, 53);
    mpfr_set_d(v, x, MPFR_RNDN);  // exact: a double has 53 bits
  }
  ~Exact53() { mpfr_clear(v); }
  Exact53(const Exact53&) = delete;
  Exact53& operator=(const Exact53&) = delete;
};

std::string directed_text(double x, int digits, bool up) {
  if (digits < 1 || digits > 40) throw Error("bound text: digits must be from 1 to 40");
  Exact53 t(x);
  std::vector<char> buf(128);
  mpfr_snprintf(buf.data(), buf.size(), up ? "%.*RUg" : "%.*RDg", digits, t.v);
  return buf.data();
}

double directed_log10(mpfr_srcptr x, mpfr_rnd_t rnd) {
  if (mpfr_nan_p(x) || mpfr_sgn(x) < 0) return std::numeric_limits<double>::quiet_NaN();
  if (mpfr_zero_p(x)) return -std::numeric_limits<double>::infinity();
  mpfr_t r;
  mpfr_init2(r, 53);
  mpfr_log10(r, x, rnd);
  const double out = mpfr_get_d(r, rnd);  // exact: r has 53 bits
  mpfr_clear(r);
  return out;
}

}  // namespace

std::string lower_text(double x, int digits) {
  return directed_text(x, digits, false);
}
std::string upper_text(double x, int digits) {
  return directed_text(x, digits, true);
}

double to_double_down(const Mpfr& x) {
  return mpfr_get_d(x.backend().data(), MPFR_RNDD);
}
double to_double_up(const Mpfr& x) {
  return mpfr_get_d(x.backend().data(), MPFR_RNDU);
}

double log10_down(double x) {
  Exact53 t(x);
  return directed_log10(t.v, MPFR_RNDD);
}
double log10_up(double x) {
  Exact53 t(x);
  return directed_log10(t.v, MPFR_RNDU);
}
double log10_down(const Mpfr& x) {
  return directed_log10(x.backend().data(), MPFR_RNDD);
}
double log10_up(const Mpfr& x) {
  return directed_log10(x.backend().data(), MPFR_RNDU);
}

}  // namespace uatlab
