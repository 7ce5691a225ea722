#include <gtest/gtest.h>

#include "../src/model/interval_product.hpp"
#include "uatlab/construct/blocks.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/model/network.hpp"

using namespace uatlab;
using nlohmann::json;

namespace {

Network<double> random_net(const std::string& arch, std::uint64_t seed) {
  Network<double> net(Architecture::from_json(json::parse(arch)));
  init_random(net, seed);
  return net;
}

// Entries k/16 with k uniform in [-16, 16): exact in every arithmetic.
Mat<Rational> random_input(int d, int n, std::uint64_t seed) {
  Rng rng(seed);
  Mat<Rational> x(d, n);
  for (Eigen::Index i = 0; i < x.size(); ++i)
    x.data()[i] = Rational(static_cast<long>(rng.uniform() * 32) - 16, 16);
  return x;
}

template <class S>
double max_abs_diff(const Mat<S>& a, const Mat<Mpfr>& ref) {
  double e = 0;
  for (Eigen::Index i = 0; i < a.size(); ++i)
    e = std::max(e, std::abs(Scalar<Mpfr>::to_double(scalar_cast<Mpfr>(a.data()[i]) - ref.data()[i])));
  return e;
}

const char* kExactArch = R"({"d": 3, "layers": [
  {"type": "attention", "heads": 2, "head_size": 2, "score": "hardmax", "bias": true},
  {"type": "feedforward", "width": 5},
  {"type": "attention", "heads": 1, "head_size": 3, "score": "linear", "tied_qkv": true},
  {"type": "feedforward", "width": 4, "activation": {"type": "piecewise", "breakpoints": ["-1/3", "1/2"],
                                                     "pieces": [[0, "1/7"], [2, 0], ["-1", "3/2"]]}}]})";

const char* kSoftArch = R"({"d": 4, "layers": [
  {"type": "attention", "heads": 2, "head_size": 2, "score": "softmax", "scale": "3/2", "rpe": "log", "bias": true, "rope": 7},
  {"type": "feedforward", "width": 6, "pre_norm": true},
  {"type": "attention", "heads": 1, "head_size": 3, "sqrt_scaling": true, "rpe": "t5", "causal": true, "t5_buckets": 8, "t5_max_distance": 16},
  {"type": "layernorm"},
  {"type": "attention", "heads": 2, "head_size": 1, "rpe": "lin", "dp_free": true},
  {"type": "feedforward", "width": 3, "activation": {"type": "piecewise", "breakpoints": ["0", "1"],
                                                     "pieces": [["1/2", 0], [0, "1/4"], [1, -1]]}}], "readout": 2})";

}  // namespace

TEST(Model, PermutationEquivariantWithoutPositionsExactly) {
  Network<Rational> net = network_cast<Rational>(random_net(kExactArch, 11));
  Mat<Rational> x = random_input(3, 5, 12);
  Eigen::PermutationMatrix<Eigen::Dynamic> P(5);
  P.indices() << 3, 0, 4, 1, 2;
  Mat<Rational> y = forward(net, x);
  Mat<Rational> y_perm = forward(net, Mat<Rational>(x * P));
  EXPECT_TRUE(y_perm == Mat<Rational>(y * P));  // exact equality, no tolerance
}

TEST(Model, PositionalEncodingBreaksEquivariance) {
  Network<Rational> net = network_cast<Rational>(random_net(R"({"d": 3, "max_len": 5, "layers": [
    {"type": "attention", "score": "linear", "heads": 1, "head_size": 2}]})",
                                                            3));
  Mat<Rational> x = random_input(3, 5, 4);
  Eigen::PermutationMatrix<Eigen::Dynamic> P(5);
  P.indices() << 1, 0, 2, 3, 4;
  EXPECT_FALSE(forward(net, Mat<Rational>(x * P)) == Mat<Rational>(forward(net, x) * P));
}

TEST(Model, SoftmaxApproachesHardmaxAsScaleGrows) {
  const MpfrPrecision precision(256);
  auto arch = [](const std::string& score, const std::string& scale) {
    return R"({"d": 3, "layers": [{"type": "attention", "heads": 2, "head_size": 1, "score": ")" + score +
           R"(", "scale": ")" + scale + R"("}]})";
  };
  Mat<Mpfr> x = matrix_cast<Mpfr>(random_input(3, 6, 5));
  Mat<Mpfr> hard = forward(network_cast<Mpfr>(random_net(arch("hardmax", "1"), 6)), x);
  double prev = 1e300;
  for (const char* scale : {"1", "10", "100", "1000", "10000", "1e6", "1e8"}) {
    double e = max_abs_diff(forward(network_cast<Mpfr>(random_net(arch("softmax", scale), 6)), x), hard);
    if (prev > 0) {  // strictly down until it underflows 2^-256
      EXPECT_LT(e, prev) << "scale " << scale;
    }
    prev = e;
  }
  EXPECT_LT(prev, 1e-30);  // the leak decays like exp(−λ·gap)
}

