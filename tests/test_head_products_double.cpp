// The products of one attention head against Eigen's in double (float and the other scalars:
// test_head_products.cpp, which says what is checked), on the chosen instruction set and on every
// one this CPU runs.
#include "../src/simd/kernels.hpp"
#include "head_products_check.hpp"

TEST(Kernels, HeadProductsEqualEigensProductsInDouble) {
  EXPECT_EQ(uatlab::test::check_head_products<double>(1e-12), 9);
  for (const std::string& name : uatlab::simd::paths_here())
    uatlab::simd::on_path(name,
                          [&] { EXPECT_EQ(uatlab::test::check_head_products<double>(1e-12), 9) << name; });
}
