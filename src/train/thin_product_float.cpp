// The token products of thin_product.hpp in float, compiled once for the library (double:
// thin_product_double.cpp; two files, so that the build compiles them side by side).
#include "thin_product.hpp"

namespace uatlab::train_detail {
UATLAB_TOKEN_PRODUCT_INSTANCES(, float)
}  // namespace uatlab::train_detail
