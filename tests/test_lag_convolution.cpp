// DP-free heads by FFT (src/train/lag_convolution.hpp) against the n×n products they replace: the
// forward, dO·Aᵀ and the bias's gradient by offset, for every mask, bias type and sign of the rate
// (a rate that weights far keys most sends early queries down the direct path), and float training
// by FFT against double training by the n×n products.
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <random>

#include "../src/model/network_impl.hpp"
#include "../src/train/backward_impl.hpp"
#include "../src/train/lag_convolution.hpp"
#include "uatlab/model/init.hpp"

using namespace uatlab;
using nlohmann::json;

namespace {

Mat<double> random_matrix(Eigen::Index rows, Eigen::Index cols, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  return Mat<double>::NullaryExpr(rows, cols, [&] { return u(rng); });
}

double max_abs(const Eigen::MatrixXd& m) {
  return m.size() ? m.cwiseAbs().maxCoeff() : 0.0;
}

struct Mask {
  const char* name;
  bool causal, strict_past;
  int window;
};
const Mask kMasks[] = {{"bidirectional", false, false, 0},
                       {"causal", true, false, 0},
                       {"strict past", true, true, 0},
                       {"causal window 4", true, false, 4},
                       {"strict past window 5", true, true, 5}};

}  // namespace

TEST(LagConvolution, MatchesTheDenseProductsOnEveryMaskBiasAndRate) {
  std::mt19937_64 rng(7);
  int direct_cases = 0, cases = 0;
  for (const Mask& m : kMasks)
    for (const char* rpe : {"lin", "log", "t5"})
      for (double rate : {0.4, -0.05, -4.0})
        for (long n : {1L, 2L, 9L, 40L}) {
          SCOPED_TRACE(std::string(m.name) + ", " + rpe + ", rate " + std::to_string(rate) + ", n " +
                       std::to_string(n));
          json layer = {{"type", "attention"},
                        {"heads", 1},
                        {"head_size", 1},
                        {"dp_free", true},
                        {"rpe", rpe},
                        {"causal", m.causal},
                        {"strict_past", m.strict_past},
                        {"window", m.window}};
          if (std::string(rpe) == "t5") layer.update({{"t5_buckets", 6}, {"t5_max_distance", 16}});
          const Architecture arch = Architecture::from_json(json{{"d", 3}, {"layers", {layer}}});
          Network<double> net(arch);
          Layer<double>& L = net.layers[0];
          for (Eigen::Index j = 0; j < L.rpe.cols(); ++j)
            L.rpe(0, j) = std::string(rpe) == "t5" ? rate * static_cast<double>(j % 3 - 1) * 5 : rate;
          const LayerSpec& s = L.spec;
          // The lags are the masking rule's: every query's keys are [q − hi, q − lo] within [0, n).
          LagHead head = lag::allowed_lags(s, n);
          for (long q = 0; q < n; ++q) {
            const KeyRange r = attended_keys(s, q, n);
            const long first = std::max(0L, q - head.hi), end = std::max(first, std::min(n, q - head.lo + 1));
            EXPECT_EQ(r.first, first) << "query " << q;
            EXPECT_EQ(r.end, end) << "query " << q;
          }
          lag::set_weights(head, bias_by_offset(L, 0, n));
          direct_cases += !head.direct.empty();
          ++cases;
          // The dense weights, as training's n×n path makes them.
          Mat<double> A = position_bias(L, 0, n);
          normalise_columns(A, s, EvalOptions{});
          const Eigen::Index R = 5;
          const Mat<double> V = random_matrix(R, n, rng), dO = random_matrix(R, n, rng);
          Eigen::MatrixXd O, dV;
          Eigen::VectorXd dbias;
          lag::forward(head, V.transpose(), O);  // a sequence-channel per column
          EXPECT_LT(max_abs(O.transpose() - V * A), 1e-9);
          lag::backward(head, V.transpose(), dO.transpose(), O, dV, dbias);
          EXPECT_LT(max_abs(dV.transpose() - dO * A.transpose()), 1e-9);
          Mat<double> dS = V.transpose() * dO;
          const Eigen::RowVectorXd dot = A.cwiseProduct(dS).colwise().sum();
          dS.array().rowwise() -= dot.array();
          dS.array() *= A.array();
          Eigen::VectorXd want = Eigen::VectorXd::Zero(2 * n - 1);
          for (long l = 0; l < n; ++l)
            for (long q = 0; q < n; ++q)
              want(l - q + n - 1) += dS(l, q);
          EXPECT_LT(max_abs(dbias - want), 1e-9 * (1 + max_abs(want)));
        }
  EXPECT_EQ(cases, 5 * 3 * 3 * 4);
  // Past FFTW's int sizes: refused before anything of that length is allocated.
  const Architecture big = Architecture::from_json(json::parse(
      R"({"d":2,"layers":[{"type":"attention","heads":1,"head_size":1,"dp_free":true,"rpe":"lin"}]})"));
  EXPECT_THROW(lag::allowed_lags(big.layers[0], 1L << 30), Error);
  const long half = lag::allowed_lags(big.layers[0], 1L << 29).fft_size;  // lags ±(n − 1): L ≥ 3n − 2
  EXPECT_GE(half, 3 * (1L << 29) - 2);
  EXPECT_LE(half, std::numeric_limits<int>::max());
  EXPECT_GT(direct_cases, 10);  // the rate −4 leaves early queries only the far tail
}

