#include "network_impl.hpp"

namespace uatlab {
UATLAB_INSTANTIATE_NETWORK(Rational)
}  // namespace uatlab
