// The certified engine (verify/certified.hpp) and its ball arithmetic (model/ball.hpp, model/arb.hpp): every
// enclosure holds the exact value (a 300-bit MPFR reference, or exact rationals), at every magnitude
// from subnormals to 1e300, through cancellations, in the round-to-nearest mode it requires; the tiers
// escalate per sequence and a sequence that no tier brings to the width is reported, not lost.
// Every attention and mixer option is checked in tests/test_agreement.cpp.
#include <gtest/gtest.h>

#include <cfenv>
#include <iostream>

#include "../src/model/interval_product.hpp"
#include "uatlab/io/dataset.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/model/network.hpp"
#include "uatlab/verify/certified.hpp"

using namespace uatlab;
using nlohmann::json;

namespace {

// Entries ±k·2^e, k in [1, 2^20), e in [low, high], a fifth of them 0: exact rationals.
Mat<Rational> spread(Eigen::Index rows, Eigen::Index cols, int low, int high, std::uint64_t seed) {
  Rng rng(seed);
  Mat<Rational> m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    if (rng.uniform() < 0.2) {
      m(i) = 0;
      continue;
    }
    const long k = 1 + static_cast<long>(rng.uniform() * ((1 << 20) - 1));
    const int e = low + static_cast<int>(rng.uniform() * (high - low + 1));
    Rational v(rng.uniform() < 0.5 ? -k : k);
    if (e >= 0)
      v *= Rational(mp::pow(mp::mpz_int(2), static_cast<unsigned>(e)));
    else
      v /= Rational(mp::pow(mp::mpz_int(2), static_cast<unsigned>(-e)));
    m(i) = v;
  }
  return m;
}

template <class M>
long expect_product_encloses(const Mat<Rational>& A, const Mat<Rational>& B, const std::string& what) {
  const Mat<Ball<M>> a = matrix_cast<Ball<M>>(A), b = matrix_cast<Ball<M>>(B);
  const Mat<Ball<M>> c = product<Ball<M>>(a, b);
  const Mat<Rational> exact = A * B;
  const MpfrPrecision bits(400);
  long finite = 0;
  for (Eigen::Index i = 0; i < exact.size(); ++i) {
    const Mpfr e = Scalar<Mpfr>::from(exact(i));
    if (!std::isfinite(c(i).r)) continue;  // past double's range: no information, no false claim
    ++finite;
    EXPECT_LE(lower(c(i)), e) << what << " entry " << i;
    EXPECT_GE(upper(c(i)), e) << what << " entry " << i;
  }
  return finite;
}

// The 300-bit reference of a network's output.
Mat<Mpfr> reference(const Network<Rational>& net, const Mat<Rational>& x) {
  const MpfrPrecision bits(300);
  return forward(network_cast<Mpfr>(net), matrix_cast<Mpfr>(x));
}

// The ball forward encloses the reference, or refuses with an Error; returns whether it enclosed.
template <class B>
bool encloses_or_refuses(const Network<Rational>& net, const Mat<Rational>& x, const Mat<Mpfr>& ref) {
  const MpfrPrecision ends(128);
  Mat<B> y;
  try {
    y = forward(network_cast<B>(net), matrix_cast<B>(x));
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("range") != std::string::npos || what.find("beyond") != std::string::npos) << what;
    std::cout << "  " << Scalar<B>::name << " refused: " << what << "\n";
    return false;
  }
  const MpfrPrecision bits(300);
  for (Eigen::Index i = 0; i < ref.size(); ++i) {
    EXPECT_LE(lower(y(i)), ref(i)) << Scalar<B>::name << " entry " << i;
    EXPECT_GE(upper(y(i)), ref(i)) << Scalar<B>::name << " entry " << i;
  }
  return true;
}

// A small network with every kind of sub-layer that meets magnitudes: attention (softmax, pre-norm,
// RoPE, causal), GELU, a layer norm, a tanh-GELU, a readout.
Network<Rational> mixed_network(std::uint64_t seed) {
  const Architecture arch = Architecture::from_json(
      {{"d", 4},
       {"readout", 2},
       {"layers",
        {{{"type", "attention"},
          {"heads", 2},
          {"head_size", 2},
          {"pre_norm", true},
          {"rope", 10000},
          {"causal", true}},
         {{"type", "feedforward"}, {"width", 8}, {"activation", "gelu"}},
         {{"type", "layernorm"}},
         {{"type", "feedforward"}, {"width", 8}, {"activation", "gelu_tanh"}, {"pre_norm", true}}}}});
  Network<double> base(arch);
  init_random(base, seed);
  return network_cast<Rational>(base);
}

}  // namespace

