// uatlab analyse: certified memorization (and a named failure when a label is wrong), separation
// per attention layer (and δ = 0 where contexts cannot be told apart), exact rounding to the
// narrow formats.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/train/trainer.hpp"
#include "uatlab/verify/analyse.hpp"
#include "uatlab/verify/bounds.hpp"
#include "uatlab/verify/evaluate.hpp"
#include "uatlab/verify/precision.hpp"
#include "uatlab/verify/zonotope.hpp"

using namespace uatlab;

namespace {

AnalyseOptions quick() {
  AnalyseOptions o;
  o.rounding = false;
  return o;
}

// 12 sequences of 4 tokens from 8, 3 classes per token; and a 2-head GELU classifier trained on them
// in double to full accuracy.
Dataset memorize_task() {
  TaskOptions t;
  t.N = 12, t.n = 4, t.d = 3, t.V = 8, t.seed = 3;
  return make_task("memorize", t);
}
Network<Rational> trained_classifier(const Dataset& data) {
  Network<double> net(Architecture::from_json(nlohmann::json::parse(
      R"({"d":3,"readout":3,"layers":[{"type":"attention","heads":2,"head_size":2},
          {"type":"feedforward","width":48,"activation":"gelu"}]})")));
  init_random(net, 1);
  TrainConfig c;
  c.loss = Loss::cross_entropy;
  c.steps = 3000, c.batch = 6, c.lr = 2e-2, c.warmup = 50, c.seed = 5;
  c.stop_at_full_accuracy = true;
  train(net, data, nullptr, c);
  return network_cast<Rational>(net);
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
  // The search from the margins' guess, hardest sequences first, finds what the plain bisection
  // over plain probes finds; and the guess is close (a precision or two).
  const Rational tol = parse_rational("1e-6");
  EXPECT_EQ(a.min_bits, min_certified_bits(a.predictions.bits, [&](unsigned b) {
              return certify_predictions(m.net, ds, LabelKind::values, tol, b).all();
            }));
  const unsigned guess = a.predictions.guess_min_bits();
  EXPECT_GT(guess, 0u);
  EXPECT_LE(std::abs(static_cast<int>(guess) - static_cast<int>(a.min_bits)), 8);
  EXPECT_EQ(a.predictions.hardest_first().size(), ds.sequences.size());
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
  Dataset data = memorize_task();
  const Network<Rational> exact = trained_classifier(data);
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

// Without the fewest-bits search, the certified engine's balls decide the predictions where they can
// (the same verdict as MPFI's, wrong labels included) and say so; where they leave one undecided,
// MPFI's doubling decides as before.
TEST(Analyse, TheEngineDecidesWhereItCanAndMpfiWhereItCannot) {
  Dataset data = memorize_task();
  const Network<Rational> exact = trained_classifier(data);
  data.sequences[7].y(0, 1) = (numerator(data.sequences[7].y(0, 1)).convert_to<long>() + 1) % 3;
  AnalyseOptions o;
  o.min_bits = false, o.separation = false;
  const Analysis by_engine = analyse(exact, data, o);
  o.engine = false;
  const Analysis by_mpfi = analyse(exact, data, o);
  EXPECT_EQ(by_engine.predictions.bits, 0u);
  EXPECT_EQ(by_engine.predictions.tier, "ball:53");
  EXPECT_GT(by_mpfi.predictions.bits, 0u);
  for (const Analysis* a : {&by_engine, &by_mpfi}) {
    EXPECT_EQ(a->predictions.tokens, 48);
    EXPECT_EQ(a->predictions.certified, 47);
    ASSERT_EQ(a->predictions.failures.size(), 1u);
    EXPECT_EQ(a->predictions.failures[0].sequence, 7u);
    EXPECT_EQ(a->predictions.failures[0].kind, FailureKind::wrong);
    ASSERT_EQ(a->rounded.size(), 3u);
    EXPECT_TRUE(a->rounded[0].second.all() || a->rounded[0].second.failures.front().sequence == 7u);
  }
  EXPECT_EQ(by_engine.report()["memorization"]["tier"], "ball:53");
  EXPECT_FALSE(by_engine.report()["memorization"].contains("bits"));
  EXPECT_EQ(by_mpfi.report()["memorization"]["tier"],
            "interval:" + std::to_string(by_mpfi.report()["memorization"]["bits"].get<unsigned>()));
  EXPECT_NE(by_engine.summary().find("the certified engine's ball:53"), std::string::npos)
      << by_engine.summary();
  // Regions by balls: the boxes through ball:53 find radii close to the intervals' on this shallow
  // network (their soundness at sampled points: RegionCertificatesHoldAtSampledPointsInsideTheBox).
  o.epsilon = "1/1000", o.epsilon_steps = 8, o.rounding = false, o.engine = true;
  o.region_method = RegionMethod::balls;
  const Analysis region_engine = analyse(exact, data, o);
  o.region_method = RegionMethod::intervals;
  const Analysis region_mpfi = analyse(exact, data, o);
  EXPECT_TRUE(region_mpfi.predictions.tier.empty());  // a region by intervals: the points by MPFI
  ASSERT_TRUE(region_engine.region && region_mpfi.region);
  EXPECT_EQ(region_engine.region->predictions.tier, "ball:53");
  EXPECT_EQ(region_engine.report()["region"]["predictions"]["tier"], "ball:53");
  for (std::size_t i = 0; i < data.sequences.size(); ++i) {
    const double e = region_engine.region->largest_epsilon[i], m = region_mpfi.region->largest_epsilon[i];
    if (m == 0) {
      EXPECT_EQ(e, 0) << i;
    } else {  // 0.89-0.99 of MPFI's (a ball covers exp's asymmetric range symmetrically)
      EXPECT_GT(e, 0.85 * m) << i;
      EXPECT_LT(e, 1.1 * m) << i;
    }
  }
  // |y − label| ≤ 1e-30 on outputs of 4/3: too narrow for ball:53's widths (about 1e-16), not for
  // ball:113's (1e-34); 1e-45 is too narrow for both, and MPFI's doubling certifies it at 256 bits.
  Network<Rational> third(Architecture::from_json(
      nlohmann::json::parse(R"({"d":1,"layers":[{"type":"feedforward","width":1}]})")));
  third.layers[0].w1(0, 0) = 1, third.layers[0].w2(0, 0) = Rational(1, 3);  // x + relu(x)/3
  Dataset one;
  one.d = 1, one.label_dim = 1;
  one.sequences.push_back(
      {Mat<Rational>::Constant(1, 2, 1), {}, Mat<Rational>::Constant(1, 2, Rational(4, 3)), {}});
  AnalyseOptions v;
  v.min_bits = false, v.separation = false, v.rounding = false, v.labels = "values", v.tolerance = "1e-30";
  const Analysis by_113 = analyse(third, one, v);
  EXPECT_TRUE(by_113.predictions.all());
  EXPECT_EQ(by_113.predictions.bits, 0u);
  EXPECT_EQ(by_113.predictions.tier, "ball:113");
  v.tolerance = "1e-45";
  const Analysis fallback = analyse(third, one, v);
  EXPECT_TRUE(fallback.predictions.all());
  EXPECT_EQ(fallback.predictions.bits, 256u);
  EXPECT_TRUE(fallback.predictions.tier.empty());
  EXPECT_EQ(engine_predictions(third, one, LabelKind::values, parse_rational("1e-45")).certified, 0);
}

// analyse --epsilon: a sequence certified at radius ε keeps every prediction for every input in the
// box. Points sampled in each sequence's largest certified box (corners included), evaluated in
// 200-bit MPFR, never change the argmax; the box at ε itself is certified where the margins say so;
// and twice a sequence's largest radius is not certified by the same search (bisection brackets it).
namespace {
void region_holds_at_sampled_points(const Dataset& data, const Network<Rational>& exact, RegionMethod method,
                                    std::vector<double>& largest) {
  SCOPED_TRACE(region_method_names(method));
  AnalyseOptions o = quick();
  o.min_bits = false, o.separation = false;
  o.epsilon = "1/1000", o.epsilon_steps = 12, o.region_method = method;
  const Analysis a = analyse(exact, data, o);
  ASSERT_TRUE(a.predictions.all());
  ASSERT_TRUE(a.region.has_value());
  const Region& r = *a.region;
  ASSERT_EQ(r.largest_epsilon.size(), data.sequences.size());
  ASSERT_EQ(r.predictions.margin.size(), data.sequences.size());
  for (std::size_t i = 0; i < data.sequences.size(); ++i) {
    const bool all_at_eps = std::all_of(r.predictions.margin[i].begin(), r.predictions.margin[i].end(),
                                        [](double m) { return m > 0; });
    EXPECT_EQ(all_at_eps, r.largest_epsilon[i] >= 1e-3)
        << i;  // certified at ε exactly when the margins say so
  }
  int certified_sequences = 0;
  Rng rng(7);
  const MpfrPrecision precision(200);
  const Network<Mpfr> hp = network_cast<Mpfr>(exact);
  for (std::size_t i = 0; i < data.sequences.size(); ++i) {
    const double e = r.largest_epsilon[i];
    if (!(e > 0)) continue;
    ++certified_sequences;
    const Sequence& s = data.sequences[i];
    for (int sample = 0; sample < 40; ++sample) {
      Mat<Mpfr> x = matrix_cast<Mpfr>(s.x);
      for (Eigen::Index j = 0; j < x.size(); ++j) {
        const double u = sample < 2 ? (sample == 0 ? -1.0 : 1.0)
                                    : (sample < 4 ? (j % 2 ? 1.0 : -1.0) : 2 * rng.uniform() - 1);
        x(j) += Mpfr(u * e);
      }
      const Mat<Mpfr> y = forward(hp, x);
      for (Eigen::Index k = 0; k < y.cols(); ++k) {
        Eigen::Index best = 0;
        for (Eigen::Index row = 1; row < y.rows(); ++row)
          if (y(row, k) > y(best, k)) best = row;
        EXPECT_EQ(best, numerator(s.y(0, k)).convert_to<long>()) << "sequence " << i << " token " << k;
      }
    }
  }
  EXPECT_GT(certified_sequences, 0);
  // Twice the largest radius found is beyond what the same bisection certified for the sequence.
  AnalyseOptions twice = o;
  ASSERT_GT(r.largest_epsilon[0], 0);
  twice.epsilon = rational_of(2 * r.largest_epsilon[0]).str();
  twice.epsilon_steps = 0;
  const Analysis b =
      analyse(exact, Dataset{{data.sequences[0]}, data.token_input, data.d, data.label_dim}, twice);
  EXPECT_FALSE(b.region->predictions.all()) << "sequence 1 at twice its largest certified radius";
  largest = r.largest_epsilon;
}
}  // namespace

// "Bits" in both senses (issue 78): min_bits (MPFI, certified) and rounded_bits (the network run at
// b bits, round to nearest at every operation, gives every label: measured with MPFR). y = x/3 with
// |y - label| <= 2^-20: both need about 20 bits; at 8 bits the rounded network misses the labels.
TEST(Analyse, BitsAreReportedInBothSenses) {
  Network<Rational> net(Architecture::from_json(nlohmann::json::parse(R"({"d":1,"readout":1,"layers":[]})")));
  net.readout_w(0, 0) = Rational(1, 3);
  const Dataset ds = parse_dataset("{\"x\": [[1], [2]], \"y\": [[\"1/3\"], [\"2/3\"]]}\n", "data");
  AnalyseOptions o = quick();
  o.separation = false, o.labels = "values", o.tolerance = "1/1048576";
  const Analysis a = analyse(net, ds, o);
  ASSERT_GT(a.min_bits, 0u);
  ASSERT_GT(a.rounded_bits, 0u);
  EXPECT_GE(a.rounded_bits, 18u);
  EXPECT_LE(a.rounded_bits, 2 * a.min_bits);
  EXPECT_TRUE(
      labels_at_rounded_bits(net, ds, LabelKind::values, parse_rational(o.tolerance), a.rounded_bits));
  EXPECT_FALSE(labels_at_rounded_bits(net, ds, LabelKind::values, parse_rational(o.tolerance), 8));
  EXPECT_EQ(a.report()["rounded_bits"], a.rounded_bits);
  EXPECT_NE(a.summary().find("rounding to nearest at every operation, gives every label"), std::string::npos)
      << a.summary();
}

// The radius search starts above 0 (issue 78: --epsilon 0 and 1e-400 reported 0 where 1.1e-3
// certifies) and says when a sequence is still certified where its doubling stops.
TEST(Analyse, RadiusSearchStartsAboveZeroAndSaysWhereItStopped) {
  Network<Rational> net(Architecture::from_json(nlohmann::json::parse(R"({"d":1,"readout":2,"layers":[]})")));
  net.readout_b(0, 0) = 1;  // class 0 whatever the input: every box is certified
  const Dataset ds = parse_dataset("{\"x\": [[1], [2]], \"y\": [[0], [0]]}\n", "data");
  AnalyseOptions o = quick();
  o.min_bits = false, o.separation = false, o.labels = "classes", o.epsilon = "1/1024", o.epsilon_steps = 2;
  const Analysis a = analyse(net, ds, o);
  ASSERT_TRUE(a.region.has_value());
  EXPECT_EQ(a.region->at_cap, 1);
  EXPECT_EQ(a.region->largest_epsilon[0], 1024.0);  // 2^20 / 1024
  EXPECT_EQ(a.report()["region"]["sequences_at_cap"], 1);
  EXPECT_NE(a.summary().find("1 sequences still certified where the search stops"), std::string::npos)
      << a.summary();
  for (const char* e : {"0", "1e-400"}) {
    o.epsilon = e;
    try {
      analyse(net, ds, o);
      ADD_FAILURE() << e << " is refused";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("at least 2^-1000"), std::string::npos) << err.what();
    }
  }
}

TEST(Analyse, RegionCertificatesHoldAtSampledPointsInsideTheBox) {
  const Dataset data = memorize_task();
  const Network<Rational> exact = trained_classifier(data);
  std::vector<double> plain, mv;
  region_holds_at_sampled_points(data, exact, RegionMethod::intervals, plain);
  // The certified engine's balls (a looser propagation than intervals, as sound).
  std::vector<double> balls;
  region_holds_at_sampled_points(data, exact, RegionMethod::balls, balls);
  // The mean-value form (intersected with the intervals) certifies larger boxes on this network.
  region_holds_at_sampled_points(data, exact, RegionMethod::mean_value, mv);
  // So do the affine forms (the zonotope), on every sequence.
  std::vector<double> zono;
  region_holds_at_sampled_points(data, exact, RegionMethod::zonotope, zono);
  ASSERT_EQ(mv.size(), plain.size());
  ASSERT_EQ(zono.size(), plain.size());
  int larger = 0, zono_larger = 0;
  for (std::size_t i = 0; i < plain.size(); ++i)
    larger += mv[i] > plain[i], zono_larger += zono[i] > plain[i];
  EXPECT_GT(larger, 0);
  EXPECT_EQ(zono_larger, static_cast<int>(plain.size()));
  AnalyseOptions o = quick();
  o.min_bits = false, o.separation = false, o.epsilon = "1/1000";
  AnalyseOptions with_affine = o;  // affine pieces need point inputs: refused, as docs/analyse.md says
  with_affine.affine = true;
  try {
    analyse(exact, data, with_affine);
    ADD_FAILURE() << "--epsilon with --affine is refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--epsilon and --affine"), std::string::npos) << e.what();
  }
  // The mean-value form needs the gradient: a hardmax network is refused, named, not left uncertified.
  Network<Rational> hard = exact;
  for (LayerSpec& l : hard.arch.layers)
    if (l.kind == LayerKind::attention) l.score = Score::hardmax;
  for (Layer<Rational>& l : hard.layers)
    if (l.spec.kind == LayerKind::attention) l.spec.score = Score::hardmax;
  AnalyseOptions mean_value = o;
  mean_value.region_method = RegionMethod::mean_value;
  try {
    analyse(hard, data, mean_value);
    ADD_FAILURE() << "mean-value on hardmax attention is refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hardmax"), std::string::npos) << e.what();
  }
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

