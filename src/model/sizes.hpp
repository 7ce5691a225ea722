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

// Sequence lengths whose attention has fixed-size kernels when every query is computed (the
// training benchmark's tiny and small configurations).
using FixedLengths = Sizes<16, 32>;
// Lengths whose softmax runs on a fixed-size matrix (softmax_columns): those and 8 (the sweeps' and
// the memorization experiments' sequences).
using SoftmaxLengths = Sizes<8, 16, 32>;

}  // namespace uatlab
