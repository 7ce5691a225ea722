// One table-driven check of the model across arithmetics: every attention option combination
// (score × rpe × dp_free × masking × tied × bias × pre_norm × rotary; ReLU and GELU after it) evaluated in
// float, double, MPFR at 128 bits, MPFI at 128 bits, the certified engine's balls (ball:53, ball:113, Arb)
// and (where no exp/log/sqrt/cos/sin is needed) exact rationals, against a 400-bit MPFR reference. Each
// arithmetic must agree within its own precision; intervals and balls must enclose the reference. Plus:
// validate() owns the masking invariants.
#include <gtest/gtest.h>

#include "../src/model/arb.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/model/network.hpp"
#include "uatlab/verify/compare.hpp"

using namespace uatlab;
using nlohmann::json;

namespace {

struct Masking {
  const char* name;
  bool causal, strict_past;
  int window;
};

// Entries k/16, k uniform in [-16, 16): exact in every arithmetic.
Mat<Rational> input(int d, int n, std::uint64_t seed) {
  Rng rng(seed);
  Mat<Rational> x(d, n);
  for (Eigen::Index i = 0; i < x.size(); ++i)
    x(i) = Rational(static_cast<long>(rng.uniform() * 32) - 16, 16);
  return x;
}

// A ball's width, as a double rounded up.
template <class B>
double width_of(const B& v) {
  if constexpr (is_arb_v<B>)
    return 2 * mag_get_d(arb_radref(v.get()));
  else
    return 2 * v.r;
}

// The certified engine's balls (model/ball.hpp, model/arb.hpp at 128 bits) enclose the reference, at
// most `width` wide relative to max(1, |ref|); a refusal is allowed where `may_refuse` (an undecided
// hardmax).
template <class B>
void expect_ball_encloses(const Network<Rational>& exact, const Mat<Rational>& x, const Mat<Mpfr>& ref,
                          double width, bool may_refuse) {
  const MpfrPrecision ends(128);
  Mat<B> y;
  try {
    y = forward(network_cast<B>(exact), matrix_cast<B>(x));
  } catch (const Error& e) {
    EXPECT_TRUE(may_refuse) << Scalar<B>::name << ": " << e.what();
    return;
  }
  for (Eigen::Index i = 0; i < ref.size(); ++i) {
    EXPECT_LE(lower(y(i)), ref(i)) << Scalar<B>::name;
    EXPECT_GE(upper(y(i)), ref(i)) << Scalar<B>::name;
    EXPECT_LT(width_of(y(i)), width * std::max(1.0, std::abs(Scalar<Mpfr>::to_double(ref(i)))))
        << Scalar<B>::name;
  }
}

// max |a - ref| / max(1, max |ref|), with a converted exactly.
template <class S>
double relative_error(const Mat<S>& a, const Mat<Mpfr>& ref) {
  double e = 0, scale = 1;
  for (Eigen::Index i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::abs(Scalar<Mpfr>::to_double(ref(i))));
    e = std::max(e, std::abs(Scalar<Mpfr>::to_double(scalar_cast<Mpfr>(a(i)) - ref(i))));
  }
  return e / scale;
}

}  // namespace

