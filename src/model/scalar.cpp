#include "uatlab/model/scalar.hpp"

#include "uatlab/limits.hpp"

#include <mpfi.h>
#include <mpfr.h>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include <mutex>

namespace uatlab {

namespace {
// Boost's own digits10 -> bits map (boost/multiprecision/detail/digits.hpp).
unsigned bits_of_digits10(unsigned d10) {
  const unsigned long long t = 1000ull * d10;
  return static_cast<unsigned>(t / 301u + (t % 301u ? 2u : 1u));
}

// An MPFR number of `prec` bits holding q rounded to nearest.
struct MpfrTmp {
  mpfr_t v;
  MpfrTmp(const Rational& q, mpfr_prec_t prec) {
    mpfr_init2(v, prec);
    mpfr_set_q(v, q.backend().data(), MPFR_RNDN);
  }
  ~MpfrTmp() { mpfr_clear(v); }
};

// Boost reads a leading 0 as octal: strip them.
std::string decimal_integer(const std::string& digits) {
  std::size_t k = digits.find_first_not_of('0');
  return k == std::string::npos ? "0" : digits.substr(k);
}

Rational rational_of_mpfr(mpfr_srcptr x) {
  if (!mpfr_number_p(x)) throw Error("cannot convert a non-finite number (NaN or infinity) to a rational");
  Rational q;
  if (mpfr_zero_p(x)) return q;
  mpz_t m;
  mpz_init(m);
  mpfr_exp_t e = mpfr_get_z_2exp(m, x);  // x = m * 2^e exactly
  mpq_set_z(q.backend().data(), m);
  if (e >= 0)
    mpq_mul_2exp(q.backend().data(), q.backend().data(), e);
  else
    mpq_div_2exp(q.backend().data(), q.backend().data(), -e);
  mpz_clear(m);
  return q;
}
}  // namespace

namespace {
unsigned digits10_for(unsigned bits) {
  if (bits < 2) throw Error("precision must be at least 2 bits, got " + std::to_string(bits));
  if (bits > (1u << 26))
    throw Error("precision of " + std::to_string(bits) + " bits is over the limit of 2^26");
  unsigned d10 = static_cast<unsigned>(301ull * bits / 1000u);  // never above the answer
  if (d10 < 1) d10 = 1;
  while (bits_of_digits10(d10) < bits)
    ++d10;
  return d10;
}
}  // namespace

namespace {
// Boost 1.74 keeps one process-wide default precision, so two threads with different scopes
// would change each other's numbers: a scope holds this lock for its lifetime (recursively, so a
// thread nests scopes freely). OpenMP workers of the holder compute at its precision unhindered.
std::recursive_mutex& precision_lock() {
  static std::recursive_mutex m;
  return m;
}
}  // namespace

MpfrPrecision::MpfrPrecision(unsigned bits) : bits_(bits) {
  const unsigned d10 = digits10_for(bits);  // throws before taking the lock
  precision_lock().lock();
  saved_digits10_ = Mpfr::default_precision();
  saved_interval_digits10_ = Mpfi::default_precision();
  Mpfr::default_precision(d10);
  Mpfi::default_precision(d10);
}

MpfrPrecision::~MpfrPrecision() {
  Mpfr::default_precision(saved_digits10_);
  Mpfi::default_precision(saved_interval_digits10_);
  precision_lock().unlock();
}

unsigned MpfrPrecision::carried() const {
  return mpfr_carried_bits(bits_);
}

unsigned mpfr_carried_bits(unsigned bits) {
  return bits_of_digits10(digits10_for(bits));
}

unsigned mpfr_bits() {
  return bits_of_digits10(Mpfr::default_precision());
}

long long fraction_bits(const Rational& w) {
  return static_cast<long long>(mpz_sizeinbase(mpq_numref(w.backend().data()), 2) +
                                mpz_sizeinbase(mpq_denref(w.backend().data()), 2));
}

bool is_dyadic(const Rational& w) {
  const mpz_srcptr den = mpq_denref(w.backend().data());
  return mpz_scan1(den, 0) + 1 == mpz_sizeinbase(den, 2);  // a single set bit
}

long long stored_bits(const Rational& w) {
  const mpz_srcptr num = mpq_numref(w.backend().data());
  if (mpz_sgn(num) == 0) return 0;
  if (!is_dyadic(w)) return fraction_bits(w);
  return static_cast<long long>(mpz_sizeinbase(num, 2) - mpz_scan1(num, 0));  // the odd part's bits
}

unsigned bits_of(const Mpfr& x) {
  return static_cast<unsigned>(mpfr_get_prec(x.backend().data()));
}
unsigned bits_of(const Mpfi& x) {
  return static_cast<unsigned>(mpfi_get_prec(x.backend().data()));
}

Rational parse_rational(const std::string& text) {
  auto bad = [&](const char* why) {
    return Error("not a number: \"" + limits::excerpt(text) + "\" (" + why + ")");
  };
  std::size_t i = 0, n = text.size();
  bool neg = false;
  if (i < n && (text[i] == '+' || text[i] == '-')) neg = text[i++] == '-';
  if (auto slash = text.find('/'); slash != std::string::npos) {  // p/q
    auto digits = [](const std::string& s) {
      return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
    };
    std::string p = text.substr(i, slash - i), qs = text.substr(slash + 1);
    if (!digits(p) || !digits(qs)) throw bad("expected integers p/q");
    if (static_cast<long long>(std::max(p.size(), qs.size())) > limits::kNumberDigits)
      throw bad("more than 10^6 digits");
    mp::mpz_int num(decimal_integer(p)), den(decimal_integer(qs));
    if (den == 0) throw bad("zero denominator");
    Rational r(num, den);
    return neg ? Rational(-r) : r;
  }
  std::string mant;     // all significant digits, decimal point removed
  long long scale = 0;  // value = mant * 10^scale
  bool any = false, point = false;
  for (; i < n && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'); ++i) {
    if (text[i] == '.') {
      if (point) throw bad("two decimal points");
      point = true;
    } else {
      mant += text[i];
      any = true;
      if (point) --scale;
    }
  }
  if (!any) throw bad("no digits");
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    std::size_t start = i;
    if (i < n && (text[i] == '+' || text[i] == '-')) ++i;
    if (i == n || !std::isdigit(static_cast<unsigned char>(text[i]))) throw bad("bad exponent");
    while (i < n && std::isdigit(static_cast<unsigned char>(text[i])))
      ++i;
    if (i - start > 9) throw bad("exponent beyond 10^6");
    scale += std::stoll(text.substr(start, i - start));  // at most 9 digits: no overflow
  }
  if (i != n) throw bad("unexpected characters");
  if (static_cast<long long>(mant.size()) > limits::kNumberDigits) throw bad("more than 10^6 digits");
  if (std::llabs(scale) > limits::kDecimalExponent) throw bad("decimal exponent beyond 10^6");
  mp::mpz_int m(decimal_integer(mant)),
      p10 = mp::pow(mp::mpz_int(10), static_cast<unsigned>(std::llabs(scale)));
  Rational r = scale >= 0 ? Rational(m * p10) : Rational(m, p10);
  return neg ? Rational(-r) : r;
}

