// Every backward option against central finite differences in 256-bit MPFR: with h = 1e-25 the
// difference quotient is exact to ~1e-50, so agreement to 1e-35 leaves no room for a wrong term.
#include <gtest/gtest.h>
#include <random>

#include "../src/train/backward_impl.hpp"
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
  const Dataset ds = data(arch.vocab > 0, arch.d, arch.vocab, arch.out_dim(), loss, seed, lengths);
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

  std::vector<Mat<Mpfr>*> params, grads;
  net.for_each_tensor([&](const std::string&, Mat<Mpfr>& m, Layout) { params.push_back(&m); });
  grad.for_each_tensor([&](const std::string&, Mat<Mpfr>& m, Layout) { grads.push_back(&m); });
  std::vector<std::string> names;
  net.for_each_tensor([&](const std::string& name, Mat<Mpfr>&, Layout) { names.push_back(name); });
  const Mpfr h("1e-25");
  int checked = 0;
  for (std::size_t t = 0; t < params.size(); ++t)
    for (Eigen::Index i = 0; i < params[t]->size(); ++i) {
      Mpfr& p = params[t]->data()[i];
      const Mpfr keep = p;
      Trace<Mpfr> tr;
      p = keep + h;
      const Mpfr up = forward_train(net, batch, loss, tr);
      p = keep - h;
      const Mpfr down = forward_train(net, batch, loss, tr);
      p = keep;
      const Mpfr fd = (up - down) / (2 * h);
      const Mpfr g = grads[t]->data()[i];
      EXPECT_LT(mp::abs(fd - g), Mpfr("1e-35") * (1 + mp::abs(g)))
          << names[t] << "[" << i << "]: backward " << g.str(20) << " finite difference " << fd.str(20);
      ++checked;
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

// The fixed-size kernels for small weights (src/train/thin_product.hpp) give Eigen's products on
// every shape of their table and beside it (where they hand over to Eigen), set and add, for a
// weight and a transposed one, with a bias or none.
template <class S>
void check_thin_products(double tol) {
  using train_detail::add_outer;
  using train_detail::add_weights_times;
  using train_detail::weights_times;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  const auto random = [&](Eigen::Index r, Eigen::Index c) {
    return Mat<S>(Mat<S>::NullaryExpr(r, c, [&] { return S(u(rng)); }));
  };
  const Eigen::Index T = 37;
  int thin = 0, fixed = 0, blocked = 0;
  for (Eigen::Index r : {1, 2, 3, 4, 8, 16, 32, 33, 64, 160, 640})
    for (Eigen::Index k : {1, 2, 4, 8, 16, 17, 32, 128}) {
      thin += train_detail::with_thin_shape<S>(r, k, [](auto, auto) {});
      fixed += train_detail::with_product_shape<S>(r, k, [](auto, auto, auto) {});
      blocked += train_detail::blocked_shape<S>(r, k, train_detail::kBlockOuterMax);
      const Mat<S> w = random(r, k), x = random(k, T), dy = random(r, T), y0 = random(r, T), b = random(r, 1);
      Mat<S> y, ya = y0, g = random(r, k), yt, yb, gb = b;
      const Mat<S> g0 = g;
      weights_times(y, w, x);
      add_weights_times(ya, w, x);
      weights_times(yb, w, x, &b);
      add_outer(g, dy, x, &gb);  // and the bias gradient
      Mat<S> g_alone = g0;       // without it
      add_outer(g_alone, dy, x);
      weights_times(yt, w.transpose(), dy);
      EXPECT_LE((y - w * x).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_LE((ya - y0 - w * x).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_LE(((yb - w * x).colwise() - b.col(0)).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_LE((g - g0 - dy * x.transpose()).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_LE((gb - b - dy.rowwise().sum()).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_EQ(g_alone, g) << r << "x" << k;
      EXPECT_LE((yt - w.transpose() * dy).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
    }
  EXPECT_EQ(thin, 5 * 4);       // r in {2, 4, 8, 16, 32}, k in {2, 4, 8, 16}
  EXPECT_EQ(fixed, 5 * 4 + 3);  // and W·X for r in {4, 8, 16}, k = 32, 8 tokens at a time (T = 37)
  // The blocked kernels (rows a multiple of two SIMD registers; T = 37 leaves five tokens after
  // four blocks of eight, k = 17 one column after two): G for at least r = 32 and 64 with every k
  // when a register holds 4 or more numbers; 160 rows only for W·X, 640 rows for neither.
  EXPECT_GE(blocked, 16);
  EXPECT_TRUE(train_detail::blocked_shape<S>(160, 32, train_detail::kBlockProductMax));
  EXPECT_FALSE(train_detail::blocked_shape<S>(160, 32, train_detail::kBlockOuterMax));
  EXPECT_FALSE(train_detail::blocked_shape<S>(640, 32, train_detail::kBlockProductMax));
}

// The six products of one head and one sequence (scores, V·A; dO·Aᵀ, Vᵀ·dO, K·dS, Q·dSᵀ), made as
// attention_forward/backward make them through with_head_view, against Eigen's products of plain
// blocks: for head sizes and lengths with and without fixed-size kernels, every query or fewer.
// Returns how many of the shapes went to the fixed-size kernels.
template <class S>
int check_head_products(double tol) {
  using namespace train_detail;
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> u(-1, 1);
  const auto random = [&](Eigen::Index r, Eigen::Index c) {
    return Mat<S>(Mat<S>::NullaryExpr(r, c, [&] { return S(u(rng)); }));
  };
  int fixed = 0;
  for (Eigen::Index hs : {1, 3, 4, 8})
    for (Eigen::Index n : {8, 16, 32})
      for (Eigen::Index queries : {n, n - 1}) {
        const Eigen::Index H = 2, h = 1, c0 = 3, T = n + 6;  // head 1 of 2, a sequence inside the batch
        const Mat<S> K = random(H * hs, T), Q = random(H * hs, T), V = random(H * hs, T),
                     dO = random(H * hs, T), A = random(n, queries), dS = random(n, queries);
        Mat<S> O = random(H * hs, T), dV = random(H * hs, T), dQ = random(H * hs, T), dK = random(H * hs, T);
        const Mat<S> O0 = O, dV0 = dV, dQ0 = dQ, dK0 = dK;
        Mat<S> scores, vdo;
        const S scale(0.3);
        with_head_view<S>(hs, h, c0, n, queries, [&](auto view, auto cols) {
          fixed += fixed_size<decltype(view(K))>;
          set_head_product(scores, view(K).transpose(), cols(Q, c0, queries), scale);
          set_head_product(cols(O, c0, queries), view(V), A, S(1));
          add_head_product(view(dV), cols(dO, c0, queries), A.transpose(), S(1));
          set_head_product(vdo, view(V).transpose(), cols(dO, c0, queries), S(1));
          add_head_product(cols(dQ, c0, queries), view(K), dS, scale);
          add_head_product(view(dK), cols(Q, c0, queries), dS.transpose(), scale);
        });
        auto blk = [&](const Mat<S>& M, Eigen::Index count) {
          return Mat<S>(M.block(h * hs, c0, hs, count));
        };
        auto near = [&](const Mat<S>& got, const Mat<S>& want) {
          EXPECT_LE((got - want).cwiseAbs().maxCoeff(), S(tol))
              << "hs " << hs << ", n " << n << ", queries " << queries;
        };
        near(scores, blk(K, n).transpose() * blk(Q, queries) * scale);
        near(blk(O, queries), blk(V, n) * A);
        near(blk(dV, n), blk(dV0, n) + blk(dO, queries) * A.transpose());
        near(vdo, blk(V, n).transpose() * blk(dO, queries));
        near(blk(dQ, queries), blk(dQ0, queries) + blk(K, n) * dS * scale);
        near(blk(dK, n), blk(dK0, n) + blk(Q, queries) * dS.transpose() * scale);
        near(O.topRows(hs), O0.topRows(hs));  // head 0 untouched
        near(dK.topRows(hs), dK0.topRows(hs));
      }
  return fixed;
}

TEST(Backward, HeadProductsEqualEigensProducts) {
  EXPECT_EQ(check_head_products<float>(1e-4), 4);  // head sizes 4 and 8 at n = 16 and 32, every query
  EXPECT_EQ(check_head_products<double>(1e-12), 4);
  EXPECT_EQ(check_head_products<Rational>(0), 0);
}

// The queries the last attention computes: empty (every query, nothing to leave out) when each
// sequence counts its first and last token, else per sequence its first to last counted token.
TEST(Backward, CountedQueries) {
  Batch<double> b;
  b.start = {0, 3, 7};
  b.mask = {1, 0, 1, 1, 1, 1, 1};
  std::vector<QueryRange> q = {{5, 5}};
  train_detail::counted_queries(b, q);
  EXPECT_TRUE(q.empty());
  b.mask = {1, 0, 0, 0, 1, 1, 0};
  train_detail::counted_queries(b, q);
  EXPECT_EQ(q, (std::vector<QueryRange>{{0, 1}, {1, 3}}));
  b.mask = {0, 0, 0, 1, 1, 1, 1};
  train_detail::counted_queries(b, q);
  EXPECT_EQ(q, (std::vector<QueryRange>{{0, 0}, {0, 4}}));
}

TEST(Backward, ThinProductsEqualEigensProducts) {
  check_thin_products<float>(1e-4);
  check_thin_products<double>(1e-12);
  EXPECT_FALSE(train_detail::with_thin_shape<Rational>(4, 4, [](auto, auto) {}));
  EXPECT_FALSE(train_detail::with_product_shape<Rational>(8, 32, [](auto, auto, auto) {}));
  EXPECT_FALSE(train_detail::blocked_shape<Rational>(32, 32, train_detail::kBlockProductMax));
}
