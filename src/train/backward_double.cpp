// The training backward pass in double (backward_impl.hpp): one scalar and one pass per translation unit.
#include "backward_impl.hpp"

namespace uatlab {
UATLAB_TRAIN_BACKWARD_INSTANCES(, double)
}  // namespace uatlab