// The pairs are split over the threads, each under its own rounding mode: the bounds must be the
// same on one thread and on two, and δ at most every same-token pair's distance enclosed at 256 bits.
TEST(Analyse, SeparationIsTheSameOnAnyThreadCountAndBelowEveryPair) {
  const Dataset ds = demo_dataset(40, 4, 3, 10, 1);
  kajitsuka::MemorizeOptions mo;
  const kajitsuka::Memorized m = kajitsuka::memorize(ds, mo);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<LayerSeparation> one = layer_separations(m.net, ds, 128, 1);
  omp_set_num_threads(2);
  const std::vector<LayerSeparation> two = layer_separations(m.net, ds, 128, 1);
  omp_set_num_threads(threads);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(one[0].delta, two[0].delta);
  EXPECT_EQ(one[0].cross, two[0].cross);
  EXPECT_EQ(one[0].same_token_pairs, two[0].same_token_pairs);
  EXPECT_EQ(one[0].projection_gap, two[0].projection_gap);
  EXPECT_EQ(one[0].v, two[0].v);
  // Every same-token pair in different contexts, enclosed at 256 bits: δ is at most its upper end.
  const MpfrPrecision precision(256);
  Network<Rational> first = m.net;
  first.arch.layers.resize(1), first.layers.resize(1);
  first.arch.readout = 0, first.readout_w.resize(0, 0), first.readout_b.resize(0, 0);
  const std::vector<Mat<Mpfi>> out = forward_dataset(network_cast<Mpfi>(first), ds);
  auto set_of = [&](std::size_t i) {
    std::vector<std::string> v;
    for (Eigen::Index k = 0; k < ds.sequences[i].x.cols(); ++k)
      v.push_back(ds.sequences[i].x(0, k).str() + "," + ds.sequences[i].x(1, k).str());
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  };
  double least = std::numeric_limits<double>::infinity();
  long long pairs = 0;
  for (std::size_t i = 0; i < ds.sequences.size(); ++i)
    for (std::size_t j = i; j < ds.sequences.size(); ++j) {
      if (set_of(i) == set_of(j)) continue;
      const Mat<Rational>&xi = ds.sequences[i].x, &xj = ds.sequences[j].x;
      for (Eigen::Index a = 0; a < xi.cols(); ++a)
        for (Eigen::Index b = 0; b < xj.cols(); ++b) {
          if (xi.col(a) != xj.col(b)) continue;
          Mpfi sq(0);
          for (Eigen::Index r = 0; r < out[i].rows(); ++r)
            sq += (out[i](r, a) - out[j](r, b)) * (out[i](r, a) - out[j](r, b));
          least = std::min(least, to_double_up(upper(mp::sqrt(sq))));
          ++pairs;
        }
    }
  EXPECT_EQ(pairs, one[0].same_token_pairs);
  EXPECT_GT(one[0].delta, 0);
  EXPECT_LE(one[0].delta, least);
}