TEST(Certified, ProductsEncloseTheExactProductAtEveryMagnitude) {
  // Exponents from the subnormals to 1e300, mixed within a row; lengths that change the slices.
  const int ranges[][2] = {{-1070, -1000}, {-300, 300}, {-20, 20}, {900, 1000}, {-1074, -1050}};
  std::uint64_t seed = 1;
  for (const auto& r : ranges)
    for (Eigen::Index k : {1, 7, 300}) {
      const Mat<Rational> A = spread(5, k, r[0] / 2, r[1] / 2, seed++),
                          B = spread(k, 4, r[0] / 2, r[1] / 2, seed++);
      const std::string what =
          "exponents " + std::to_string(r[0]) + ".." + std::to_string(r[1]) + ", k " + std::to_string(k);
      const long finite =
          expect_product_encloses<double>(A, B, what) + expect_product_encloses<Quad>(A, B, what);
      if (r[1] < 900) {  // every entry within double's range has a radius
        EXPECT_EQ(finite, 2 * 5 * 4) << what;
      }
    }
}

TEST(Certified, ScalarOperationsEncloseTheirExactResults) {
  const MpfrPrecision bits(300);
  const Rational third(1, 3), big = Rational(mp::pow(mp::mpz_int(10), 300)), tiny = 1 / big;
  for (const Rational& a : {third, big, tiny, Rational(-7, 5), Rational(0)})
    for (const Rational& b : {third, tiny, Rational(3), Rational(-1, 1024)}) {
      const Ball53 x = Scalar<Ball53>::from(a), y = Scalar<Ball53>::from(b);
      auto check = [&](const Ball53& z, const Rational& exact, const char* op) {
        const Mpfr e = Scalar<Mpfr>::from(exact);
        if (!std::isfinite(z.r)) return;  // no information is no false claim
        EXPECT_LE(lower(z), e) << op << " " << a << " " << b;
        EXPECT_GE(upper(z), e) << op << " " << a << " " << b;
      };
      check(x + y, a + b, "+");
      check(x - y, a - b, "-");
      check(x * y, a * b, "*");
      if (b != 0) check(x / y, a / b, "/");
      check(square(x), a * a, "square");
    }
  // exp and sqrt against MPFR at 300 bits
  for (double v : {-700.0, -1.5, 0.0, 1e-300, 2.5, 700.0}) {
    const Ball53 x(v);
    const Mpfr e = mp::exp(Mpfr(v)), s = v >= 0 ? Mpfr(mp::sqrt(Mpfr(v))) : Mpfr(0);
    const Ball53 ex = Scalar<Ball53>::exp(x);
    EXPECT_LE(lower(ex), e);
    EXPECT_GE(upper(ex), e);
    if (v >= 0) {
      const Ball53 sq = Scalar<Ball53>::sqrt(x);
      EXPECT_LE(lower(sq), s);
      EXPECT_GE(upper(sq), s);
    }
  }
  EXPECT_THROW(Scalar<Ball53>::log(Ball53(-1.0)), Error);  // a NaN is an error, never dropped
}

