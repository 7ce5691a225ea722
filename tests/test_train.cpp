// The training loop: schedule, reproducibility, exact resume, freezing, and tasks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "../src/simd/kernels.hpp"
#include "sign_classes.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/train/trainer.hpp"

using namespace uatlab;
using nlohmann::json;

namespace {

Network<double> small_net(std::uint64_t seed) {
  const Architecture a = Architecture::from_json(json::parse(R"({"d":3,"readout":3,"layers":[
    {"type":"attention","heads":2,"head_size":2},{"type":"feedforward","width":48}]})"));
  Network<double> net(a);
  init_random(net, seed);
  return net;
}

TaskOptions memo() {
  TaskOptions o;
  o.N = 12;
  o.n = 4;
  o.d = 3;
  o.V = 8;
  o.seed = 3;
  return o;
}

// Cross-entropy training of the memorization task: the settings every test below varies.
TrainConfig classifier(long steps, int batch, double lr) {
  TrainConfig c;
  c.loss = Loss::cross_entropy;
  c.steps = steps, c.batch = batch, c.lr = lr;
  return c;
}

std::vector<double> flat(const Network<double>& n) {
  std::vector<double> v;
  n.for_each_tensor([&](const std::string&, const Mat<double>& m, Layout) {
    v.insert(v.end(), m.data(), m.data() + m.size());
  });
  return v;
}

}  // namespace

TEST(Train, WarmupThenCosine) {
  TrainConfig c;
  c.lr = 1;
  c.min_lr = 0.1;
  c.warmup = 4;
  c.steps = 14;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(c, 3), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 4), 1.0);
  EXPECT_NEAR(learning_rate(c, 9), 0.55, 1e-12);  // halfway down
  EXPECT_NEAR(learning_rate(c, 14), 0.1, 1e-12);
}

TEST(Train, MemorizesASmallTaskAndIsReproducible) {
  const Dataset data = make_task("memorize", memo());
  TrainConfig c = classifier(3000, 6, 2e-2);
  c.warmup = 50;
  c.seed = 5;
  Network<double> a = small_net(1), b = small_net(1);
  TrainReport ra = train(a, data, nullptr, c);
  train(b, data, nullptr, c);
  EXPECT_EQ(flat(a), flat(b));  // same seeds, same bits
  EXPECT_GT(evaluate_loss(a, data, Loss::cross_entropy).second, 0.95) << "loss " << ra.loss;
}

TEST(Train, AValidationPlateauStopsTheRun) {
  // The criterion on canned losses: the best of the last k against the best before them.
  const std::vector<double> h = {3, 2, 1.9, 1.899, 1.8985};
  EXPECT_TRUE(validation_plateaued(h, 2, 0.002));      // 1.8985 is 0.08% below 1.9
  EXPECT_FALSE(validation_plateaued(h, 2, 0.0005));    // ... which counts at 0.05%
  EXPECT_FALSE(validation_plateaued(h, 3, 0.002));     // 1.899 against 2: 5% lower
  EXPECT_FALSE(validation_plateaued(h, 5, 0.002));     // nothing before the last 5
  EXPECT_FALSE(validation_plateaued(h, 0, 0.002));     // off
  EXPECT_TRUE(validation_plateaued({1, 2, 3}, 2, 0));  // worse is no improvement
  EXPECT_TRUE(validation_plateaued({1, std::nan("")}, 1, 0));
  // A run: evaluations every 5 steps, and a tolerance no positive loss can beat (100%): it stops
  // at its third evaluation, step 15 of 400, and says why.
  const Dataset data = make_task("memorize", memo());
  TrainConfig c = classifier(400, 6, 1e-2);
  c.eval_every = 5;
  c.plateau_evals = 2;
  c.plateau_tolerance = 1;
  Network<double> net = small_net(1);
  const TrainReport r = train(net, data, &data, c);
  EXPECT_EQ(r.steps, 15);
  EXPECT_TRUE(r.plateaued);
  EXPECT_TRUE(r.stopped_early);
  EXPECT_EQ(training_summary(net, data, &data, c.loss, r).at("plateaued"), true);
  // At 0.2% the same run goes on (its loss falls fast at first) and stops later or at the cap.
  c.plateau_tolerance = 0.002;
  Network<double> again = small_net(1);
  EXPECT_GT(train(again, data, &data, c).steps, 15);
  EXPECT_THROW(train(again, data, nullptr, c), Error);  // a plateau of nothing
  c.eval_every = 0;
  EXPECT_THROW(train(again, data, &data, c), Error);
}

