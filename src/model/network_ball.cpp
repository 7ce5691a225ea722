#include "network_impl.hpp"

namespace uatlab {
UATLAB_INSTANTIATE_NETWORK(Ball53)
UATLAB_INSTANTIATE_NETWORK(Ball113)
}  // namespace uatlab