// Exact numbers become balls by two paths: a dyadic of at most 53 significant bits in double's normal
// range is its own midpoint (radius 0); anything else goes through MPFR with the gap as radius. Both
// sides of each boundary: 53 and 54 bits, the least normal and the greatest subnormal, the largest
// double and beyond it.
TEST(Certified, ExactNumbersBecomeBallsThatHoldThem) {
  const MpfrPrecision bits(300);
  auto pow2 = [](int e) {
    Rational q(1);
    for (int i = 0; i < std::abs(e); ++i)
      q = e > 0 ? Rational(q * 2) : Rational(q / 2);
    return q;
  };
  const Rational p53 = pow2(53);
  struct Case {
    Rational q;
    bool exact53;  // a double holds it: ball:53's radius is 0
  };
  const std::vector<Case> cases = {
      {Rational(0), true},
      {Rational(-5, 8), true},
      {p53 - 1, true},
      {p53 + 1, false},
      {(p53 - 1) / pow2(60), true},
      {(p53 + 1) / pow2(60), false},
      {pow2(-1022), true},
      {pow2(-1023), true},                   // subnormal, but a double holds it: MPFR's path
      {Rational(3) * pow2(-1075), false},    // between two subnormals
      {(p53 - 1) * pow2(-1100), false},      // 53 bits, subnormal: no double holds it
      {(2 - pow2(-52)) * pow2(1023), true},  // the largest double
      {Rational(1, 3), false},
      {-Rational(1, 3) * pow2(-1000), false}};
  for (const Case& c : cases) {
    const Mpfr e = Scalar<Mpfr>::from(c.q);
    const Ball53 x = Scalar<Ball53>::from(c.q);
    const Ball113 y = Scalar<Ball113>::from(c.q);
    EXPECT_TRUE(lower(x) <= e && e <= upper(x)) << c.q;
    EXPECT_TRUE(lower(y) <= e && e <= upper(y)) << c.q;
    EXPECT_EQ(x.r == 0, c.exact53) << c.q << " radius " << x.r;
    if (c.exact53) {
      EXPECT_EQ(Scalar<Ball53>::to_rational(x), c.q);
    }
  }
  EXPECT_THROW(Scalar<Ball53>::from(pow2(1024)), Error);  // beyond double's range: refused
}

TEST(Certified, ArbOperationsEncloseTheirExactResults) {
  const Rational third(1, 3), big = Rational(mp::pow(mp::mpz_int(10), 300)), tiny = 1 / big;
  for (unsigned prec : {64u, 300u}) {
    for (const Rational& a : {third, big, tiny, Rational(-7, 5), Rational(0)})
      for (const Rational& b : {third, tiny, Rational(3), Rational(-1, 1024)}) {
        const MpfrPrecision bits(prec);
        const Arb x = Scalar<Arb>::from(a), y = Scalar<Arb>::from(b);
        auto check = [&](const Arb& z, const Rational& exact, const char* op) {
          EXPECT_TRUE(arb_is_finite(z.get())) << op;
          EXPECT_LE(Scalar<Rational>::from(Scalar<Mpfr>::to_rational(lower(z))), exact)
              << op << " " << a << " " << b;
          EXPECT_GE(Scalar<Rational>::from(Scalar<Mpfr>::to_rational(upper(z))), exact)
              << op << " " << a << " " << b;
        };
        check(x + y, a + b, "+");
        check(x - y, a - b, "-");
        check(x * y, a * b, "*");
        if (b != 0) check(x / y, a / b, "/");
        check(square(x), a * a, "square");
        EXPECT_GE(lower(square(x)), 0);
        check(Scalar<Arb>::hull(lower(x), upper(x)), a, "hull");
      }
    const MpfrPrecision bits(prec);  // exp, log, sqrt against MPFR at 4 times the bits
    for (double v : {-700.0, -1.5, 1e-300, 2.5, 700.0, 1e30}) {
      const Arb x(v), ex = Scalar<Arb>::exp(x), sq = Scalar<Arb>::sqrt(Arb(std::abs(v)));
      const Arb lg = Scalar<Arb>::log(Arb(std::abs(v)));
      const MpfrPrecision fine(4 * prec);
      const Mpfr e = mp::exp(Mpfr(v)), s = mp::sqrt(Mpfr(std::abs(v))), l = mp::log(Mpfr(std::abs(v)));
      EXPECT_LE(lower(ex), e) << v;
      EXPECT_GE(upper(ex), e) << v;
      EXPECT_LE(lower(sq), s) << v;
      EXPECT_GE(upper(sq), s) << v;
      EXPECT_LE(lower(lg), l) << v;
      EXPECT_GE(upper(lg), l) << v;
    }
    EXPECT_FALSE(arb_is_finite(Scalar<Arb>::log(Arb(-1.0)).get()));  // refused by the forward's check
  }
}

