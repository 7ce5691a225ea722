// In-place products of MPFR and MPFI matrices: the certified evaluation (network_impl.hpp) and the
// training passes in MPFI (analyse's mean-value form, thin_product.hpp) multiply through these.
#pragma once

#include <mpfi.h>
#include <mpfr.h>

#include <algorithm>
#include <type_traits>

#include "arb.hpp"
#include "sliced_product.hpp"
#include "uatlab/model/ball.hpp"
#include "uatlab/model/scalar.hpp"

namespace uatlab {

// A·B for balls (Rump's midpoint-radius product, with a-priori bounds of its rounding errors): the
// midpoints' product Cm = fl(Am·Bm), and one bound of
//   |A·B − Cm| ≤ |Am|·Br + Ar·(|Bm| + Br) + γ·|Am|·|Bm| + tail
// as nonnegative products in double: T = |Am|·(Br + γ|Bm|) (+ Ar·(|Bm| + Br) where A has radii),
// computed in round-to-nearest and raised by c = 1 + 4k·2^-53 ≥ 1/(1 − γ_k) and 8k·η, which bound
// the error of that product itself (docs/certified.md). For double midpoints Cm is Eigen's product
// and γ = γ_k = k·u/(1 − k·u) ≤ 2k·u, the bound of any dot product of length k in any order, with or
// without FMA (Higham, Accuracy and Stability, §3.1), so it holds for any BLAS-like kernel. For
// binary128 midpoints Cm is summed from exact products of double slices (sliced_product), and γ
// bounds the binary128 sum of those products.
template <class M, class AM, class BM>
Mat<Ball<M>> ball_product(const AM& A, const BM& B) {
  using namespace ball;
  const Eigen::Index k = A.cols();
  // A tall A (a readout over a vocabulary) in blocks of rows: the copies below stay small.
  constexpr Eigen::Index kRows = 4096;
  if (A.rows() > kRows) {
    Mat<Ball<M>> C(A.rows(), B.cols());
    for (Eigen::Index i = 0; i < A.rows(); i += kRows) {
      const Eigen::Index rows = std::min(kRows, A.rows() - i);
      const Mat<Ball<M>> block = A.middleRows(i, rows);  // a matrix: one more instance, not a chain
      C.middleRows(i, rows) = ball_product<M>(block, B);
    }
    return C;
  }
  auto mid = [](const Ball<M>& x) { return x.m; };
  auto rad = [](const Ball<M>& x) { return x.r; };
  auto size = [](const Ball<M>& x) { return mag(x.m); };
  const Mat<M> Am = A.unaryExpr(mid), Bm = B.unaryExpr(mid);
  const Mat<double> Aa = A.unaryExpr(size), Ar = A.unaryExpr(rad), Ba = B.unaryExpr(size),
                    Br = B.unaryExpr(rad);
  Mat<M> Cm;
  Mat<double> tail;
  double gamma;
  if constexpr (std::is_same_v<M, double>) {
    Cm = Am * Bm;
    gamma = up(2 * static_cast<double>(k) * MidTraits<M>::u);
  } else {
    gamma = sliced_product(Am, Bm, Cm, tail);
  }
  const double kd = static_cast<double>(k), c = up(1 + up(4 * kd * 0x1p-53)),
               floor = up(8 * kd * MidTraits<M>::eta);
  const Mat<double> S1 =
      Br.binaryExpr(Ba, [gamma](double r, double a) { return sum_up(r, mul_up(gamma, a)); });
  Mat<double> T = Aa * S1;
  if ((Ar.array() != 0).any()) {
    const Mat<double> S2 = Ba.binaryExpr(Br, [](double a, double r) { return sum_up(a, r); });
    const Mat<double> T2 = Ar * S2;
    T = T.binaryExpr(T2, [](double a, double b) { return sum_up(a, b); });
  }
  if (tail.size()) T = T.binaryExpr(tail, [](double a, double b) { return sum_up(a, b); });
  Mat<Ball<M>> C(Cm.rows(), Cm.cols());
  for (Eigen::Index i = 0; i < C.size(); ++i) {  // past double's range: no information (0 ± inf)
    const double r = sum_up(mul_up(T.data()[i], c), floor);
    const bool finite = std::isfinite(r) && std::isfinite(static_cast<double>(Cm.data()[i]));
    C.data()[i] = finite ? Ball<M>(Cm.data()[i], r) : Ball<M>(M(0), kInf);
  }
  return C;
}

// C += A·B, each entry's terms added in index order. Eigen's generic product allocates a temporary
// number per multiply-add for MPFR/MPFI; this in-place kernel uses one scratch value and skips exact
// zeros of B (ReLU outputs), which makes certified evaluation several times faster (wide feed-forward
// layers, attention: docs/benchmarks.md). The operands are matrices, blocks of them or their
// transposes, read where their entries lie (a block of a const matrix hands out its entries by
// value: a copy of a number per read).
template <class CM, class AM, class BM>
void add_product(CM&& C, const AM& A, const BM& B) {
  using S = typename std::decay_t<CM>::Scalar;
  if (C.size() == 0) return;
  auto at = [](auto& M, Eigen::Index i, Eigen::Index j) -> auto& {
    return M.data()[i * M.rowStride() + j * M.colStride()];
  };
  // c += a·b for every term, in the order of the sums; a zero b skips its column of A.
  auto terms = [&](auto is_zero, auto multiply_add) {
    for (Eigen::Index j = 0; j < B.cols(); ++j)
      for (Eigen::Index k = 0; k < A.cols(); ++k) {
        const auto& b = at(B, k, j);
        if (is_zero(b)) continue;
        for (Eigen::Index i = 0; i < A.rows(); ++i)
          multiply_add(at(C, i, j), at(A, i, k), b);
      }
  };
  if constexpr (is_ball_v<S>) {
    C += ball_product<decltype(S::m)>(A, B);
  } else if constexpr (is_arb_v<S>) {
    C += arb_product(A, B);
  } else if constexpr (std::is_same_v<S, Mpfi>) {
    mpfi_t t;
    mpfi_init2(t, mpfi_get_prec(C.data()[0].backend().data()));
    terms([](const S& b) { return mpfi_is_zero(b.backend().data()) != 0; },
          [&](S& c, const S& a, const S& b) {
            mpfi_mul(t, a.backend().data(), b.backend().data());
            mpfi_add(c.backend().data(), c.backend().data(), t);
          });
    mpfi_clear(t);
  } else if constexpr (std::is_same_v<S, Mpfr>) {
    terms([](const S& b) { return mpfr_zero_p(b.backend().data()) != 0; },
          [](S& c, const S& a, const S& b) {
            mpfr_fma(c.backend().data(), a.backend().data(), b.backend().data(), c.backend().data(),
                     MPFR_RNDN);
          });
  } else {
    C.noalias() += A * B;
  }
}

// A·B: in MPFI through add_product, else Eigen's product. Eigen's sums were in the same order, except
// its GEMM's over a transposed operand (Kᵀ·Q at larger head sizes): enclosures as sound, which can
// differ in their last bits (Model.IntervalProductsInPlaceAreThePlainSums).
template <class S, class AM, class BM>
Mat<S> product(const AM& A, const BM& B) {
  if constexpr (is_ball_v<S>) {
    return ball_product<decltype(S::m)>(A, B);
  } else if constexpr (is_arb_v<S>) {
    return arb_product(A, B);
  } else if constexpr (std::is_same_v<S, Mpfi>) {
    Mat<S> C = Mat<S>::Zero(A.rows(), B.cols());
    add_product(C, A, B);
    return C;
  } else {
    return A * B;
  }
}

}  // namespace uatlab
