// The products of one attention head and one sequence when its head size R and its length N are
// both compile-time sizes (float and double, R ∈ HeadRows, N ∈ FixedLengths, every query computed:
// with_head_view hands such blocks). Eigen's GEMM packs both operands first, which at these sizes
// costs more than the multiply-adds, and its fixed-size product of a transposed block was slower
// still (measured). The kernels (simd::head_gram and simd::head_times in simd/kernels.cpp, Highway,
// the instruction set chosen at run time) keep the column being summed in registers:
//   scores and dS:  A = Xᵀ·Y·scale, A's column j = Σ_r (row r of X)ᵀ · Y(r, j);
//   the others:     G (+)= X·M·scale and X·Mᵀ·scale, sixteen columns of G at a time (eight with AVX2).
// The train step at n = 16 and 32 is faster with them (docs/benchmarks.md, "The kernels' design
// figures"). Larger heads go to the blocked kernels (blocked_head_product). Last, the views of one
// head that attention_forward/backward compute with (with_head_view) and the dispatch of their
// products among these kernels and Eigen's (set_head_product, add_head_product).
#pragma once

#include "thin_product.hpp"

namespace uatlab::train_detail {

using HeadRows = Sizes<1, 4, 8>;  // and lengths N in FixedLengths (model/sizes.hpp)

template <class T>
struct IsTranspose : std::false_type {};
template <class X>
struct IsTranspose<Eigen::Transpose<X>> : std::true_type {};
// M of Mᵀ, else M.
template <class M>
const auto& untransposed(const M& m) {
  if constexpr (IsTranspose<M>::value)
    return m.nestedExpression();
  else
    return m;
}
template <class X>
constexpr bool fixed_size = X::RowsAtCompileTime != Eigen::Dynamic&& X::ColsAtCompileTime != Eigen::Dynamic;

// Whether a·b is one of the products below: Xᵀ·Y (scores, dS), X·M (V·A, K·dS) or X·Mᵀ (dO·Aᵀ,
// Q·dSᵀ) for fixed-size blocks X, Y and an N×N Mat M. Decided at compile time, so that no other
// product is compiled for these operands.
template <class A, class B>
constexpr bool fixed_head_operands = (IsTranspose<A>::value && fixed_size<B>) ||
                                     (fixed_size<A> && !fixed_size<B>);

// dst = a·b·scale, or dst += a·b·scale when Add, for fixed_head_operands.
template <bool Add, class D, class A, class B, class S>
void fixed_head_product(D&& dst, const A& a, const B& b, const S& scale) {
  static_assert(fixed_head_operands<A, B>);
  // X·Mᵀ for a float head of half a register's rows (8 with AVX-512) at lengths that are multiples of
  // 16: simd::head_times would run at half the machine's width, and simd::outer pairs G's columns,
  // lane 2r + e of pair p summing X(r, i)·M(2p + e, i) over i (X(:, i) as a_i, M(:, i) as b_i). X·M
  // stays with head_times: pairing its sums over i measured 1.0-1.18×, a transposed copy of M
  // first 0.65× (docs/benchmarks.md, bench_train's heads/8x16 and heads/8x32).
  if constexpr (std::is_same_v<S, float> && !IsTranspose<A>::value && IsTranspose<B>::value) {
    constexpr int R = A::RowsAtCompileTime, N = A::ColsAtCompileTime;
    if constexpr (N % 16 == 0 && simd::paired_cols(N))
      if (R == simd::paired_rows(N)) {
        const auto& m = b.nestedExpression();
        eigen_assert(m.rows() == N && m.cols() == N && m.colStride() == N);
        if constexpr (!Add) dst.setZero();
        simd::Outer<S> o{dst.data(), dst.colStride(), R, N, {a.data(), a.colStride()}, {m.data(), N}, N};
        o.scale = scale, o.heads = true;
        simd::outer(o);
        return;
      }
  }
  // Columns colStride() apart: a block of one row is a row vector to Eigen, whose outerStride() is
  // not the distance between its numbers.
  simd::Head<S> h{};
  h.scale = scale;
  if constexpr (IsTranspose<A>::value) {
    static_assert(!Add, "the scores are set, not added");
    const auto& x = a.nestedExpression();
    h.rows = B::RowsAtCompileTime, h.length = B::ColsAtCompileTime;
    static_assert(simd::head_shape(B::RowsAtCompileTime, B::ColsAtCompileTime));
    h.x = {x.data(), x.colStride()}, h.y = {b.data(), b.colStride()};
    dst.resize(h.length, h.length);
    h.out = dst.data(), h.out_stride = h.length;
    simd::head_gram(h);
  } else {
    const auto& m = untransposed(b);
    h.rows = A::RowsAtCompileTime, h.length = A::ColsAtCompileTime;
    static_assert(simd::head_shape(A::RowsAtCompileTime, A::ColsAtCompileTime));
    eigen_assert(m.rows() == h.length && m.cols() == h.length && m.colStride() == h.length);
    h.x = {a.data(), a.colStride()}, h.m = m.data();
    h.out = dst.data(), h.out_stride = dst.colStride();
    h.add = Add, h.transposed = IsTranspose<B>::value;
    simd::head_times(h);
  }
}

// dst (+)= a·b·scale through the blocked kernels (simd/kernels.hpp) for the heads without
// fixed-size kernels (float and double, dynamic blocks), when the operand whose rows become the
// kernel's rows has at least one vector register's numbers (simd::half_block_rows):
// - X·M (V·A, K·dS): Y = W·X with W = X, read in place (scaled: a copy of X, hs·n numbers);
// - Xᵀ·Y (the scores Kᵀ·Q, and Vᵀ·dO): W = a copy of Xᵀ, scaled (n rows);
// - X·Mᵀ (dO·Aᵀ, Q·dSᵀ): dst's columns as sums of outer products Σ_j x_j m_jᵀ over X's n columns
//   (simd::outer with heads: dst's columns consecutive in m, one pointer for all, so a half block
//   takes more of them at a time), M read in place where Y = W·X needed a copy of Mᵀ (n² numbers,
//   transposed).
// The copies hold n·hs numbers against the n²·hs multiply-adds. Returns false, having done
// nothing, for other shapes (Eigen's GEMM then). Figures: docs/benchmarks.md ("The kernels'
// design figures"), bench_train's heads/ benchmarks.
template <bool Add, class D, class A, class B, class S>
bool blocked_head_product(D&& dst, const A& a, const B& b, const S& scale) {
  if constexpr (!std::is_same_v<S, float> && !std::is_same_v<S, double>) {
    return false;
  } else {
    const Eigen::Index r = a.rows(), k = a.cols(), T = b.cols();
    if (!blocked_shape<S>(r, k)) return false;
    if constexpr (!Add && std::is_same_v<std::decay_t<D>, Mat<S>>) dst.resize(r, T);
    eigen_assert(dst.rows() == r && dst.cols() == T && dst.rowStride() == 1);
    thread_local Mat<S> w_copy, x_copy;
    if constexpr (IsTranspose<B>::value && !IsTranspose<A>::value) {
      const auto& m = b.nestedExpression();  // T×k
      if constexpr (!Add) dst.setZero();
      simd::Outer<S> o{
          dst.data(), dst.colStride(), r, T, {a.data(), a.colStride()}, {m.data(), m.colStride()}, k};
      o.scale = scale, o.heads = true;
      simd::outer(o);
      return true;
    } else {
      const simd::Columns<S> x = [&]() -> simd::Columns<S> {
        if constexpr (IsTranspose<B>::value) {  // both transposed: b copied
          x_copy.noalias() = b;
          return {x_copy.data(), k};
        } else {
          return {b.data(), b.colStride()};
        }
      }();
      const simd::Columns<S> w = [&]() -> simd::Columns<S> {
        if constexpr (!IsTranspose<A>::value)
          if (scale == S(1)) return {a.data(), a.colStride()};
        w_copy.noalias() = a * scale;
        return {w_copy.data(), r};
      }();
      simd::Product<S> p{w, r, k, x, T, dst.data(), dst.colStride()};
      p.add = Add;
      simd::product(p);
      return true;
    }
  }
}

// f(view, cols), where view(M) is the block of M that one head sees for one sequence (hs×n), and
// cols(M, first, count) the head's rows of M at other columns (the queries computed). For head
// sizes 1, 4 and 8 the blocks have hs rows at compile time, so that Eigen picks outer products,
// matrix-vector products and unrolled small products instead of its general GEMM, whose set-up
// dominates at these sizes (Kajitsuka's construction is one tied head of size 1). For the head
// sizes and lengths of the kernels above, when every query is computed, the blocks have n columns
// at compile time too, and the products go to those kernels. The math is written once, in f.
template <class S, class F>
void with_head_view(Eigen::Index hs, Eigen::Index h, Eigen::Index c0, Eigen::Index n, Eigen::Index queries,
                    F&& f) {
  auto fixed = [&](auto rows) {
    constexpr int R = decltype(rows)::value;
    if constexpr ((std::is_same_v<S, float> || std::is_same_v<S, double>)&&contains(HeadRows{}, R))
      if (queries == n && with_size(FixedLengths{}, n, [&](auto length) {
            constexpr int N = decltype(length)::value;
            auto cols = [=](auto& M, Eigen::Index first, [[maybe_unused]] Eigen::Index count) {
              eigen_assert(count == N);
              return M.template block<R, N>(h * R, first);
            };
            f([=](auto& M) { return cols(M, c0, N); }, cols);
          }))
        return;
    auto cols = [=](auto& M, Eigen::Index first, Eigen::Index count) {
      return M.template block<R, Eigen::Dynamic>(h * R, first, R, count);
    };
    f([=](auto& M) { return cols(M, c0, n); }, cols);
  };
  switch (hs) {
    case 1:
      return fixed(std::integral_constant<int, 1>());
    case 4:
      return fixed(std::integral_constant<int, 4>());
    case 8:
      return fixed(std::integral_constant<int, 8>());
    default: {
      auto cols = [=](auto& M, Eigen::Index first, Eigen::Index count) {
        return M.block(h * hs, first, hs, count);
      };
      f([=](auto& M) { return cols(M, c0, n); }, cols);
    }
  }
}

// The products of one head and one sequence: dst = a·b·scale, or dst += a·b·scale. When a is a
// head view (one dimension fixed at compile time) and every size is at most 8, as a
// coefficient-wise product, which Eigen unrolls and vectorises instead of packing the operands for
// its GEMM (faster at n = 8, slower from n = 32 on: docs/benchmarks.md). A single row (head size 1)
// at a length without fixed-size kernels stays a matrix-vector product, which is faster still.
// Larger heads go to the blocked kernel where its weight's rows fit its blocks
// (blocked_head_product), the rest to Eigen's GEMM. Each branch is compiled only for the operands it
// can serve (fixed-size blocks go to fixed_head_product alone).
template <bool Add, class D, class A, class B, class S>
void head_product(D&& dst, const A& a, const B& b, const S& scale) {
  if constexpr (fixed_head_operands<A, B>) {
    fixed_head_product<Add>(dst, a, b, scale);
  } else {
    if constexpr (A::RowsAtCompileTime != Eigen::Dynamic || A::ColsAtCompileTime != Eigen::Dynamic)
      if (a.rows() > 1 && a.rows() <= 8 && a.cols() <= 8 && b.cols() <= 8) {
        if constexpr (Add)
          dst.noalias() += a.lazyProduct(b) * scale;
        else
          dst.noalias() = a.lazyProduct(b) * scale;
        return;
      }
    if (blocked_head_product<Add>(dst, a, b, scale)) return;
    if constexpr (Add)
      dst.noalias() += (a * b) * scale;
    else
      dst.noalias() = (a * b) * scale;
  }
}
template <class D, class A, class B, class S>
void set_head_product(D&& dst, const A& a, const B& b, const S& scale) {
  head_product<false>(dst, a, b, scale);
}
template <class D, class A, class B, class S>
void add_head_product(D&& dst, const A& a, const B& b, const S& scale) {
  head_product<true>(dst, a, b, scale);
}

}  // namespace uatlab::train_detail
