// The token products of thin_product.hpp in float and double, compiled once for the library.
#include "thin_product.hpp"

namespace uatlab::train_detail {
UATLAB_TOKEN_PRODUCT_INSTANCES(, float)
UATLAB_TOKEN_PRODUCT_INSTANCES(, double)
}  // namespace uatlab::train_detail