void set_rational(Rational& q, double x) {
  if (!std::isfinite(x)) throw Error("cannot convert a non-finite number (NaN or infinity) to a rational");
  mpq_set_d(q.backend().data(), x);  // exact (GMP), and canonical
}

long class_label(const Rational& q, long count) {
  mpq_srcptr v = q.backend().data();
  if (mpz_cmp_ui(mpq_denref(v), 1) != 0 || mpq_sgn(v) < 0 || mpz_cmp_si(mpq_numref(v), count) >= 0) return -1;
  return mpz_get_si(mpq_numref(v));
}

Rational rational_of(double x) {
  Rational q;
  set_rational(q, x);
  return q;
}

// q = m / 2^k with |m| < 2^63 (every double, and most data): one correctly rounded conversion of
// m, then an exact scaling, unless the result could fall below the normal range (false: use MPFR).
template <class F>
bool dyadic_to(const Rational& q, F& out) {
  mpq_srcptr v = q.backend().data();
  const std::size_t bits = mpz_sizeinbase(mpq_denref(v), 2);
  if (!mpz_fits_slong_p(mpq_numref(v)) || mpz_scan1(mpq_denref(v), 0) != bits - 1) return false;
  const long k = static_cast<long>(bits) - 1;
  if (k > std::numeric_limits<F>::max_exponent - 2) return false;  // 2^-k·|m| may be subnormal
  out = std::ldexp(static_cast<F>(mpz_get_si(mpq_numref(v))), static_cast<int>(-k));
  return true;
}

