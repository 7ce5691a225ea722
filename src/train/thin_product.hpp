// Products of a small weight matrix with one column per token: Y = W·X and G += dY·Xᵀ, where W
// and G are r×k with r ≤ 32 and k ≤ 16 (the models of memorization sweeps and the tiny training
// benchmark, d = 4 to 16), and Y = W·X for r = 4, 8, 16 and k = 32 (a feed-forward layer of width
// 32 back to d, and its input's gradient). Eigen's GEMM first copies (packs) all T token columns
// into its own layout, which costs as much as the product when k is this small. Here W, or the
// running sum of G, is a fixed-size matrix that stays in registers, and the tokens stream through
// once, column by column. Of these, the float weights of half or a quarter of a vector register's
// rows (columns in pairs or fours) and of at least one register's rows with 4, 8 or 16 columns
// (unrolled) go to the kernels
// of simd/kernels.hpp, dispatched at run time, so that a build for any CPU of the family runs them
// at its best instruction set. Larger weights, with r at least one vector register's numbers and
// both sizes up to 512 (the small and medium benchmarks' d = 32, 128 and m = 128, 512), go to the
// blocked kernels there too. Other shapes and scalars go to Eigen's product.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "../model/interval_product.hpp"
#include "../model/sizes.hpp"
#include "../simd/kernels.hpp"
#include "uatlab/model/scalar.hpp"