// The guess only orders the probes: for every threshold and every guess (none, far below, a little
// below, exact, above), the answer is the plain bisection's; a guess a precision or two low costs
// one passing probe.
TEST(Precision, FewestBitsAreTheSameWhateverTheGuess) {
  for (unsigned need : {3u, 20u, 61u, 68u, 100u, 128u}) {
    const unsigned answer = mpfr_carried_bits(need);
    int passing = 0;
    auto certified = [&](unsigned b) {
      EXPECT_EQ(b, mpfr_carried_bits(b)) << "a probe at a precision MPFR does not carry";
      passing += b >= answer;
      return b >= answer;
    };
    const unsigned plain = min_certified_bits(128, certified);
    EXPECT_EQ(plain, answer) << need;
    for (unsigned guess :
         {0u, 2u, 5u, need > 8 ? need - 8 : 3u, need > 3 ? need - 3 : 3u, need, need + 5, 127u, 500u}) {
      passing = 0;
      EXPECT_EQ(min_certified_bits(128, certified, guess), answer) << "need " << need << ", guess " << guess;
      if (guess > 2 && guess + 4 >= need && guess <= need && need < 128) {
        EXPECT_EQ(passing, 1) << need << " " << guess;
      }
    }
  }
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

// Issue 38: where a bound becomes text or a rounded double, it stays a bound.
TEST(Bounds, PrintedBoundsAreRoundedOutward) {
  Rng rng(5);
  std::vector<double> xs = {0.00321, 1.19977e-5, -11322.17, 1e-310, 5e-324, 1.7976931348623157e308,
                            2.5,     -0.0,       1};
  for (int i = 0; i < 2000; ++i)
    xs.push_back(std::ldexp(rng.gauss(), static_cast<int>(rng.uniform() * 2000) - 1000));
  for (double x : xs)
    for (int digits : {1, 3, 4, 6, 17}) {
      const Rational exact = rational_of(x);
      EXPECT_LE(parse_rational(lower_text(x, digits)), exact) << x << " " << digits;
      EXPECT_GE(parse_rational(upper_text(x, digits)), exact) << x << " " << digits;
    }
  EXPECT_EQ(lower_text(std::log10(0.00321), 3), "-2.5");  // printed "-2.49" before: 10^-2.49 > 0.00321
  EXPECT_EQ(upper_text(0.1, 3), "0.101");
  EXPECT_EQ(lower_text(-std::numeric_limits<double>::infinity()), "-inf");
  const MpfrPrecision precision(300);
  for (double x : xs) {
    if (!(x > 0)) continue;
    const Mpfr exact = mp::log10(Mpfr(x));
    EXPECT_LE(Mpfr(log10_down(x)), exact) << x;
    EXPECT_GE(Mpfr(log10_up(x)), exact) << x;
  }
  EXPECT_TRUE(std::isinf(log10_down(0.0)));
  EXPECT_TRUE(std::isnan(log10_down(-1.0)));
}

TEST(Bounds, IntervalTextEnclosesTheValue) {  // 2^-100 printed [7.88860905221011805412e-31, same] before
  const MpfrPrecision precision(100);
  const Mpfi x = Mpfi(1) / Mpfi(mp::pow(Mpfr(2), 100));
  const std::string lo = decimal_text(lower(x), MPFR_RNDD), hi = decimal_text(upper(x), MPFR_RNDU);
  const Rational exact = rational_of(std::ldexp(1.0, -100));
  EXPECT_LE(parse_rational(lo), exact) << lo;
  EXPECT_GE(parse_rational(hi), exact) << hi;
  EXPECT_NE(lo, hi);
  const std::string text = Scalar<Mpfi>::to_string(x);
  EXPECT_EQ(text, "[" + lo + "," + hi + "]");
}

TEST(Analyse, NothingCheckedCertifiesNothing) {  // every token masked: an error, not "all certified"
  Dataset ds = demo_dataset(4, 3, 3, 8, 2);
  for (Sequence& s : ds.sequences)
    s.mask.assign(s.n(), 0);
  Network<Rational> net(Architecture::from_json(nlohmann::json::parse(
      R"({"d":3,"readout":3,"layers":[{"type":"attention","heads":1,"head_size":1}]})")));
  try {
    analyse(net, ds, quick());
    FAIL() << "zero checked predictions were reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no prediction to check"), std::string::npos) << e.what();
  }
}