// q rounded once to the nearest float or double, subnormals included: MPFR's exponent range is
// the format's for the rounding, then mpfr_subnormalize (rounding to 53 bits first and then to a
// subnormal's fewer bits rounded twice: 2^-1075·(1 + 2^-125) became 0, not 2^-1074). The exponent
// range is per thread in MPFR, and restored.
template <class F>
F round_once(const Rational& q) {
  constexpr int p = std::numeric_limits<F>::digits;
  const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
  mpfr_set_emin(std::numeric_limits<F>::min_exponent - p + 1);  // double: −1073, float: −148
  mpfr_set_emax(std::numeric_limits<F>::max_exponent);          // double: 1024, float: 128
  mpfr_t t;
  mpfr_init2(t, p);
  const int inexact = mpfr_set_q(t, q.backend().data(), MPFR_RNDN);
  mpfr_subnormalize(t, inexact, MPFR_RNDN);
  F r;
  if constexpr (std::is_same_v<F, float>)
    r = mpfr_get_flt(t, MPFR_RNDN);  // exact: t holds a float
  else
    r = mpfr_get_d(t, MPFR_RNDN);
  mpfr_clear(t);
  mpfr_set_emin(emin);
  mpfr_set_emax(emax);
  return r;
}

float Scalar<float>::from(const Rational& q) {
  float fast;
  if (dyadic_to(q, fast)) return fast;
  const float r = round_once<float>(q);
  if (!std::isfinite(r))
    throw Error("a number beyond the range of float (about 3.4e38): use a wider precision");
  return r;
}
double Scalar<double>::from(const Rational& q) {
  double fast;
  if (dyadic_to(q, fast)) return fast;
  const double r = round_once<double>(q);
  if (!std::isfinite(r))
    throw Error(
        "a number beyond the range of double (about 1.8e308): use MPFR, interval or rational precision");
  return r;
}
std::string Scalar<float>::to_string(float x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
  return buf;
}
std::string Scalar<double>::to_string(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

Mpfr Scalar<Mpfr>::from(const Rational& q) {
  Mpfr r;
  mpfr_set_q(r.backend().data(), q.backend().data(), MPFR_RNDN);
  return r;
}
Rational Scalar<Mpfr>::to_rational(const Mpfr& x) {
  return rational_of_mpfr(x.backend().data());
}
double Scalar<Mpfr>::to_double(const Mpfr& x) {
  return mpfr_get_d(x.backend().data(), MPFR_RNDN);
}
std::string Scalar<Mpfr>::to_string(const Mpfr& x) {
  return decimal_text(x, MPFR_RNDN);
}

std::string decimal_text(const Mpfr& x, mpfr_rnd_t rnd) {
  mpfr_srcptr v = x.backend().data();
  if (mpfr_nan_p(v)) return "nan";
  if (mpfr_inf_p(v)) return mpfr_sgn(v) > 0 ? "inf" : "-inf";
  if (mpfr_zero_p(v)) return "0";
  mpfr_exp_t e;
  char* digits = mpfr_get_str(nullptr, &e, 10, 0, v, rnd);  // enough digits to read back (RNDN: exactly)
  std::string s(digits);
  mpfr_free_str(digits);
  bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  while (s.size() > 1 && s.back() == '0')
    s.pop_back();
  // value = 0.DIGITS * 10^e = D.IGITS * 10^(e-1)
  std::string out = (neg ? "-" : "") + s.substr(0, 1);
  if (s.size() > 1) out += "." + s.substr(1);
  if (e - 1 != 0) out += "e" + std::to_string(static_cast<long>(e - 1));
  return out;
}

Mpfi Scalar<Mpfi>::from(const Rational& q) {
  Mpfi r;
  mpfi_set_q(r.backend().data(), q.backend().data());
  return r;
}
Mpfr lower(const Mpfi& x) {
  return mp::lower(x);
}
Mpfr upper(const Mpfi& x) {
  return mp::upper(x);
}
Mpfi hull(const Mpfr& lo, const Mpfr& hi) {
  Mpfi r;
  mpfi_interv_fr(r.backend().data(), lo.backend().data(), hi.backend().data());
  return r;
}
Mpfi Scalar<Mpfi>::hull(const Mpfr& lo, const Mpfr& hi) {
  return uatlab::hull(lo, hi);
}
Mpfi point(const Mpfr& x) {
  Mpfi r;
  mpfi_set_fr(r.backend().data(), x.backend().data());
  return r;
}
Mpfi square(const Mpfi& x) {
  Mpfi r;
  mpfi_sqr(r.backend().data(), x.backend().data());
  return r;
}
Mpfi intersect(const Mpfi& a, const Mpfi& b) {
  if (mpfi_nan_p(a.backend().data())) return b;  // NaN: no information
  if (mpfi_nan_p(b.backend().data())) return a;
  const Mpfr lo = std::max(lower(a), lower(b)), hi = std::min(upper(a), upper(b));
  if (!(lo <= hi)) throw Error("two enclosures of one value do not meet (an internal error)");
  return hull(lo, hi);
}
Rational Scalar<Mpfi>::to_rational(const Mpfi& x) {
  return Scalar<Mpfr>::to_rational(mp::median(x));
}
double Scalar<Mpfi>::to_double(const Mpfi& x) {
  return Scalar<Mpfr>::to_double(mp::median(x));
}
std::string Scalar<Mpfi>::to_string(const Mpfi& x) {
  return "[" + decimal_text(lower(x), MPFR_RNDD) + "," + decimal_text(upper(x), MPFR_RNDU) + "]";
}

double Scalar<Rational>::to_double(const Rational& x) {  // ±inf beyond the range (a display value)
  MpfrTmp t(x, 53);
  return mpfr_get_d(t.v, MPFR_RNDN);
}

}  // namespace uatlab

