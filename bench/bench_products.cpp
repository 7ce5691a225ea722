// The certified engine's products (src/model/interval_product.hpp) against the double product of the
// same shape: a weight matrix (1024×256, doubles, radius 0) times activations (256×64 balls), as in
// the benchmark model's feed-forward layers; Arb's and MPFI's products at 128 and 384 bits (the
// tier past binary128 and the reference it replaced there). Counter: ns per multiply-add. One
// thread (OMP_NUM_THREADS=1) for the figures in docs/benchmarks.md, "Certified engine".
#include <benchmark/benchmark.h>

#include "../src/model/interval_product.hpp"
#include "uatlab/model/init.hpp"

using namespace uatlab;

namespace {

constexpr Eigen::Index kRows = 1024, kInner = 256, kCols = 64;

Mat<double> random_matrix(Eigen::Index r, Eigen::Index c, std::uint64_t seed) {
  Rng rng(seed);
  Mat<double> m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i)
    m(i) = rng.uniform() - 0.5;
  return m;
}

template <class M>
void BM_BallProduct(benchmark::State& state) {
  using B = Ball<M>;
  const Mat<B> A = random_matrix(kRows, kInner, 1).unaryExpr([](double x) { return B(x); });
  // Activations: midpoints with the full precision of M (a third of a double), radii of rounding.
  const Mat<B> X = random_matrix(kInner, kCols, 2).unaryExpr([](double x) {
    return B(static_cast<M>(x) / static_cast<M>(3), 1e-30);
  });
  for (auto _ : state)
    benchmark::DoNotOptimize(product<B>(A, X));
  state.counters["ns_per_madd"] =
      benchmark::Counter(static_cast<double>(kRows * kInner * kCols) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_DoubleProduct(benchmark::State& state) {
  const Mat<double> A = random_matrix(kRows, kInner, 1), X = random_matrix(kInner, kCols, 2);
  for (auto _ : state)
    benchmark::DoNotOptimize(Mat<double>(A * X));
  state.counters["ns_per_madd"] =
      benchmark::Counter(static_cast<double>(kRows * kInner * kCols) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// Arb (its balls) or MPFI at state.range(0) bits: the same weights, activations a third of a double.
template <class S>
void BM_MultiPrecisionProduct(benchmark::State& state) {
  const MpfrPrecision bits(static_cast<unsigned>(state.range(0)));
  const Mat<S> A = random_matrix(kRows, kInner, 1).unaryExpr([](double x) { return scalar_cast<S>(x); });
  const Mat<S> X =
      random_matrix(kInner, kCols, 2).unaryExpr([](double x) { return S(scalar_cast<S>(x) / S(3)); });
  for (auto _ : state)
    benchmark::DoNotOptimize(product<S>(A, X));
  state.counters["ns_per_madd"] =
      benchmark::Counter(static_cast<double>(kRows * kInner * kCols) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK_TEMPLATE(BM_MultiPrecisionProduct, Arb)->Arg(128)->Arg(384)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_MultiPrecisionProduct, Mpfi)->Arg(128)->Arg(384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DoubleProduct)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_BallProduct, double)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_BallProduct, Quad)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
