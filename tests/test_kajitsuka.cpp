// Kajitsuka & Sato: hypotheses, Lemma 3, the contextual mapping (faithful and tuned), certified
// memorization checked independently in 1000-bit MPFR, and Theorem 1's hardmax counterexample.
#include <gtest/gtest.h>

#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/experiment/contextual.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/verify/affine.hpp"
#include "uatlab/verify/evaluate.hpp"

using namespace uatlab;
namespace ks = uatlab::kajitsuka;

namespace {

Dataset parse(const std::string& text) {
  return parse_dataset(text, "test");
}

std::string error_of(const Dataset& ds, bool labels) {
  try {
    ks::analyse(ds, labels);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// d = 2, |V| = 4 fixed tokens, every 3-subset as a sequence (the toy example of
// docs/theory/kajitsuka-sato.md).
Dataset toy() {
  const char* v[4][2] = {{"1", "1/2"}, {"-3/4", "1"}, {"1/5", "-6/5"}, {"-1", "-1/2"}};
  Dataset ds;
  ds.d = 2;
  for (int skip = 0; skip < 4; ++skip) {
    Sequence s;
    s.x = Mat<Rational>(2, 3);
    int k = 0;
    for (int t = 0; t < 4; ++t)
      if (t != skip) {
        s.x(0, k) = parse_rational(v[t][0]);
        s.x(1, k) = parse_rational(v[t][1]);
        ++k;
      }
    ds.sequences.push_back(s);
  }
  return ds;
}

}  // namespace

TEST(Kajitsuka, RejectsEveryViolationByName) {
  // unequal n, a duplicate inside sequence 2, a zero token in sequence 3
  Dataset ds = parse(
      "{\"x\": [[1,0],[0,1]]}\n"
      "{\"x\": [[1,0],[1,0]]}\n"
      "{\"x\": [[0,0],[0,1]]}\n"
      "{\"x\": [[1,0],[0,1],[1,1]]}\n");
  const std::string e = error_of(ds, false);
  EXPECT_NE(e.find("sequence 2: tokens 1 and 2 are equal"), std::string::npos) << e;
  EXPECT_NE(e.find("sequence 3, token 1: the zero vector"), std::string::npos) << e;
  EXPECT_NE(e.find("sequence 4 has 3 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("3 problems"), std::string::npos) << e;
}

TEST(Kajitsuka, RejectsInconsistentLabelsListingThePair) {
  // Sequences 1 and 2 are permutations of each other: token (1,0) must carry the same label.
  Dataset ds = parse(
      "{\"x\": [[1,0],[0,1]], \"y\": [1, 2]}\n"
      "{\"x\": [[0,1],[1,0]], \"y\": [2, 5]}\n");
  const std::string e = error_of(ds, true);
  EXPECT_NE(e.find("sequence 1 token 1 and sequence 2 token 2"), std::string::npos) << e;
  EXPECT_EQ(
      error_of(parse("{\"x\": [[1,0],[0,1]], \"y\": [1, 2]}\n{\"x\": [[0,1],[1,0]], \"y\": [2, 1]}\n"), true),
      "");
  EXPECT_NE(error_of(parse("{\"x\": [[1,0],[0,1]]}\n"), true).find("no labels"), std::string::npos);
}

TEST(Kajitsuka, MeasuresTheHypotheses) {
  ks::Facts f = ks::analyse(toy());
  EXPECT_EQ(f.vocab.size(), 4u);
  EXPECT_EQ(f.sets.size(), 4u);
  EXPECT_EQ(f.r_min_sq, parse_rational("5/4"));    // (1, 1/2)
  EXPECT_EQ(f.r_max_sq, parse_rational("25/16"));  // (-3/4, 1)
  EXPECT_EQ(f.eps_sq, parse_rational("193/100"));  // (1/5, -6/5) − (-1, -1/2): 36/25 + 49/100
}

TEST(Kajitsuka, ProjectionMeetsLemma3) {
  ks::Facts f = ks::analyse(demo_dataset(30, 4, 3, 12, 5));
  ks::Projection p = ks::find_projection(f, 9);
  EXPECT_GE(p.achieved, p.required);
  EXPECT_NEAR(p.required, std::sqrt(8 / (M_PI * 3)) / (13.0 * 13.0), 1e-15);
  // Reproducible from the seed.
  EXPECT_EQ(ks::find_projection(f, 9).v, p.v);
}

TEST(Kajitsuka, FaithfulConstructionNeedsThousandsOfBitsAndBeatsTheBound) {
  ks::Facts f = ks::analyse(toy());
  ks::ContextualOptions opt;
  opt.mode = ks::Mode::faithful;
  ks::Contextual c = ks::build_contextual(f, opt);
  ASSERT_TRUE(c.separation.certified);
  EXPECT_GT(c.separation.log10_delta_lo, c.log10_delta_bound);  // Theorem 2's δ holds, loosely
  EXPECT_LT(c.separation.log10_delta, -100);                    // and δ is astronomically small
  EXPECT_GT(c.min_bits, 300u);
  EXPECT_LE(c.min_bits, c.bits_used);
  EXPECT_LE(c.separation.r, c.r_bound + 1e-12);
  // Below the minimum the certificate fails.
  EXPECT_FALSE(ks::certify_separation(c.net, f, c.min_bits / 2).certified);
  EXPECT_TRUE(ks::certify_separation(c.net, f, c.min_bits).certified);
}

TEST(Kajitsuka, TunedConstructionIsSeparatedAtLowPrecisionTiedOrNot) {
  ks::Facts f = ks::analyse(demo_dataset(60, 4, 3, 12, 2));
  for (bool tied : {false, true}) {
    ks::ContextualOptions opt;
    opt.tied = tied;
    ks::Contextual c = ks::build_contextual(f, opt);
    ASSERT_TRUE(c.separation.certified);
    EXPECT_GT(c.separation.log10_delta, -12);
    EXPECT_GT(c.separation.log10_delta, c.log10_delta_bound);
    EXPECT_LT(c.min_bits, 128u);
    EXPECT_EQ(c.net.arch.layers[0].tied_qkv, tied);
    EXPECT_GT(c.separation.cross_lower, 0);
    EXPECT_TRUE(c.projection.certified);
    EXPECT_TRUE(ks::lemma3_holds(f, c.projection.v));
    EXPECT_TRUE(c.separation.r_within_bound);
    EXPECT_LE(c.separation.log10_delta, c.separation.log10_delta_same_token);  // δ covers every pair
    EXPECT_LE(c.separation.log10_delta, std::log10(c.separation.cross_lower));
    EXPECT_LE(c.separation.log10_delta_lo, c.separation.log10_delta);
    // Controls: ten times W_O breaks the norm condition, and a direction orthogonal to a token
    // difference breaks Lemma 3.
    Network<Rational> loud = c.net;
    loud.layers[0].wo *= Rational(10);
    EXPECT_FALSE(ks::certify_separation(loud, f, c.bits_used).r_within_bound);
    const Vec<Rational> diff = f.vocab[0] - f.vocab[1];
    Vec<Rational> v = Vec<Rational>::Zero(f.d);
    v(0) = diff(1), v(1) = -diff(0);  // ⟂ diff in the first two coordinates
    EXPECT_FALSE(ks::lemma3_holds(f, v));
  }
}

TEST(Kajitsuka, MemorizesEveryLabelCheckedIndependentlyIn1000Bits) {
  const Dataset ds = demo_dataset(40, 4, 3, 10, 1);
  ks::MemorizeOptions opt;
  ks::Memorized m = ks::memorize(ds, opt);
  EXPECT_LE(m.max_error, 1e-6);
  EXPECT_LE(m.min_bits, m.bits_used);
  ASSERT_EQ(m.net.arch.layers.size(), 2u);
  EXPECT_EQ(m.net.arch.layers[0].heads, 1);
  EXPECT_EQ(m.net.arch.layers[0].head_size, 1);
  EXPECT_EQ(m.hidden, static_cast<std::size_t>(m.net.arch.layers[1].width));
  EXPECT_EQ(m.zhang_form_ff, 3 + m.hidden + 3 * m.hidden);
  // An independent check: the whole network in 1000-bit MPFR (not intervals) on every sequence.
  const MpfrPrecision reference(1000);
  const Network<Mpfr> net = network_cast<Mpfr>(m.net);
  for (const auto& s : ds.sequences) {
    Mat<Mpfr> y = forward(net, matrix_cast<Mpfr>(s.x));
    for (Eigen::Index k = 0; k < y.cols(); ++k)
      EXPECT_LT(mp::abs(y(0, k) - Scalar<Mpfr>::from(s.y(0, k))), Mpfr(1e-6));
  }
  // At half the certified minimum the certificate fails (memorize certifies through AffineForward).
  EXPECT_GT(ks::certified_max_error(m.net, ds, m.min_bits / 2, kInf, {}, true), 1e-6);
  EXPECT_LE(ks::certified_max_error(m.net, ds, m.min_bits, kInf, {}, true), 1e-6);
  EXPECT_EQ(mpfr_carried_bits(m.min_bits), m.min_bits);  // the minimum is a precision MPFR carries exactly
}

// Zhang's and the bounded value map read one direction: AffineForward sums their units by exact
// prefix sums (affine.hpp). Against the plain MPFI forward, on points and on boxes around them
// (whose t straddles units): the enclosure holds every value (1000-bit MPFR at the box's centre
// and corners along ±1), is no wider beyond a few roundings (0.0026 to 1 times Zhang's plain width,
// down to 3e-7 times the bounded map's), and certifies whatever the plain one certifies.
TEST(Kajitsuka, OneDirectionValueMapsEncloseByPrefixSums) {
  const Dataset ds = demo_dataset(40, 4, 3, 10, 1);
  for (ks::ValueMap vm : {ks::ValueMap::zhang, ks::ValueMap::bounded}) {
    ks::MemorizeOptions opt;
    opt.value_map = vm;
    const ks::Memorized m = ks::memorize(ds, opt);
    Network<Mpfr> exact;
    {
      const MpfrPrecision reference(1000);
      exact = network_cast<Mpfr>(m.net);
    }
    long straddled = 0, tighter = 0;
    for (unsigned bits : {40u, 64u, 128u})
      for (const char* radius : {"0", "1e-9", "1e-4"}) {
        const MpfrPrecision precision(bits);
        const AffineForward affine(m.net);
        const Network<Mpfi> plain = network_cast<Mpfi>(m.net);
        const Mpfi e = Scalar<Mpfi>::from(parse_rational(radius));
        for (const Sequence& s : ds.sequences) {
          Mat<Mpfi> x = matrix_cast<Mpfi>(s.x);
          for (Eigen::Index j = 0; j < x.size(); ++j)
            x(j) = hull(lower(Mpfi(x(j) - e)), upper(Mpfi(x(j) + e)));
          const Mat<Mpfi> fast = affine(x), slow = forward(plain, x);
          for (int sign : {0, 1, -1}) {  // points of the box, in 1000 bits
            const MpfrPrecision reference(1000);
            const Mat<Mpfr> y = forward(exact, Mat<Mpfr>(matrix_cast<Mpfr>(s.x).array() +
                                                         sign * Scalar<Mpfr>::from(parse_rational(radius))));
            for (Eigen::Index i = 0; i < y.size(); ++i)
              ASSERT_TRUE(lower(fast(i)) <= y(i) && y(i) <= upper(fast(i)))
                  << bits << " bits, radius " << radius;
          }
          for (Eigen::Index i = 0; i < fast.size(); ++i) {
            const Mpfr wf = upper(fast(i)) - lower(fast(i)), ws = upper(slow(i)) - lower(slow(i));
            // 0.0026 to 1 times (3e-7 for the bounded map), beyond a few roundings of the value
            const Mpfr ulps = Mpfr(std::ldexp(1.0, 16 - static_cast<int>(bits))) * mp::abs(upper(slow(i)));
            EXPECT_LE(wf, ws + ulps) << bits << " bits, radius " << radius;
            tighter += wf < ws;
            const Mpfi tol = Scalar<Mpfi>::from(parse_rational("1e-6"));
            const Mpfi label = Scalar<Mpfi>::from(s.y(i));
            if (upper(Mpfi(mp::abs(Mpfi(slow(i) - label)))) <= lower(tol)) {
              EXPECT_LE(upper(Mpfi(mp::abs(Mpfi(fast(i) - label)))), lower(tol));
            }
          }
          straddled += std::string(radius) != "0" && upper(fast(0)) - lower(fast(0)) > 0;
        }
      }
    EXPECT_GT(tighter, 0);
    EXPECT_GT(straddled, 0);
  }
}

TEST(Kajitsuka, TheBoundedValueMapStaysWithinItsTargetsWhereZhangsDoesNot) {
  const Dataset ds = demo_dataset(40, 4, 3, 10, 1);
  ks::MemorizeOptions opt;
  opt.value_map = ks::ValueMap::bounded;
  const ks::Memorized b = ks::memorize(ds, opt);
  EXPECT_LE(b.max_error, 1e-6);  // certified on every sequence, as Zhang's
  EXPECT_EQ(b.hidden, 156u);     // the same q units
  ASSERT_TRUE(std::isfinite(b.value_map_sup));
  EXPECT_LE(b.value_map_sup, b.target_max * (1 + 1e-9));  // the interpolant stays between its targets
  opt.value_map = ks::ValueMap::zhang;
  const ks::Memorized z = ks::memorize(ds, opt);
  EXPECT_FALSE(std::isfinite(z.value_map_sup));  // the last slope runs on
  // Independently, in 512-bit MPFR: F(t) − b2 on a sweep across and beyond the data.
  const MpfrPrecision precision(512);
  const double lo = b.profile.t.front(), hi = b.profile.t.back(), span = hi - lo;
  double zhang_max = 0;
  for (int k = -50; k <= 150; ++k) {
    const Mpfr t = Mpfr(lo) + Mpfr(span) * k / 100;
    for (const ks::Memorized* m : {&b, &z}) {
      const Layer<Rational>& ff = m->net.layers[1];
      Mpfr F = Scalar<Mpfr>::from(ff.b2(0, 0));
      for (Eigen::Index j = 0; j < ff.b1.rows(); ++j) {
        const Mpfr pre = t + Scalar<Mpfr>::from(ff.b1(j, 0));
        if (pre > 0) F += Scalar<Mpfr>::from(ff.w2(0, j)) * pre;
      }
      const double v = std::abs(Scalar<Mpfr>::to_double(F));
      if (m == &b)
        EXPECT_LE(v, b.target_max * (1 + 1e-9)) << "t = " << Scalar<Mpfr>::to_double(t);
      else
        zhang_max = std::max(zhang_max, v);
    }
  }
  EXPECT_GT(zhang_max, 10 * b.target_max);  // the overshoot this map exists to remove
}

TEST(Kajitsuka, SoftmaxSeparatesBetweenMeanPoolingAndHardmaxWhichCannot) {
  // Theorem 1's pair shares min, max and mean: hardmax (c = ∞) gives exactly coinciding contexts,
  // and δ(c) certified on a log grid rises from the mean-pooling end, peaks, and falls again.
  const ks::Facts f = ks::analyse(ks::theorem1_pair());
  ks::ContextualOptions opt;
  opt.max_bits = 1u << 14;
  const ks::ScaleSweep sw = ks::sweep_scale(f, opt, 12);
  ASSERT_EQ(sw.points.size(), 12u);
  EXPECT_TRUE(sw.hardmax_pairs);
  EXPECT_EQ(sw.hardmax_log10_delta, -std::numeric_limits<double>::infinity());
  std::size_t best = 0;
  for (std::size_t k = 0; k < sw.points.size(); ++k) {
    EXPECT_TRUE(sw.points[k].separation.certified) << "c = " << sw.points[k].c;
    if (sw.points[k].separation.log10_delta_lo > sw.points[best].separation.log10_delta_lo) best = k;
    if (k) {
      EXPECT_GT(sw.points[k].c, sw.points[k - 1].c);
    }
  }
  EXPECT_GT(best, 0u);
  EXPECT_LT(best, sw.points.size() - 1);
  EXPECT_LT(sw.points.back().separation.log10_delta_lo, sw.points[best].separation.log10_delta_lo - 50);
  EXPECT_LT(sw.points.front().separation.log10_delta_lo, sw.points[best].separation.log10_delta_lo - 1);
}

TEST(Kajitsuka, LabelsWiderThanTokensAreRejected) {
  Dataset ds = parse("{\"x\": [[1,0],[0,1]], \"y\": [[1,2,3],[4,5,6]]}\n");
  ks::MemorizeOptions opt;
  EXPECT_THROW(ks::memorize(ds, opt), Error);
}

TEST(Kajitsuka, HardmaxCannotSeparateWhatSoftmaxDoes) {
  ks::HardmaxCounterexample h = ks::hardmax_counterexample(48, 3);
  EXPECT_EQ(h.identical, h.draws);
  EXPECT_TRUE(h.softmax_separates);
  // The pair is a valid Theorem 2 dataset: separated, no duplicates.
  ks::Facts f = ks::analyse(h.data);
  EXPECT_EQ(f.vocab.size(), 6u);
  EXPECT_EQ(f.eps_sq, Rational(1));  // neighbours 1 apart along the unit u
}

// Below the precision that resolves the contexts (10^-7156 apart here: tokens of norms 1 to 8), the
// separation certificate must fail, whatever the threads computed first. It used to certify at
// 8, 114 or 151 bits now and then: an interval's x·x has a negative lower end, and −1 marked "no
// pair yet", so a token whose least lower end was below 0 handed the minimum to the next token.
TEST(Kajitsuka, SeparationIsNotCertifiedBelowThePrecisionThatResolvesIt) {
  Dataset ds;
  ds.d = 2;
  const long v[4][2] = {{1, 0}, {0, 2}, {4, 0}, {0, 8}};
  for (int skip = 0; skip < 4; ++skip)
    for (int reverse = 0; reverse < 2; ++reverse) {
      Sequence s;
      s.x = Mat<Rational>(2, 3);
      int k = 0;
      for (int t = 0; t < 4; ++t)
        if (t != skip) {
          const int col = reverse ? 2 - k : k;
          s.x(0, col) = v[t][0], s.x(1, col) = v[t][1];
          ++k;
        }
      ds.sequences.push_back(s);
    }
  const ks::Facts f = ks::analyse(ds);
  ks::ContextualOptions opt;
  opt.mode = ks::Mode::faithful;
  opt.search_min_bits = false;
  const ks::Contextual c = ks::build_contextual(f, opt);
  EXPECT_TRUE(c.separation.certified);
  EXPECT_LT(c.separation.log10_delta_lo, -7000);
  for (int rep = 0; rep < 8; ++rep)
    for (unsigned bits : {8u, 114u, 151u, 1000u, 20000u})
      for (bool decide_only : {false, true}) {
        const ks::Separation s = ks::certify_separation(c.net, f, bits, decide_only);
        ASSERT_FALSE(s.certified) << bits << " bits, decide_only " << decide_only << ", repetition " << rep;
      }
  EXPECT_TRUE(ks::certify_separation(c.net, f, c.bits_used, true).certified);
}
