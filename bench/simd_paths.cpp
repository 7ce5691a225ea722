// One kernel, three ways of reaching the CPU's SIMD units (issue 77's measurement; run by
// bench/run_simd_paths.py, which compiles this file three times):
//   eigen, -march=native:    thin_product.hpp's blocked Y = W·X as uatlab builds it today;
//   eigen, portable:         the same source without -march=native (SSE2 on x86-64);
//   highway (-DSIMD_HIGHWAY): the same loop in Highway's operations, compiled for every target Highway
//                             knows and dispatched at run time (HWY_DYNAMIC_DISPATCH), portable flags.
// Each takes rows in blocks of two vector registers and as many tokens as keep the sums in the
// registers (src/simd/kernels.cpp's kWhole: eight with 32 registers, six with 16).
// usage: simd_paths R K T: prints the target and the best seconds per product of 9 timings.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef SIMD_HIGHWAY
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd_paths.cpp"
#include <hwy/foreach_target.h>  // includes this file again for every target
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace simd_paths::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM_A64
constexpr int kWidth = 8;  // 32 vector registers
#else
constexpr int kWidth = 6;
#endif

void product(const float* HWY_RESTRICT w, int64_t r, int64_t k, const float* HWY_RESTRICT x, int64_t T,
             float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> d;
  const int64_t L = hn::Lanes(d);
  for (int64_t j = 0; j + kWidth <= T; j += kWidth)
    for (int64_t r0 = 0; r0 + 2 * L <= r; r0 += 2 * L) {
      hn::Vec<decltype(d)> lo[kWidth], hi[kWidth];
      for (int t = 0; t < kWidth; ++t)
        lo[t] = hn::Zero(d), hi[t] = hn::Zero(d);
      for (int64_t c = 0; c < k; ++c) {
        const auto w0 = hn::LoadU(d, w + c * r + r0), w1 = hn::LoadU(d, w + c * r + r0 + L);
        for (int t = 0; t < kWidth; ++t) {
          const auto xt = hn::Set(d, x[(j + t) * k + c]);
          lo[t] = hn::MulAdd(w0, xt, lo[t]);
          hi[t] = hn::MulAdd(w1, xt, hi[t]);
        }
      }
      for (int t = 0; t < kWidth; ++t) {
        hn::StoreU(lo[t], d, y + (j + t) * r + r0);
        hn::StoreU(hi[t], d, y + (j + t) * r + r0 + L);
      }
    }
}
}  // namespace simd_paths::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace simd_paths {
HWY_EXPORT(product);
void product(const float* w, int64_t r, int64_t k, const float* x, int64_t T, float* y) {
  HWY_DYNAMIC_DISPATCH(product)(w, r, k, x, T, y);
}
std::string target() {
  const int64_t t = hwy::SupportedTargets() & HWY_TARGETS;
  return std::string("highway ") + hwy::TargetName(t & -t);
}
}  // namespace simd_paths
#endif

#else  // Eigen, compiled for whatever the flags allow
#include <Eigen/Dense>

namespace simd_paths {
#if defined(__AVX512F__) || defined(__aarch64__)
constexpr int kWidth = 8;
#else
constexpr int kWidth = 6;
#endif
constexpr int kRows = 2 * Eigen::internal::packet_traits<float>::size;

void product(const float* w, int64_t r, int64_t k, const float* x, int64_t T, float* y) {
  using Block = Eigen::Matrix<float, kRows, kWidth>;
  for (int64_t j = 0; j + kWidth <= T; j += kWidth)
    for (int64_t r0 = 0; r0 + kRows <= r; r0 += kRows) {
      Block acc = Block::Zero();
      for (int64_t c = 0; c < k; ++c) {
        const Eigen::Map<const Eigen::Matrix<float, kRows, 1> > wc(w + c * r + r0);
        for (int t = 0; t < kWidth; ++t)
          acc.col(t) += wc * x[(j + t) * k + c];
      }
      Eigen::Map<Block, 0, Eigen::OuterStride<> >(y + j * r + r0, Eigen::OuterStride<>(r)) = acc;
    }
}
std::string target() {  // Eigen's list omits AVX2 and FMA
#if defined(__AVX2__) && defined(__FMA__)
  return "eigen AVX2 + FMA";
#else
  return std::string("eigen ") + Eigen::SimdInstructionSetsInUse();
#endif
}
}  // namespace simd_paths
#endif

#if !defined(SIMD_HIGHWAY) || HWY_ONCE
int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: simd_paths R K T\n");
    return 2;
  }
  const int64_t r = std::atol(argv[1]), k = std::atol(argv[2]), T = std::atol(argv[3]);
  std::vector<float> w(r * k), x(k * T), y(r * T);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = float(i % 7) * 0.01f;
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i % 5) * 0.1f;
  simd_paths::product(w.data(), r, k, x.data(), T, y.data());
  double best = 1e30;
  for (int rep = 0; rep < 9; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i)
      simd_paths::product(w.data(), r, k, x.data(), T, y.data());
    best =
        std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 20);
  }
  std::printf("%s\n%.9g\n", simd_paths::target().c_str(), best);
}
#endif