TEST(Analyse, HugeOutputsMakeNoFalseSeparation) {
  // Outputs beyond double's range (1e400·relu(x_0)), W_O = 0: a token's outputs in different
  // contexts are identical (δ = 0). Midpoints of inf once made a NaN bound that was dropped and a
  // separation of 0.5 was printed; now the separation is refused there.
  Dataset ds = demo_dataset(12, 4, 3, 8, 2);
  Network<Rational> net(Architecture::from_json(nlohmann::json::parse(
      R"({"d":3,"layers":[{"type":"feedforward","width":1},{"type":"attention","heads":1,"head_size":1}]})")));
  net.layers[0].w1(0, 0) = 1;
  net.layers[0].w2.setConstant(parse_rational("1e400"));
  net.layers[1].wv(0, 0) = 1;  // Q = K = 0: uniform attention; W_O = 0
  AnalyseOptions o = quick();
  o.tolerance = "1e500";
  const Analysis a = analyse(net, ds, o);
  EXPECT_TRUE(a.layers.empty());
  EXPECT_NE(a.separation_note.find("beyond double's range"), std::string::npos) << a.separation_note;
  // The same network at 1e300 stays in range: δ = 0, certified.
  net.layers[0].w2.setConstant(parse_rational("1e300"));
  const Analysis b = analyse(net, ds, o);
  ASSERT_EQ(b.layers.size(), 1u);
  EXPECT_EQ(b.layers[0].delta, 0);
}

