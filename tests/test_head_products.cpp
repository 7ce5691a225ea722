// The kernels of the training step against Eigen's products, part 1: the products of one attention
// head and one sequence (src/train/head_product.hpp through with_head_view), and the queries the
// last attention computes (in double: test_head_products_double.cpp). Part 2, the token products:
// test_token_products.cpp. These are internal headers: these files and bench/bench_train.cpp are the
// only includers outside src/.
#include "../src/simd/kernels.hpp"
#include "../src/train/backward_impl.hpp"  // counted_queries
#include "head_products_check.hpp"

using namespace uatlab;

TEST(Kernels, HeadProductsEqualEigensProducts) {
  EXPECT_EQ(test::check_head_products<float>(1e-4),
            9);  // head sizes 1, 4 and 8 at n = 8, 16 and 32, every query
  // double: test_head_products_double.cpp.
  // Other scalars take the general products (their results are checked by the MPFR finite
  // differences of test_backward.cpp): no view with both sizes fixed.
  const Mat<Rational> M(16, 16);
  int fixed = 0;
  train_detail::with_head_view<Rational>(
      8, 0, 0, 16, 16, [&](auto view, auto) { fixed += train_detail::fixed_size<decltype(view(M))>; });
  EXPECT_EQ(fixed, 0);
}

// The heads' products on every instruction set this CPU runs (the blocked kernels' copies, chosen in
// turn), the emulated one among them; in double: test_head_products_double.cpp.
TEST(Kernels, HeadProductsEqualEigensProductsOnEveryInstructionSet) {
  for (const std::string& name : simd::paths_here())
    simd::on_path(name, [&] { EXPECT_EQ(test::check_head_products<float>(1e-4), 9) << name; });
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