namespace uatlab::train_detail {

using ThinRows = Sizes<1, 2, 3, 4, 8, 16, 32>;
using ThinCols = Sizes<1, 2, 3, 4, 8, 16>;
// Y = W·X for r = 4, 8, 16 and these k, eight tokens at a time: each column of W loaded serves
// eight tokens, and the eight sums are independent, so the multiply-adds do not wait on each
// other's latency (one token at a time is one chain of k of them). Float, one core, 1,024 tokens
// (bench_train's products/ benchmarks): 3.1× Eigen's GEMM at 8×8, 1.8× at 8×32. Float weights of
// half a register's rows (8 with AVX-512) go to simd::product instead, which pairs their columns.
using WideRows = Sizes<4, 8, 16>;
using WideCols = Sizes<2, 4, 8, 16, 32>;
constexpr int kWideTokens = 8;

// f(r, k) as compile-time sizes when S is float or double and rows×cols has a kernel.
template <class S, class F>
bool with_thin_shape(Eigen::Index rows, Eigen::Index cols, F&& f) {
  if constexpr (!std::is_same_v<S, float> && !std::is_same_v<S, double>) {
    return false;
  } else {
    bool found = false;
    with_size(ThinRows{}, rows,
              [&](auto r) { found = with_size(ThinCols{}, cols, [&](auto k) { f(r, k); }); });
    return found;
  }
}

// f(r, k, p) as compile-time sizes when S is float or double and Y = W·X with an r×k weight has a
// kernel that takes p tokens at a time.
template <class S, class F>
bool with_product_shape(Eigen::Index rows, Eigen::Index cols, F&& f) {
  if constexpr (!std::is_same_v<S, float> && !std::is_same_v<S, double>) {
    return false;
  } else {
    bool found = false;
    with_size(WideRows{}, rows, [&](auto r) {
      found =
          with_size(WideCols{}, cols, [&](auto k) { f(r, k, std::integral_constant<int, kWideTokens>{}); });
    });
    // The shapes both tables hold went to the first: only the others are compiled again.
    return found || with_thin_shape<S>(rows, cols, [&](auto r, auto k) {
             if constexpr (!contains(WideRows{}, decltype(r)::value) ||
                           !contains(WideCols{}, decltype(k)::value))
               f(r, k, std::integral_constant<int, 1>{});
           });
  }
}

// What a product kernel does to its sums before it sets y (simd/kernels.hpp): in registers, where a
// separate pass read and wrote all of y again.
using simd::Epilogue;

// y[i] = v[i] where g[i] > 0, else 0, for i < count, in SIMD registers: Eigen 3.4's select() has
// no vector path, and ran number by number with a branch each (the ReLU's slope in the backward
// pass was 30% of the small train step on AVX2).
// (Eigen's packet types carry vector attributes, which GCC warns that a template argument drops.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
template <class S>
inline void gate_numbers(S* y, const S* v, const S* g, Eigen::Index count) {
  namespace ei = Eigen::internal;
  using P = typename ei::packet_traits<S>::type;
  constexpr int L = ei::packet_traits<S>::size;
  Eigen::Index i = 0;
  if constexpr (L > 1) {
    const P zero = ei::pset1<P>(S(0));
    for (; i + L <= count; i += L)
      ei::pstoreu(y + i, ei::pselect(ei::pcmp_lt(zero, ei::ploadu<P>(g + i)), ei::ploadu<P>(v + i), zero));
  }
  for (; i < count; ++i)
    y[i] = g[i] > S(0) ? v[i] : S(0);
}
#pragma GCC diagnostic pop

// Sums v into y (a column of one token or a block of them): added (add), set, or set to the
// epilogue's value, the gate laid out as y (its columns `stride` numbers apart). Every kernel's
// epilogue is this one.
template <Epilogue E, class Y, class V, class S>
void store_sums(Y&& y, const V& v, bool add, const S* gate, Eigen::Index stride) {
  if constexpr (E == Epilogue::relu) {
    y = v.cwiseMax(S(0));
  } else if constexpr (E == Epilogue::gate) {
    const auto sums = v.eval();  // column-major, its columns consecutive
    for (Eigen::Index t = 0; t < sums.cols(); ++t)
      gate_numbers(&y.coeffRef(0, t), sums.data() + t * sums.rows(), gate + t * stride, sums.rows());
  } else if (add) {
    y += v;
  } else {
    y = v;
  }
}

// y (+)= w·x + b for the P token columns at x and y (added when add, else set; the epilogues set).
template <int P, class S, int R, int K, Epilogue E = Epilogue::none>
void tokens_product(const Eigen::Matrix<S, R, K>& w, const Eigen::Matrix<S, R, 1>& b, const S* x, S* y,
                    bool add, const S* gate = nullptr) {
  const Eigen::Map<const Eigen::Matrix<S, K, P>> xj(x);
  if constexpr (P == 1) {  // Eigen unrolls the product
    const Eigen::Matrix<S, R, 1> v = w.lazyProduct(xj) + b;
    store_sums<E>(Eigen::Map<Eigen::Matrix<S, R, 1>>(y), v, add, gate, R);
  } else {
    Eigen::Matrix<S, R, P> acc = Eigen::Matrix<S, R, P>::Zero();
    for (int k = 0; k < K; ++k) {
      const Eigen::Matrix<S, R, 1> c = w.col(k);
      for (int t = 0; t < P; ++t)
        acc.col(t) += c * xj(k, t);
    }
    // Column by column, the bias added last: GCC stores a plain copy of the sums as whole
    // registers through the stack, which stalls the loads that follow (seen in perf annotate).
    for (int t = 0; t < P; ++t)
      store_sums<E>(Eigen::Map<Eigen::Matrix<S, R, 1>>(y + t * R), acc.col(t) + b, add,
                    gate ? gate + t * R : nullptr, R);
  }
}

// The blocked kernels (simd/kernels.hpp; Highway, the instruction set chosen at run time) take
// weights of at least one vector register's rows (simd::half_block_rows) and at most 512 rows and
// columns. With AVX-512 (Eigen-written kernels of the same design, which Highway's replaced), one
// core, 1,024 tokens, float (bench_train's products/ benchmarks, docs/benchmarks.md): Y = W·X 1.57×
// Eigen's GEMM at 32×32, 1.28× at 128×32, 1.16-1.17× at 128×128, 512×128 and 128×512; G += dY·Xᵀ
// 2.07×, 1.45× and 1.24× at the first three, 1.32× and 1.44× at 512×128 and 128×512 summed over
// chunks of tokens (outer_chunk).
constexpr Eigen::Index kBlockMax = 512;

template <class S>
bool blocked_shape(Eigen::Index rows, Eigen::Index cols) {
  if constexpr (!std::is_same_v<S, float> && !std::is_same_v<S, double>)
    return false;
  else
    return rows >= simd::half_block_rows<S>() && rows <= kBlockMax && cols <= kBlockMax;
}

// dst (+)= w·x + b over all of x's tokens (dst already sized), w of a blocked_shape; the gate, when
// E needs it, has dst's shape.
template <Epilogue E = Epilogue::none, class S>
void blocked_product(Mat<S>& dst, const Mat<S>& w, const Mat<S>& x, const S* b, bool add,
                     const S* gate = nullptr) {
  const simd::Columns<S> wc{w.data(), w.rows()}, xc{x.data(), x.rows()};
  simd::Product<S> p{wc, w.rows(), w.cols(), xc, x.cols(), dst.data(), dst.rows()};
  p.bias = b, p.add = add, p.epilogue = E, p.gate = gate;
  simd::product(p);
}

// Tokens per chunk of the blocked outer product: as many as keep a chunk's columns of both
// operands (per_token bytes a token) within 512 KB, so that they stay in L2 while every block of G
// reads them (512 KB: half of the L2 of the family-25 AMD VM, 1 MB a core; G += dY·Xᵀ at 512×128
// ran at 0.65× Eigen's speed when every block of G's columns read all of dY, 2 MB at 1,024 tokens);
// at least 64.
inline Eigen::Index outer_chunk(Eigen::Index per_token) {
  return std::max<Eigen::Index>(64, (Eigen::Index{512} << 10) / per_token);
}

// g += a·bᵀ, and a_sum (when given) += the sum of a's columns, a of a blocked_shape's rows.
template <class S>
void blocked_outer(Mat<S>& g, const Mat<S>& a, const Mat<S>& b, S* a_sum = nullptr) {
  simd::Outer<S> o{g.data(), g.rows(), a.rows(), b.rows(), {a.data(), a.rows()}, {b.data(), b.rows()},
                   a.cols()};
  o.chunk = outer_chunk((a.rows() + b.rows()) * Eigen::Index{sizeof(S)}), o.a_sum = a_sum;
  simd::outer(o);
}

template <class S>
void add_bias(Mat<S>& m, const Mat<S>& b) {  // every column
  m.colwise() += b.col(0);
}

// Whether Y = W·X with an r×k weight has a kernel here (else it is Eigen's product).
template <class S>
bool has_product_kernel(Eigen::Index rows, Eigen::Index cols) {
  return with_product_shape<S>(rows, cols, [](auto, auto, auto) {}) || blocked_shape<S>(rows, cols);
}

// dst (+)= w·x + b as Eigen's product, for the shapes without a kernel; in MPFI in place (product:
// no number allocated per multiply-add), the sum then added, as Eigen's +=.
template <class S, class W>
void eigen_product(Mat<S>& dst, const W& w, const Mat<S>& x, const Mat<S>* b, bool add) {
  if constexpr (std::is_same_v<S, Mpfi>) {
    if (add)
      dst += product<S>(w, x);
    else
      dst = product<S>(w, x);
  } else if (add) {
    dst.noalias() += w * x;
  } else {
    dst.noalias() = w * x;
  }
  if (b) add_bias(dst, *b);
}

// dst (+)= w·x + b through the fixed-size kernels when they take w's shape (else false, nothing
// done); dst already sized; the gate, when E needs it, has dst's shape. The epilogues in float only:
// they cost compile time (thin_product_float.cpp 33-35 s → 43-44 s), and in double, which only the
// tests train with, the passes after the product serve (thin_product_double.cpp stays at 25-29 s).
template <Epilogue E = Epilogue::none, class S>
bool fixed_product(Mat<S>& dst, const Mat<S>& w, const Mat<S>& x, const Mat<S>* b, bool add,
                   const S* gate = nullptr) {
  if constexpr (E != Epilogue::none && !std::is_same_v<S, float>) {
    return false;
  } else {
    return with_product_shape<S>(w.rows(), w.cols(), [&](auto r, auto k, auto p) {
      constexpr int R = decltype(r)::value, K = decltype(k)::value, P = decltype(p)::value;
      const Eigen::Index T = x.cols(), whole = T - T % P;
      // Float weights of half a register's rows (simd::product pairs their columns), and of whole
      // registers' rows with a column count that simd::product unrolls: on every instruction set,
      // where these kernels are Eigen's, compiled for the build's.
      if constexpr (std::is_same_v<S, float> &&
                    (simd::paired_cols(K) || simd::unrolled_cols(K) || simd::quad_cols(K)))
        if (R == simd::paired_rows(K) || (simd::quad_cols(K) && R == simd::quad_rows(K)) ||
            (simd::unrolled_cols(K) && R >= simd::half_block_rows<float>())) {
          simd::Product<S> pp{{w.data(), R}, R, K, {x.data(), K}, T, dst.data(), R};
          pp.bias = b ? b->data() : nullptr, pp.add = add, pp.epilogue = E, pp.gate = gate;
          simd::product(pp);
          return;
        }
      const Eigen::Matrix<S, R, K> wf = w;
      const Eigen::Matrix<S, R, 1> bf =
          b ? Eigen::Matrix<S, R, 1>(b->col(0)) : Eigen::Matrix<S, R, 1>::Zero();
      const auto gate_at = [&](Eigen::Index j) { return gate ? gate + j * R : nullptr; };
      for (Eigen::Index j = 0; j < whole; j += P)
        tokens_product<P, S, R, K, E>(wf, bf, x.data() + j * K, dst.data() + j * R, add, gate_at(j));
      for (Eigen::Index j = whole; j < T; ++j)
        tokens_product<1, S, R, K, E>(wf, bf, x.data() + j * K, dst.data() + j * R, add, gate_at(j));
    });
  }
}

// dst (+)= w·x + b through the kernels (has_product_kernel) or Eigen's product: w is r×k, x holds
// k×T tokens, b (optional) is an r×1 bias; dst is set, or added to when add (then already sized).
template <class S>
void product_into(Mat<S>& dst, const Mat<S>& w, const Mat<S>& x, const Mat<S>* b, bool add) {
  eigen_assert(w.cols() == x.rows() && (!b || b->rows() == w.rows()));
  if (!add) dst.resize(w.rows(), x.cols());
  eigen_assert(dst.rows() == w.rows() && dst.cols() == x.cols());
  if (fixed_product(dst, w, x, b, add)) return;
  if (blocked_shape<S>(w.rows(), w.cols())) {
    blocked_product(dst, w, x, b ? b->data() : nullptr, add);
    return;
  }
  eigen_product(dst, w, x, b, add);
}
// A transposed weight (the backward's Wᵀ·dY) is copied column-major when a kernel takes its shape:
// the kernels are compiled for plain weights only. The copy goes to memory each thread keeps, so
// that a training step allocates nothing for it.
template <class S>
const Mat<S>& plain_copy(const Eigen::Transpose<const Mat<S>>& w) {
  thread_local Mat<S> copy;
  copy = w;
  return copy;
}
template <class S>
void product_into(Mat<S>& dst, const Eigen::Transpose<const Mat<S>>& w, const Mat<S>& x, const Mat<S>* b,
                  bool add) {
  if (has_product_kernel<S>(w.rows(), w.cols())) return product_into(dst, plain_copy(w), x, b, add);
  eigen_assert(w.cols() == x.rows() && (!b || b->rows() == w.rows()));
  eigen_product(dst, w, x, b, add);
}
template <class S, class W>
void weights_times(Mat<S>& dst, const W& w, const Mat<S>& x, const Mat<S>* b = nullptr) {
  product_into(dst, w, x, b, false);
}
template <class S, class W>
void add_weights_times(Mat<S>& dst, const W& w, const Mat<S>& x, const Mat<S>* b = nullptr) {
  product_into(dst, w, x, b, true);
}
// Whether weights_times takes an r×k weight to the blocked kernels (after the fixed-size ones).
template <class S>
bool takes_blocked(Eigen::Index rows, Eigen::Index cols) {
  return blocked_shape<S>(rows, cols) && !with_product_shape<S>(rows, cols, [](auto, auto, auto) {});
}

// The feed-forward's ReLU and its slope with the product before them, in the kernels' registers
// where a kernel takes the weight's shape (fixed-size in float, blocked), else as a pass after the
// product: dst = max(w·x + b, 0), and dst = (wᵀ·x) ⊙ [act > 0] for the gradient through a ReLU
// whose output was act (a transposed weight, as the backward pass has it).
template <class S>
void relu_weights_times(Mat<S>& dst, const Mat<S>& w, const Mat<S>& x, const Mat<S>* b) {
  eigen_assert(w.cols() == x.rows() && (!b || b->rows() == w.rows()));
  dst.resize(w.rows(), x.cols());
  if (fixed_product<Epilogue::relu>(dst, w, x, b, false)) return;
  if (takes_blocked<S>(w.rows(), w.cols())) {
    blocked_product<Epilogue::relu>(dst, w, x, b ? b->data() : nullptr, false);
    return;
  }
  product_into(dst, w, x, b, false);
  dst = dst.cwiseMax(S(0));
}
template <class S>
void relu_gated_times(Mat<S>& dst, const Eigen::Transpose<const Mat<S>>& w, const Mat<S>& x,
                      const Mat<S>& act) {
  eigen_assert(w.cols() == x.rows() && act.rows() == w.rows() && act.cols() == x.cols());
  if (has_product_kernel<S>(w.rows(), w.cols())) {
    const Mat<S>& wp = plain_copy(w);
    dst.resize(w.rows(), x.cols());
    if (fixed_product<Epilogue::gate>(dst, wp, x, static_cast<const Mat<S>*>(nullptr), false, act.data()))
      return;
    if (takes_blocked<S>(w.rows(), w.cols())) {
      blocked_product<Epilogue::gate>(dst, wp, x, static_cast<const S*>(nullptr), false, act.data());
      return;
    }
    weights_times(dst, wp, x);  // the fixed-size kernels without the epilogue (double)
  } else {
    weights_times(dst, w, x);
  }
  gate_numbers(dst.data(), dst.data(), act.data(), dst.size());
}

// g += the sum of m's columns (a bias gradient), as one matrix-vector product: Eigen's
// rowwise().sum() walks a column-major matrix row by row and does not vectorise.
template <class S, class M>
void add_column_sum(Mat<S>& g, const M& m) {
  if (g.size() == 0) return;  // an input-only gradient (input_only_like)
  g.col(0).noalias() += m * Vec<S>::Ones(m.cols());
}

// Whether outer_tokens' R×K sum stays in the vector registers Eigen's code has (four left for a_j,
// the broadcast and the bias sum); else the blocked kernels take the shape. With AVX2, float, one
// core, 1,024 tokens (bench_train's products/dYXt): 8×8 (8 of 16 registers) ran at 80 GFLOP/s
// against the blocked kernel's 25, 32×8 and 8×32 (32 registers: spilled) at 34 and 33 against 70
// and 54.
template <class S>
constexpr bool sum_in_registers(int R, int K) {
#if defined(__AVX512F__) || defined(__aarch64__)
  constexpr int registers = 32;
#else
  constexpr int registers = 16;
#endif
  return R * K <= (registers - 4) * Eigen::internal::packet_traits<S>::size;
}

// g (+)= Σ_j a_j b_jᵀ over the token columns of a (R×T) and b (K×T), as g += sum when Tall, else
// as g += sumᵀ; gb (when given) += the sum of dy's columns: a's when Tall, else b's, summed in the
// same pass (one more addition per token).
template <bool Tall, int R, int K, class S>
void outer_tokens(Mat<S>& g, const Mat<S>& a, const Mat<S>& b, Mat<S>* gb) {
  constexpr int D = Tall ? R : K;  // dy's rows
  Eigen::Matrix<S, R, K> sum = Eigen::Matrix<S, R, K>::Zero();
  Eigen::Matrix<S, D, 1> dy_sum = Eigen::Matrix<S, D, 1>::Zero();
  for (Eigen::Index j = 0; j < a.cols(); ++j) {
    const Eigen::Map<const Eigen::Matrix<S, R, 1>> aj(a.data() + j * R);
    for (int c = 0; c < K; ++c)
      sum.col(c).noalias() += aj * b.data()[j * K + c];
    if constexpr (Tall)
      dy_sum += aj;
    else
      dy_sum += Eigen::Map<const Eigen::Matrix<S, K, 1>>(b.data() + j * K);
  }
  // Into g and gb through fixed-size maps: a dynamic destination of a fixed-size sum makes GCC 12
  // warn (-Warray-bounds) about the branches of Eigen's assignment it cannot prove dead.
  eigen_assert(g.size() == R * K && (!gb || gb->size() == D));
  if constexpr (Tall)
    Eigen::Map<Eigen::Matrix<S, R, K>>(g.data()) += sum;
  else
    Eigen::Map<Eigen::Matrix<S, K, R>>(g.data()) += sum.transpose();
  if (gb) Eigen::Map<Eigen::Matrix<S, D, 1>>(gb->data()) += dy_sum;
}

// g += dy·xᵀ, the sum over tokens of dy_j x_jᵀ: dy is r×T, x is k×T, g is r×k; and, when gb is
// given, the bias gradient gb += the sum of dy's columns. The running sum is kept column by column
// in the orientation whose columns are the longer vectors (for r < k, as gᵀ += x·dyᵀ), so 8×32
// runs as 32×8.
template <class S>
void add_outer(Mat<S>& g, const Mat<S>& dy, const Mat<S>& x, Mat<S>* gb = nullptr) {
  if (g.size() == 0) return;  // an input-only gradient (input_only_like)
  eigen_assert(dy.cols() == x.cols() && g.rows() == dy.rows() && g.cols() == x.rows());
  eigen_assert(!gb || (gb->rows() == dy.rows() && gb->cols() == 1));
  const bool tall = g.rows() >= g.cols();
  if constexpr (std::is_same_v<S, float>)
    if (tall && dy.rows() == simd::paired_rows(x.rows())) {  // half a register's rows: paired
      simd::Outer<S> o{g.data(), g.rows(), g.rows(), g.cols(), {dy.data(), dy.rows()}, {x.data(), x.rows()},
                       dy.cols()};
      o.a_sum = gb ? gb->data() : nullptr;
      simd::outer(o);
      return;
    }
  const Mat<S>& a = tall ? dy : x;  // the longer side, a column per token
  const Mat<S>& b = tall ? x : dy;
  // a has at least as many rows as b, more unless g is square (then tall): only those shapes are
  // compiled.
  bool thin = false;
  with_thin_shape<S>(a.rows(), b.rows(), [&](auto r, auto k) {
    constexpr int R = decltype(r)::value, K = decltype(k)::value;
    if constexpr (sum_in_registers<S>(R, K)) {
      thin = true;
      if constexpr (R == K)
        outer_tokens<true, R, K>(g, a, b, gb);
      else if constexpr (R > K) {
        if (tall)
          outer_tokens<true, R, K>(g, a, b, gb);
        else
          outer_tokens<false, R, K>(g, a, b, gb);
      }
    }
  });
  if (thin) return;
  if (blocked_shape<S>(dy.rows(), x.rows())) {
    blocked_outer(g, dy, x, gb ? gb->data() : nullptr);
    return;
  }
  if (blocked_shape<S>(x.rows(), dy.rows())) {
    Mat<S> gt = Mat<S>::Zero(x.rows(), dy.rows());
    blocked_outer(gt, x, dy);
    g += gt.transpose();
  } else if constexpr (std::is_same_v<S, Mpfi>) {
    g += product<S>(dy, x.transpose());
  } else {
    g.noalias() += dy * x.transpose();
  }
  if (gb) add_column_sum(*gb, dy);
}

// The kernels in float and double are compiled once, in thin_product_{float,double}.cpp, for every file that
// includes this header (the training passes, their tests, the benchmark).
#define UATLAB_TOKEN_PRODUCT_INSTANCES(PREFIX, S)                                                         \
  PREFIX template void product_into<S>(Mat<S>&, const Mat<S>&, const Mat<S>&, const Mat<S>*, bool);       \
  PREFIX template void product_into<S>(Mat<S>&, const Eigen::Transpose<const Mat<S>>&, const Mat<S>&,     \
                                       const Mat<S>*, bool);                                              \
  PREFIX template void add_outer<S>(Mat<S>&, const Mat<S>&, const Mat<S>&, Mat<S>*);                      \
  PREFIX template void relu_weights_times<S>(Mat<S>&, const Mat<S>&, const Mat<S>&, const Mat<S>*);       \
  PREFIX template void relu_gated_times<S>(Mat<S>&, const Eigen::Transpose<const Mat<S>>&, const Mat<S>&, \
                                           const Mat<S>&);
UATLAB_TOKEN_PRODUCT_INSTANCES(extern, float)
UATLAB_TOKEN_PRODUCT_INSTANCES(extern, double)

}  // namespace uatlab::train_detail