TEST(Analyse, TheSummaryPrintsBoundsRoundedDown) {  // δ exactly 0.00321 printed ">= 10^-2.49" before
  Analysis a;
  a.predictions.tokens = a.predictions.certified = 1;
  a.predictions.bits = 49;
  LayerSeparation l;
  l.same_token_pairs = 1;
  l.delta = 0.00321, l.log10_delta = log10_down(0.00321);
  l.cross = 1, l.log10_cross = 0, l.projection_gap = 0.1;
  a.layers.push_back(l);
  const std::string s = a.summary();
  EXPECT_NE(s.find(">= 10^-2.5 "), std::string::npos) << s;
  EXPECT_NE(s.find("along v >= 0.1\n"), std::string::npos) << s;  // the double 0.1 is above 1/10
  EXPECT_NE(s.find("MPFI at 51 bits"), std::string::npos) << s;   // the bits MPFR carried, not 49
}

TEST(Analyse, NarrowFormatsAreRoundedAsPyTorchRoundsThem) {
  // w = 1 + 2^-8 + 2^-30: straight to bfloat16 it is 1 + 2^-7; PyTorch's .to(bfloat16) of a float64
  // model goes through float32 (1 + 2^-8, a tie) and holds 1. The same for float16 with 1 + 2^-11 + 2^-40.
  bool over = false;
  auto two_to = [](int e) { return rational_of(std::ldexp(1.0, e)); };  // exact
  const Rational w = 1 + two_to(-8) + two_to(-30);
  EXPECT_EQ(round_weight(w, "bfloat16", false, over), 1);
  EXPECT_EQ(round_weight(w, "bfloat16", true, over), 1 + two_to(-7));
  const Rational h = 1 + two_to(-11) + two_to(-40);
  EXPECT_EQ(round_weight(h, "float16", false, over), 1);
  EXPECT_EQ(round_weight(h, "float16", true, over), 1 + two_to(-10));
  EXPECT_EQ(rounding_path("bfloat16", false), "to float32 then bfloat16");
  EXPECT_EQ(rounding_path("float16", true), "to float16");
  EXPECT_THROW(round_weight(w, "float8", false, over), Error);
}