// ---- GELU ---------------------------------------------------------------------------------------

namespace uatlab {

float gelu(float x) {
  return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
}
double gelu(double x) {
  return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440));
}
float gelu_derivative(float x) {
  return 0.5f * (1.0f + std::erf(x * 0.70710678118654752f)) +
         x * std::exp(-0.5f * x * x) * 0.39894228040143268f;
}
double gelu_derivative(double x) {
  return 0.5 * (1.0 + std::erf(x * 0.70710678118654752440)) +
         x * std::exp(-0.5 * x * x) * 0.39894228040143267794;
}

namespace {
template <class S>
S pi_value() {
  S p;
  if constexpr (std::is_same_v<S, Mpfi>)
    mpfi_const_pi(p.backend().data());
  else
    mpfr_const_pi(p.backend().data(), MPFR_RNDN);
  return p;
}

// erf over an interval: erf is increasing, so its endpoints rounded outward enclose it.
Mpfi erf_enclosure(const Mpfi& u) {
  Mpfr lo = lower(u), hi = upper(u);
  mpfr_erf(lo.backend().data(), lo.backend().data(), MPFR_RNDD);
  mpfr_erf(hi.backend().data(), hi.backend().data(), MPFR_RNDU);
  return hull(lo, hi);
}

// The natural interval extension of x/2·(1 + erf(x/√2)): an enclosure for any x, tight for a
// thin one (a point).
Mpfi gelu_natural(const Mpfi& x) {
  return x / 2 * (Mpfi(1) + erf_enclosure(x / mp::sqrt(Mpfi(2))));
}
}  // namespace

Mpfr gelu(const Mpfr& x) {
  return x / 2 * (1 + mp::erf(x / mp::sqrt(Mpfr(2))));
}
Mpfr gelu_derivative(const Mpfr& x) {
  return (1 + mp::erf(x / mp::sqrt(Mpfr(2)))) / 2 + x * mp::exp(-x * x / 2) / mp::sqrt(2 * pi_value<Mpfr>());
}
Mpfi gelu_derivative(const Mpfi& x) {
  Mpfi sq;
  mpfi_sqr(sq.backend().data(), x.backend().data());  // x², not x·x: no dependency
  return (Mpfi(1) + erf_enclosure(x / mp::sqrt(Mpfi(2)))) / 2 +
         x * mp::exp(-sq / 2) / mp::sqrt(2 * pi_value<Mpfi>());
}

