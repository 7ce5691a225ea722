// uatlab analyse: certified memorization (and a named failure when a label is wrong), separation
// per attention layer (and δ = 0 where contexts cannot be told apart), exact rounding to the
// narrow formats.
#include <gtest/gtest.h>

#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/train/trainer.hpp"
#include "uatlab/verify/analyse.hpp"
#include "uatlab/verify/precision.hpp"

using namespace uatlab;

namespace {

AnalyseOptions quick() {
  AnalyseOptions o;
  o.rounding = false;
  return o;
}

}  // namespace

TEST(Analyse, RoundsExactlyToNarrowFormats) {
  bool over = false;
  EXPECT_EQ(round_to_format(Rational(1, 3), 11, -14, 15, over), parse_rational("0.333251953125"));
  EXPECT_EQ(round_to_format(Rational(1, 3), 8, -126, 127, over), parse_rational("0.333984375"));
  EXPECT_EQ(round_to_format(Rational(1, 3), 24, -126, 127, over), rational_of(static_cast<float>(1.0 / 3)));
  EXPECT_FALSE(over);
  EXPECT_EQ(round_to_format(1 + parse_rational("1/2048"), 11, -14, 15, over), 1);  // a tie: to even
  EXPECT_EQ(round_to_format(1 + parse_rational("3/2048"), 11, -14, 15, over), 1 + parse_rational("1/512"));
  EXPECT_EQ(round_to_format(parse_rational("-1/16777216"), 11, -14, 15, over), parse_rational("-1/16777216"));
  EXPECT_EQ(round_to_format(parse_rational("1/33554432"), 11, -14, 15, over), 0);  // half the least subnormal
  round_to_format(Rational(65519), 11, -14, 15, over);
  EXPECT_FALSE(over);
  round_to_format(Rational(65520), 11, -14, 15, over);  // rounds to 65536 > 65504
  EXPECT_TRUE(over);
}

TEST(Analyse, CertifiesAConstructionAndNamesAWrongLabel) {
  Dataset ds = demo_dataset(12, 4, 3, 8, 2);
  kajitsuka::MemorizeOptions mo;
  const kajitsuka::Memorized m = kajitsuka::memorize(ds, mo);
  Analysis a = analyse(m.net, ds, AnalyseOptions{});
  EXPECT_TRUE(a.predictions.all());
  EXPECT_EQ(a.predictions.kind, LabelKind::values);
  EXPECT_EQ(a.predictions.tokens, 48);
  EXPECT_GT(a.min_bits, 0u);
  EXPECT_LE(a.min_bits, a.predictions.bits);
  ASSERT_EQ(a.layers.size(), 1u);
  // The construction's own certificate separates the contexts; analyse finds a positive δ too,
  // and no more than the construction's lower bound on every pair allows... at least as large.
  EXPECT_GT(a.layers[0].delta, 0);
  EXPECT_GE(a.layers[0].log10_delta, m.contextual.separation.log10_delta_lo - 1e-9);
  EXPECT_GT(a.layers[0].projection_gap, 0);
  ds.sequences[5].y(0, 2) += 1;  // one wrong label
  a = analyse(m.net, ds, quick());
  ASSERT_EQ(a.predictions.failures.size(), 1u);
  EXPECT_EQ(a.predictions.failures[0].sequence, 5u);
  EXPECT_EQ(a.predictions.failures[0].token, 2u);
  EXPECT_EQ(a.predictions.failures[0].kind, FailureKind::wrong);
  EXPECT_EQ(a.min_bits, 0u);
  EXPECT_NE(a.summary().find("sequence 6 token 3: wrong"), std::string::npos) << a.summary();
}

TEST(Analyse, ATrainedClassifierAndAFlippedLabel) {
  TaskOptions t;
  t.N = 12, t.n = 4, t.d = 3, t.V = 8, t.seed = 3;
  Dataset data = make_task("memorize", t);
  Network<double> net(Architecture::from_json(nlohmann::json::parse(
      R"({"d":3,"readout":3,"layers":[{"type":"attention","heads":2,"head_size":2},
          {"type":"feedforward","width":48,"activation":"gelu"}]})")));
  init_random(net, 1);
  TrainConfig c;
  c.loss = Loss::cross_entropy;
  c.steps = 3000, c.batch = 6, c.lr = 2e-2, c.warmup = 50, c.seed = 5;
  c.stop_at_full_accuracy = true;
  train(net, data, nullptr, c);
  const Network<Rational> exact = network_cast<Rational>(net);
  Analysis a = analyse(exact, data, AnalyseOptions{});
  EXPECT_EQ(a.predictions.kind, LabelKind::classes);
  EXPECT_TRUE(a.predictions.all()) << a.summary();
  ASSERT_EQ(a.rounded.size(), 3u);
  EXPECT_EQ(a.rounded[0].first, "float32");
  EXPECT_TRUE(a.rounded[0].second.all());  // float32 weights keep a decided argmax
  const int label = static_cast<int>(numerator(data.sequences[7].y(0, 1)).convert_to<long>());
  data.sequences[7].y(0, 1) = (label + 1) % 3;
  a = analyse(exact, data, quick());
  ASSERT_EQ(a.predictions.failures.size(), 1u);
  EXPECT_EQ(a.predictions.failures[0].sequence, 7u);
  EXPECT_EQ(a.predictions.failures[0].kind, FailureKind::wrong);
  EXPECT_EQ(a.predictions.failures[0].predicted, std::to_string(label));
}

