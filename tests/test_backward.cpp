// Every backward option against central finite differences in 256-bit MPFR: with h = 1e-25 the
// difference quotient is exact to ~1e-50, so agreement to 1e-35 leaves no room for a wrong term.
// Per tensor, the derivative along a random direction over all its entries (a wrong entry of the
// gradient shows in it unless the direction happens to cancel it, which has probability zero) and
// at a sample of single entries (its first and last, and one at random): two forward passes per
// check instead of two per parameter. The fixed-size product kernels have their own tests
// (test_kernels.cpp).
#include <gtest/gtest.h>
#include <random>

#include "uatlab/model/init.hpp"
#include "uatlab/train/backward.hpp"

using namespace uatlab;
using nlohmann::json;

namespace {

Dataset data(bool tokens, int d, int vocab, int out, Loss loss, std::uint64_t seed,
             const std::vector<int>& lengths = {3, 4}) {
  Rng rng(seed);
  Dataset ds;
  ds.d = tokens ? 0 : d;
  ds.token_input = tokens;
  ds.label_dim = loss == Loss::mse ? out : 1;
  for (int n : lengths) {
    Sequence s;
    if (tokens)
      for (int k = 0; k < n; ++k)
        s.tokens.push_back(static_cast<int>(rng.uniform() * vocab));
    else
      s.x = Mat<Rational>(d, n).unaryExpr([&](const Rational&) { return rational_of(rng.uniform(-1, 1)); });
    s.y = Mat<Rational>(ds.label_dim, n);
    for (int k = 0; k < n; ++k)
      for (int r = 0; r < ds.label_dim; ++r)
        s.y(r, k) = loss == Loss::mse ? rational_of(rng.uniform(-1, 1))
                                      : Rational(static_cast<long>(rng.uniform() * out));
    if (n == 4) s.mask = {1, 0, 1, 1};
    if (n == 5) s.mask = {0, 1, 0, 1, 0};  // counted queries 1 … 3
    if (n == 6) s.mask.assign(6, 0);       // none
    ds.sequences.push_back(s);
  }
  return ds;
}

void check(const std::string& arch_json, Loss loss, std::uint64_t seed, std::vector<int> lengths = {3, 4}) {
  SCOPED_TRACE(arch_json);
  const Architecture arch = Architecture::from_json(json::parse(arch_json));
  Network<double> nd(arch);
  init_random(nd, seed, 1.5);
  const MpfrPrecision precision(256);
  Network<Mpfr> net = network_cast<Mpfr>(nd);
  const Dataset ds = data(arch.vocab > 0, arch.in_dim(), arch.vocab, arch.out_dim(), loss, seed, lengths);
  const Batch<Mpfr> batch = make_batch<Mpfr>(ds, {0, 1}, loss, arch.out_dim());
  Network<Mpfr> grad = zero_like(net);
  loss_and_gradient(net, batch, loss, grad);
  {  // at the tokens counted in the loss, the training forward is the model's own forward
    Trace<Mpfr> tr;
    forward_train(net, batch, loss, tr);
    for (int b = 0; b < batch.sequences(); ++b) {
      const Sequence& seq = ds.sequences[static_cast<std::size_t>(b)];
      const Mat<Mpfr> want =
          arch.vocab > 0
              ? forward_tokens(net, seq.tokens)
              : forward(net, seq.x.unaryExpr([](const Rational& r) { return Scalar<Mpfr>::from(r); }).eval());
      ASSERT_EQ(batch.start[b + 1] - batch.start[b], want.cols());
      for (Eigen::Index k = 0; k < want.cols(); ++k)
        if (batch.mask[batch.start[b] + k]) {
          EXPECT_LT(Mpfr((tr.y.col(batch.start[b] + k) - want.col(k)).cwiseAbs().maxCoeff()), Mpfr("1e-60"))
              << "sequence " << b << ", token " << k;
        }
    }
  }

  {  // an input-only gradient (input_only_like) gives the same input gradient, and stays empty
    Trace<Mpfr> tr;
    forward_train(net, batch, loss, tr);
    std::mt19937_64 r(seed + 1);
    std::uniform_real_distribution<double> u(-1, 1);
    Mat<Mpfr> dY(arch.out_dim(), batch.tokens());
    for (Eigen::Index i = 0; i < dY.size(); ++i)
      dY.data()[i] = Mpfr(u(r));
    Network<Mpfr> full = zero_like(net), only = input_only_like(net);
    Mat<Mpfr> dx_full, dx_only;
    backward_from(net, batch, tr, dY, full, &dx_full);
    backward_from(net, batch, tr, dY, only, &dx_only);
    ASSERT_EQ(dx_full.rows(), dx_only.rows());
    ASSERT_EQ(dx_full.cols(), dx_only.cols());
    for (Eigen::Index i = 0; i < dx_full.size(); ++i)
      EXPECT_TRUE(dx_full(i) == dx_only(i)) << "input gradient entry " << i;
    only.for_each_tensor(
        [](const std::string& name, Mat<Mpfr>& m, Layout) { EXPECT_EQ(m.size(), 0) << name; });
  }

  std::vector<Mat<Mpfr>*> params, grads;
  net.for_each_tensor([&](const std::string&, Mat<Mpfr>& m, Layout) { params.push_back(&m); });
  grad.for_each_tensor([&](const std::string&, Mat<Mpfr>& m, Layout) { grads.push_back(&m); });
  std::vector<std::string> names;
  net.for_each_tensor([&](const std::string& name, Mat<Mpfr>&, Layout) { names.push_back(name); });
  const Mpfr h("1e-25");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1, 1);
  int checked = 0;
  // The loss moved by ±h along v (one tensor's entries), against the gradient's component along v.
  auto along = [&](std::size_t t, const Mat<Mpfr>& v, const std::string& what) {
    Mat<Mpfr>& p = *params[t];
    const Mat<Mpfr> keep = p;
    Trace<Mpfr> tr;
    p = keep + v * h;
    const Mpfr up = forward_train(net, batch, loss, tr);
    p = keep - v * h;
    const Mpfr down = forward_train(net, batch, loss, tr);
    p = keep;
    const Mpfr fd = (up - down) / (2 * h);
    const Mpfr g = grads[t]->cwiseProduct(v).sum();
    const Mpfr scale = grads[t]->cwiseProduct(v).cwiseAbs().sum();
    EXPECT_LT(mp::abs(fd - g), Mpfr("1e-35") * (1 + scale))
        << names[t] << " " << what << ": backward " << g.str(20) << " finite difference " << fd.str(20);
    ++checked;
  };
  for (std::size_t t = 0; t < params.size(); ++t) {
    const Eigen::Index size = params[t]->size();
    if (size == 0) continue;
    Mat<Mpfr> v = Mat<Mpfr>::Zero(params[t]->rows(), params[t]->cols());
    for (Eigen::Index i = 0; i < size; ++i)
      v.data()[i] = Mpfr(unit(rng));
    along(t, v, "along a random direction");
    const Eigen::Index random_entry = static_cast<Eigen::Index>(rng() % static_cast<std::uint64_t>(size));
    for (Eigen::Index i : {Eigen::Index(0), size - 1, random_entry}) {
      v.setZero();
      v.data()[i] = 1;
      along(t, v, "[" + std::to_string(i) + "]");
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace

TEST(Backward, SoftmaxHeadsBiasScaleFeedForwardReadoutMse) {
  check(R"({"d":4,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":2,"bias":true,"scale":"7/10","sqrt_scaling":true},
    {"type":"feedforward","width":6}]})",
        Loss::mse, 1);
}

