// The SIMD kernels: the products of the training passes and the attention's softmax, written once
// in Google Highway's operations and
// compiled for every vector instruction set Highway knows (AVX-512, AVX2, SSE4, SSSE3, NEON and an
// emulated 128-bit path), the best one the CPU has chosen at run time (simd/kernels.cpp). This
// header is the whole interface, on raw column-major numbers, so that neither Eigen nor Highway
// reaches the callers (thin_product.hpp, head_product.hpp, model/network_impl.hpp): Eigen's code compiled
// once per instruction set would collide in the linker (docs/benchmarks.md, "One kernel, three ways to the
// SIMD units" and "The kernels in Highway"). UATLAB_SIMD restricts the choice (uatlab/simd.hpp).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "uatlab/simd.hpp"

namespace uatlab::simd {

using Index = std::ptrdiff_t;

// Columns of a column-major operand: column j at data + j·stride.
template <class S>
struct Columns {
  const S* data;
  Index stride;
};

// What a product does to its sums before it sets y: nothing; the feed-forward's ReLU, max(sum, 0);
// or the ReLU's slope, sum where the gate (laid out as y: the ReLU's output) is positive, else 0.
enum class Epilogue { none, relu, gate };

// y (+)= w·x + b over `tokens` columns of x and y: w is rows×cols, at least half_block_rows<S>()
// rows or a paired_rows shape; bias (rows numbers) may be null; y is added to when add (Epilogue::none only),
// else set. The options with a default are set by name at the call (p.bias = b, ...).
template <class S>
struct Product {
  Columns<S> w;
  Index rows, cols;
  Columns<S> x;
  Index tokens;
  S* y;
  Index y_stride;
  const S* bias = nullptr;
  bool add = false;
  Epilogue epilogue = Epilogue::none;
  const S* gate = nullptr;  // Epilogue::gate: laid out as y
};

// g(:, 0 … cols − 1) += scale · Σ_j a_j b_jᵀ over `tokens` columns j of a (rows numbers each, at least
// half_block_rows<S>() or a paired_rows shape) and b (cols numbers each), and a_sum (rows numbers, when not
// null) += Σ_j a_j. The tokens are summed `chunk` at a time (0: all at once), each chunk's sums added to g,
// so that a chunk's columns of a and b stay in the cache while every block of g reads them. heads: g's
// columns consecutive in b (the heads' X·Mᵀ), which lets a block take more of them at a time.
template <class S>
struct Outer {
  S* g;
  Index g_stride, rows, cols;
  Columns<S> a, b;
  Index tokens;
  Index chunk = 0;
  S* a_sum = nullptr;
  S scale = S(1);
  bool heads = false;
};

// The products of one attention head and one sequence with R ∈ {1, 4, 8} rows and N ∈ {8, 16, 32}
// tokens (head_product.hpp's fixed-size views), the N numbers of a column of the result (gram) or
// its R numbers (times) in registers, several columns at a time:
//   head_gram:  out (N×N, columns N apart) = scale · Xᵀ·Y for R×N blocks X and Y;
//   head_times: out (R×N) (+)= scale · X·M, or X·Mᵀ when transposed, for an R×N block X and an
//               N×N matrix m (columns N apart); added to when add.
template <class S>
struct Head {
  int rows, length;
  Columns<S> x, y;  // y: head_gram's
  const S* m;       // head_times'
  S* out;
  Index out_stride;
  S scale;
  bool add, transposed;
};
// Whether rows×length is one of those shapes (head_product.hpp checks its fixed-size views against it
// at compile time; head_any's switch in kernels.cpp takes the same).
constexpr bool head_shape(Index rows, Index length) {
  return (rows == 1 || rows == 4 || rows == 8) && (length == 8 || length == 16 || length == 32);
}

// The softmax of each of the `columns` columns of an n×columns matrix (column-major, n numbers a
// column), in place; −∞ counts as a masked entry (weight 0), a NaN stays NaN.
template <class S>
struct Softmax {
  S* data;
  Index n, columns;
};

// The softmax's backward for each of the `columns` columns: ds = a ⊙ (ds − Σ_l a_l·ds_l), in place, a
// the softmax's output and ds the gradient of its output on entry (both n×columns, column-major, n
// numbers a column).
template <class S>
struct SoftmaxBackward {
  const S* a;
  S* ds;
  Index n, columns;
};

// The kernels, for S = float and double, on the chosen instruction set.
template <class S>
void product(const Product<S>& p);
template <class S>
void outer(const Outer<S>& o);
template <class S>
void head_gram(const Head<S>& h);
template <class S>
void head_times(const Head<S>& h);
template <class S>
void softmax_columns(const Softmax<S>& s);
template <class S>
void softmax_backward_columns(const SoftmaxBackward<S>& s);

// Numbers of S in one vector register of the chosen instruction set: a half block's rows (a whole
// block has twice as many).
template <class S>
Index half_block_rows();

// product() and outer() also take a float weight of half a register's rows (8 with AVX-512, 4 with
// AVX2, 2 with 128-bit vectors) and 2, 4, 8, 16 or 32 columns, by pairing its columns (kernels.cpp;
// product() with x's tokens consecutive, x.stride = cols); paired_rows(cols) is that row count where
// cols is such, else 0.
constexpr bool paired_cols(Index cols) {
  return cols == 2 || cols == 4 || cols == 8 || cols == 16 || cols == 32;
}
Index paired_rows(Index cols);
// And a float weight of a quarter of a register's rows (4 with AVX-512, 2 with AVX2, 1 with 128-bit
// vectors) and 4, 8, 16 or 32 columns in fours (product() only, x's and y's tokens consecutive);
// quad_rows(cols) is that row count where cols is such, else 0.
constexpr bool quad_cols(Index cols) {
  return cols == 4 || cols == 8 || cols == 16 || cols == 32;
}
Index quad_rows(Index cols);

// Whether product() unrolls its loop over w's columns: float weights of 4, 8 or 16 columns (at least
// half_block_rows<float>() rows) with x's tokens consecutive (x.stride = cols), the fixed-size
// products of small models' weights.
constexpr bool unrolled_cols(Index cols) {
  return cols == 4 || cols == 8 || cols == 16;
}

// Whether the chosen instruction set fuses a multiply-add into one rounding (AVX2, AVX-512, NEON);
// SSE4, SSSE3 and the emulated path round the product and the sum apart.
bool fused_multiply_add();

// For tests: the instruction sets this CPU and build run (Highway's names, best first), and f run
// with the kernels on the one named (the choice restored after, also when f throws).
std::vector<std::string> paths_here();
void on_path(const std::string& name, const std::function<void()>& f);

}  // namespace uatlab::simd