// The zonotope encloses the network at every point of the box: random networks with every feature it
// follows (an input projection, positions, pre-norm, a layer-norm sub-layer, causal, windowed and
// strict-past softmax, linear scores, tied QKV, biases, relative positions, √d scaling, ReLU, both
// GELUs, a jumping piecewise activation, a readout; and feed-forward sub-layers alone), boxes of radius 1e-6
// to 1/4, 24 points each (two corners, two alternating corners, random points) evaluated in 200-bit MPFR:
// every output within its enclosure, every difference of two outputs within the enclosure of the difference
// of their forms. Positive control: at radius 1e-6 the forms' enclosures are narrower than plain intervals'.
TEST(Analyse, ZonotopeEnclosesTheNetworkAtSampledPointsOfTheBox) {
  const char* archs[] = {
      R"({"d":4,"input":3,"max_len":6,"readout":3,"layers":[
          {"type":"attention","heads":2,"head_size":2,"pre_norm":true,"bias":true,"causal":true,"sqrt_scaling":true},
          {"type":"feedforward","width":8,"activation":"gelu","pre_norm":true},{"type":"layernorm"}]})",
      R"({"d":4,"readout":2,"layers":[{"type":"attention","heads":1,"head_size":4,"rpe":"t5","scale":"3/2"},
          {"type":"layernorm","eps":"1/1000"},{"type":"feedforward","width":6},{"type":"layernorm"}]})",
      R"({"d":3,"layers":[{"type":"attention","heads":1,"head_size":3,"score":"linear","tied_qkv":true},
          {"type":"feedforward","width":5,"activation":{"type":"piecewise","breakpoints":["-1/2","1/3"],
           "pieces":[["0","-1"],["2","1/4"],["-1","3"]]}},
          {"type":"attention","heads":3,"head_size":1,"causal":true,"window":2,"rpe":"lin","bias":true},
          {"type":"attention","heads":1,"head_size":2,"causal":true,"strict_past":true,"rpe":"log"},
          {"type":"feedforward","width":4,"activation":"gelu_tanh"}]})",
      R"({"d":4,"readout":2,"layers":[{"type":"attention","heads":2,"head_size":2,"rope":7,"rpe":"lin","causal":true},
          {"type":"attention","heads":1,"head_size":4,"rope":10000,"bias":true},{"type":"feedforward","width":5}]})",
      // No products of forms: the linearisations' errors are all the remainder holds.
      R"({"d":3,"readout":2,"layers":[{"type":"feedforward","width":6},
          {"type":"feedforward","width":5,"activation":"gelu"},{"type":"feedforward","width":4,"activation":"gelu_tanh"}]})"};
  const double radii[] = {1e-6, 1.0 / 64, 0.25};
  Rng rng(7);
  int arch_index = 0, narrower = 0, entries = 0;
  for (const char* text : archs) {
    Network<double> net(Architecture::from_json(nlohmann::json::parse(text)));
    init_random(net, 11 + static_cast<std::uint64_t>(arch_index));
    const Network<Rational> exact = network_cast<Rational>(net);
    const Eigen::Index n = 5, rows = net.arch.in_dim();
    Mat<Rational> x0(rows, n);
    for (Eigen::Index j = 0; j < x0.size(); ++j)
      x0(j) = rational_of(rng.uniform(-1, 1));
    for (double e : radii) {
      SCOPED_TRACE("architecture " + std::to_string(arch_index) + ", radius " + std::to_string(e));
      Zonotope z;
      Mat<Mpfi> plain;
      {
        const MpfrPrecision p(128);
        const Network<Mpfi> ni = network_cast<Mpfi>(exact);
        z = zonotope_forward(ni, matrix_cast<Mpfi>(x0), rational_of(e));
        Mat<Mpfi> box = matrix_cast<Mpfi>(x0);
        const Mpfi eps = Scalar<Mpfi>::from(rational_of(e));
        for (Eigen::Index j = 0; j < box.size(); ++j)
          box(j) = hull(lower(Mpfi(box(j) - eps)), upper(Mpfi(box(j) + eps)));
        plain = forward(ni, box);
      }
      ASSERT_EQ(z.rows(), plain.rows());
      const MpfrPrecision p(200);
      const Network<Mpfr> hp = network_cast<Mpfr>(exact);
      for (int sample = 0; sample < 24; ++sample) {
        Mat<Mpfr> x = matrix_cast<Mpfr>(x0);
        std::vector<double> noise(static_cast<std::size_t>(x.size()));  // the point's noise symbols
        for (Eigen::Index j = 0; j < x.size(); ++j) {
          const double u = sample < 2 ? (sample == 0 ? -1.0 : 1.0)
                                      : (sample < 4 ? ((j + sample) % 2 ? 1.0 : -1.0) : rng.uniform(-1, 1));
          x(j) += Mpfr(u) * Mpfr(e);
          noise[static_cast<std::size_t>(j)] = u;
        }
        const Mat<Mpfr> y = forward(hp, x);
        for (Eigen::Index k = 0; k < y.cols(); ++k)
          for (Eigen::Index r = 0; r < y.rows(); ++r) {
            // The invariant itself, at this point's symbols: |y − (c + G·e)| ≤ r (the input's
            // generators are e·I, its centers x0, so e_j = u_j; the symbols added along the way
            // take unknown values in [−1, 1], so their coefficients count as remainders here).
            Mpfr form(z.c(r, k)), rest(z.r(r, k));
            for (Eigen::Index j = 0; j < z.G.cols(); ++j) {
              const Mpfr g(z.G(r + z.rows() * k, j));
              if (j < x0.size())
                form += g * Mpfr(noise[static_cast<std::size_t>(j)]);
              else
                rest += abs(g);
            }
            EXPECT_LE(Mpfr(abs(Mpfr(y(r, k) - form))), rest) << "form of output " << r << ", token " << k;
            const Mpfi box = z.enclose(r, k);
            EXPECT_TRUE(lower(box) <= y(r, k) && y(r, k) <= upper(box))
                << "output " << r << " of token " << k;
            const Eigen::Index other = (r + 1) % y.rows();
            const Mpfi diff = z.enclose(r, k, other);
            const Mpfr dy = y(r, k) - y(other, k);
            EXPECT_TRUE(lower(diff) <= dy && dy <= upper(diff)) << "outputs " << r << " - " << other;
          }
      }
      if (e == radii[0])
        for (Eigen::Index j = 0; j < plain.size(); ++j, ++entries) {
          const MpfrPrecision p128(128);
          narrower += enclosure_width(z.enclose(j % z.rows(), j / z.rows())) < enclosure_width(plain(j));
        }
    }
    ++arch_index;
  }
  EXPECT_GT(narrower, entries / 2) << narrower << " of " << entries << " enclosures narrower than intervals'";
}

