#include <gtest/gtest.h>

#include "uatlab/model/init.hpp"
#include "uatlab/model/scalar.hpp"
#include "uatlab/verify/precision.hpp"

using namespace uatlab;

TEST(Scalar, ParseRationalExact) {
  EXPECT_EQ(parse_rational("0.1"), Rational(1, 10));
  EXPECT_EQ(parse_rational("-2/6"), Rational(-1, 3));
  EXPECT_EQ(parse_rational("007/03"), Rational(7, 3));
  EXPECT_EQ(parse_rational("1.5E+3"), Rational(1500));
  EXPECT_EQ(parse_rational("+.25"), Rational(1, 4));
  EXPECT_EQ(parse_rational("0.01703732508612577643"),
            Rational(mp::mpz_int("1703732508612577643"), mp::mpz_int(mp::pow(mp::mpz_int(10), 20))));
  Rational tiny = parse_rational("0.1e-400");
  EXPECT_EQ(tiny * Rational(mp::mpz_int(mp::pow(mp::mpz_int(10), 401))), Rational(1));
}

TEST(Scalar, ParseRationalRejects) {
  for (const char* bad :
       {"", "nan", "inf", "1/0", "1..2", "1e", "0x10", "1/2/3", "abc", "1e99999999999", "--1"}) {
    EXPECT_THROW(parse_rational(bad), Error) << bad;
  }
  try {
    parse_rational("nan");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"nan\""), std::string::npos);
  }
}

TEST(Scalar, RoundingIsCorrect) {
  // 1/3 rounds to nearest in each format; 0.1 as a double is the familiar binary64 value.
  EXPECT_EQ(Scalar<double>::from(Rational(1, 3)), 1.0 / 3.0);
  EXPECT_EQ(Scalar<float>::from(Rational(1, 3)), 1.0f / 3.0f);
  EXPECT_EQ(Scalar<double>::from(parse_rational("0.1")), 0.1);
  // A value exactly halfway between two floats rounds to even (not through double).
  // 1 + 2^-24: tie between 1 and 1+2^-23
  Rational half_ulp = Rational(1) + Rational(1, mp::mpz_int(1) << 24);
  EXPECT_EQ(Scalar<float>::from(half_ulp), 1.0f);
  EXPECT_EQ(rational_of(0.5), Rational(1, 2));
  EXPECT_EQ(Scalar<double>::to_rational(0.1),
            Rational(mp::mpz_int("3602879701896397"), mp::mpz_int(1) << 55));
}

TEST(Scalar, ClassLabelsAreIntegersInRange) {
  EXPECT_EQ(class_label(Rational(0), 3), 0);
  EXPECT_EQ(class_label(Rational(2), 3), 2);
  EXPECT_EQ(class_label(Rational(3), 3), -1);
  EXPECT_EQ(class_label(Rational(-1), 3), -1);
  EXPECT_EQ(class_label(Rational(1, 2), 3), -1);
  EXPECT_EQ(class_label(Rational(4, 2), 3), 2);  // canonical: 2
  EXPECT_EQ(class_label(Rational(mp::mpz_int(1) << 70), 3), -1);
  EXPECT_EQ(class_label(Rational((1L << 20) - 1), 1L << 20), (1L << 20) - 1);
  Rational q(7);
  set_rational(q, -0.375);
  EXPECT_EQ(q, Rational(-3, 8));
  EXPECT_THROW(set_rational(q, std::nan("")), Error);
}

// m / 2^k with |m| < 2^63 takes a fast path (one integer conversion, an exact scaling); it must
// round exactly as MPFR does, ties to even included, down to the normal range and past it.
TEST(Scalar, DyadicFastPathRoundsAsMpfr) {
  auto by_mpfr = [](const Rational& q,
                    mpfr_prec_t prec) {  // one rounding, subnormals included (MPFR's manual)
    const mpfr_exp_t emin = mpfr_get_emin(), emax = mpfr_get_emax();
    mpfr_set_emin(prec == 24 ? -148 : -1073);
    mpfr_set_emax(prec == 24 ? 128 : 1024);
    mpfr_t t;
    mpfr_init2(t, prec);
    mpfr_subnormalize(t, mpfr_set_q(t, q.backend().data(), MPFR_RNDN), MPFR_RNDN);
    const double r = prec == 24 ? mpfr_get_flt(t, MPFR_RNDN) : mpfr_get_d(t, MPFR_RNDN);
    mpfr_clear(t);
    mpfr_set_emin(emin), mpfr_set_emax(emax);
    return r;
  };
  Rng rng(7);
  std::vector<Rational> qs;
  for (long m : {0L, 1L, -1L, (1L << 24) + 1, (1L << 25) + 3, -((1L << 53) + 1), (1L << 62) + (1L << 38) + 1,
                 std::numeric_limits<long>::max(), std::numeric_limits<long>::min() + 1})
    for (int k : {0, 1, 30, 125, 126, 127, 149, 150, 1021, 1022, 1023, 1074, 1080})
      qs.push_back(Rational(m) / Rational(mp::mpz_int(1) << k));
  for (int i = 0; i < 2000; ++i) {
    const long m = static_cast<long>((rng.uniform() - 0.5) * 9e18);
    const int k = static_cast<int>(rng.uniform() * 1100);
    qs.push_back(Rational(m) / Rational(mp::mpz_int(1) << k));
  }
  for (const Rational& q : qs) {
    EXPECT_EQ(static_cast<double>(Scalar<float>::from(q)), by_mpfr(q, 24)) << q.str();
    EXPECT_EQ(Scalar<double>::from(q), by_mpfr(q, 53)) << q.str();
  }
}

