// The deep value map (bit extraction): certified memorization, checked independently in 2000-bit
// MPFR; a changed payload bit caught by the certificate; plain intervals unable to certify what
// AffineForward does; parameters growing like √q; its input limits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "uatlab/construct/deep_value_map.hpp"
#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/verify/analyse.hpp"

using namespace uatlab;
namespace ks = uatlab::kajitsuka;
using nlohmann::json;

namespace {

ks::Memorized deep_memorized(const Dataset& ds, int blocks = 0) {
  ks::MemorizeOptions opt;
  opt.value_map = ks::ValueMap::deep;
  opt.blocks = blocks;
  return ks::memorize(ds, opt);
}

// One attention sub-layer of width d, for plans without data.
Network<Rational> attention(int d) {
  Architecture a;
  a.d = d;
  a.layers.push_back(LayerSpec{});
  a.validate();
  return Network<Rational>(a);
}

// q points at 0, 1, 2, ... with seeded labels in {0, 1, 2}.
std::vector<deep::Point> line(int q, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<deep::Point> pts;
  for (int i = 0; i < q; ++i)
    pts.push_back({Rational(i), Rational(i), static_cast<long>(rng.next() % 3)});
  return pts;
}

}  // namespace

TEST(DeepValueMap, MemorizesEveryLabelCheckedIndependentlyIn2000Bits) {
  const Dataset ds = demo_dataset(60, 8, 4, 64, 3);
  const ks::Memorized m = deep_memorized(ds);
  EXPECT_EQ(m.max_error, 0);  // the outputs are the labels exactly, enclosures of width 0
  const json& p = m.deep_plan;
  EXPECT_EQ(m.hidden, 480u);
  EXPECT_GE(p.at("blocks").get<int>() * p.at("block_size").get<int>(), 480);
  EXPECT_EQ(p.at("parameters").get<long long>(), static_cast<long long>(m.net.parameter_count()));
  EXPECT_EQ(static_cast<long long>(m.net.layers.size()), 1 + p.at("depth").get<long long>());
  EXPECT_EQ(
      p.at("payload_bits").get<long long>(),
      (p.at("block_size").get<long long>() - 1) * (p.at("beta").get<int>() + p.at("rho").get<int>() + 1));
  const MpfrPrecision reference(2000);
  const Network<Mpfr> net = network_cast<Mpfr>(m.net);
  for (const auto& s : ds.sequences) {
    const Mat<Mpfr> y = forward(net, matrix_cast<Mpfr>(s.x));
    for (Eigen::Index k = 0; k < y.cols(); ++k)
      EXPECT_LT(mp::abs(y(0, k) - Scalar<Mpfr>::from(s.y(0, k))), Mpfr(1e-100));
  }
  // The certificate can fail: below the minimum, and with one payload bit changed.
  EXPECT_GT(ks::certified_max_error(m.net, ds, m.min_bits / 2, 1e-6, {}, true), 1e-6);
  // Block 0's payload E (entry 1 of the select layer's b2): flip the top bit of its first label
  // change, so that the ids past its first threshold are off by 2^ρ.
  Network<Rational> wrong = m.net;
  Rational& E = wrong.layers[2].b2(1, 0);
  const long long P = p.at("payload_bits"), at = P - p.at("beta").get<long long>() - 1;
  const mp::mpz_int bits = mp::numerator(Rational(E * Rational(mp::mpz_int(1) << static_cast<unsigned>(P))));
  const Rational flip = Rational(mp::mpz_int(1) << static_cast<unsigned>(at)) /
                        Rational(mp::mpz_int(1) << static_cast<unsigned>(P));
  E += mp::bit_test(bits, static_cast<unsigned>(at)) ? Rational(-flip) : flip;
  EXPECT_GT(ks::certified_max_error(wrong, ds, m.bits_used, 1e-6, {}, true), 1e-6);
  // Plain interval arithmetic loses the steep steps' cancellation: it cannot certify the same net.
  EXPECT_GT(ks::certified_max_error(m.net, ds, m.bits_used, 1e-6), 1e-6);
  // analyse agrees with memorize's certificate with --affine, and is undecided without it.
  for (bool affine : {true, false}) {
    const Predictions pr = certify_predictions(m.net, ds, LabelKind::values, Rational(1, 1000000),
                                               m.bits_used, {}, false, affine);
    EXPECT_EQ(pr.all(), affine);
    if (!affine) {
      EXPECT_EQ(pr.failures.front().kind, FailureKind::undecided);
    }
  }
}

