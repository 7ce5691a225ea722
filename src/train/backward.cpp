// The training loss by name; the forward/backward passes are instantiated per scalar in
// {forward,backward}_{float,double,mpfr}.cpp.
#include "uatlab/train/backward.hpp"

namespace uatlab {

Loss parse_loss(const std::string& s) {
  return loss_names.parse(s == "cross-entropy" ? "ce" : s);
}

}  // namespace uatlab