TEST(Agreement, EveryAttentionOptionInEveryArithmetic) {
  const Masking maskings[] = {{"none", false, false, 0},
                              {"causal", true, false, 0},
                              {"strict past", true, true, 0},
                              {"window 2", true, false, 2},
                              {"strict past, window 2", true, true, 2}};
  const int d = 3, n = 6;
  const Mat<Rational> x = input(d, n, 5);
  int combos = 0, exact_combos = 0;
  for (const char* score : {"softmax", "linear", "hardmax"})
    for (const char* rpe : {"none", "lin", "log", "t5"})
      for (bool dp_free : {false, true})
        for (const Masking& m : maskings)
          for (bool tied : {false, true})
            for (bool bias : {false, true})
              for (bool pre_norm : {false, true})
                for (int rope : {0, 7}) {
                  if (dp_free && std::string(rpe) == "none") continue;  // validate() refuses it
                  if (rope > 0 && (dp_free || tied)) continue;          // rotary positions turn Q and K
                  json layer = {{"type", "attention"},  {"heads", 2},         {"head_size", 2},
                                {"score", score},       {"scale", "3/4"},     {"rpe", rpe},
                                {"dp_free", dp_free},   {"causal", m.causal}, {"strict_past", m.strict_past},
                                {"window", m.window},   {"tied_qkv", tied},   {"bias", bias},
                                {"pre_norm", pre_norm}, {"t5_buckets", 4},    {"t5_max_distance", 8},
                                {"rope", rope}};
                  const Architecture arch = Architecture::from_json(
                      {{"d", d},
                       {"layers",
                        {layer,
                         {{"type", "feedforward"},
                          {"width", 4},
                          {"activation", combos % 2 ? (combos % 4 == 3 ? "gelu_tanh" : "gelu") : "relu"}}}}});
                  Network<double> base(arch);
                  init_random(base, 1000 + static_cast<std::uint64_t>(combos));
                  const Network<Rational> exact = network_cast<Rational>(base);
                  SCOPED_TRACE(layer.dump());
                  ++combos;
                  Mat<Mpfr> ref;
                  const MpfrPrecision reference(400);
                  try {
                    ref = forward(network_cast<Mpfr>(exact), matrix_cast<Mpfr>(x));
                  } catch (const Error& e) {
                    ADD_FAILURE() << e.what();
                    continue;
                  }
                  const bool hardmax = std::string(score) == "hardmax";
                  // Hardmax in floating point: an argmax decided by less than the rounding would flip;
                  // the reference and MPFR/MPFI decide it, float/double are checked where they agree
                  // on the argmax (compared through the interval's certificate below).
                  EXPECT_LT(relative_error(forward(network_cast<double>(exact), matrix_cast<double>(x)), ref),
                            hardmax ? 1e-6 : 1e-12);
                  EXPECT_LT(relative_error(forward(network_cast<float>(exact), matrix_cast<float>(x)), ref),
                            hardmax ? 1e-2 : 1e-4);
                  const std::vector<Rational> y128 = exact_output<Mpfr>(exact, x, 128);
                  Mat<Mpfr> m128(ref.rows(), ref.cols());
                  for (Eigen::Index i = 0; i < ref.size(); ++i)
                    m128(i) = Scalar<Mpfr>::from(y128[i]);
                  EXPECT_LT(relative_error(m128, ref), 1e-30);
                  try {
                    const std::vector<Rational> yi = exact_output<Mpfi>(exact, x, 128);
                    for (Eigen::Index i = 0; i < ref.size(); ++i) {
                      EXPECT_LE(Scalar<Mpfr>::from(yi[2 * i]), ref(i));
                      EXPECT_GE(Scalar<Mpfr>::from(yi[2 * i + 1]), ref(i));
                    }
                  } catch (const Error& e) {  // only an undecided hardmax may refuse
                    EXPECT_TRUE(hardmax) << e.what();
                  }
                  expect_ball_encloses<Ball53>(exact, x, ref, 1e-9, hardmax);
                  expect_ball_encloses<Ball113>(exact, x, ref, 1e-27, hardmax);
                  expect_ball_encloses<Arb>(exact, x, ref, 1e-27, hardmax);
                  if (!arch.needs_transcendental()) {
                    ++exact_combos;
                    const Mat<Rational> yq = forward(exact, x);
                    EXPECT_LT(relative_error(yq, ref), 1e-100);
                  }
                }
  EXPECT_EQ(combos, 3 * 7 * 5 * 2 * 2 * 2 + 3 * 4 * 5 * 2 * 2);  // and rotary positions on untied DP heads
  EXPECT_GT(exact_combos, 0);
}