TEST(Train, ResumeContinuesExactly) {
  const Dataset data = make_task("memorize", memo());
  const std::string ck = (std::filesystem::temp_directory_path() / "uatlab_resume_test.safetensors").string();
  TrainConfig c = classifier(40, 5, 1e-2);
  c.warmup = 3;
  c.weight_decay = 0.01;
  c.clip = 1;
  Network<double> straight = small_net(2);
  train(straight, data, nullptr, c);
  // Interrupt a run of the same 40-step schedule after its step-17 checkpoint is on disk.
  struct Stop {};
  Network<double> interrupted = small_net(2);
  TrainConfig cut = c;
  cut.checkpoint = ck;
  cut.checkpoint_every = 17;
  cut.log_every = 1;
  EXPECT_THROW(train(interrupted, data, nullptr, cut, "",
                     [](const Progress& p) {
                       if (p.step == 18) throw Stop{};
                     }),
               Stop);
  Network<double> resumed = small_net(99);  // weights come from the checkpoint
  train(resumed, data, nullptr, c, ck);
  EXPECT_EQ(flat(resumed), flat(straight));
  // A checkpoint at or past the steps asked for has nothing left to train: refused (issue 78: the
  // run reported a loss of 0.0 that no step had measured).
  TrainConfig shorter = c;
  shorter.steps = 17;
  try {
    train(resumed, data, nullptr, shorter, ck);
    ADD_FAILURE() << "resuming at step 17 of 17 is refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at step 17, at or past the 17 steps"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(ck);
}

TEST(Train, FrozenTensorsDoNotMove) {
  const Dataset data = make_task("memorize", memo());
  TrainConfig c = classifier(20, 4, TrainConfig{}.lr);
  c.freeze = {"layers.0.*"};
  Network<double> net = small_net(4);
  const Mat<double> qkv = net.layers[0].wq, wk = net.layers[0].wk, wo = net.layers[0].wo,
                    w1 = net.layers[1].w1;
  train(net, data, nullptr, c);
  EXPECT_EQ(net.layers[0].wq, qkv);
  EXPECT_EQ(net.layers[0].wk, wk);
  EXPECT_EQ(net.layers[0].wo, wo);
  EXPECT_NE(net.layers[1].w1, w1);
  c.freeze = {"no.such.tensor"};
  EXPECT_THROW(train(net, data, nullptr, c), Error);
}

TEST(Train, TasksAreSeededAndWellFormed) {
  TaskOptions o;
  o.N = 5;
  o.n = 12;
  o.lags = {1, 3, 5};
  o.seed = 7;
  Dataset a = make_task("sparse-boolean", o), b = make_task("sparse-boolean", o);
  ASSERT_EQ(a.sequences.size(), 5u);
  EXPECT_EQ(a.sequences[2].tokens, b.sequences[2].tokens);
  for (auto& s : a.sequences)
    for (int t = 5; t < 12; ++t) {
      EXPECT_EQ(s.mask[t], 1);
      EXPECT_EQ(s.y(0, t), Rational((s.tokens[t - 1] + s.tokens[t - 3] + s.tokens[t - 5]) % 2));
    }
  EXPECT_EQ(a.sequences[0].mask[4], 0);
  o.n = 30;
  Dataset h = make_task("kernel-heavy", o);
  // y_t = Σ ρ(s) x_{t−s}: y_0 = 0, y_1 = ρ(1) x_0.
  EXPECT_EQ(h.sequences[0].y(0, 0), Rational(0));
  EXPECT_THROW(make_task("no-such-task", o), Error);
}

// Associative recall: n − 1 pairs with distinct keys, then a query for one of their keys; the label
// (the last token only) is the value of that pair. Too few keys for the pairs is refused.
TEST(Train, RecallAsksForTheValueOfAKeyOfTheSequence) {
  TaskOptions o;
  o.N = 200, o.n = 9, o.V = 8, o.classes = 5, o.seed = 3;
  const Dataset ds = make_task("recall", o);
  std::set<int> asked_at;
  for (const Sequence& s : ds.sequences) {
    ASSERT_EQ(s.tokens.size(), 9u);
    std::map<int, int> value;  // key -> value
    for (int t = 0; t < 8; ++t) {
      ASSERT_LT(s.tokens[t], 8 * 5);
      EXPECT_TRUE(value.emplace(s.tokens[t] / 5, s.tokens[t] % 5).second) << "a key twice";
      EXPECT_EQ(s.mask[t], 0);
    }
    const int key = s.tokens[8] - 8 * 5;
    ASSERT_TRUE(key >= 0 && key < 8);
    ASSERT_EQ(value.count(key), 1u);
    EXPECT_EQ(s.y(0, 8), Rational(value.at(key)));
    EXPECT_EQ(s.mask[8], 1);
    for (int t = 0; t < 8; ++t)
      if (s.tokens[t] / 5 == key) asked_at.insert(t);
  }
  EXPECT_EQ(asked_at.size(), 8u);  // the asked pair sits anywhere before the query
  EXPECT_EQ(task("recall").shape(o).vocab, 8 * 6);
  o.V = 7;
  EXPECT_THROW(make_task("recall", o), Error);
}

TEST(Train, AdaptiveMemoryTasksFollowTheirLagRules) {
  TaskOptions o;
  o.N = 20;
  o.n = 40;
  o.lags = {1, 3, 7};
  o.seed = 3;
  for (bool nested : {false, true}) {
    const Dataset ds = make_task(nested ? "adaptive-2" : "adaptive-1", o);
    int scored = 0;
    for (const auto& s : ds.sequences)
      for (int t = 0; t < o.n; ++t) {
        auto b = [&](int i) { return s.tokens[i] % 2; };
        auto lag = [&](int i) { return o.lags[s.tokens[i] / 2]; };
        const int t1 = lag(t), t2 = t - t1 >= 0 ? t1 + lag(t - t1) : 1 << 20;
        const bool defined = nested ? t - t2 >= 0 : t - t1 >= 0;
        ASSERT_EQ(s.mask[t], defined ? 1 : 0);
        if (!defined) continue;
        ++scored;
        EXPECT_EQ(s.y(0, t), Rational(nested ? b(t - t1) ^ b(t - t2) : b(t - t1)));
      }
    EXPECT_GT(scored, 20 * 20);
    EXPECT_EQ(task(nested ? "adaptive-2" : "adaptive-1").shape(o).vocab, 6);
  }
}

TEST(Train, ComplexReadoutAndKernelsPadTheValueIntoRowZero) {
  TaskOptions o;
  o.N = 3;
  o.n = 10;
  o.lags = {1, 2};
  o.d = 3;
  o.omega = 2;
  o.seed = 5;
  const Dataset c = make_task("complex-readout", o);
  ASSERT_EQ(c.d, 3);
  for (const auto& s : c.sequences) {
    EXPECT_EQ(s.x.row(1), Mat<Rational>::Zero(1, 10));
    for (int t = 2; t < 10; ++t) {
      const double want = std::sin(2 * M_PI * Scalar<double>::from(s.x(0, t - 1))) *
                          std::sin(2 * M_PI * Scalar<double>::from(s.x(0, t - 2)));
      EXPECT_NEAR(Scalar<double>::from(s.y(0, t)), want, 1e-15);
    }
    EXPECT_EQ(s.mask[1], 0);
  }
  EXPECT_EQ(make_task("kernel-light", o).sequences[0].x.rows(), 3);
  o.window = 2;
  o.beta = 1;
  const Dataset w = make_task("kernel-light", o);  // ρ(s) = (1 − e^{−1}) e^{−(s−1)}, cut at s = 2
  const double r1 = 1 - std::exp(-1.0), r2 = r1 * std::exp(-1.0);
  for (int t = 2; t < 10; ++t) {
    auto x = [&](int i) { return Scalar<double>::from(w.sequences[1].x(0, i)); };
    EXPECT_NEAR(Scalar<double>::from(w.sequences[1].y(0, t)), r1 * x(t - 1) + r2 * x(t - 2), 1e-15);
  }
  EXPECT_EQ(task("kernel-light").shape(o).d, 3);
  EXPECT_EQ(task("kernel-light").loss, Loss::mse);
  // Tempered: ρ(s) = s^{−2} e^{−s/3} / Z, Z summed here independently (the terms vanish by k = 2000).
  o.cutoff = 3;
  double z = 0;
  for (int k = 1; k < 2000; ++k)
    z += std::pow(k, -2.0) * std::exp(-k / 3.0);
  const Dataset p = make_task("kernel-tempered", o);
  const double p1 = std::exp(-1 / 3.0) / z, p2 = 0.25 * std::exp(-2 / 3.0) / z;
  for (int t = 2; t < 10; ++t) {
    auto x = [&](int i) { return Scalar<double>::from(p.sequences[2].x(0, i)); };
    EXPECT_NEAR(Scalar<double>::from(p.sequences[2].y(0, t)), p1 * x(t - 1) + p2 * x(t - 2), 1e-14);
  }
  o.cutoff = 0;
  EXPECT_THROW(make_task("kernel-tempered", o), Error);
  o.cutoff = 3;
  o.beta = 0;
  EXPECT_THROW(make_task("kernel-heavy", o), Error);
  o.window = 0;  // kernel-lags: the mean of x_{t−1} and x_{t−3}, whatever beta
  o.lags = {1, 3};
  const Dataset l = make_task("kernel-lags", o);
  for (int t = 3; t < 10; ++t) {
    auto x = [&](int i) { return Scalar<double>::from(l.sequences[0].x(0, i)); };
    EXPECT_NEAR(Scalar<double>::from(l.sequences[0].y(0, t)), (x(t - 1) + x(t - 3)) / 2, 1e-15);
  }
}

TEST(Train, CharsTaskSplitsTheCorpusAndPredictsTheNextCharacter) {
  std::filesystem::create_directories(UATLAB_TEST_TMP);
  const std::string path = std::string(UATLAB_TEST_TMP) + "/corpus.txt";
  std::string text;
  for (int i = 0; i < 900; ++i)
    text += "ab";  // the first 90%: only a and b
  for (int i = 0; i < 100; ++i)
    text += "cd";  // the last 10%: only c and d
  { std::ofstream(path) << text; }
  TaskOptions o;
  o.corpus = path;
  o.N = 50;
  o.n = 16;
  o.seed = 2;
  EXPECT_EQ(task("chars").shape(o).outputs, 4);
  EXPECT_EQ(task("chars").shape(o).vocab, 4);
  EXPECT_EQ(validation_options(o, 7).seed, o.seed + 1000003);
  EXPECT_TRUE(validation_options(o, 7).validation);
  for (bool val : {false, true}) {
    o.validation = val;
    const Dataset ds = make_task("chars", o);
    for (const auto& s : ds.sequences)
      for (int t = 0; t < 16; ++t) {
        EXPECT_EQ(s.tokens[t] >= 2, val);
        if (t + 1 < 16) {
          EXPECT_EQ(s.y(0, t), Rational(s.tokens[t + 1]));
        }
        EXPECT_EQ(s.y(0, t), Rational(s.tokens[t] ^ 1));  // a->b->a, c->d->c
      }
  }
  o.corpus = std::string(UATLAB_TEST_TMP) + "/missing.txt";
  EXPECT_THROW(make_task("chars", o), Error);
}

TEST(Train, EveryTaskOfTheTableMatchesItsShape) {
  std::filesystem::create_directories(UATLAB_TEST_TMP);
  const std::string path = std::string(UATLAB_TEST_TMP) + "/table-corpus.txt";
  std::string text;
  for (int i = 0; i < 600; ++i)
    text += "abc ";
  { std::ofstream(path) << text; }
  ASSERT_EQ(tasks().size(), 12u);
  for (const TaskSpec& t : tasks()) {
    SCOPED_TRACE(t.name);
    TaskOptions o;
    o.N = 6;
    o.n = 12;
    o.d = 3;
    o.corpus = path;
    o.lags = {1, 2};
    const Dataset ds = make_task(t.name, o);
    const TaskShape sh = t.shape(o);
    ASSERT_EQ(ds.sequences.size(), 6u);
    EXPECT_EQ(ds.token_input, sh.vocab > 0);
    EXPECT_GE(sh.outputs, 1);
    for (const Sequence& s : ds.sequences) {
      if (ds.token_input)
        for (int id : s.tokens)
          EXPECT_TRUE(id >= 0 && id < sh.vocab);
      else
        EXPECT_EQ(s.x.rows(), sh.d);
      for (Eigen::Index k = 0; k < s.y.cols(); ++k) {
        if (!s.mask.empty() && !s.mask[k]) continue;
        if (t.loss == Loss::cross_entropy) {  // a class label in [0, outputs)
          const Rational& y = s.y(0, k);
          EXPECT_TRUE(y >= 0 && y < sh.outputs && denominator(y) == 1);
        } else {
          EXPECT_EQ(s.y.rows(), sh.outputs);
        }
      }
    }
  }
  EXPECT_EQ(&task("chars"), &tasks().back());
  EXPECT_THROW(task("nope"), Error);
}

// nonnegative_rates projects the lin/log RPE rates onto p_h >= 0 after the AdamW step and leaves
// every other tensor as it is; without it the same step takes them below 0.
TEST(Train, NonnegativeRatesAreProjected) {
  Architecture a;
  a.d = 2;
  LayerSpec s;
  s.heads = 2;
  s.dp_free = true;
  s.causal = true;
  s.rpe = Rpe::lin;
  a.layers.push_back(s);
  a.validate();
  for (bool project : {true, false}) {
    Network<double> net(a), grad(a);
    net.layers[0].rpe << 1e-3, 0.5;
    grad.layers[0].rpe << 1, 1;  // the step lowers both rates by about lr
    grad.layers[0].wo.setConstant(1);
    TrainConfig c;
    c.nonnegative_rates = project;
    AdamW<double> opt(net);
    opt.update(net, grad, c, 0.1);
    EXPECT_EQ(net.layers[0].rpe(0, 0) == 0, project);
    EXPECT_LT(net.layers[0].rpe(0, 0), project ? 1e-300 : -0.09);
    EXPECT_NEAR(net.layers[0].rpe(1, 0), 0.4, 1e-6);  // a rate that stays positive is untouched
    EXPECT_LT(net.layers[0].wo(0, 0), 0);             // other weights go below 0 freely
  }
}

// mask_before applies to every task: positions before it are not scored.
TEST(Train, MaskBeforeAppliesToEveryTask) {
  TaskOptions o;
  o.N = 3, o.n = 16, o.lags = {1, 4, 9}, o.mask_before = 12;
  for (const char* name : {"sparse-boolean", "adaptive-1", "complex-readout"}) {
    const Dataset ds = make_task(name, o);
    for (const Sequence& s : ds.sequences)
      for (int t = 0; t < 16; ++t)
        EXPECT_EQ(s.mask[t] != 0, t >= 12) << name << " position " << t;
  }
}

namespace {

// A valid value other than v, of v's type (the round trip below changes one field at a time).
json altered(const json& v) {
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number_integer()) return v.get<long long>() + 1;
  if (v.is_number()) return v.get<double>() * 0.5 + 0.25;
  if (v.is_string()) return v == "mse" ? json("ce") : json(v.get<std::string>() + "x");
  json a = v;
  a.push_back(v.empty() ? json("x") : json(2));
  return a;
}

template <class Options>
void round_trips_field_by_field(const Options& defaults) {
  const json base = defaults.to_json();
  EXPECT_EQ(base.size(), field_keys<Options>().size());
  for (const std::string& key : field_keys<Options>()) {
    json j = base;
    j[key] = altered(base.at(key));
    // Reading back gives exactly j: the key reaches its own member and no other.
    EXPECT_EQ(Options::from_json(j).to_json(), j) << key;
  }
}

}  // namespace