// A sharp head (scores 800·x_q·x_k, differences up to 1,600): exp's chord over them would leave
// double's range (the 1.6M-weight model of docs/analyse.md: every margin −inf, no radius), so a
// weight whose differences may pass 512 is a constant form, enclosed in MPFI. Every sampled point
// of the box stays inside the enclosures, and they are narrow.
TEST(Analyse, ZonotopeFollowsSharpHeads) {
  Network<double> net(Architecture::from_json(nlohmann::json::parse(
      R"({"d":2,"readout":2,"layers":[{"type":"attention","heads":1,"head_size":2,"scale":"400"},
          {"type":"feedforward","width":3}]})")));
  init_random(net, 5);
  net.layers[0].wq << 2, 0, 0, 2;
  net.layers[0].wk << 1, 0, 0, 1;
  const Network<Rational> exact = network_cast<Rational>(net);
  Mat<Rational> x0(2, 4);
  x0 << 1, -1, Rational(1, 2), 0, 0, 0, Rational(1, 2), -1;
  const double e = 1e-3;
  Zonotope z;
  {
    const MpfrPrecision p(128);
    z = zonotope_forward(network_cast<Mpfi>(exact), matrix_cast<Mpfi>(x0), rational_of(e));
  }
  const MpfrPrecision p(200);
  const Network<Mpfr> hp = network_cast<Mpfr>(exact);
  Rng rng(3);
  for (int sample = 0; sample < 24; ++sample) {
    Mat<Mpfr> x = matrix_cast<Mpfr>(x0);
    for (Eigen::Index j = 0; j < x.size(); ++j)
      x(j) += Mpfr(sample < 2 ? (sample == 0 ? -1.0 : 1.0) : rng.uniform(-1, 1)) * Mpfr(e);
    const Mat<Mpfr> y = forward(hp, x);
    for (Eigen::Index k = 0; k < y.cols(); ++k)
      for (Eigen::Index r = 0; r < y.rows(); ++r) {
        const Mpfi box = z.enclose(r, k);
        EXPECT_TRUE(lower(box) <= y(r, k) && y(r, k) <= upper(box)) << "output " << r << " of token " << k;
        EXPECT_LT(enclosure_width(box), 0.1) << "output " << r << " of token " << k;
      }
  }
}