// Yun's cheaper mixers: exact in rationals (without pre_norm), every other arithmetic within its
// precision, intervals enclosing the 400-bit reference.
TEST(Agreement, EveryMixerInEveryArithmetic) {
  const int d = 4, n = 6;
  const Mat<Rational> x = input(d, n, 9);
  int combos = 0;
  for (const char* kind : {"bproj", "sepconv"})
    for (bool causal : {false, true})
      for (bool bias : {false, true})
        for (bool pre_norm : {false, true}) {
          json layer = {{"type", kind}, {"causal", causal}, {"bias", bias}, {"pre_norm", pre_norm}};
          if (std::string(kind) == "bproj")
            layer["length"] = 7;
          else
            layer["heads"] = 2, layer["kernel"] = causal ? 4 : 3;
          const Architecture arch = Architecture::from_json(
              {{"d", d}, {"layers", {layer, {{"type", "feedforward"}, {"width", 4}}, layer}}});
          Network<double> base(arch);
          init_random(base, 77 + static_cast<std::uint64_t>(combos++));
          const Network<Rational> exact = network_cast<Rational>(base);
          SCOPED_TRACE(layer.dump());
          const MpfrPrecision reference(400);
          const Mat<Mpfr> ref = forward(network_cast<Mpfr>(exact), matrix_cast<Mpfr>(x));
          EXPECT_LT(relative_error(forward(network_cast<double>(exact), matrix_cast<double>(x)), ref), 1e-12);
          EXPECT_LT(relative_error(forward(network_cast<float>(exact), matrix_cast<float>(x)), ref), 1e-4);
          const std::vector<Rational> yi = exact_output<Mpfi>(exact, x, 128);
          for (Eigen::Index i = 0; i < ref.size(); ++i) {
            EXPECT_LE(Scalar<Mpfr>::from(yi[2 * i]), ref(i));
            EXPECT_GE(Scalar<Mpfr>::from(yi[2 * i + 1]), ref(i));
          }
          expect_ball_encloses<Ball53>(exact, x, ref, 1e-9, false);
          expect_ball_encloses<Ball113>(exact, x, ref, 1e-27, false);
          expect_ball_encloses<Arb>(exact, x, ref, 1e-27, false);
          if (!pre_norm) {
            EXPECT_LT(relative_error(forward(exact, x), ref), 1e-100);
          }
          // Causal mixers: changing the last token leaves every earlier output as it was.
          if (causal && !pre_norm) {
            Mat<Rational> x2 = x;
            x2(0, n - 1) += 1;
            const Mat<Rational> a = forward(exact, x), b = forward(exact, x2);
            EXPECT_TRUE(a.leftCols(n - 1) == b.leftCols(n - 1));
            EXPECT_FALSE(a.col(n - 1) == b.col(n - 1));
          }
        }
  EXPECT_EQ(combos, 16);
}

TEST(Agreement, ValidateOwnsTheMaskingInvariants) {
  Architecture a;
  a.d = 2;
  LayerSpec s;
  s.window = 1;  // a window without causal: refused whoever built the architecture
  a.layers = {s};
  EXPECT_THROW(a.validate(), Error);
  EXPECT_THROW(Network<double>{a}, Error);
  a.layers[0].window = 0;
  a.layers[0].strict_past = true;
  EXPECT_THROW(Network<double>{a}, Error);
  a.layers[0].causal = true;
  EXPECT_NO_THROW(Network<double>{a});
  a.layers[0].heads = 1 << 20;
  a.layers[0].head_size = 1 << 20;  // 2^40 weights: refused before allocating
  EXPECT_THROW(Network<double>{a}, Error);
  a.layers[0] = LayerSpec{};
  a.layers[0].kind = LayerKind::layernorm;
  a.layers[0].pre_norm = true;
  EXPECT_THROW(a.validate(), Error);
}

TEST(Agreement, AttendedKeysIsTheOneMaskingRule) {
  LayerSpec s;
  EXPECT_EQ(attended_keys(s, 3, 6).first, 0);
  EXPECT_EQ(attended_keys(s, 3, 6).end, 6);
  s.causal = true;
  EXPECT_EQ(attended_keys(s, 3, 6).end, 4);
  s.strict_past = true;
  EXPECT_EQ(attended_keys(s, 3, 6).end, 3);
  EXPECT_EQ(attended_keys(s, 0, 6).end, attended_keys(s, 0, 6).first);  // query 0 sees nothing
  s.window = 2;
  EXPECT_EQ(attended_keys(s, 5, 6).first, 3);  // keys l >= k - window
  EXPECT_EQ(attended_keys(s, 1, 6).first, 0);
}
