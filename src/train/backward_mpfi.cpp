// The training backward pass in Mpfi (backward_impl.hpp), for analyse's mean-value region certificate:
// one scalar and one pass per translation unit.
#include "backward_impl.hpp"

namespace uatlab {
UATLAB_TRAIN_BACKWARD_INSTANCES(, Mpfi)
}  // namespace uatlab
