// Products of binary128 matrices from exact products of double ones: the midpoints of ball:113
// (model/ball.hpp) at the cost of a few double products, where binary128's own (software) product
// costs about 350 (Ozaki, Ogita, Oishi & Rump, "Error-free transformations of matrix
// multiplication by using fast routines of matrix multiplication", Numer. Algorithms 59, 2012;
// docs/certified.md).
//
// Each row of A and column of B is cut into slices of β bits below its largest entry:
//   A(i, :) = Σ_s 2^(a_i − β(s+1))·QA_s(i, :) + RA(i, :),   |QA_s| < 2^β integers, |A(i, :)| < 2^a_i,
// and alike for B. A product QA_s·QB_t of integer matrices sums k terms below 2^2β, and the slices of
// one group s + t = g add up to less than k·S·2^2β ≤ 2^53: a double product in any order and their
// sum are exact. The S groups are summed in binary128 (the only rounding: γ of that sum), and what
// is left out (pairs with s + t ≥ S, the remainders) is below k·(S² + 2)·2^(a_i + b_j − βS) (tail).
#pragma once

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "uatlab/model/ball.hpp"

namespace uatlab {

// 2^e as an exact M, for any e a binary128 holds (factors within double's range).
template <class M>
M pow2(int e) {
  M x = 1;
  for (; e > 1000; e -= 1000)
    x *= static_cast<M>(0x1p1000);
  for (; e < -1000; e += 1000)
    x *= static_cast<M>(0x1p-1000);
  return x * static_cast<M>(std::ldexp(1.0, e));
}

// x = ±mant·2^exp exactly (mant < 2^113), read from binary128's bits (or a double's).
struct Significand {
  bool negative = false;
  int exp = 0;
  unsigned __int128 mant = 0;
};
inline Significand significand(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  const int biased = static_cast<int>((u >> 52) & 0x7ff);
  Significand s;
  s.negative = (u >> 63) != 0;
  s.mant = u & ((std::uint64_t{1} << 52) - 1);
  if (biased) s.mant |= std::uint64_t{1} << 52;
  s.exp = (biased ? biased : 1) - 1023 - 52;
  return s;
}
inline Significand significand(Quad x) {
  static_assert(sizeof(Quad) == 16);
  unsigned __int128 u;
  std::memcpy(&u, &x, sizeof u);
  const int biased = static_cast<int>((u >> 112) & 0x7fff);
  Significand s;
  s.negative = (u >> 127) != 0;
  s.mant = u & ((static_cast<unsigned __int128>(1) << 112) - 1);
  if (biased) s.mant |= static_cast<unsigned __int128>(1) << 112;
  s.exp = (biased ? biased : 1) - 16383 - 112;
  return s;
}

// The slices of X's columns (rows of A are the columns of Aᵀ): e[j] with max |X(:, j)| < 2^e[j]
// (INT_MIN: a zero column), q[s] the integer slices, any[s] whether slice s has a non-zero entry.
// Slice s of x holds the bits of |x| from 2^(e − β(s+1)) up to below 2^(e − βs), with x's sign:
// the slices add up to x truncated at 2^(e − β·count), read off its significand.
struct Slices {
  std::vector<Mat<double>> q;
  std::vector<int> e;
  std::vector<char> any;
};

template <class M>
Slices slice_columns(const Mat<M>& X, int beta, int count) {
  using Word = unsigned __int128;
  Slices out;
  out.e.assign(static_cast<std::size_t>(X.cols()), INT_MIN);
  out.q.assign(static_cast<std::size_t>(count), Mat<double>::Zero(X.rows(), X.cols()));
  std::vector<char> any(static_cast<std::size_t>(count) * static_cast<std::size_t>(X.cols()), 0);
  const Word mask = (Word{1} << beta) - 1;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && X.size() > 4096)
  for (Eigen::Index j = 0; j < X.cols(); ++j) {
    int e = INT_MIN;  // the exponent above the column's largest entry
    for (Eigen::Index i = 0; i < X.rows(); ++i) {
      const Significand v = significand(X(i, j));
      if (v.mant == 0) continue;
      int bits = 0;
      while (bits < 128 && (v.mant >> bits) != 0)
        ++bits;
      e = std::max(e, v.exp + bits);  // |x| < 2^(exp + bits)
    }
    if (e == INT_MIN) continue;
    out.e[static_cast<std::size_t>(j)] = e;
    for (Eigen::Index i = 0; i < X.rows(); ++i) {
      const Significand v = significand(X(i, j));
      if (v.mant == 0) continue;
      for (int s = 0; s < count; ++s) {
        const int shift = v.exp - (e - beta * (s + 1));  // x's unit in the slice's units
        Word w = 0;
        if (shift >= 0)
          w = shift >= beta ? 0 : (v.mant & (mask >> shift)) << shift;
        else
          w = -shift >= 128 ? 0 : (v.mant >> -shift) & mask;
        if (w == 0) continue;
        const double q = static_cast<double>(static_cast<std::uint64_t>(w));
        out.q[static_cast<std::size_t>(s)](i, j) = v.negative ? -q : q;
        any[static_cast<std::size_t>(j) * static_cast<std::size_t>(count) + static_cast<std::size_t>(s)] = 1;
      }
    }
  }
  out.any.assign(static_cast<std::size_t>(count), 0);
  for (std::size_t j = 0; j < static_cast<std::size_t>(X.cols()); ++j)
    for (std::size_t s = 0; s < static_cast<std::size_t>(count); ++s)
      out.any[s] |= any[j * static_cast<std::size_t>(count) + s];
  return out;
}

