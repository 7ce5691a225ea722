#include "arb.hpp"

#include <arb_mat.h>
#include <flint/fmpq.h>
#include <omp.h>

#include <algorithm>

#include "uatlab/error.hpp"

namespace uatlab {

namespace {
// An end of x rounded outward to the working precision, as an MPFR number of that precision.
Mpfr end_of(const Arb& x, bool upward) {
  Mpfr out;
  arf_t e;
  arf_init(e);
  if (upward)
    arb_get_ubound_arf(e, x.get(), arb_bits());
  else
    arb_get_lbound_arf(e, x.get(), arb_bits());
  arf_get_mpfr(out.backend().data(), e, upward ? MPFR_RNDU : MPFR_RNDD);
  arf_clear(e);
  return out;
}

// Arb's functions take the precision last: one form for all of them.
Arb apply(void (*f)(arb_t, const arb_t, slong), const Arb& x) {
  Arb y;
  f(y.get(), x.get(), arb_bits());
  return y;
}
}  // namespace

Mpfr lower(const Arb& x) {
  return end_of(x, false);
}
Mpfr upper(const Arb& x) {
  return end_of(x, true);
}
Mpfi to_mpfi(const Arb& x) {
  return hull(lower(x), upper(x));
}

Arb intersect(const Arb& a, const Arb& b) {
  Arb c;
  if (!arb_intersection(c.get(), a.get(), b.get(), arb_bits()))
    throw Error("two enclosures of the same value do not meet (one of them was not an enclosure)");
  return c;
}

Arb square(const Arb& x) {
  Arb y;
  arb_sqr(y.get(), x.get(), arb_bits());
  arb_nonnegative_part(y.get(), y.get());
  return y;
}

Arb Scalar<Arb>::from(const Rational& q) {
  fmpq_t f;
  fmpq_init(f);
  fmpq_set_mpq(f, q.backend().data());
  Arb y;
  arb_set_fmpq(y.get(), f, arb_bits());
  fmpq_clear(f);
  return y;
}

Rational Scalar<Arb>::to_rational(const Arb& x) {
  if (!arf_is_finite(arb_midref(x.get()))) throw Error("an Arb ball's midpoint is not finite");
  fmpq_t f;
  fmpq_init(f);
  arf_get_fmpq(f, arb_midref(x.get()));
  Rational q;
  fmpq_get_mpq(q.backend().data(), f);
  fmpq_clear(f);
  return q;
}

double Scalar<Arb>::to_double(const Arb& x) {
  return arf_get_d(arb_midref(x.get()), ARF_RND_NEAR);
}

std::string Scalar<Arb>::to_string(const Arb& x) {
  return Scalar<Mpfi>::to_string(to_mpfi(x));
}

Arb Scalar<Arb>::exp(const Arb& x) {
  return apply(arb_exp, x);
}
Arb Scalar<Arb>::log(const Arb& x) {
  return apply(arb_log, x);
}
Arb Scalar<Arb>::sqrt(const Arb& x) {
  return apply(arb_sqrt, x);
}
Arb Scalar<Arb>::cos(const Arb& x) {
  return apply(arb_cos, x);
}
Arb Scalar<Arb>::sin(const Arb& x) {
  return apply(arb_sin, x);
}

Arb Scalar<Arb>::hull(const Mpfr& lo, const Mpfr& hi) {
  Arb y;
  if (mpfr_nan_p(lo.backend().data()) || mpfr_nan_p(hi.backend().data()) || !(lo <= hi)) {
    arb_indeterminate(y.get());  // no information: refused as a non-finite enclosure downstream
    return y;
  }
  if (!mpfr_number_p(lo.backend().data()) || !mpfr_number_p(hi.backend().data())) {
    arb_zero_pm_inf(y.get());
    return y;
  }
  arb_set_interval_mpfr(y.get(), lo.backend().data(), hi.backend().data(), arb_bits());
  return y;
}

Arb gelu(const Arb& x) {
  const Mpfi y = gelu(to_mpfi(x));
  return Scalar<Arb>::hull(lower(y), upper(y));
}
Arb gelu_tanh(const Arb& x) {
  const Mpfi y = gelu_tanh(to_mpfi(x));
  return Scalar<Arb>::hull(lower(y), upper(y));
}

Mat<Arb> arb_product(const Mat<Arb>& A, const Mat<Arb>& B) {
  if (A.cols() != B.rows()) throw Error("arb_product: the shapes do not match (an internal error)");
  const slong m = A.rows(), k = A.cols(), n = B.cols(), prec = arb_bits();
  Mat<Arb> C(m, n);
  if (m == 0 || n == 0) return C;
  // Arb's matrices are row-major arrays of balls: B copied in once, A a block of rows at a time
  // (a copy of a readout's 50,257 rows would double its memory), the product's balls swapped out.
  arb_mat_t b;
  arb_mat_init(b, k, n);
  for (slong j = 0; j < n; ++j)
    for (slong i = 0; i < k; ++i)
      arb_set(arb_mat_entry(b, i, j), B(i, j).get());
  // Blocks among the threads (Arb's own threading is its classical product, slower than its block
  // product on one thread); within a block Arb chooses its algorithm.
  const slong rows = 512, blocks = (m + rows - 1) / rows;
  const int threads =
      omp_in_parallel() ? 1 : static_cast<int>(std::min<slong>(omp_get_max_threads(), blocks));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (slong t = 0; t < blocks; ++t) {
    const slong r0 = t * rows, r = std::min(rows, m - r0);
    arb_mat_t a, c;
    arb_mat_init(a, r, k);
    arb_mat_init(c, r, n);
    for (slong j = 0; j < k; ++j)
      for (slong i = 0; i < r; ++i)
        arb_set(arb_mat_entry(a, i, j), A(r0 + i, j).get());
    arb_mat_mul(c, a, b, prec);
    for (slong j = 0; j < n; ++j)
      for (slong i = 0; i < r; ++i)
        arb_swap(C(r0 + i, j).get(), arb_mat_entry(c, i, j));
    arb_mat_clear(a);
    arb_mat_clear(c);
  }
  arb_mat_clear(b);
  return C;
}

}  // namespace uatlab