TEST(Model, FloatDoubleMpfrAgreeWithinTheirPrecision) {
  const MpfrPrecision precision(400);
  Network<Rational> exact = network_cast<Rational>(random_net(kSoftArch, 21));
  Mat<Rational> x = random_input(4, 7, 22);
  Mat<Mpfr> ref = forward(network_cast<Mpfr>(exact), matrix_cast<Mpfr>(x));
  double scale = max_abs_diff(Mat<Mpfr>(Mat<Mpfr>::Zero(ref.rows(), ref.cols())), ref);
  EXPECT_LT(max_abs_diff(forward(network_cast<double>(exact), matrix_cast<double>(x)), ref), 1e-13 * scale);
  EXPECT_LT(max_abs_diff(forward(network_cast<float>(exact), matrix_cast<float>(x)), ref), 1e-5 * scale);
  Mat<Rational> y100;
  {
    const MpfrPrecision low(100);
    y100 = matrix_cast<Rational>(forward(network_cast<Mpfr>(exact), matrix_cast<Mpfr>(x)));
  }
  EXPECT_LT(max_abs_diff(matrix_cast<Mpfr>(y100), ref), 1e-27 * scale);
  EXPECT_GT(max_abs_diff(matrix_cast<Mpfr>(y100), ref), 0);  // 100 bits really were 100, not 400
  // not trivially equal
  EXPECT_GT(max_abs_diff(forward(network_cast<double>(exact), matrix_cast<double>(x)), ref), 0);
}

TEST(Model, IntervalEnclosesTheThousandBitValue) {
  for (std::uint64_t seed : {31, 32, 33}) {
    for (const char* arch : {kSoftArch, kExactArch}) {
      Network<Rational> exact = network_cast<Rational>(random_net(arch, seed));
      Mat<Rational> x = random_input(exact.arch.d, 6, seed + 100);
      const MpfrPrecision reference(1000);
      Mat<Mpfr> ref = forward(network_cast<Mpfr>(exact), matrix_cast<Mpfr>(x));
      for (unsigned bits : {53u, 128u}) {
        Mat<Mpfi> y;
        {
          const MpfrPrecision low(bits);
          y = forward(network_cast<Mpfi>(exact), matrix_cast<Mpfi>(x));
        }
        for (Eigen::Index i = 0; i < y.size(); ++i) {
          EXPECT_LE(lower(y.data()[i]), ref.data()[i]) << "seed " << seed << " bits " << bits;
          EXPECT_GE(upper(y.data()[i]), ref.data()[i]) << "seed " << seed << " bits " << bits;
        }
      }
    }
  }
}

TEST(Model, IntervalHardmaxRefusesUndecidedArgmax) {
  // Two keys whose scores are enclosures of 1/3 computed two different ways overlap.
  Network<Rational> net = network_cast<Rational>(random_net(R"({"d": 1, "layers": [
    {"type": "attention", "score": "hardmax", "heads": 1, "head_size": 1}]})",
                                                            1));
  net.layers[0].wq(0, 0) = 1;
  net.layers[0].wk(0, 0) = Rational(1, 3);
  net.layers[0].wv(0, 0) = 1;
  net.layers[0].wo(0, 0) = 1;
  Mat<Rational> x(1, 2);
  x << 1, 1;  // equal keys: an exact tie, fine in rationals ...
  Mat<Rational> y = forward(net, x);
  EXPECT_EQ(y(0, 0), Rational(2));  // 1 + (1/2·1 + 1/2·1)
  const MpfrPrecision precision(64);
  // ... undecidable on intervals
  EXPECT_THROW(forward(network_cast<Mpfi>(net), matrix_cast<Mpfi>(x)), Error);
}

TEST(Model, HardmaxTiesShareWeightExactly) {
  Network<Rational> net(Architecture::from_json(json::parse(R"({"d": 1, "layers": [
    {"type": "attention", "score": "hardmax", "heads": 1, "head_size": 1}]})")));
  net.layers[0].wq(0, 0) = 1;
  net.layers[0].wk(0, 0) = 1;
  net.layers[0].wv(0, 0) = 1;
  net.layers[0].wo(0, 0) = 1;
  Mat<Rational> x(1, 4);
  x << 3, -1, 3, 2;  // query 3: keys 0 and 2 tie at score 9
  Mat<Rational> y = forward(net, x);
  EXPECT_EQ(y(0, 0), Rational(6));   // 3 + (3 + 3)/2
  EXPECT_EQ(y(0, 1), Rational(-2));  // query −1 prefers the smallest key, −1
  // In double, a tolerance widens the argmax set.
  Network<double> nd = network_cast<double>(net);
  Mat<double> xd(1, 3);
  xd << 1.0, 1.0 + 1e-12, 0.0;
  EvalOptions tol;
  tol.hardmax_tolerance = 1e-9;
  EXPECT_DOUBLE_EQ(forward(nd, xd)(0, 0), 1.0 + (1.0 + 1e-12));
  EXPECT_DOUBLE_EQ(forward(nd, xd, tol)(0, 0), 1.0 + (2.0 + 1e-12) / 2);
}