TEST(Certified, ArbProductsEncloseTheExactProduct) {
  // Row blocks of 512 among the threads: 1,100 rows make three, the last one short.
  const Mat<Rational> A = spread(1100, 37, -60, 60, 5), B = spread(37, 3, -300, 300, 6);
  const MpfrPrecision bits(200);
  const Mat<Arb> c = arb_product(matrix_cast<Arb>(A), matrix_cast<Arb>(B));
  const Mat<Rational> exact = A * B;
  for (Eigen::Index i = 0; i < exact.size(); ++i) {
    ASSERT_TRUE(arb_is_finite(c(i).get()));
    EXPECT_LE(Scalar<Rational>::from(Scalar<Mpfr>::to_rational(lower(c(i)))), exact(i)) << i;
    EXPECT_GE(Scalar<Rational>::from(Scalar<Mpfr>::to_rational(upper(c(i)))), exact(i)) << i;
  }
}

TEST(Certified, EnclosuresHoldFromSubnormalsTo1e300) {
  const Network<Rational> net = mixed_network(11);
  int enclosed = 0, cases = 0;
  // Inputs at magnitudes 2^e (subnormal to 1e300), and a token of equal entries (x − mean(x) = 0).
  for (int e : {-1074, -1000, -60, 0, 60, 990}) {
    Mat<Rational> x = spread(4, 3, e, e + 2, 100 + static_cast<std::uint64_t>(e + 2000));
    x.col(1).setConstant(x(0, 0) == 0 ? Rational(1) : x(0, 0));
    SCOPED_TRACE("inputs near 2^" + std::to_string(e));
    const Mat<Mpfr> ref = reference(net, x);
    enclosed += encloses_or_refuses<Ball53>(net, x, ref);
    enclosed += encloses_or_refuses<Ball113>(net, x, ref);
    enclosed += encloses_or_refuses<Arb>(net, x, ref);
    cases += 3;
  }
  EXPECT_GE(enclosed, cases - 2);  // the layer norms bring 1e300 back: at most the top refuses
}

TEST(Certified, EngineEscalatesPerSequenceAndReportsWhatItCouldNotReach) {
  const Network<Rational> net = mixed_network(5);
  const Dataset ds = parse_dataset(
      "{\"x\": [[1, 2, 3, 4], [\"1/3\", 0, -1, 2]]}\n{\"x\": [[0.5, -2, 1, 1], [1, 1, 1, 1], [3, 0, 0, "
      "1]]}\n",
      "data");
  const NetworkSource src = held_source(net);
  auto check = [&](const std::vector<CertifiedOutput>& out) {
    ASSERT_EQ(out.size(), ds.sequences.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      const Mat<Mpfr> ref = reference(net, ds.sequences[i].x);
      const MpfrPrecision bits(300);
      for (Eigen::Index j = 0; j < ref.size(); ++j) {
        EXPECT_LE(lower(out[i].y(j)), ref(j)) << out[i].tier;
        EXPECT_GE(upper(out[i].y(j)), ref(j)) << out[i].tier;
      }
      EXPECT_EQ(out[i].layer_widths.size(), net.layers.size() + 2);
    }
  };
  CertifiedOptions opt;
  opt.max_width = 1e-9;
  std::vector<CertifiedOutput> out = certified_eval(src, ds, opt);
  check(out);
  for (const CertifiedOutput& o : out) {
    EXPECT_EQ(o.tier, "ball:53");
    EXPECT_TRUE(o.reached);
    EXPECT_LE(o.relative_width, 1e-9);
  }
  opt.max_width = 1e-20;  // past double's 53 bits: binary128 midpoints
  out = certified_eval(src, ds, opt);
  check(out);
  for (const CertifiedOutput& o : out) {
    EXPECT_EQ(o.tier, "ball:113");
    EXPECT_TRUE(o.reached);
    ASSERT_EQ(o.tried.size(), 2u);
  }
  opt.ball53 = false;  // told to start at ball:113, the engine does not try ball:53
  out = certified_eval(src, ds, opt);
  check(out);
  for (const CertifiedOutput& o : out) {
    EXPECT_EQ(o.tier, "ball:113");
    ASSERT_EQ(o.tried.size(), 1u);
    EXPECT_EQ(o.tried[0].rfind("ball:113: ", 0), 0u) << o.tried[0];
  }
  opt.ball53 = true;
  opt.max_width = 1e-45, opt.max_bits = 512;  // past binary128: Arb at the bits the widths ask for
  out = certified_eval(src, ds, opt);
  check(out);
  for (const CertifiedOutput& o : out) {
    EXPECT_EQ(o.tier.rfind("arb:", 0), 0u) << o.tier;
    EXPECT_TRUE(o.reached);
    EXPECT_LE(o.relative_width, 1e-45);
  }
  {  // a weight that is no double (1/3): ball:53 holds it with a radius, so MPFI, which reads it exactly
    Network<Rational> third = net;
    third.layers[1].w1(0, 0) = Rational(1, 3);
    const std::vector<CertifiedOutput> o = certified_eval(held_source(third), ds, opt);
    for (std::size_t i = 0; i < o.size(); ++i) {
      EXPECT_EQ(o[i].tier.rfind("interval:", 0), 0u) << o[i].tier;
      EXPECT_TRUE(o[i].reached);
      const Mat<Mpfr> ref = reference(third, ds.sequences[i].x);
      const MpfrPrecision bits(300);
      for (Eigen::Index j = 0; j < ref.size(); ++j) {
        EXPECT_LE(lower(o[i].y(j)), ref(j));
        EXPECT_GE(upper(o[i].y(j)), ref(j));
      }
    }
  }
  opt.max_bits = 0;  // no MPFI tier: the narrowest ball, not reached, its width said
  out = certified_eval(src, ds, opt);
  check(out);
  for (const CertifiedOutput& o : out) {
    EXPECT_EQ(o.tier, "ball:113");
    EXPECT_FALSE(o.reached);
    EXPECT_GT(o.relative_width, 1e-45);
    EXPECT_LT(o.relative_width, 1e-25);
  }
  const json line = certified_json(out[0]);
  EXPECT_FALSE(line["reached"].get<bool>());
  EXPECT_EQ(line["lo"].size(), 2u);
}