TEST(Backward, GeluFeedForwardPostNormBlock) {  // nn.TransformerEncoderLayer's post-norm layout
  check(R"({"d":4,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":2,"bias":true,"sqrt_scaling":true},{"type":"layernorm"},
    {"type":"feedforward","width":6,"activation":"gelu"},{"type":"layernorm"}]})",
        Loss::mse, 7);
}

TEST(Backward, GeluTanhFeedForwardPreNormBlock) {  // GPT-2's block: pre-norm, tanh-form GELU
  check(R"({"d":4,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":2,"bias":true,"sqrt_scaling":true,"causal":true,"pre_norm":true},
    {"type":"feedforward","width":6,"activation":"gelu_tanh","pre_norm":true},{"type":"layernorm"}]})",
        Loss::mse, 9);
}

TEST(Backward, BilinearProjectionAndSeparableConvolution) {  // Yun's cheaper mixers
  check(R"({"d":4,"readout":2,"layers":[
    {"type":"bproj","length":5,"causal":true,"bias":true},{"type":"sepconv","heads":2,"kernel":3,"pre_norm":true},
    {"type":"bproj","length":4},{"type":"sepconv","heads":4,"kernel":2,"causal":true,"bias":true},
    {"type":"feedforward","width":3}]})",
        Loss::mse, 8);
}