TEST(Model, CausalAttentionIgnoresTheFuture) {
  Network<double> net = random_net(R"({"d": 2, "layers": [
    {"type": "attention", "heads": 2, "head_size": 2, "causal": true, "rpe": "lin"}, {"type": "feedforward", "width": 4}]})",
                                   8);
  Mat<double> x = matrix_cast<double>(random_input(2, 6, 9)), x2 = x;
  x2.col(5).setConstant(7.0);
  Mat<double> y = forward(net, x), y2 = forward(net, x2);
  EXPECT_TRUE(y.leftCols(5) == y2.leftCols(5));
  EXPECT_FALSE(y.col(5) == y2.col(5));
}

// Eigen's packet exp clamps its argument: exp(−∞) came out 5.6e-309 in double (2.9e-39 in float),
// so a masked key of 1e300 (1e30) leaked about 5e-9 into the queries before it, whose exact
// outputs do not depend on it. Zero query and key weights: every score 0, finite at any value.
// Both softmax paths (fixed sizes at 8 tokens, the whole-matrix form at 3 and 9); training
// normalises its scores with the same function.
template <class S>
void expect_masked_keys_silent(S huge) {
  for (int n : {3, 8, 9}) {
    Network<S> net = network_cast<S>(random_net(R"({"d": 2, "layers": [
      {"type": "attention", "heads": 2, "head_size": 2, "causal": true}, {"type": "feedforward", "width": 4}]})",
                                                11));
    net.layers[0].wq.setZero();
    net.layers[0].wk.setZero();
    Mat<S> x = matrix_cast<S>(random_input(2, n, 12)), far = x;
    far.col(n - 1).setConstant(huge);
    const Mat<S> y = forward(net, x), y_far = forward(net, far);
    EXPECT_TRUE(y.leftCols(n - 1) == y_far.leftCols(n - 1))
        << n << " tokens, largest difference " << (y - y_far).leftCols(n - 1).cwiseAbs().maxCoeff();
    EXPECT_TRUE(y_far.allFinite());
  }
}

TEST(Model, MaskedKeysAddNothingBesideHugeValues) {
  expect_masked_keys_silent<double>(1e300);
  expect_masked_keys_silent<float>(1e30f);
}

// Rotary positions make a score depend on the two tokens and their offset alone: a query that sees
// the same window of tokens at another place computes the same output (to MPFR's last bits), while
// the network is no longer permutation equivariant. Bad settings and exact arithmetic are refused.
TEST(Model, RotaryPositionsSeeOffsetsNotPlaces) {
  const char* arch = R"({"d": 3, "layers": [
    {"type": "attention", "heads": 2, "head_size": 4, "rope": 10, "causal": true, "window": 2, "bias": true},
    {"type": "feedforward", "width": 4}]})";
  const MpfrPrecision precision(256);
  const Network<Mpfr> net = network_cast<Mpfr>(random_net(arch, 5));
  const Mat<Mpfr> x = matrix_cast<Mpfr>(random_input(3, 4, 6)),
                  prefix = matrix_cast<Mpfr>(random_input(3, 5, 7));
  Mat<Mpfr> shifted(3, 9);
  shifted << prefix, x;
  const Mat<Mpfr> y = forward(net, x), ys = forward(net, shifted);
  for (Eigen::Index k = 2; k < 4; ++k)  // queries whose window lies inside x
    EXPECT_LT(Mpfr((y.col(k) - ys.col(5 + k)).cwiseAbs().maxCoeff()), Mpfr("1e-70")) << "query " << k;
  Eigen::PermutationMatrix<Eigen::Dynamic> P(4);
  P.indices() << 1, 0, 3, 2;
  Mat<double> unrotated_y, rotated_y;
  {
    const Network<double> bidirectional = random_net(R"({"d": 3, "layers": [
      {"type": "attention", "heads": 2, "head_size": 2, "rope": 10000}]})",
                                                     5);
    const Mat<double> xd = matrix_cast<double>(random_input(3, 4, 6));
    rotated_y = forward(bidirectional, Mat<double>(xd * P));
    unrotated_y = Mat<double>(forward(bidirectional, xd) * P);
  }
  EXPECT_GT((rotated_y - unrotated_y).cwiseAbs().maxCoeff(), 1e-3);
  EXPECT_THROW(forward(network_cast<Rational>(random_net(arch, 5)), random_input(3, 4, 6)), Error);
  for (const char* bad : {R"("head_size": 3, "rope": 10)", R"("head_size": 2, "rope": 1)",
                          R"("head_size": 2, "rope": 10, "dp_free": true, "rpe": "lin")",
                          R"("head_size": 2, "rope": 10, "tied_qkv": true)", R"("head_size": 2, "rope": -3)"})
    EXPECT_THROW(Architecture::from_json(
                     json::parse(std::string(R"({"d": 2, "layers": [{"type": "attention", )") + bad + "}]}")),
                 Error)
        << bad;
  const Architecture a = Architecture::from_json(json::parse(arch));
  EXPECT_EQ(Architecture::from_json(a.to_json()).layers[0].rope, 10);
}