TEST(Scalar, MpfrPrecisionAndTextRoundTrip) {
  for (unsigned bits = 2; bits < 5000; ++bits) {  // Boost's decimal-digit granularity: at most 4 bits more
    EXPECT_GE(mpfr_carried_bits(bits), bits);
    EXPECT_LE(mpfr_carried_bits(bits), bits + 4);
    // carried bits round-trip
    EXPECT_EQ(mpfr_carried_bits(mpfr_carried_bits(bits)), mpfr_carried_bits(bits));
  }
  EXPECT_EQ(mpfr_carried_bits(256), 257u);
  const unsigned before = mpfr_bits();
  {
    const MpfrPrecision outer(256);
    EXPECT_EQ(outer.bits(), 256u);
    EXPECT_EQ(mpfr_bits(), 257u);
    EXPECT_EQ(bits_of(Mpfr(1)), 257u);
    try {
      const MpfrPrecision inner(64);
      EXPECT_EQ(bits_of(Mpfi(1)), mpfr_carried_bits(64));
      throw Error("thrown half-way");
    } catch (const Error&) {
    }
    EXPECT_EQ(mpfr_bits(), 257u);  // the inner scope restored the outer one while unwinding
  }
  EXPECT_EQ(mpfr_bits(), before);
  const MpfrPrecision precision(256);
  Mpfr third = Scalar<Mpfr>::from(Rational(1, 3));
  Mpfr back = Scalar<Mpfr>::from(parse_rational(Scalar<Mpfr>::to_string(third)));
  EXPECT_EQ(third, back);
  EXPECT_EQ(Scalar<Mpfr>::from(Scalar<Mpfr>::to_rational(third)), third);  // exact rational of a binary float
  EXPECT_THROW(MpfrPrecision(1), Error);
  EXPECT_THROW(MpfrPrecision(1u << 27), Error);
}

TEST(Scalar, IntervalEnclosesRational) {
  const MpfrPrecision precision(64);
  Mpfi third = Scalar<Mpfi>::from(Rational(1, 3));
  EXPECT_LT(lower(third), upper(third));
  EXPECT_LE(Scalar<Mpfr>::to_rational(lower(third)), Rational(1, 3));
  EXPECT_GE(Scalar<Mpfr>::to_rational(upper(third)), Rational(1, 3));
  Mpfi half = Scalar<Mpfi>::from(Rational(1, 2));
  EXPECT_EQ(lower(half), upper(half));  // representable: a point
}

// GELU's interval form rests on the bracket [−0.76, −0.74] of its minimiser: certified here.
TEST(Scalar, GeluBracketsItsMinimiser) {
  const MpfrPrecision p(256);
  EXPECT_LT(upper(gelu_derivative(Mpfi(-0.76))), 0);
  EXPECT_GT(lower(gelu_derivative(Mpfi(-0.74))), 0);
}

// f's enclosure of [c, c + w] at 256 bits against f's 1000-bit values at 65 points inside (each must
// lie in it): the enclosure's width less the sampled range, and the enclosure's largest magnitude.
template <class F>
std::pair<double, double> enclosure_slack(F f, double c, double w) {
  const Rational a = rational_of(c), b = rational_of(c + w);
  Mpfi g;
  {
    const MpfrPrecision p(256);
    g = f(hull(Scalar<Mpfr>::from(a), Scalar<Mpfr>::from(b)));
  }
  const MpfrPrecision ref(1000);
  Mpfr lo_seen(1e300), hi_seen(-1e300);
  for (int k = 0; k <= 64; ++k) {
    const Mpfr x = Scalar<Mpfr>::from(a + (b - a) * Rational(k, 64)), y = f(x);
    EXPECT_LE(Mpfr(lower(g)), y) << "x = " << x.str(20);
    EXPECT_GE(Mpfr(upper(g)), y) << "x = " << x.str(20);
    lo_seen = std::min(lo_seen, y), hi_seen = std::max(hi_seen, y);
  }
  const Mpfr slack = Mpfr(upper(g)) - Mpfr(lower(g)) - (hi_seen - lo_seen);
  return {Scalar<Mpfr>::to_double(slack), std::max(std::abs(Scalar<Mpfr>::to_double(Mpfr(upper(g)))),
                                                   std::abs(Scalar<Mpfr>::to_double(Mpfr(lower(g)))))};
}