TEST(Certified, RangesPastDoubleFallToArb) {
  // A value of 2^1000 squared by a feed-forward layer: past double's range, the balls refuse (named)
  // and Arb, whose exponents have no limit, encloses it.
  Network<Rational> net(
      Architecture::from_json({{"d", 1}, {"layers", {{{"type", "feedforward"}, {"width", 1}}}}}));
  net.layers[0].w1(0, 0) = Rational(mp::pow(mp::mpz_int(2), 1000u));
  net.layers[0].w2(0, 0) = Rational(mp::pow(mp::mpz_int(2), 1000u));
  const Dataset ds = parse_dataset("{\"x\": [[1]]}\n", "data");
  CertifiedOptions opt;
  opt.max_bits = 128;
  const std::vector<CertifiedOutput> out = certified_eval(held_source(net), ds, opt);
  EXPECT_EQ(out[0].tier, "arb:128");
  ASSERT_EQ(out[0].tried.size(), 3u);
  EXPECT_NE(out[0].tried[0].find("sub-layer 0"), std::string::npos) << out[0].tried[0];
  EXPECT_TRUE(out[0].reached);
  opt.max_bits = 0;  // no tier can: the whole line, not a failure of the run
  const std::vector<CertifiedOutput> none = certified_eval(held_source(net), ds, opt);
  EXPECT_EQ(none[0].tier, "none");
  EXPECT_FALSE(none[0].reached);
  ASSERT_EQ(none[0].y.size(), 1);
  EXPECT_TRUE(mpfr_inf_p(lower(none[0].y(0)).backend().data()) &&
              mpfr_inf_p(upper(none[0].y(0)).backend().data()));
  EXPECT_EQ(certified_json(none[0])["relative_width"], "inf");
  // With a bias of 1, y = 2^2000 + 2^1000 + 1 is inexact at 128 bits: Arb doubles its bits to 256,
  // reading the network once for both (ball:53's tier read it once before).
  net.layers[0].b1(0) = 1;
  NetworkSource counted = held_source(net);
  int reads = 0;
  counted.ball53 = [&, read = counted.ball53](const auto& check) { return ++reads, read(check); };
  opt.max_width = 1e-45, opt.max_bits = 256;
  const std::vector<CertifiedOutput> doubled = certified_eval(counted, ds, opt);
  EXPECT_EQ(doubled[0].tier, "arb:256");
  EXPECT_TRUE(doubled[0].reached);
  ASSERT_EQ(doubled[0].tried.size(), 4u);
  EXPECT_EQ(doubled[0].tried[2].rfind("arb:128: ", 0), 0u) << doubled[0].tried[2];
  EXPECT_EQ(reads, 2);
  const Mpfi& y = doubled[0].y(0);
  const MpfrPrecision bits(2100);
  const Mpfr exact = mp::pow(Mpfr(2), 2000) + mp::pow(Mpfr(2), 1000) + 1;
  EXPECT_LE(lower(y), exact);
  EXPECT_GE(upper(y), exact);
}