TEST(Model, PiecewiseActivationIsLeftClosedAndMayJump) {
  Network<Rational> net(
      Architecture::from_json(json::parse(R"({"d": 1, "layers": [{"type": "feedforward", "width": 1,
    "activation": {"type": "piecewise", "breakpoints": ["0", "1"], "pieces": [[0, 5], [-1, 0], [0, 0]]}}]})")));
  net.layers[0].w1(0, 0) = 1;
  net.layers[0].w2(0, 0) = 1;
  Mat<Rational> x(1, 4);
  x << Rational(-1, 2), 0, Rational(1, 2), 1;
  Mat<Rational> y = forward(net, x);
  EXPECT_EQ(y(0, 0), Rational(9, 2));  // −1/2 + 5
  EXPECT_EQ(y(0, 1), Rational(0));     // 0 + (−0)
  EXPECT_EQ(y(0, 2), Rational(0));     // 1/2 − 1/2
  EXPECT_EQ(y(0, 3), Rational(1));     // 1 + 0
  EXPECT_TRUE(net.arch.layers[0].activation.in_yun_class());
}

TEST(Model, T5BucketsMatchTheReferenceRule) {
  // Bidirectional, 32 buckets, max distance 128 (T5's defaults).
  EXPECT_EQ(t5_bucket(0, true, 32, 128), 0);
  EXPECT_EQ(t5_bucket(-1, true, 32, 128), 1);
  EXPECT_EQ(t5_bucket(1, true, 32, 128), 17);
  EXPECT_EQ(t5_bucket(-20, true, 32, 128), 10);
  EXPECT_EQ(t5_bucket(20, true, 32, 128), 26);
  EXPECT_EQ(t5_bucket(-200, true, 32, 128), 15);
  // Unidirectional: future keys share bucket 0.
  EXPECT_EQ(t5_bucket(5, false, 32, 128), 0);
  EXPECT_EQ(t5_bucket(-20, false, 32, 128), 17);  // 16 + ⌊log(20/16)/log(128/16)·16⌋
}

TEST(Model, RationalsRefuseTranscendentalNetworks) {
  Network<Rational> net = network_cast<Rational>(random_net(kSoftArch, 1));
  EXPECT_THROW(forward(net, random_input(4, 3, 1)), Error);
  EXPECT_NO_THROW(check_evaluable<Rational>(Architecture::from_json(json::parse(kExactArch))));
}

TEST(Model, ArchitectureRoundTripsAndRejectsBadFields) {
  Architecture a = Architecture::from_json(json::parse(kSoftArch));
  EXPECT_EQ(Architecture::from_json(a.to_json()).to_json(), a.to_json());
  EXPECT_THROW(
      Architecture::from_json(json::parse(R"({"d": 2, "layers": [{"type": "attention", "heds": 2}]})")),
      Error);
  EXPECT_THROW(Architecture::from_json(json::parse(R"({"d": 0})")), Error);
  EXPECT_THROW(Architecture::from_json(json::parse(R"({"d": 2, "layers": [{"type": "feedforward"}]})")),
               Error);
  EXPECT_THROW(Architecture::from_json(
                   json::parse(R"({"d": 2, "layers": [{"type": "attention", "score": "sparsemax"}]})")),
               Error);
  EXPECT_THROW(
      Architecture::from_json(json::parse(R"({"d": 2, "layers": [{"type": "attention", "dp_free": true}]})")),
      Error);
  EXPECT_THROW(Architecture::from_json(json::parse(R"({"d": 2, "layers": [{"type": "feedforward", "width": 2,
    "activation": {"type": "piecewise", "breakpoints": [1, 0], "pieces": [[0,0],[0,0],[0,0]]}}]})")),
               Error);
}

// A sub-layer may carry the name it had elsewhere (from_torch: PyTorch's), kept through the file
// formats and printed beside the index; anything but short printable text is refused.
TEST(Model, SubLayerSourceNamesRoundTripAndAreChecked) {
  const Architecture a = Architecture::from_json(json::parse(
      R"({"d": 2, "layers": [{"type": "attention", "source": "layers.0.self_attn"},
                             {"type": "feedforward", "width": 2, "source": "layers.0.linear1/linear2"},
                             {"type": "layernorm", "source": "norm"}]})"));
  EXPECT_EQ(a.layers[0].source, "layers.0.self_attn");
  EXPECT_EQ(a.layers[2].source, "norm");
  EXPECT_EQ(Architecture::from_json(a.to_json()).to_json(), a.to_json());
  EXPECT_NE(a.layers[1].describe().find("[layers.0.linear1/linear2]"), std::string::npos)
      << a.layers[1].describe();
  EXPECT_EQ(a.layers[1].describe_kind().find("["), std::string::npos);
  EXPECT_FALSE(a.to_json()["layers"][0].contains("eps"));
  for (const char* bad : {R"(1)", R"("")", R"("a\nb")", R"("é")"})
    EXPECT_THROW(Architecture::from_json(json::parse(
                     std::string(R"({"d": 2, "layers": [{"type": "layernorm", "source": )") + bad + "}]}")),
                 Error)
        << bad;
  EXPECT_THROW(
      Architecture::from_json(json::parse(R"({"d": 2, "layers": [{"type": "layernorm", "source": ")" +
                                          std::string(201, 'x') + R"("}]})")),
      Error);
}