// The enclosure holds the 1000-bit value at points inside the interval, and it is tight: a thin
// interval's enclosure is a few ulps wide, a wide one's exceeds the sampled range by little.
TEST(Scalar, GeluEnclosureIsSoundAndTight) {
  Rng rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const double c = rng.uniform(-6, 4), w = trial % 4 == 0 ? 0 : std::pow(10.0, rng.uniform(-30, 0.5));
    const auto [slack, size] = enclosure_slack([](const auto& v) { return gelu(v); }, c, w);
    // Thin: 2^-240 relative; wide: the sampling misses at most ~(w/64)² of curvature, plus 1e-3·w.
    EXPECT_LE(slack, 1e-70 * (1 + size) + w * w / 512 + 1e-3 * w) << "[" << c << ", " << c + w << "]";
  }
}

TEST(Scalar, GeluAgreesAcrossArithmetics) {
  for (double x : {-5.0, -0.75, -0.1, 0.0, 0.3, 2.5}) {
    const MpfrPrecision p(200);
    const Mpfr m = gelu(Mpfr(x));
    EXPECT_NEAR(gelu(x), Scalar<Mpfr>::to_double(m), 1e-16);
    EXPECT_NEAR(gelu(static_cast<float>(x)), Scalar<Mpfr>::to_double(m), 1e-6);
    EXPECT_NEAR(gelu_derivative(x), Scalar<Mpfr>::to_double(gelu_derivative(Mpfr(x))), 1e-15);
  }
}

// GELU's tanh form (GPT-2's): the interval form holds the 1000-bit value at points inside thin and
// wide intervals and is tight on thin ones; float, double and MPFR agree, and so do the derivatives
// with a 1000-bit central difference.
TEST(Scalar, GeluTanhEnclosureIsSoundAndAgreesAcrossArithmetics) {
  Rng rng(13);
  for (int trial = 0; trial < 300; ++trial) {
    const double c = rng.uniform(-6, 4), w = trial % 3 == 0 ? 0 : std::pow(10.0, rng.uniform(-30, 0.5));
    const auto [slack, size] = enclosure_slack([](const auto& v) { return gelu_tanh(v); }, c, w);
    if (w == 0) {
      EXPECT_LE(slack, 1e-70 * (1 + size)) << c;  // a point: tight
    }
  }
  for (double x : {-5.0, -0.75, -0.1, 0.0, 0.3, 2.5}) {
    const MpfrPrecision p(1000);
    const Mpfr m = gelu_tanh(Mpfr(x)), h("1e-100");
    const Mpfr central = (gelu_tanh(Mpfr(x) + h) - gelu_tanh(Mpfr(x) - h)) / (2 * h);
    EXPECT_NEAR(gelu_tanh(x), Scalar<Mpfr>::to_double(m), 1e-16);
    EXPECT_NEAR(gelu_tanh(static_cast<float>(x)), Scalar<Mpfr>::to_double(m), 1e-6);
    EXPECT_LT(Scalar<Mpfr>::to_double(mp::abs(gelu_tanh_derivative(Mpfr(x)) - central)), 1e-150);
    EXPECT_NEAR(gelu_tanh_derivative(x), Scalar<Mpfr>::to_double(central), 1e-15);
    EXPECT_NEAR(gelu_tanh_derivative(static_cast<float>(x)), Scalar<Mpfr>::to_double(central), 1e-6);
    Mpfi d;
    {
      const MpfrPrecision low(256);
      d = gelu_tanh_derivative(Mpfi(x));
    }
    const Mpfr exact = gelu_tanh_derivative(Mpfr(x));  // 1000 bits
    EXPECT_TRUE(Mpfr(lower(d)) <= exact && exact <= Mpfr(upper(d))) << x;
  }
  // PyTorch's own: GELU(approximate="tanh")(1) = 0.8411919906082768 in float64.
  EXPECT_NEAR(gelu_tanh(1.0), 0.8411919906082768, 1e-16);
}

