// The training forward pass in float (backward_impl.hpp): one scalar and one pass per translation unit.
#include "backward_impl.hpp"

namespace uatlab {
UATLAB_TRAIN_FORWARD_INSTANCES(, float)
}  // namespace uatlab