TEST(Model, InputErrorsNameTheProblem) {
  Network<double> net = random_net(R"({"d": 2, "max_len": 3, "layers": []})", 1);
  EXPECT_THROW(forward(net, Mat<double>(Mat<double>::Zero(3, 2))), Error);  // wrong d
  EXPECT_THROW(forward(net, Mat<double>(Mat<double>::Zero(2, 4))), Error);  // longer than max_len
  Network<double> tok = random_net(R"({"d": 2, "vocab": 5, "layers": []})", 1);
  EXPECT_THROW(forward_tokens(tok, {0, 5}), Error);
  EXPECT_EQ(forward_tokens(tok, {4, 1}).col(0), tok.embed.col(4));
}

// The MPFI feed-forward kernel (relu_hidden) shares the products of equal consecutive rows of W1,
// clamps in place and keeps a per-thread scratch: its enclosures must be those of the plain
// interval formula, entry by entry, and follow the precision in force from one call to the next.
TEST(Model, IntervalFeedForwardIsThePlainFormulaAtThePrecisionInForce) {
  Architecture a = Architecture::from_json(json::parse(R"({"d": 2, "layers": [
    {"type": "feedforward", "width": 7}]})"));
  Network<Rational> net(a);
  const Rational r[7][2] = {{{1, 3}, {2, 7}},   {{1, 3}, {2, 7}}, {{1, 3}, {2, 7}},  {{-5, 11}, {0, 1}},
                            {{-5, 11}, {0, 1}}, {{1, 3}, {2, 7}}, {{3, 13}, {-1, 9}}};
  for (int i = 0; i < 7; ++i) {
    net.layers[0].w1(i, 0) = r[i][0];
    net.layers[0].w1(i, 1) = r[i][1];
    net.layers[0].b1(i, 0) = Rational(i - 3, 17);
    net.layers[0].w2(0, i) = Rational(i + 1, 19);
    net.layers[0].w2(1, i) = Rational(3 - i, 23);
  }
  net.layers[0].b2(1, 0) = Rational(1, 29);
  auto input = [] {  // intervals around zero (units straddle the kink), a point and an exact zero
    Mat<Mpfi> x(2, 3);
    x(0, 0) = hull(Mpfr(-0.125), Mpfr(0.0625));
    x(1, 0) = hull(Mpfr(-0.25), Mpfr(0.5));
    x(0, 1) = Scalar<Mpfi>::from(Rational(2, 3));
    x(1, 1) = Mpfi(0);
    x(0, 2) = hull(Mpfr(0.75), Mpfr(1));
    x(1, 2) = Scalar<Mpfi>::from(Rational(-1, 5));
    return x;
  };
  double width_60 = 0;
  for (unsigned bits : {60u, 200u, 60u}) {
    const MpfrPrecision precision(bits);
    const Network<Mpfi> ni = network_cast<Mpfi>(net);
    const Mat<Mpfi> x = input(), y = forward(ni, x);
    const Layer<Mpfi>& L = ni.layers[0];
    double width = 0;
    for (int j = 0; j < 3; ++j)
      for (int o = 0; o < 2; ++o) {
        Mpfi z = x(o, j);  // the residual stream, to which each unit adds its term in turn
        for (int i = 0; i < 7; ++i) {
          Mpfi h(0);
          for (int k = 0; k < 2; ++k)
            if (!(lower(x(k, j)) == 0 && upper(x(k, j)) == 0)) h = h + L.w1(i, k) * x(k, j);
          h = h + L.b1(i, 0);
          if (upper(h) <= 0) continue;  // relu gives 0, which the kernel skips
          if (lower(h) < 0) h = hull(Mpfr(0), upper(h));
          z = z + L.w2(o, i) * h;
        }
        z = z + L.b2(o, 0);
        EXPECT_TRUE(lower(y(o, j)) == lower(z) && upper(y(o, j)) == upper(z))
            << bits << " bits, token " << j << " row " << o;
        if (j == 1)  // the point token: its width is the rounding of the precision in force
          width = std::max(width, Scalar<Mpfr>::to_double(upper(y(o, j)) - lower(y(o, j))));
      }
    if (bits == 60u && width_60 == 0) width_60 = width;
    if (bits == 200u) {
      EXPECT_LT(width, width_60 * 1e-30);
    }
    EXPECT_GT(width, 0);  // the scratch took the new precision
    if (bits == 60u && width_60 > 0) {
      EXPECT_EQ(width, width_60);
    }
  }
}