TEST(DeepValueMap, ChosenBlocksAreUsed) {
  const Dataset ds = demo_dataset(20, 6, 4, 32, 5);
  const ks::Memorized m = deep_memorized(ds, 7);
  EXPECT_EQ(m.deep_plan.at("blocks").get<int>(), 7);
  EXPECT_LE(m.max_error, 1e-6);
}

TEST(DeepValueMap, ParametersGrowLikeTheSquareRootOfTheContexts) {
  const Network<Rational> att = attention(4);
  const deep::Plan small = deep::plan(att, line(1000, 1)), large = deep::plan(att, line(16000, 1));
  const double ratio = static_cast<double>(large.parameters) / static_cast<double>(small.parameters);
  EXPECT_GT(ratio, 3);  // about √16 = 4 (times the threshold bits' slow growth)
  EXPECT_LT(ratio, 6);  // far from the 16 of a one-layer map
  // A one-layer map of q units stores (2d + 1) q + d: 9 q here.
  EXPECT_LT(large.parameters, 9 * 16000 / 4);
}

// The plan without data: the closed-form count equals the built architecture's, and at the
// theorem's own separation (β = 23,745 bits per offset) the √(q·β) law starts only past 10^4
// contexts: below, one step per id (a linear staircase) is cheaper than any block of two.
TEST(DeepValueMap, PlanOnlyCountFallsBackToTheStaircaseAtWideOffsets) {
  const Network<Rational> att = attention(4);
  for (int blocks : {2, 7, 40}) {
    const deep::Plan p = deep::plan(att, line(80, 1), blocks);
    Architecture base = att.arch;
    base.readout = 0;
    EXPECT_EQ(p.parameters,
              base.parameter_count() + deep::value_map_parameters(4, p.blocks, p.block_size, p.beta, p.rho));
    EXPECT_EQ(p.parameters,
              deep::build(att, Vec<Rational>::Unit(4, 0), line(80, 1), p).arch.parameter_count());
  }
  EXPECT_EQ(deep::plan_count(4, 10000, 23745, 2).block_size, 1);  // the staircase
  const deep::PlanCount far = deep::plan_count(4, 100000, 23745, 2);
  EXPECT_EQ(far.block_size, 2);
  EXPECT_LT(far.parameters, deep::value_map_parameters(4, 100000, 1, 23745, 2));
  // Narrow offsets: blocks from the start, and parameters / √(q·β) settles (42.7 at 10^4, 43.6 at 10^7).
  const double c4 = static_cast<double>(deep::plan_count(4, 10000, 16, 2).parameters) / std::sqrt(1e4 * 19),
               c7 =
                   static_cast<double>(deep::plan_count(4, 10000000, 16, 2).parameters) / std::sqrt(1e7 * 19);
  EXPECT_NEAR(c7 / c4, 1, 0.03);
}

TEST(DeepValueMap, RefusesWhatItCannotEncode) {
  const Network<Rational> att = attention(3);
  EXPECT_THROW(deep::plan(att, line(10, 1)), Error);  // d < 4: no room for four registers
  auto pts = line(10, 1);
  pts[3].hi = pts[4].lo;  // two enclosures touch
  EXPECT_THROW(deep::plan(attention(4), pts), Error);
  pts = line(10, 1);
  pts[2].label = -1;
  EXPECT_THROW(deep::plan(attention(4), pts), Error);
  Dataset ds = demo_dataset(10, 4, 4, 16, 2);
  ds.sequences[1].y(0, 2) = Rational(1, 2);  // not an integer
  try {
    deep_memorized(ds);
    FAIL() << "a fractional label was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 2 token 3"), std::string::npos) << e.what();
  }
}

TEST(DeepValueMap, PlanSkipsBlockCountsPastTheDepthLimit) {
  // 300,000 ids: two blocks of 150,000 would need over 2^20 sub-layers; the planner skips such block
  // counts instead of refusing the whole data (it did, at N = 10^5 next-token sequences).
  const deep::Plan p = deep::plan(attention(4), line(300000, 1));
  EXPECT_LE(p.depth, 1 << 20);
  EXPECT_GT(p.blocks, 2);
  EXPECT_THROW(deep::plan(attention(4), line(300000, 1), 2), Error);  // asked for: refused, named
}