// C = A·B rounded to binary128 with the bound |C − A·B| ≤ γ·|A|·|B| + tail (tail: rows × cols,
// empty where there is none); returns γ.
template <class M>
double sliced_product(const Mat<M>& A, const Mat<M>& B, Mat<M>& C, Mat<double>& tail) {
  const Eigen::Index k = A.cols();
  int c = 0;
  while ((Eigen::Index{1} << c) < std::max<Eigen::Index>(k, 1))
    ++c;
  int beta = (53 - c) / 2, count = 0, bits = 0;
  for (;; --beta) {  // the widest slices whose group sums stay below 2^53
    count = (124 + beta - 1) / beta;
    bits = 0;
    while ((1 << bits) < count)
      ++bits;
    if (c + bits + 2 * beta <= 53) break;
  }
  const Mat<M> At = A.transpose();
  const Slices a = slice_columns(At, beta, count), b = slice_columns(B, beta, count);
  std::vector<M> scale_a(a.e.size());
  std::vector<double> scale_a_double(a.e.size());
  int low_a = INT_MAX, high_a = INT_MIN;
  for (std::size_t i = 0; i < a.e.size(); ++i) {
    if (a.e[i] == INT_MIN) continue;
    scale_a[i] = pow2<M>(a.e[i]);
    low_a = std::min(low_a, a.e[i]), high_a = std::max(high_a, a.e[i]);
  }
  const bool a_in_double = low_a >= -900 && high_a <= 900;
  for (std::size_t i = 0; i < a.e.size(); ++i)
    scale_a_double[i] = a_in_double && a.e[i] != INT_MIN ? std::ldexp(1.0, a.e[i]) : 0.0;
  if (!a_in_double) low_a = INT_MIN / 2, high_a = INT_MAX / 2;  // never in double
  C = Mat<M>::Zero(A.rows(), B.cols());
  tail.resize(A.rows(), B.cols());
  Mat<double> group(A.rows(), B.cols());
  int sums = 0;
  for (int g = 0; g < count; ++g) {
    bool any = false;
    for (int s = 0; s <= g; ++s) {
      if (!a.any[static_cast<std::size_t>(s)] || !b.any[static_cast<std::size_t>(g - s)]) continue;
      if (!any)
        group.noalias() = a.q[static_cast<std::size_t>(s)].transpose() * b.q[static_cast<std::size_t>(g - s)];
      else
        group.noalias() +=
            a.q[static_cast<std::size_t>(s)].transpose() * b.q[static_cast<std::size_t>(g - s)];
      any = true;
    }
    if (!any) continue;
    ++sums;
    // group g's value is 2^(a_i + b_j − β(g + 2))·group(i, j): scaled in double where every such
    // power stays in its normal range (exact there), else in M.
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && A.rows() * B.cols() > 4096)
    for (Eigen::Index j = 0; j < B.cols(); ++j) {
      const int eb = b.e[static_cast<std::size_t>(j)];
      if (eb == INT_MIN) continue;
      const int shift = eb - beta * (g + 2);
      const M bj = pow2<M>(shift);
      const bool in_double =
          shift > -1000 && shift < 1000 && low_a + shift > -1000 && high_a + shift + 53 < 1000;
      const double bj_double = in_double ? std::ldexp(1.0, shift) : 0.0;
      for (Eigen::Index i = 0; i < A.rows(); ++i) {
        const double v = group(i, j);
        if (v == 0) continue;
        if (in_double)
          C(i, j) += static_cast<M>(v * scale_a_double[static_cast<std::size_t>(i)] * bj_double);
        else
          C(i, j) += static_cast<M>(v) * scale_a[static_cast<std::size_t>(i)] * bj;
      }
    }
  }
  const double left = static_cast<double>(k) * (count * count + 2);
  for (Eigen::Index j = 0; j < B.cols(); ++j)
    for (Eigen::Index i = 0; i < A.rows(); ++i) {
      const int ea = a.e[static_cast<std::size_t>(i)], eb = b.e[static_cast<std::size_t>(j)];
      tail(i, j) = ea == INT_MIN || eb == INT_MIN
                       ? 0.0
                       : ball::sum_up(std::ldexp(left, ea + eb - beta * count), MidTraits<double>::eta);
    }
  return ball::up(2 * (sums + 1) * MidTraits<M>::u);
}

}  // namespace uatlab