TEST(Blocks, TheBuilderFillsChecksAndAppends) {
  const Vec<Rational> v = (Vec<Rational>(2) << 1, 2).finished();
  blocks::Builder b(2, 3);
  b.add(blocks::rank1_attention(false),
        [&](Layer<Rational>& L) { blocks::fill_rank1(L, v, 4, Rational(1, 2), false); })
      .positions([](Mat<Rational>& pe) { pe(1, 2) = 7; })
      .readout(1, [](Mat<Rational>& w, Mat<Rational>& c) { w(0, 1) = 1, c(0, 0) = -1; });
  const Network<Rational> net = b.build();
  EXPECT_EQ(net.layers[0].wq, Mat<Rational>(4 * v.transpose()));
  EXPECT_EQ(net.layers[0].wo, Mat<Rational>(Rational(1, 2) * v));
  EXPECT_EQ(net.pe(1, 2), 7);
  EXPECT_EQ(net.readout_b(0, 0), -1);
  // The tied form keeps the product W_O·W_V·(W_Q·W_K) of the untied one when c is a square.
  blocks::Builder t(2);
  t.add(blocks::rank1_attention(true),
        [&](Layer<Rational>& L) { blocks::fill_rank1(L, v, 4, Rational(1, 2), true); });
  const Network<Rational> tied = t.build();
  EXPECT_EQ(tied.layers[0].wq, Mat<Rational>(2 * v.transpose()));
  EXPECT_EQ(tied.layers[0].wo, Mat<Rational>(Rational(1, 4) * v));
  // append copies sub-layers with their weights; a fill of the wrong shape is refused, named.
  blocks::Builder c(2);
  c.append(net).add(blocks::feedforward(3), [](Layer<Rational>& L) { L.w1 = Mat<Rational>::Zero(2, 2); });
  try {
    c.build();
    FAIL() << "a wrongly shaped fill was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sub-layer 1 (feedforward: width 3"), std::string::npos) << e.what();
  }
  blocks::Builder ok(2);
  ok.append(net).add(blocks::hardmax_shift(2), [](Layer<Rational>& L) { L.bq(1, 0) = 5; });
  const Network<Rational> two = ok.build();
  EXPECT_EQ(two.layers[0].wq, net.layers[0].wq);
  EXPECT_EQ(two.layers[1].spec.score, Score::hardmax);
  EXPECT_EQ(two.layers[1].bq(1, 0), 5);
  EXPECT_EQ(blocks::piecewise_unit({0}, {{-1, 0}, {0, 0}}).activation.pieces.size(), 2u);
}

// Issue 38: a value past double's range stops the evaluation, named; it used to flow on as inf or
// NaN, or vanish in a layer norm ([0, 0] where the exact output is [1, -1]).
TEST(Model, OverflowInDoubleIsAnErrorNotASilentNumber) {
  Network<double> net(Architecture::from_json(
      json::parse(R"({"d":2,"layers":[{"type":"feedforward","width":1},{"type":"layernorm"}]})")));
  net.layers[0].w1(0, 0) = 1;
  net.layers[0].w2(0, 0) = 1e200, net.layers[0].w2(1, 0) = -1e200;
  net.layers[1].norm_w.setOnes();
  Mat<double> x(2, 1);
  x << 1, 0;
  try {
    forward(net, x);
    FAIL() << "a layer norm of a 1e200 token gave a number";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer norm: a token's variance is beyond double's range"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(
      forward(network_cast<Mpfr>(network_cast<Rational>(net)), matrix_cast<Mpfr>(x)));  // MPFR's range
  Network<double> h(Architecture::from_json(
      json::parse(R"({"d":1,"layers":[{"type":"attention","score":"hardmax","heads":1,"head_size":1}]})")));
  h.layers[0].wq(0, 0) = 1e300, h.layers[0].wv(0, 0) = 1, h.layers[0].wo(0, 0) = 1;  // W_K = 0: score 0·inf
  Mat<double> t(1, 2);
  t << 1e10, 2e10;
  try {
    forward(h, t);
    FAIL() << "a hardmax of NaN scores dropped the attention silently";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hardmax scores of query 1 are not finite"), std::string::npos)
        << e.what();
  }
}

// Issue 38: --hardmax-tol has one meaning in every arithmetic; intervals ignored it before, and
// their enclosure then excluded what double, MPFR and rationals give.
TEST(Model, HardmaxToleranceMeansTheSameInEveryArithmetic) {
  Network<Rational> net(Architecture::from_json(
      json::parse(R"({"d":1,"layers":[{"type":"attention","score":"hardmax","heads":1,"head_size":1}]})")));
  net.layers[0].wq(0, 0) = net.layers[0].wk(0, 0) = net.layers[0].wv(0, 0) = net.layers[0].wo(0, 0) = 1;
  Mat<Rational> x(1, 3);
  const Rational e = parse_rational("1e-12");
  x << 1, 1 + e, -2;  // query k scores key l by x_l·x_k: keys 0 and 1 within 1e-9 for queries 0 and 1
  EvalOptions o;
  o.hardmax_tolerance = 1e-9;
  const Mat<Rational> q = forward(net, x, o);
  EXPECT_EQ(q(0, 0), 1 + (2 + e) / 2);    // keys 0 and 1 share the weight
  EXPECT_EQ(q(0, 2), -2 + Rational(-2));  // query 2: key 2 alone (score 4)
  const Mat<double> d = forward(network_cast<double>(net), matrix_cast<double>(x), o);
  const MpfrPrecision precision(200);
  const Mat<Mpfi> iv = forward(network_cast<Mpfi>(net), matrix_cast<Mpfi>(x), o);
  for (Eigen::Index k = 0; k < 3; ++k) {  // the enclosure holds what rationals (and double) give
    EXPECT_LE(Scalar<Mpfr>::to_rational(lower(iv(0, k))), q(0, k)) << k;
    EXPECT_GE(Scalar<Mpfr>::to_rational(upper(iv(0, k))), q(0, k)) << k;
    EXPECT_NEAR(d(0, k), Scalar<Rational>::to_double(q(0, k)), 1e-12) << k;
  }
  o.hardmax_tolerance = 0;  // the maximum alone
  EXPECT_EQ(forward(net, x, o)(0, 0), 1 + (1 + e));
  const Mat<Mpfi> exact_max = forward(network_cast<Mpfi>(net), matrix_cast<Mpfi>(x), o);
  EXPECT_LE(Scalar<Mpfr>::to_rational(lower(exact_max(0, 0))), 2 + e);
  EXPECT_GE(Scalar<Mpfr>::to_rational(upper(exact_max(0, 0))), 2 + e);
}

