#include "network_impl.hpp"

namespace uatlab {
UATLAB_INSTANTIATE_NETWORK(Arb)
}  // namespace uatlab