TEST(Scalar, AnOverlongNumberIsQuotedShortly) {  // a 1,000,001-digit number was quoted whole (1 MB)
  try {
    parse_rational(std::string(1000001, '7'));
    FAIL();
  } catch (const Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 200u);
    EXPECT_NE(std::string(e.what()).find("more than 10^6 digits"), std::string::npos) << e.what();
  }
}

TEST(Scalar, SubnormalsAreRoundedOnce) {  // 2^-1075·(1 + 2^-125) became 0 in double (float: 0 too)
  auto two_to = [](int e) {               // 2^e exactly, far outside double's range if need be
    Rational r(1);
    for (int i = 0; i < std::abs(e); ++i)
      r = e > 0 ? r * 2 : r / 2;
    return r;
  };
  EXPECT_EQ(Scalar<double>::from(two_to(-1075) * (1 + two_to(-125))), std::ldexp(1.0, -1074));
  EXPECT_EQ(Scalar<double>::from(two_to(-1075)), 0.0);  // a tie: to even (0)
  EXPECT_EQ(Scalar<double>::from(two_to(-1074) * 3 / 2 + two_to(-1200)), std::ldexp(1.0, -1073));
  EXPECT_EQ(Scalar<float>::from(two_to(-150) * (1 + two_to(-125))), std::ldexp(1.0f, -149));
  EXPECT_EQ(Scalar<float>::from(Rational(1, 3)), 1.0f / 3);
  EXPECT_EQ(Scalar<double>::from(Rational(1, 3)), 1.0 / 3);
  EXPECT_THROW(Scalar<double>::from(two_to(1024)), Error);
  EXPECT_EQ(Scalar<double>::from(two_to(1024) - two_to(971)), std::numeric_limits<double>::max());
  EXPECT_THROW(Scalar<double>::from(two_to(1024) - two_to(970)), Error);  // halfway to 2^1024: a tie, to inf
}

// The bits an exact weight needs: a dyadic weight's significand (its odd part), any other weight's
// exact fraction; and their count over a network.
TEST(Scalar, StoredBitsCountSignificandsAndFractions) {
  EXPECT_EQ(stored_bits(Rational(0)), 0);
  EXPECT_EQ(stored_bits(Rational(12)), 2);             // 3·2^2
  EXPECT_EQ(stored_bits(parse_rational("-5/16")), 3);  // 101
  EXPECT_EQ(stored_bits(parse_rational("1e-300")), fraction_bits(parse_rational("1e-300")));
  EXPECT_EQ(stored_bits(parse_rational("1/3")), 3);                 // 1 and 11: no binary float holds it
  EXPECT_EQ(stored_bits(Rational(static_cast<double>(0.1f))), 24);  // float32's full significand
  EXPECT_TRUE(is_dyadic(parse_rational("3/1024")));
  EXPECT_FALSE(is_dyadic(parse_rational("3/10")));
  Architecture a;
  a.d = 1, a.readout = 2;
  Network<Rational> net(a);
  net.readout_w << Rational(12), parse_rational("1/3");
  net.readout_b << Rational(0), parse_rational("-5/16");
  const StoredBits b = count_stored_bits(net);
  EXPECT_EQ(b.parameters, 4u);
  EXPECT_EQ(b.nonzero, 3u);
  EXPECT_EQ(b.non_dyadic, 1u);
  EXPECT_EQ(b.max_bits, 3);
  EXPECT_EQ(b.total_bits, 2 + 3 + 3);
}

// Boost 1.74 constructs an MPFI number from an MPFR one as NaN for some values (all of [2^61, 2^62)
// tried: 3.156e18 is a softmax denominator that met it): point() encloses every value, and the
// GELU enclosures that convert their ends through it stay finite there.
TEST(Scalar, MpfrBecomesAnIntervalAtAnyValue) {
  for (unsigned bits : {20u, 65u, 128u}) {
    const MpfrPrecision p(bits);
    for (double v : {1.5, 3.156e18, std::ldexp(1.0, 61), std::ldexp(1.5, 61), -3.156e18, 1e300, 0x1p-1070}) {
      Mpfr x;
      mpfr_set_d(x.backend().data(), v, MPFR_RNDN);
      const Mpfi y = point(x);
      EXPECT_TRUE(lower(y) <= x && x <= upper(y)) << v << " at " << bits << " bits";
    }
    Mpfr big;
    mpfr_set_d(big.backend().data(), 3.156e18, MPFR_RNDN);
    const Mpfi g = gelu(hull(big, big)), t = gelu_tanh(hull(big, big));
    EXPECT_TRUE(lower(g) <= big && big <= upper(g)) << Scalar<Mpfi>::to_string(g);  // GELU(x) = x up there
    EXPECT_TRUE(lower(t) <= big && big <= upper(t)) << Scalar<Mpfi>::to_string(t);
  }
}