TEST(Backward, CausalLinRpePreNormTokensPositionsCrossEntropy) {
  check(R"({"d":4,"vocab":5,"max_len":6,"readout":3,"layers":[
    {"type":"attention","heads":2,"head_size":1,"causal":true,"rpe":"lin","pre_norm":true},
    {"type":"feedforward","width":5,"pre_norm":true}]})",
        Loss::cross_entropy, 2);
}

TEST(Backward, InputProjectionPositionsEncoderHead) {  // nn.Linear in front of an encoder
  check(R"({"d":4,"input":3,"max_len":6,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":2,"bias":true,"sqrt_scaling":true},{"type":"layernorm"},
    {"type":"feedforward","width":5},{"type":"layernorm"}]})",
        Loss::mse, 11);
}

TEST(Backward, TiedQkvLogRpeLayerNormSubLayer) {
  check(R"({"d":3,"layers":[
    {"type":"attention","heads":1,"head_size":1,"tied_qkv":true,"rpe":"log","bias":true},
    {"type":"layernorm"},
    {"type":"attention","heads":2,"head_size":2,"tied_qkv":true}]})",
        Loss::mse, 3);
}

TEST(Backward, DpFreeT5CausalAndBidirectional) {
  check(R"({"d":4,"readout":1,"layers":[
    {"type":"attention","heads":2,"head_size":2,"dp_free":true,"rpe":"t5","t5_buckets":4,"t5_max_distance":8,"causal":true},
    {"type":"attention","heads":1,"head_size":3,"rpe":"t5","t5_buckets":6,"t5_max_distance":8,"bias":true}]})",
        Loss::mse, 4);
}

// Head sizes 1, 4 and 8 take views with their rows fixed at compile time, and for n <= 8 their
// scores and dA are coefficient-wise products; n = 11 takes Eigen's general product with the same
// views.
TEST(Backward, FixedRowHeadViewsShortAndLongSequences) {
  const char* arch = R"({"d":8,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":4,"bias":true,"sqrt_scaling":true},
    {"type":"attention","heads":1,"head_size":8,"tied_qkv":true,"causal":true},
    {"type":"attention","heads":1,"head_size":1,"rpe":"lin"}]})";
  check(arch, Loss::cross_entropy, 9, {3, 4});
  check(arch, Loss::mse, 10, {11, 4});
}

// DP-free heads over sequences of one length share one weight matrix per head across the batch
// (lin, log and T5 biases; softmax and linear scores; windows; head sizes 1, 2 and 3).
TEST(Backward, DpFreeHeadsShareOneWeightMatrixOverEqualLengths) {
  const char* arch = R"({"d":4,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":1,"dp_free":true,"rpe":"lin","causal":true,"strict_past":true,"window":3},
    {"type":"attention","heads":1,"head_size":3,"dp_free":true,"rpe":"log","score":"linear","causal":true},
    {"type":"attention","heads":2,"head_size":2,"dp_free":true,"rpe":"t5","t5_buckets":4,"t5_max_distance":8},
    {"type":"feedforward","width":3}]})";
  check(arch, Loss::mse, 11, {5, 5});
  check(arch, Loss::cross_entropy, 12, {4, 4});  // both masked at one position
}

