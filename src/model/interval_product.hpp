// In-place products of MPFR and MPFI matrices: the certified evaluation (network_impl.hpp) and the
// training passes in MPFI (analyse's mean-value form, thin_product.hpp) multiply through these.
#pragma once

#include <mpfi.h>
#include <mpfr.h>

#include <type_traits>

#include "uatlab/model/scalar.hpp"

namespace uatlab {

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
  if constexpr (std::is_same_v<S, Mpfi>) {
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
  if constexpr (std::is_same_v<S, Mpfi>) {
    Mat<S> C = Mat<S>::Zero(A.rows(), B.cols());
    add_product(C, A, B);
    return C;
  } else {
    return A * B;
  }
}

}  // namespace uatlab