// The forms take n·d doubles per value: a box too large for the memory budget is refused, named,
// before the generators are allocated; hardmax and the mixers are refused by name.
TEST(Analyse, ZonotopeRefusesWhatItCannotHoldOrFollow) {
  const MpfrPrecision p(64);
  const Network<Mpfi> wide(Architecture::from_json(
      nlohmann::json::parse(R"({"d":64,"layers":[{"type":"feedforward","width":64}]})")));
  const Mat<Mpfi> x0 = Mat<Mpfi>::Zero(64, 2000);  // 128,000 symbols × 128,000 values
  try {
    zonotope_forward(wide, x0, Rational(1, 100));
    ADD_FAILURE() << "a box of 128,000 coordinates is refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory budget"), std::string::npos) << e.what();
  }
  {  // through analyse: the whole run refused, named, before any pass (it read as undecided, −inf)
    Network<double> net(Architecture::from_json(
        nlohmann::json::parse(R"({"d":64,"readout":2,"layers":[{"type":"feedforward","width":64}]})")));
    init_random(net, 1);
    Dataset ds;
    Sequence seq;
    seq.x = Mat<Rational>::Zero(64, 600);  // 38,400 symbols: about 140 GiB of generators
    seq.y = Mat<Rational>::Zero(1, 600);
    ds.sequences.push_back(seq);
    ds.d = 64, ds.label_dim = 1;
    AnalyseOptions o = quick();
    o.min_bits = false, o.separation = false;
    o.epsilon = "1/1000", o.region_method = RegionMethod::zonotope;
    try {
      analyse(network_cast<Rational>(net), ds, o);
      ADD_FAILURE() << "a box of 38,400 coordinates is refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("memory budget"), std::string::npos) << e.what();
    }
  }
  for (const char* text : {R"({"d":2,"layers":[{"type":"attention","score":"hardmax"}]})",
                           R"({"d":2,"layers":[{"type":"sepconv","heads":1,"kernel":3}]})"}) {
    try {
      check_zonotope_supported(Architecture::from_json(nlohmann::json::parse(text)));
      ADD_FAILURE() << text << " is refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sub-layer 0"), std::string::npos) << e.what();
    }
  }
}
