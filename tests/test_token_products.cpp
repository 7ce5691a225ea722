// The kernels of the training step against Eigen's products, part 2: the fixed-size and blocked
// token products (src/train/thin_product.hpp, an internal header). Part 1: test_head_products.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../src/simd/kernels.hpp"
#include "../src/train/thin_product.hpp"

using namespace uatlab;

// The fixed-size kernels for small weights (src/train/thin_product.hpp) give Eigen's products on
// every shape of their table and beside it (where they hand over to Eigen), set and add, for a
// weight and a transposed one, with a bias or none.
template <class S>
void check_thin_products(double tol) {
  using train_detail::add_outer;
  using train_detail::add_weights_times;
  using train_detail::weights_times;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  const auto random = [&](Eigen::Index r, Eigen::Index c) {
    return Mat<S>(Mat<S>::NullaryExpr(r, c, [&] { return S(u(rng)); }));
  };
  // 45 tokens: five groups of eight and five alone (the blocked kernels with 16 vector registers:
  // seven groups of six, a pair and one alone); the paired kernels (float weights of half a
  // register's rows: 8 with AVX-512, 4 with AVX2, 2 with 128-bit vectors) two groups of sixteen, six
  // pairs and one alone.
  const Eigen::Index T = 45;
  int thin = 0, fixed = 0, blocked = 0;
  for (Eigen::Index r : {1, 2, 3, 4, 8, 16, 29, 32, 33, 64, 160, 640})
    for (Eigen::Index k : {1, 2, 3, 4, 8, 16, 17, 32, 128}) {
      thin += train_detail::with_thin_shape<S>(r, k, [](auto, auto) {});
      fixed += train_detail::with_product_shape<S>(r, k, [](auto, auto, auto) {});
      blocked += train_detail::blocked_shape<S>(r, k);
      const Mat<S> w = random(r, k), x = random(k, T), dy = random(r, T), y0 = random(r, T), b = random(r, 1);
      Mat<S> y, ya = y0, g = random(r, k), yt, yb, gb = b;
      const Mat<S> g0 = g;
      weights_times(y, w, x);
      add_weights_times(ya, w, x);
      weights_times(yb, w, x, &b);
      add_outer(g, dy, x, &gb);  // and the bias gradient
      Mat<S> g_alone = g0;       // without it
      add_outer(g_alone, dy, x);
      weights_times(yt, w.transpose(), dy);
      Mat<S> yr, yg;  // the feed-forward's ReLU and its slope, in the blocked kernel where it takes the shape
      train_detail::relu_weights_times(yr, w, x, &b);
      const Mat<S> gate = random(k, T);  // about half of it positive
      train_detail::relu_gated_times(yg, w.transpose(), dy, gate);
      EXPECT_LE((y - w * x).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_LE((ya - y0 - w * x).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_LE(((yb - w * x).colwise() - b.col(0)).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_LE((g - g0 - dy * x.transpose()).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_LE((gb - b - dy.rowwise().sum()).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_EQ(g_alone, g) << r << "x" << k;
      EXPECT_LE((yt - w.transpose() * dy).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      // The same sums, then the ReLU or the gate: a kernel's epilogue may round its sums in another
      // order than the same kernel without it (the compiler contracts multiply-adds per function),
      // so to the tolerance; never negative after the ReLU, exactly 0 wherever the gate is not positive.
      EXPECT_LE((yr - yb.cwiseMax(S(0))).cwiseAbs().maxCoeff(), S(tol)) << r << "x" << k;
      EXPECT_TRUE((yr.array() >= S(0)).all()) << r << "x" << k;
      EXPECT_LE((yg - Mat<S>((gate.array() > S(0)).select(yt, S(0)))).cwiseAbs().maxCoeff(), S(tol))
          << r << "x" << k;
      EXPECT_TRUE(((gate.array() > S(0)) || (yg.array() == S(0))).all()) << r << "x" << k;
    }
  EXPECT_EQ(thin, 7 * 6);       // r in {1, 2, 3, 4, 8, 16, 32}, k in {1, 2, 3, 4, 8, 16}
  EXPECT_EQ(fixed, 7 * 6 + 3);  // and W·X for r in {4, 8, 16}, k = 32, 8 tokens at a time (T = 45)
  // The blocked kernels (rows from one SIMD register's on, the rows past the last whole or half
  // block in one more half block that overlaps the one before: r = 29 and 33; T = 45 leaves five
  // tokens after five blocks of eight, k = 17 one column after two; with 16 registers, three tokens
  // after seven blocks of six, and five columns after two): at least r = 29, 32, 33, 64
  // and 160 with every k when a register holds 4 to 16 numbers; 640 rows for none. Added to
  // (add_weights_times), the overlapping half block keeps the rows the one before it set.
  EXPECT_GE(blocked, 5 * 9);
  EXPECT_TRUE(train_detail::blocked_shape<S>(160, 32));
  EXPECT_FALSE(train_detail::blocked_shape<S>(640, 32));
  // G += dY·Xᵀ over more tokens than one chunk (outer_chunk: 455 tokens of 160 + 128 floats, 227
  // of doubles), the last chunk partial: every chunk is summed, the bias gradient with them.
  const Eigen::Index r = 160, k = 128, T_long = 600;
  ASSERT_TRUE(train_detail::blocked_shape<S>(r, k));
  ASSERT_LT(train_detail::outer_chunk((r + k) * Eigen::Index{sizeof(S)}), T_long);
  const Mat<S> dy = random(r, T_long), x = random(k, T_long), b = random(r, 1);
  Mat<S> g = random(r, k), gb = b;
  const Mat<S> g0 = g;
  add_outer(g, dy, x, &gb);
  EXPECT_LE((g - g0 - dy * x.transpose()).cwiseAbs().maxCoeff(), S(10 * tol));
  EXPECT_LE((gb - b - dy.rowwise().sum()).cwiseAbs().maxCoeff(), S(10 * tol));
}

// The same on every instruction set this CPU runs (the blocked kernels' copies, chosen in turn:
// simd::on_path), the emulated one among them. The heads' products: test_head_products.cpp.
TEST(Kernels, ThinProductsEqualEigensProductsOnEveryInstructionSet) {
  const std::vector<std::string> paths = simd::paths_here();
  ASSERT_GE(paths.size(), 2u) << "the best path and the emulated one";
  for (const std::string& name : paths)
    simd::on_path(name, [&] {
      EXPECT_EQ(simd::path().rfind(name + " (", 0), 0u) << simd::path();
      check_thin_products<float>(1e-4);
      check_thin_products<double>(1e-12);
    });
  EXPECT_THROW(simd::on_path("no such path", [] {}), Error);
}

// The grouped kernels' sums (simd::product of a float weight of paired_rows rows, G = 2, or of
// quad_rows rows, G = 4) in the order docs/training.md states, to the bit: the lanes of a row sum the
// products of the columns c with c mod G = e in order, each multiply-add rounded once where the
// instruction set fuses it (else twice), starting from the first product; a row's sum is then
// (e = 0) + (e = 1) for pairs, ((e = 0) + (e = 1)) + ((e = 2) + (e = 3)) for fours, then + bias,
// then + y when added to. 19 tokens: a group of sixteen, then pairs and one alone, or three tokens
// through the quad kernel's buffer. Returns the numbers checked.
int check_grouped_sums(int G, simd::Index (*rows_of)(simd::Index)) {
  const bool fused = simd::fused_multiply_add();
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  int checked = 0;
  for (Eigen::Index k : {4, 8, 32}) {
    const Eigen::Index r = rows_of(k), T = 19;
    if (r == 0) continue;
    const Mat<float> w = Mat<float>::NullaryExpr(r, k, [&] { return u(rng); }),
                     x = Mat<float>::NullaryExpr(k, T, [&] { return u(rng); }),
                     b = Mat<float>::NullaryExpr(r, 1, [&] { return u(rng); }),
                     y0 = Mat<float>::NullaryExpr(r, T, [&] { return u(rng); });
    Mat<float> y = y0;
    simd::Product<float> p{{w.data(), r}, r, k, {x.data(), k}, T, y.data(), r};
    p.bias = b.data(), p.add = true;
    simd::product(p);
    for (Eigen::Index t = 0; t < T; ++t)
      for (Eigen::Index i = 0; i < r; ++i) {
        // Each product rounded on its own (volatile: the compiler may not fuse it with the sum).
        const auto product = [&](Eigen::Index c) {
          volatile float q = w(i, c) * x(c, t);
          return float(q);
        };
        float part[4];
        for (int e = 0; e < G; ++e) {
          part[e] = product(e);
          for (Eigen::Index c = G + e; c < k; c += G)
            part[e] = fused ? std::fma(w(i, c), x(c, t), part[e]) : part[e] + product(c);
        }
        const float sum = G == 2 ? part[0] + part[1] : (part[0] + part[1]) + (part[2] + part[3]);
        EXPECT_EQ(y(i, t), y0(i, t) + (sum + b(i)))
            << simd::path() << ", " << r << "x" << k << ", token " << t;
        ++checked;
      }
  }
  return checked;
}

TEST(Kernels, PairedSumsInTheirStatedOrderOnEveryInstructionSet) {
  for (const std::string& name : simd::paths_here())
    simd::on_path(name, [&] {
      EXPECT_EQ(simd::paired_rows(8), simd::half_block_rows<float>() / 2) << name;
      EXPECT_EQ(simd::quad_rows(8), simd::half_block_rows<float>() / 4) << name;
      EXPECT_EQ(simd::fused_multiply_add(), name == "AVX2" || name.rfind("AVX3", 0) == 0 || name == "NEON")
          << name;
      EXPECT_EQ(simd::paired_rows(3), 0);
      EXPECT_EQ(simd::quad_rows(2), 0);
      EXPECT_EQ(check_grouped_sums(2, simd::paired_rows) > 0, simd::paired_rows(8) > 0) << name;
      EXPECT_EQ(check_grouped_sums(4, simd::quad_rows) > 0, simd::quad_rows(8) > 0) << name;
    });
}

TEST(Kernels, ThinProductsEqualEigensProducts) {
  check_thin_products<float>(1e-4);
  check_thin_products<double>(1e-12);
  EXPECT_FALSE(train_detail::with_thin_shape<Rational>(4, 4, [](auto, auto) {}));
  EXPECT_FALSE(train_detail::with_product_shape<Rational>(8, 32, [](auto, auto, auto) {}));
  EXPECT_FALSE(train_detail::blocked_shape<Rational>(32, 32));
}

// The attention's softmax (simd::softmax_columns, every column of a matrix) on every instruction set
// this CPU runs, against exp in long double: lengths with and without a partial last register, −∞
// entries (masked keys) exactly 0, a column holding a NaN all NaN, huge and tiny scores. 37 columns:
// where n is a multiple of a register's numbers, groups of as many columns as it holds (two of 16
// floats with AVX-512, four of 8 with AVX2) and the rest one at a time, specials in both.
template <class S>
void check_softmax(double tol) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-30, 30);
  for (Eigen::Index n : {1, 2, 3, 7, 8, 9, 16, 17, 32, 33}) {
    const Eigen::Index columns = 37;
    Mat<S> a = Mat<S>::NullaryExpr(n, columns, [&] { return S(u(rng)); });
    if (n > 1) a(0, 1) = a(n - 1, 34) = -std::numeric_limits<S>::infinity();  // masked keys
    a(n - 1, 2) = S(1e30);                                         // a huge score beside the others
    a(n / 2, 3) = a(0, 35) = std::numeric_limits<S>::quiet_NaN();  // NaNs
    Mat<S> y = a;
    simd::softmax_columns(simd::Softmax<S>{y.data(), n, columns});
    for (Eigen::Index k = 0; k < columns; ++k) {
      if (k == 3 || k == 35) continue;
      long double high = -INFINITY, sum = 0;
      for (Eigen::Index i = 0; i < n; ++i)
        high = std::max(high, (long double)a(i, k));
      for (Eigen::Index i = 0; i < n; ++i)
        sum += std::exp((long double)a(i, k) - high);
      for (Eigen::Index i = 0; i < n; ++i) {
        const long double want = std::exp((long double)a(i, k) - high) / sum;
        EXPECT_LE(std::abs(y(i, k) - want), tol * want + std::numeric_limits<S>::min())
            << "n " << n << ", column " << k << ", row " << i;
      }
    }
    if (n > 1) {
      EXPECT_EQ(y(0, 1), S(0)) << n;
      EXPECT_EQ(y(n - 1, 34), S(0)) << n;
    }
    EXPECT_TRUE(y.col(3).array().isNaN().all()) << n;
    EXPECT_TRUE(y.col(35).array().isNaN().all()) << n;
  }
}

// The softmax's backward (simd::softmax_backward_columns) on every instruction set, against the
// formula in long double: lengths with and without a partial last register, 37 columns (groups of a
// register's count where the length is a multiple of it, the rest one at a time), zero weights (a
// masked key) giving zero.
template <class S>
void check_softmax_backward(double tol) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<double> u(-1, 1);
  for (Eigen::Index n : {1, 3, 8, 9, 16, 17, 32}) {
    const Eigen::Index columns = 37;
    Mat<S> a = Mat<S>::NullaryExpr(n, columns, [&] { return S(u(rng) * u(rng) + 1); });
    a.row(0).setZero();  // masked keys
    const Mat<S> ds0 = Mat<S>::NullaryExpr(n, columns, [&] { return S(u(rng)); });
    Mat<S> ds = ds0;
    simd::softmax_backward_columns(simd::SoftmaxBackward<S>{a.data(), ds.data(), n, columns});
    for (Eigen::Index k = 0; k < columns; ++k) {
      long double dot = 0;
      for (Eigen::Index i = 0; i < n; ++i)
        dot += (long double)a(i, k) * ds0(i, k);
      for (Eigen::Index i = 0; i < n; ++i) {
        const long double want = a(i, k) * (ds0(i, k) - dot);
        EXPECT_LE(std::abs(ds(i, k) - want), tol * (1 + std::abs(dot)) * (1 + n))
            << n << ", " << k << ", " << i;
      }
      EXPECT_EQ(ds(0, k), S(0));
    }
  }
}

TEST(Kernels, SoftmaxBackwardOnEveryInstructionSet) {
  for (const std::string& name : simd::paths_here())
    simd::on_path(name, [&] {
      SCOPED_TRACE(name);
      check_softmax_backward<float>(2e-7);
      check_softmax_backward<double>(4e-16);
    });
}

TEST(Kernels, SoftmaxColumnsOnEveryInstructionSet) {
  for (const std::string& name : simd::paths_here())
    simd::on_path(name, [&] {
      SCOPED_TRACE(name);
      check_softmax<float>(4e-6);
      check_softmax<double>(1e-14);
    });
}