// Softmax and hardmax weights are ≥ 0 and sum to 1: an attention output lies between its keys'
// values, whatever the scale of the scores. Interval weights that straddle (each [0, 1] at a steep
// scale) used to add up to twice the values' spread; the enclosure is now clipped to their hull,
// and it still holds the outputs of points in the box (in 300-bit MPFR).
// Over a box of independent scores a_j ∈ [lo_j, hi_j], w_l = 1 / (1 + Σ_{j≠l} exp(a_j − a_l)) falls
// in a_j and rises in a_l, so its exact range is [1/(1 + Σ_{j≠l} e^{hi_j − lo_l}), 1/(1 + Σ_{j≠l}
// e^{lo_j − hi_l})]. The interval softmax must give that range up to rounding: no dependency loss
// (e_l/Σ e_j with e_l in both would be wider) and no loss from long sequences (48 keys).
TEST(Model, IntervalSoftmaxIsTheExactRangeOverABoxOfScores) {
  Network<Rational> net(Architecture::from_json(json::parse(R"({"d": 1, "layers": [
    {"type": "attention", "heads": 1, "head_size": 1, "bias": true}]})")));
  Layer<Rational>& L = net.layers[0];
  L.wq(0, 0) = 0, L.bq(0, 0) = 1, L.wk(0, 0) = 1, L.bk(0, 0) = 0;  // score of key j: x_j, every query
  L.wv(0, 0) = L.wo(0, 0) = 1, L.bv(0, 0) = L.bo(0, 0) = 0;
  const Eigen::Index n = 48;
  const MpfrPrecision precision(200);
  const Network<Mpfi> ni = network_cast<Mpfi>(net);
  Mat<Mpfi> x(1, n);
  std::vector<Mpfr> lo(n), hi(n);
  for (Eigen::Index j = 0; j < n; ++j) {  // centres spread over 30 nats, radii up to 0.5
    const Mpfr c(static_cast<double>((j * 37) % n) * 0.625 - 15), r(static_cast<double>(j % 5) * 0.125);
    lo[j] = c - r, hi[j] = c + r, x(0, j) = hull(lo[j], hi[j]);
  }
  Activations<Mpfi> acts;
  forward(ni, x, {}, &acts);
  const Mat<Mpfi>& w = acts.pattern[0][0];  // row: query, column: key
  const MpfrPrecision reference(400);
  for (Eigen::Index l = 0; l < n; ++l) {
    Mpfr below(1), above(1);  // the exact range's denominators
    for (Eigen::Index j = 0; j < n; ++j)
      if (j != l) below += mp::exp(Mpfr(hi[j] - lo[l])), above += mp::exp(Mpfr(lo[j] - hi[l]));
    const Mpfr least = 1 / below, most = 1 / above;
    for (Eigen::Index q : {Eigen::Index(0), n - 1}) {
      const Mpfr a = lower(w(q, l)), b = upper(w(q, l));
      EXPECT_LE(a, least) << "key " << l;  // an enclosure of the range ...
      EXPECT_GE(b, most) << "key " << l;
      EXPECT_LE(Mpfr(least - a), least * Mpfr(1e-55)) << "key " << l;  // ... equal to it up to rounding
      EXPECT_LE(Mpfr(b - most), most * Mpfr(1e-55)) << "key " << l;
    }
  }
}

TEST(Model, IntervalAttentionStaysWithinItsValues) {
  for (const char* score : {"softmax", "hardmax"}) {
    Network<Rational> net(Architecture::from_json(json::parse(std::string(R"({"d": 1, "layers": [
      {"type": "attention", "heads": 1, "head_size": 1, "score": ")") +
                                                              score + R"(", "scale": "1000000"}]})")));
    net.layers[0].wq(0, 0) = net.layers[0].wk(0, 0) = net.layers[0].wv(0, 0) = net.layers[0].wo(0, 0) = 1;
    const MpfrPrecision precision(128);
    const Network<Mpfi> ni = network_cast<Mpfi>(net);
    Mat<Mpfi> x(1, 2);
    x(0, 0) = hull(Mpfr(-1), Mpfr(1));  // straddles the other token: either may win
    x(0, 1) = Mpfi(Mpfr(0.5));
    Mat<Mpfi> y;
    if (std::string(score) == "hardmax") {
      EXPECT_THROW(forward(ni, x), Error);  // an undecided argmax stays an error
      x(0, 0) = hull(Mpfr(0.75), Mpfr(1));  // decided: token 0 wins both queries
    }
    y = forward(ni, x);
    // query 1: 0.5 + a value in [min, max] of the keys' values
    const double lo = std::string(score) == "hardmax" ? 1.25 : -0.5, hi = 1.5;
    EXPECT_GE(lower(y(0, 1)), Mpfr(lo) - Mpfr(1e-30)) << score;
    EXPECT_LE(upper(y(0, 1)), Mpfr(hi) + Mpfr(1e-30)) << score;
    const MpfrPrecision reference(300);
    const Network<Mpfr> nm = network_cast<Mpfr>(net);
    for (const Mpfr& t : {lower(x(0, 0)), Mpfr((lower(x(0, 0)) + upper(x(0, 0))) / 2), upper(x(0, 0))}) {
      Mat<Mpfr> p(1, 2);
      p(0, 0) = t, p(0, 1) = Mpfr(0.5);
      const Mat<Mpfr> yp = forward(nm, p);
      for (Eigen::Index k = 0; k < 2; ++k)
        EXPECT_TRUE(lower(y(0, k)) <= yp(0, k) && yp(0, k) <= upper(y(0, k))) << score << " at " << t;
    }
  }
}

