#include "network_impl.hpp"

namespace uatlab {
UATLAB_INSTANTIATE_NETWORK(double)
}  // namespace uatlab
