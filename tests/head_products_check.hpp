// The check of the products of one attention head against Eigen's (src/train/head_product.hpp
// through with_head_view), shared by test_head_products.cpp (float, and the other scalars) and
// test_head_products_double.cpp: two files, so that the build compiles the two instantiations side
// by side. An internal header (docs/ARCHITECTURE.md, tests/).
#pragma once

#include <gtest/gtest.h>
#include <random>

#include "../src/train/head_product.hpp"

namespace uatlab::test {

// The six products of one head and one sequence (scores, V·A; dO·Aᵀ, Vᵀ·dO, K·dS, Q·dSᵀ), made as
// attention_forward/backward make them through with_head_view, against Eigen's products of plain
// blocks: for head sizes and lengths with and without fixed-size kernels, every query or fewer, and
// sizes that the blocked kernel takes (head sizes 16 and 32, lengths 16 to 64: a multiple of half
// its rows, 16 floats or 8 doubles with AVX-512; the scores at n = 48 take a whole block and a
// half one). Returns how many of the shapes went to the fixed-size kernels.
template <class S>
int check_head_products(double tol) {
  using namespace train_detail;
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> u(-1, 1);
  const auto random = [&](Eigen::Index r, Eigen::Index c) {
    return Mat<S>(Mat<S>::NullaryExpr(r, c, [&] { return S(u(rng)); }));
  };
  int fixed = 0;
  for (Eigen::Index hs : {1, 3, 4, 8, 16, 32})
    for (Eigen::Index n : {8, 16, 32, 48, 64})
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

}  // namespace uatlab::test