// The last attention sub-layer computes only the queries from the first to the last counted token
// (T5 buckets and a window, log biases and linear scores over the strict past, bidirectional T5;
// then token-wise sub-layers); a sequence with no counted token computes none.
TEST(Backward, LastAttentionComputesOnlyTheCountedQueries) {
  const char* t5 = R"({"d":4,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":2,"causal":true,"rpe":"lin"},
    {"type":"attention","heads":2,"head_size":4,"rpe":"t5","t5_buckets":4,"t5_max_distance":8,"causal":true,"window":2},
    {"type":"feedforward","width":3},{"type":"layernorm"}]})";
  check(t5, Loss::mse, 13, {5, 6});
  check(t5, Loss::cross_entropy, 14, {6, 5});
  const char* linear = R"({"d":3,"readout":1,"layers":[
    {"type":"attention","heads":1,"head_size":1,"score":"linear","causal":true,"strict_past":true,"rpe":"log"},
    {"type":"feedforward","width":2}]})";
  check(linear, Loss::mse, 15, {5, 4});
  const char* bidirectional = R"({"d":4,"readout":2,"layers":[
    {"type":"attention","heads":1,"head_size":3,"rpe":"t5","t5_buckets":6,"t5_max_distance":8,"bias":true}]})";
  check(bidirectional, Loss::cross_entropy, 16, {5, 4});
  // The queries' own columns of q, o and their gradients, scattered back into the input's gradient
  // (embeddings and positions read it), with biases and pre-norm; tied heads keep q whole.
  const char* untied = R"({"d":4,"vocab":5,"max_len":6,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":2,"bias":true,"pre_norm":true,"rpe":"lin"}]})";
  check(untied, Loss::cross_entropy, 17, {5, 6});
  check(untied, Loss::mse, 18, {6, 5});
  const char* tied = R"({"d":4,"vocab":5,"max_len":6,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":2,"tied_qkv":true,"bias":true,"pre_norm":true}]})";
  check(tied, Loss::cross_entropy, 19, {5, 6});
}

// Rotary positions turn the queries and keys (and their gradients back): bases 7 and 10000, head
// sizes 2 and 4, with a position bias, a window and biases; sequences of different lengths, and the
// last attention's counted queries only (their positions are not the columns' indices there).
TEST(Backward, RotaryPositions) {
  const char* arch = R"({"d":4,"vocab":5,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":2,"rope":7,"bias":true,"pre_norm":true},
    {"type":"attention","heads":1,"head_size":4,"rope":10000,"rpe":"lin","causal":true,"window":3},
    {"type":"feedforward","width":3}]})";
  check(arch, Loss::mse, 21, {5, 3});
  check(arch, Loss::cross_entropy, 22, {6, 5});
}

TEST(Backward, LinearAttentionCausal) {
  check(R"({"d":3,"readout":2,"layers":[
    {"type":"attention","heads":2,"head_size":2,"score":"linear","causal":true},
    {"type":"feedforward","width":4}]})",
        Loss::cross_entropy, 5);
}

TEST(Backward, StrictPastDpFreeLogAndLinearScores) {
  check(R"({"d":3,"readout":1,"layers":[
    {"type":"attention","heads":2,"head_size":1,"dp_free":true,"rpe":"log","causal":true,"strict_past":true},
    {"type":"attention","heads":1,"head_size":2,"score":"linear","rpe":"lin","causal":true,"strict_past":true,"window":2},
    {"type":"attention","heads":2,"head_size":1,"rpe":"log","causal":true,"window":1},
    {"type":"feedforward","width":3}]})",
        Loss::mse, 6);
}

TEST(Backward, RefusesHardmaxAndAllMaskedBatches) {
  const Architecture arch =
      Architecture::from_json(json::parse(R"({"d":2,"layers":[{"type":"attention","score":"hardmax"}]})"));
  Network<double> net(arch);
  Dataset ds = data(false, 2, 0, 2, Loss::mse, 1);
  Trace<double> tr;
  EXPECT_THROW(forward_train(net, make_batch<double>(ds, {0}, Loss::mse, 2), Loss::mse, tr), Error);
  const Architecture ok =
      Architecture::from_json(json::parse(R"({"d":2,"layers":[{"type":"feedforward","width":2}]})"));
  Network<double> n2(ok);
  ds.sequences[0].mask = {0, 0, 0};
  EXPECT_THROW(forward_train(n2, make_batch<double>(ds, {0}, Loss::mse, 2), Loss::mse, tr), Error);
  EXPECT_THROW(make_batch<double>(ds, {0}, Loss::cross_entropy, 2), Error);  // labels are not classes
}
