// Compile-time size lists and the dispatch from a run-time size into them: the fixed-size kernels
// of evaluation (the softmax) and of training (src/train/thin_product.hpp, head_product.hpp) take
// their shapes from these tables.
#pragma once

#include <type_traits>
#include "uatlab/model/eigen.hpp"

namespace uatlab {

template <int... N>
struct Sizes {};

// f(integral_constant<int, N>) for the N in the list that equals n; false if none does.
template <int... N, class F>
bool with_size(Sizes<N...>, Eigen::Index n, F&& f) {
  return ((n == N ? (f(std::integral_constant<int, N>{}), true) : false) || ...);
}
template <int... N>
constexpr bool contains(Sizes<N...>, int v) {
  return ((v == N) || ...);
}

// Sequence lengths with fixed-size kernels: when every query is computed, the products of one
// attention head (src/train/head_product.hpp, simd::head_shape): the sweeps' and the memorization
// experiments' sequences (8) and the training benchmark's tiny and small configurations (16, 32).
using FixedLengths = Sizes<8, 16, 32>;

}  // namespace uatlab
