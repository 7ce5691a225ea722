// The training loss by name and what the passes take; the forward/backward passes are instantiated
// per scalar in {forward,backward}_{float,double,mpfr,mpfi}.cpp.
#include "uatlab/train/backward.hpp"

namespace uatlab {

Loss parse_loss(const std::string& s) {
  return loss_names.parse(s == "cross-entropy" ? "ce" : s);
}

void check_differentiable(const Architecture& a) {
  for (const LayerSpec& s : a.layers) {
    if (s.kind == LayerKind::attention && s.score == Score::hardmax)
      throw Error("hardmax attention has no gradient (softmax and linear scores have one)");
    if (s.kind == LayerKind::feedforward && s.piecewise)
      throw Error(
          "the gradient passes take ReLU and GELU feed-forward layers only, not piecewise activations");
  }
  if (a.pool) throw Error("the gradient passes do not take pooled (\"pool\": \"sum\") outputs");
}

}  // namespace uatlab
