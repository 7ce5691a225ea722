// The token products of thin_product.hpp in double, compiled once for the library (float:
// thin_product_float.cpp).
#include "thin_product.hpp"

namespace uatlab::train_detail {
UATLAB_TOKEN_PRODUCT_INSTANCES(, double)
}  // namespace uatlab::train_detail