// Control: without positions, an attention layer whose output projection is 0 gives a token the
// same output in every context, so δ must come out 0 exactly (and the different tokens stay apart).
TEST(Analyse, SeparationIsZeroWhereContextsCannotBeToldApart) {
  Dataset ds = demo_dataset(12, 4, 3, 8, 2);
  Network<Rational> net(Architecture::from_json(nlohmann::json::parse(
      R"({"d":3,"layers":[{"type":"attention","heads":1,"head_size":1},{"type":"attention","heads":1,"head_size":1}]})")));
  net.layers[0].wq(0, 0) = 1, net.layers[0].wk(0, 1) = 1, net.layers[0].wv(0, 2) = 1;  // W_O = 0
  net.layers[1] = net.layers[0];
  net.layers[1].wo(0, 0) = Rational(1, 2);
  AnalyseOptions o = quick();
  o.tolerance = "1000";
  const Analysis a = analyse(net, ds, o);
  ASSERT_EQ(a.layers.size(), 2u);
  EXPECT_EQ(a.layers[0].delta, 0);
  EXPECT_TRUE(std::isinf(a.layers[0].log10_delta));
  EXPECT_GT(a.layers[0].cross, 0);
  EXPECT_GT(a.layers[1].delta, 0);  // the second layer mixes the context in
}

TEST(Precision, DoublingTriesTwiceTheBitsUpToTheCap) {
  std::vector<unsigned> tried;
  auto never = [&](unsigned b) {
    tried.push_back(b);
    return false;
  };
  Doubling d = certify_with_doubling(64, 1000, never);
  EXPECT_EQ(tried, (std::vector<unsigned>{64, 128, 256, 512, 1000}));
  EXPECT_EQ(d.bits, 1000u);
  EXPECT_FALSE(d.finished);
  tried.clear();
  d = certify_with_doubling(64, 1000, [&](unsigned b) {
    tried.push_back(b);
    return b >= 200;
  });
  EXPECT_EQ(tried, (std::vector<unsigned>{64, 128, 256}));
  EXPECT_TRUE(d.finished);
  EXPECT_EQ(d.bits, 256u);
  tried.clear();  // an attempt that asks for more than twice its bits, and one past the cap
  d = certify_with_doubling(64, 1000, [&](unsigned b, unsigned& next) {
    tried.push_back(b);
    next = b == 64 ? 700 : 5000;
    return false;
  });
  EXPECT_EQ(tried, (std::vector<unsigned>{64, 700, 1000}));
  tried.clear();  // a start above the cap starts at the cap; no overflow near the top of unsigned
  certify_with_doubling(2000, 1000, never);
  EXPECT_EQ(tried, (std::vector<unsigned>{1000}));
  tried.clear();
  certify_with_doubling(3000000000u, 4000000000u, never);
  EXPECT_EQ(tried, (std::vector<unsigned>{3000000000u, 4000000000u}));
}

TEST(Names, OneTablePerEnumParsesWhatItPrints) {
  for (const char* name : score_names.names)
    EXPECT_STREQ(score_names(score_names.parse(name)), name);
  EXPECT_EQ(rpe_names.parse("t5"), Rpe::t5);
  EXPECT_STREQ(layer_kind_names(LayerKind::sepconv), "sepconv");
  EXPECT_EQ(parse_loss("cross-entropy"), Loss::cross_entropy);
  EXPECT_STREQ(loss_names(parse_loss("ce")), "ce");
  try {
    kajitsuka::value_map_names.parse("zang");
    FAIL() << "a misspelt value map was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "value map \"zang\": expected zhang, bounded or deep");
  }
  EXPECT_EQ(failure_kind_names.choices(), "wrong or undecided");
  EXPECT_EQ(label_kind("values", Dataset{}, 3), LabelKind::values);
  EXPECT_THROW(label_kind("class", Dataset{}, 3), Error);
}
