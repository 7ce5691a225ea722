// The training loss by name; the forward/backward passes are instantiated per scalar in
// {forward,backward}_{float,double,mpfr}.cpp.
#include "uatlab/train/backward.hpp"

namespace uatlab {

Loss parse_loss(const std::string& s) {
  if (s == "mse") return Loss::mse;
  if (s == "ce" || s == "cross-entropy") return Loss::cross_entropy;
  throw Error("loss \"" + s + "\": expected mse or ce");
}

}  // namespace uatlab