TEST(Options, FieldTablesRoundTripAndRefuseWhatTheyDoNotKnow) {
  round_trips_field_by_field(TrainConfig{});
  round_trips_field_by_field(TaskOptions{});
  EXPECT_EQ(TaskOptions::from_json({{"cutoff", 4}}).cutoff, 4);
  EXPECT_TRUE(TrainConfig::from_json({{"nonnegative_rates", true}}).nonnegative_rates);
  EXPECT_EQ(TrainConfig::from_json({{"loss", "cross-entropy"}}).loss, Loss::cross_entropy);
  auto refused = [](const json& j, const std::string& why) {
    try {
      TrainConfig::from_json(j);
      ADD_FAILURE() << j.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused({{"stepz", 3}}, "unknown option \"stepz\" (known: loss, steps,");
  refused({{"steps", 1.5}}, "train options \"steps\": expected an integer, got 1.5");
  refused({{"batch", 1LL << 40}}, "\"batch\": expected a smaller integer");
  refused({{"seed", -1}}, "\"seed\": expected an integer >= 0");
  refused({{"lr", "fast"}}, "\"lr\": expected a number");
  refused({{"clip", true}}, "\"clip\": expected a number");
  refused({{"freeze", "layers.0.*"}}, "\"freeze\": expected a list");
  refused({{"loss", 1}}, "\"loss\": expected mse or ce");
  refused({{"batch", 0}}, "batch");  // validated after reading
  EXPECT_THROW(TaskOptions::from_json({{"lags", {1, "x"}}}), Error);
  EXPECT_THROW(TaskOptions::from_json(json::array()), Error);
}

// Issue 38: no null or meaningless number in a training summary.
TEST(Train, SummaryVarianceIsTwoPassAndUndefinedValuesAreLeftOut) {
  Dataset data;
  data.d = 1, data.label_dim = 1;
  for (int i = 0; i < 8; ++i) {
    Sequence s;
    s.x = Mat<Rational>::Constant(1, 1, Rational(i));
    s.y = Mat<Rational>::Constant(1, 1, parse_rational(i % 2 ? "100000000.1" : "99999999.9"));
    data.sequences.push_back(s);
  }
  Architecture a;
  a.d = 1, a.readout = 1;
  Network<double> net(a);
  const TrainReport none;  // no step ran
  const json s = training_summary(net, data, &data, Loss::mse, none);
  EXPECT_FALSE(s.contains("loss")) << s.dump();  // "loss": 0.0 before
  // Var(y) = 0.01, which E[y²] − E[y]² lost in rounding (val_nmse came out 4.27e15, not 1.5e18).
  const double val_loss = s.at("val_loss").get<double>();
  EXPECT_NEAR(s.at("val_nmse").get<double>() * 0.01 / val_loss, 1, 1e-6) << s.dump();
  EXPECT_NEAR(chance_loss(data, Loss::mse), 0.01, 1e-8);  // the labels in double: 1e8 ± 0.09999999
  for (Sequence& q : data.sequences)
    q.y.setConstant(3);  // constant targets: MSE/Var is undefined, left out (was null)
  EXPECT_FALSE(training_summary(net, data, &data, Loss::mse, none).contains("val_nmse"));
}

TEST(Train, NonFiniteTaskOptionsAreNamed) {  // --task-omega inf: "cannot convert a non-finite number"
  TaskOptions o;
  o.N = 2, o.n = 4, o.omega = std::numeric_limits<double>::infinity();
  try {
    make_task("complex-readout", o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("task option omega must be a number from"), std::string::npos)
        << e.what();
  }
  o.omega = 2, o.beta = std::nan("");
  EXPECT_THROW(make_task("memorize", o), Error);  // checked whichever task reads it
}

TEST(Train, ATaskIsSizedBeforeItIsDrawn) {  // random-labels, N = 10^8, n = 10^5: out of memory before
  TaskOptions o;
  o.N = 100000000, o.n = 100000;
  try {
    make_task("random-labels", o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("task size N * n * d"), std::string::npos) << e.what();
  }
}

// A confident prediction's cross-entropy keeps its digits in float: with logits (30, 0) the loss
// is log(1 + e^-30) ≈ 9.36e-14, which log(Σ exp) rounded to 0 (the sum is 1 in float), and a
// validation loss of 0 cannot be placed on the log scale the verdicts use. Tied logits lose log 2.
TEST(Train, ConfidentCrossEntropyIsNotRoundedToZero) {
  const Dataset data = sign_classes();
  Network<float> net = sign_classifier();
  net.readout_w << 15, -15;  // logits (15x, −15x): a gap of 30 toward the label
  net.readout_b.setZero();
  const double want = std::log1p(std::exp(-30.0));
  EXPECT_NEAR(evaluate_loss(net, data, Loss::cross_entropy).first / want, 1, 1e-5);
  Network<double> nd = network_cast<double>(net);
  EXPECT_NEAR(evaluate_loss(nd, data, Loss::cross_entropy).first / want, 1, 1e-12);
  net.readout_w.setZero();  // tied logits: two terms are 1, one of them counts as the maximum
  EXPECT_NEAR(evaluate_loss(net, data, Loss::cross_entropy).first, std::log(2.0), 1e-6);
}

// A float model of the tiny config's shapes (d = 8, one head of 8, 16 tokens, a feed-forward width of
// 32: the paired, unrolled and blocked products, the fixed-size heads and the grouped softmax),
// trained for 20 steps on every instruction set this CPU runs. Paths that do the same arithmetic (a
// register of as many floats, multiply-adds fused or not: SSE4, SSSE3 and the emulated path) give the
// same model to the byte; the others round differently, and the weights stay within the bound that
// docs/training.md states (relative to the largest weight).
TEST(Train, FloatModelsOnEveryInstructionSetAgree) {
  TaskOptions o;
  o.N = 32, o.n = 16, o.d = 8, o.V = 16, o.seed = 3;
  const Dataset data = make_task("memorize", o);
  const Architecture a = Architecture::from_json(nlohmann::json::parse(R"({"d":8,"readout":16,"layers":[
    {"type":"attention","heads":1,"head_size":8},{"type":"feedforward","width":32}]})"));
  Network<double> start(a);
  init_random(start, 7);
  TrainConfig c;
  c.loss = Loss::cross_entropy;
  c.steps = 20, c.batch = 8, c.lr = 1e-2, c.seed = 5;
  std::map<std::pair<Eigen::Index, bool>, std::vector<float>> by_arithmetic;
  std::vector<std::pair<std::string, std::vector<float>>> models;
  for (const std::string& name : simd::paths_here())
    simd::on_path(name, [&] {
      Network<float> net = network_cast<float>(start);
      train(net, data, nullptr, c);
      std::vector<float> w;
      net.for_each_tensor([&](const std::string&, const Mat<float>& m, Layout) {
        w.insert(w.end(), m.data(), m.data() + m.size());
      });
      const auto key = std::make_pair(simd::half_block_rows<float>(), simd::fused_multiply_add());
      if (by_arithmetic.count(key)) {
        EXPECT_EQ(w, by_arithmetic[key]) << name << " and a path of the same arithmetic";
      }
      by_arithmetic[key] = w;
      models.emplace_back(name, w);
    });
  ASSERT_GE(models.size(), 2u);
  const std::vector<float>& best = models.front().second;
  float largest = 0;
  for (float v : best)
    largest = std::max(largest, std::abs(v));
  for (const auto& [name, w] : models) {
    float apart = 0;
    for (size_t i = 0; i < w.size(); ++i)
      apart = std::max(apart, std::abs(w[i] - best[i]));
    EXPECT_LE(apart, 1e-5f * largest) << name << " against " << models.front().first;
    std::printf("%s: largest difference from %s %.3g (largest weight %.3g)\n", name.c_str(),
                models.front().first.c_str(), double(apart), double(largest));
  }
}