// ---- GELU, tanh form: 0.044715 is the decimal PyTorch and GPT-2 use; √(2/π) as each type computes it.
float gelu_tanh(float x) {
  const float c = 0.7978845608028654f;  // √(2/π)
  return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
}
double gelu_tanh(double x) {
  const double c = 0.79788456080286535588;
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
float gelu_tanh_derivative(float x) {
  const float c = 0.7978845608028654f, t = std::tanh(c * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x);
}
double gelu_tanh_derivative(double x) {
  const double c = 0.79788456080286535588, t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

namespace {
template <class S>
S kappa() {  // 0.044715 = 8943/200000, exactly where the type can (intervals enclose it)
  return S(8943) / S(200000);
}
template <class S>
S sqrt_two_over_pi() {
  return mp::sqrt(S(2) / pi_value<S>());
}
}  // namespace

Mpfr gelu_tanh(const Mpfr& x) {
  return x / 2 * (1 + mp::tanh(sqrt_two_over_pi<Mpfr>() * (x + kappa<Mpfr>() * x * x * x)));
}
Mpfr gelu_tanh_derivative(const Mpfr& x) {
  const Mpfr c = sqrt_two_over_pi<Mpfr>(), t = mp::tanh(c * (x + kappa<Mpfr>() * x * x * x));
  return (1 + t) / 2 + x / 2 * (1 - t * t) * c * (1 + 3 * kappa<Mpfr>() * x * x);
}
Mpfi gelu_tanh(const Mpfi& x) {
  // u(x) = c(x + κx³) is increasing, and so is tanh: 1 + tanh(u) over x is enclosed by its values
  // at the ends, each computed as an interval (c and κ are enclosures) and the outer ends kept.
  auto one_plus_tanh = [](const Mpfr& p) {
    const Mpfi xp = point(p), u = sqrt_two_over_pi<Mpfi>() * (xp + kappa<Mpfi>() * xp * xp * xp);
    return Mpfi(1) + mp::tanh(u);
  };
  const Mpfi g = hull(lower(one_plus_tanh(lower(x))), upper(one_plus_tanh(upper(x))));
  return x / 2 * g;
}
Mpfi gelu_tanh_derivative(const Mpfi& x) {
  Mpfi sq;
  mpfi_sqr(sq.backend().data(), x.backend().data());  // x², not x·x: no dependency
  const Mpfi c = sqrt_two_over_pi<Mpfi>(), t = mp::tanh(c * (x + kappa<Mpfi>() * x * sq));
  Mpfi t2;
  mpfi_sqr(t2.backend().data(), t.backend().data());
  return (Mpfi(1) + t) / 2 + x / 2 * (Mpfi(1) - t2) * c * (Mpfi(1) + 3 * kappa<Mpfi>() * sq);
}

Mpfi gelu(const Mpfi& x) {
  // The bracket of the minimiser x*: GELU' < 0 at −0.76 and > 0 at −0.74 (certified by
  // Scalar.GeluBracketsItsMinimiser), and GELU'' = φ·(2 − x²) > 0 on [−√2, √2] makes the root unique.
  const Mpfr left(-0.76), right(-0.74), lo = lower(x), hi = upper(x);
  auto at = [](const Mpfr& p) { return gelu_natural(point(p)); };
  if (hi <= left) return hull(lower(at(hi)), upper(at(lo)));   // falling
  if (lo >= right) return hull(lower(at(lo)), upper(at(hi)));  // rising
  // x meets [left, right]: the maximum is at an endpoint (GELU falls, then rises); the minimum is
  // at least the least value over x ∩ [left, right], bounded below by the mean-value form there.
  const Mpfr a = std::max(lo, left), b = std::min(hi, right), m = (a + b) / 2;
  const Mpfi part = hull(a, b), mvf = at(m) + gelu_derivative(part) * (part - point(m));
  return hull(lower(mvf), std::max(upper(at(lo)), upper(at(hi))));
}

}  // namespace uatlab
