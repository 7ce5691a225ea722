// The kernels of the training step against Eigen's products, part 1: the products of one attention
// head and one sequence (src/train/head_product.hpp through with_head_view), and the queries the
// last attention computes. Part 2, the token products: test_token_products.cpp. These are internal
// headers: these two files and bench/bench_train.cpp are the only includers outside src/.
#include <gtest/gtest.h>
#include <random>

#include "../src/train/backward_impl.hpp"

using namespace uatlab;

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

TEST(Kernels, HeadProductsEqualEigensProducts) {
  EXPECT_EQ(check_head_products<float>(1e-4), 9);  // head sizes 1, 4 and 8 at n = 8, 16 and 32, every query
  EXPECT_EQ(check_head_products<double>(1e-12), 9);
  // Other scalars take the general products (their results are checked by the MPFR finite
  // differences of test_backward.cpp): no view with both sizes fixed.
  const Mat<Rational> M(16, 16);
  int fixed = 0;
  train_detail::with_head_view<Rational>(
      8, 0, 0, 16, 16, [&](auto view, auto) { fixed += train_detail::fixed_size<decltype(view(M))>; });
  EXPECT_EQ(fixed, 0);
}

// The queries the last attention computes: empty (every query, nothing to leave out) when each
// sequence counts its first and last token, else per sequence its first to last counted token.
TEST(Kernels, CountedQueries) {
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