// The MPFI attention and the MPFI training passes (the mean-value form) multiply in place
// (product, add_product in src/model/interval_product.hpp: no number allocated per multiply-add). Every entry
// is the plain sum in index order at the precision in force, for every kind of operand the attention passes
// (matrices, blocks of const matrices, whose entries Eigen hands out by value, and the transpose of a block),
// exact zeros skipped; without a transpose that is also what Eigen's product gave, at small sizes
// (coefficient-wise) and large (its GEMM), so the enclosures of the values and the outputs did not change.
// (Eigen's GEMM sums a transposed operand in another order at depth 24: an enclosure as sound, differing in
// its last bits.)
TEST(Model, IntervalProductsInPlaceAreThePlainSums) {
  Rng rng(5);
  auto interval_matrix = [&](Eigen::Index r, Eigen::Index c) {
    Mat<Mpfi> m(r, c);
    for (Eigen::Index i = 0; i < m.size(); ++i) {
      const double a = 2 * rng.uniform() - 1, w = rng.uniform() < 0.2 ? 0.0 : rng.uniform() / 8;
      m.data()[i] = rng.uniform() < 0.1 ? Mpfi(0) : hull(Mpfr(a) / 3, Mpfr(a + w) / 3);
    }
    return m;
  };
  auto plain = [](const auto& A, const auto& B) {  // z = ((0 + a_0 b_0) + a_1 b_1) + ...
    Mat<Mpfi> C(A.rows(), B.cols());
    for (Eigen::Index i = 0; i < A.rows(); ++i)
      for (Eigen::Index j = 0; j < B.cols(); ++j) {
        Mpfi z(0);
        for (Eigen::Index k = 0; k < A.cols(); ++k)
          z = z + Mpfi(A(i, k)) * Mpfi(B(k, j));
        C(i, j) = z;
      }
    return C;
  };
  auto same = [](const Mat<Mpfi>& a, const Mat<Mpfi>& b) {
    if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
    for (Eigen::Index i = 0; i < a.size(); ++i)
      if (!(lower(a.data()[i]) == lower(b.data()[i]) && upper(a.data()[i]) == upper(b.data()[i])))
        return false;
    return true;
  };
  for (unsigned bits : {60u, 200u})
    for (Eigen::Index size : {3, 24}) {  // 3: coefficient-wise in Eigen; 24: its GEMM
      SCOPED_TRACE(std::to_string(bits) + " bits, size " + std::to_string(size));
      const MpfrPrecision precision(bits);
      const Mat<Mpfi> W = interval_matrix(size + 2, size), X = interval_matrix(size, size + 1),
                      K = interval_matrix(2 * size, size + 1);
      EXPECT_TRUE(same(product<Mpfi>(W, X), plain(W, X)));
      EXPECT_TRUE(same(product<Mpfi>(W, X), Mat<Mpfi>(W * X))) << "Eigen's product";
      const auto Wb = W.middleCols(1, size - 1);
      const auto Xb = X.bottomRows(size - 1);
      EXPECT_TRUE(same(product<Mpfi>(Wb, Xb), plain(Wb, Xb))) << "blocks of const matrices";
      EXPECT_TRUE(same(product<Mpfi>(Wb, Xb), Mat<Mpfi>(Wb * Xb))) << "blocks, Eigen's product";
      const auto Kt = K.middleRows(size, size).transpose();
      EXPECT_TRUE(same(product<Mpfi>(Kt, X), plain(Kt, X))) << "the transpose of a block";
      Mat<Mpfi> Z = interval_matrix(size + 2, size + 3), Zi = Z;
      auto out = Z.rightCols(size + 1);
      out.noalias() += W * X;
      auto out_in_place = Zi.rightCols(size + 1);
      out_in_place += product<Mpfi>(W, X);
      EXPECT_TRUE(same(Zi, Z)) << "a head's sum added to the residual, as Eigen's +=";
      const Mat<Mpfi> P = product<Mpfi>(W, X);  // the scratch carries the precision in force
      EXPECT_EQ(mpfi_get_prec(P(0, 0).backend().data()), mpfi_get_prec(Mpfi(1).backend().data()));
    }
}