TEST(Certified, RefusesAnyRoundingModeButNearest) {
  // The a-priori bounds are those of round-to-nearest; the engine checks the mode before it starts.
  const Network<Rational> net = mixed_network(3);
  const Dataset ds = parse_dataset("{\"x\": [[1, 2, 3, 4]]}\n", "data");
  ASSERT_EQ(std::fesetround(FE_UPWARD), 0);
  EXPECT_THROW(certified_eval(held_source(net), ds), Error);
  std::fesetround(FE_TONEAREST);
  EXPECT_NO_THROW(certified_eval(held_source(net), ds));
}

TEST(Certified, SharpSoftmaxWeightsBelowDoublesRangeStayEnclosed) {
  // Scores 1e4 apart: most weights are below 1e-308, where a ball's exponential reaches 0; the
  // weights are then formed as e_l / Σ_j e_j (tests/test_agreement.cpp covers the ordinary scale).
  const Architecture arch = Architecture::from_json(
      {{"d", 3}, {"layers", {{{"type", "attention"}, {"heads", 1}, {"head_size", 3}, {"scale", "10000"}}}}});
  Network<double> base(arch);
  init_random(base, 4);
  const Network<Rational> net = network_cast<Rational>(base);
  Mat<Rational> x(3, 5);  // entries k/8, |k| ≤ 16
  for (Eigen::Index i = 0; i < x.size(); ++i)
    x(i) = Rational(static_cast<long>(i * 7 % 33) - 16, 8);
  const Mat<Mpfr> ref = reference(net, x);
  const MpfrPrecision bits(300);
  const Mat<Ball53> y = forward(network_cast<Ball53>(net), matrix_cast<Ball53>(x));
  for (Eigen::Index i = 0; i < ref.size(); ++i) {
    EXPECT_LE(lower(y(i)), ref(i));
    EXPECT_GE(upper(y(i)), ref(i));
    EXPECT_LT(2 * y(i).r, 1e-9);
  }
  // Score gaps of 739 and 740: e^-740 is subnormal, a ball above its radius, and Σ_{j≠l} e_j / e_l
  // overflowed double (a sharp head of a trained model stopped ball:53 and ball:113 so); such a
  // weight is formed as e_l / Σ_j e_j too.
  Network<Rational> sharp(Architecture::from_json(
      {{"d", 1}, {"layers", {{{"type", "attention"}, {"heads", 1}, {"head_size", 1}, {"scale", "1"}}}}}));
  Layer<Rational>& L = sharp.layers[0];
  L.wq(0, 0) = L.wk(0, 0) = L.wv(0, 0) = L.wo(0, 0) = 1;
  Mat<Rational> t(1, 3);
  t << Rational(1), Rational(740), Rational(0);
  const Mat<Mpfr> exact = reference(sharp, t);
  const Mat<Ball53> z = forward(network_cast<Ball53>(sharp), matrix_cast<Ball53>(t));
  const Mat<Ball113> z113 = forward(network_cast<Ball113>(sharp), matrix_cast<Ball113>(t));
  for (Eigen::Index i = 0; i < exact.size(); ++i) {
    EXPECT_TRUE(lower(z(i)) <= exact(i) && exact(i) <= upper(z(i))) << i;
    EXPECT_TRUE(lower(z113(i)) <= exact(i) && exact(i) <= upper(z113(i))) << i;
    EXPECT_LT(z(i).r, 1e-9 * std::max(1.0, std::abs(static_cast<double>(z(i).m))));
  }
}
