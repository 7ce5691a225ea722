// The blocks the constructions are assembled from. A construction reads as a short list of named
// stages (Tracr's habit), each adding sub-layers to a Builder; the builder allocates the network
// once the architecture is complete, fills every sub-layer, and checks what the fills did.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "uatlab/model/network.hpp"

namespace uatlab::blocks {

// e_i, a d×1 column.
Mat<Rational> unit(int d, int i);

// A ReLU feed-forward sub-layer of the given width.
LayerSpec feedforward(int width);
// A feed-forward sub-layer of width 1 with a piecewise-linear activation: breakpoints c_1 < … < c_k
// and k + 1 pieces (slope, intercept).
LayerSpec piecewise_unit(const std::vector<Rational>& breakpoints,
                         const std::vector<std::pair<Rational, Rational>>& pieces);
// Yun et al.'s selective shift: hardmax heads of size 1 with biases.
LayerSpec hardmax_shift(int heads);
// Kajitsuka & Sato's contextual mapping: one softmax head of size 1 (tied: W_Q = W_K = W_V).
LayerSpec rank1_attention(bool tied);
// Its weights, reading along v: W_Q = c·vᵀ, W_K = W_V = vᵀ, W_O = wo_scale·v; tied: W = √c·vᵀ
// (√c rounded to a rational) and W_O = (wo_scale/√c)·v, so that the product is the same.
void fill_rank1(Layer<Rational>& L, const Vec<Rational>& v, const Rational& c, const Rational& wo_scale,
                bool tied);

// A network assembled sub-layer by sub-layer.
class Builder {
 public:
  using Fill = std::function<void(Layer<Rational>&)>;
  explicit Builder(int d, int max_len = 0);
  // A new sub-layer and how to fill its (zero) weights.
  Builder& add(const LayerSpec& spec, Fill fill);
  // The sub-layers [first, last) of a built network, weights kept.
  Builder& append(const Network<Rational>& net, std::size_t first = 0, std::size_t last = SIZE_MAX);
  // The absolute positional encoding (d×max_len) and a readout of k outputs (k×d, k×1).
  Builder& positions(std::function<void(Mat<Rational>&)> fill);
  Builder& readout(int k, std::function<void(Mat<Rational>& w, Mat<Rational>& b)> fill);
  // Sum the tokens before the readout.
  Builder& pool() {
    arch_.pool = true;
    return *this;
  }
  std::size_t size() const { return arch_.layers.size(); }
  const Architecture& arch() const { return arch_; }
  // Validates the architecture, allocates and fills. A fill that changes a tensor's shape is an
  // Error naming the sub-layer (a construction's bug).
  Network<Rational> build() const;

 private:
  Architecture arch_;
  std::vector<Fill> fills_;
  std::function<void(Mat<Rational>&)> positions_;
  std::function<void(Mat<Rational>&, Mat<Rational>&)> readout_;
};

}  // namespace uatlab::blocks
