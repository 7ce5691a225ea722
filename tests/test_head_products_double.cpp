// The products of one attention head against Eigen's in double (float and the other scalars:
// test_head_products.cpp, which says what is checked).
#include "head_products_check.hpp"

TEST(Kernels, HeadProductsEqualEigensProductsInDouble) {
  EXPECT_EQ(uatlab::test::check_head_products<double>(1e-12), 9);
}