// Float training by FFT (sequences of 300 tokens, over lag::kMinLength) against double training by
// the n×n products: the loss and every gradient agree to float's precision. Lin heads with a window
// and a rate that weights far keys most (early queries direct), log heads bidirectional, T5 causal.
TEST(LagConvolution, FloatTrainingByFftMatchesDoubleDenseProducts) {
  constexpr long n = 300;
  static_assert(n >= lag::kMinLength);
  const Architecture arch = Architecture::from_json(json::parse(R"({"d":4,"readout":2,"layers":[
    {"type":"attention","heads":3,"head_size":1,"dp_free":true,"rpe":"lin","causal":true,"strict_past":true,"window":200},
    {"type":"attention","heads":2,"head_size":2,"dp_free":true,"rpe":"log"},
    {"type":"attention","heads":2,"head_size":1,"dp_free":true,"rpe":"t5","t5_buckets":8,"t5_max_distance":64,"causal":true},
    {"type":"feedforward","width":8}]})"));
  Network<double> nd(arch);
  init_random(nd, 3, 1.0);
  nd.layers[0].rpe(0, 0) = -0.2;  // e^{-0.2·200}: the first queries see 10^-17 of Σw
  nd.layers[1].rpe(1, 0) = -1.5;
  Network<float> nf = network_cast<float>(nd);
  Dataset ds;
  ds.d = 4;
  ds.label_dim = 2;
  std::mt19937_64 rng(5);
  for (int b = 0; b < 3; ++b) {
    Sequence seq;
    const Mat<double> x = random_matrix(4, n, rng), y = random_matrix(2, n, rng);
    seq.x = x.unaryExpr([](double v) { return rational_of(v); });
    seq.y = y.unaryExpr([](double v) { return rational_of(v); });
    ds.sequences.push_back(seq);
  }
  const Batch<double> bd = make_batch<double>(ds, {0, 1, 2}, Loss::mse, 2);
  const Batch<float> bf = make_batch<float>(ds, {0, 1, 2}, Loss::mse, 2);
  Network<double> gd = zero_like(nd);
  Network<float> gf = zero_like(nf);
  {  // float goes by FFT at this length, one LagHead per head, some queries of layer 0 directly
    Trace<float> tr;
    forward_train(nf, bf, Loss::mse, tr);
    for (std::size_t i = 0; i < 3; ++i)
      EXPECT_EQ(tr.layers[i].lag.size(), static_cast<std::size_t>(arch.layers[i].heads)) << "layer " << i;
    EXPECT_FALSE(tr.layers[0].lag[0].direct.empty());
    EXPECT_TRUE(tr.layers[0].a.empty());
  }
  const double ld = loss_and_gradient(nd, bd, Loss::mse, gd);
  const float lf = loss_and_gradient(nf, bf, Loss::mse, gf);
  EXPECT_NEAR(lf, ld, 1e-5 * ld);
  std::vector<Mat<double>*> want;
  gd.for_each_tensor([&](const std::string&, Mat<double>& m, Layout) { want.push_back(&m); });
  std::size_t t = 0;
  gf.for_each_tensor([&](const std::string& name, Mat<float>& m, Layout) {
    const Mat<double>& w = *want[t++];
    ASSERT_EQ(m.size(), w.size()) << name;
    if (!w.size()) return;
    const double err = max_abs(m.cast<double>() - w);
    EXPECT_LT(err, 2e-5 * (1e-3 + max_abs(w))) << name;  // measured: 1e-6 of the largest or less
  });
  EXPECT_EQ(t, want.size());
}

// An error in one head of the heads' parallel loop (allowed_lags past FFTW's sizes, an allocation)
// reaches the caller as an exception: thrown out of an OpenMP region it would end the process.
TEST(LagConvolution, AnErrorInOneHeadReachesTheCaller) {
  std::atomic<int> ran{0};
  const auto body = [&](Eigen::Index h) {
    ++ran;
    if (h == 2) throw Error("head 2");
  };
  EXPECT_THROW(train_detail::for_each_head(4, body), Error);
  EXPECT_EQ(ran.load(), 4);
}
