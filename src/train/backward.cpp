// Instantiations of the training forward/backward: float and double train, MPFR checks them.
#include "backward_impl.hpp"

namespace uatlab {

Loss parse_loss(const std::string& s) {
  if (s == "mse") return Loss::mse;
  if (s == "ce" || s == "cross-entropy") return Loss::cross_entropy;
  throw Error("loss \"" + s + "\": expected mse or ce");
}

UATLAB_INSTANTIATE_TRAIN(float)
UATLAB_INSTANTIATE_TRAIN(double)
UATLAB_INSTANTIATE_TRAIN(Mpfr)

}  // namespace uatlab
