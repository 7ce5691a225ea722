// One training step (forward + backward + AdamW, float32) on the configurations, plus a
// large SGEMM as the machine's attainable peak. bench/run_train.py runs this beside PyTorch.
// Beside them, the token products of src/train/thin_product.hpp (products/...) and the products of
// one attention head (heads/..., head_product.hpp) against Eigen's on one core, and each product of
// a head of 8 rows at n = 16 and 32 alone (heads/8xN/PRODUCT: the fixed-size kernels), for the
// figures quoted there and in docs/benchmarks.md:
//   bench_train [google-benchmark flags]
//   bench_train --benchmark_filter=products --benchmark_repetitions=15
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
//       --benchmark_min_time=0.05
#include <benchmark/benchmark.h>
#include <omp.h>

#include "../src/train/head_product.hpp"  // and through it thin_product.hpp
#include "uatlab/model/init.hpp"
#include "uatlab/train/trainer.hpp"

using namespace uatlab;

namespace {

struct Config {
  const char* name;
  int B, n, d, H, m;
};
constexpr Config kConfigs[] = {
    {"tiny", 64, 16, 8, 1, 32}, {"small", 64, 32, 32, 4, 128}, {"medium", 32, 64, 128, 4, 512}};

// Multiply-adds per step: forward + backward ≈ 3 × forward.
double flops_per_step(const Config& c) {
  const double T = static_cast<double>(c.B) * c.n;
  const double fwd = T * (2.0 * 4 * c.d * c.d + 2.0 * 2 * c.n * c.d + 2.0 * 2 * c.d * c.m);
  return 3 * fwd;
}

void train_step(benchmark::State& state, Config c) {
  nlohmann::json aj = {{"d", c.d},
                       {"layers",
                        {{{"type", "attention"},
                          {"heads", c.H},
                          {"head_size", c.d / c.H},
                          {"bias", true},
                          {"sqrt_scaling", true}},
                         {{"type", "feedforward"}, {"width", c.m}}}}};
  Network<double> nd(Architecture::from_json(aj));
  init_random(nd, 1);
  Network<float> net = network_cast<float>(nd);
  Rng rng(2);
  Batch<float> b;
  b.x = Mat<float>(c.d, c.B * c.n).unaryExpr([&](float) { return static_cast<float>(rng.uniform(-1, 1)); });
  b.target =
      Mat<float>(c.d, c.B * c.n).unaryExpr([&](float) { return static_cast<float>(rng.uniform(-1, 1)); });
  for (int i = 0; i <= c.B; ++i)
    b.start.push_back(static_cast<Eigen::Index>(i) * c.n);
  b.mask.assign(static_cast<std::size_t>(c.B) * c.n, 1);
  TrainConfig cfg;
  cfg.lr = 1e-4;
  AdamW<float> opt(net);
  Network<float> grad = zero_like(net);
  Workspace<float> ws;
  double seconds_zero = 0, seconds_update = 0;
  for (auto _ : state) {
    const double t0 = omp_get_wtime();
    grad.for_each_tensor([](Mat<float>& m) { m.setZero(); });
    const double t1 = omp_get_wtime();
    double loss = batch_gradient(net, b, Loss::mse, grad, ws);
    const double t2 = omp_get_wtime();
    opt.update(net, grad, cfg, cfg.lr);
    seconds_zero += t1 - t0, seconds_update += omp_get_wtime() - t2;
    benchmark::DoNotOptimize(loss);
  }
  const double steps = static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = benchmark::Counter(flops_per_step(c) * steps / 1e9, benchmark::Counter::kIsRate);
  // Where a step's time goes, in seconds per step.
  state.counters["s_forward"] = ws.seconds_forward / steps;
  state.counters["s_backward"] = ws.seconds_backward / steps;
  state.counters["s_reduce"] = ws.seconds_reduce / steps;
  state.counters["s_optimizer"] = (seconds_zero + seconds_update) / steps;
}

void sgemm_peak(benchmark::State& state) {
  const int n = 1024;
  Mat<float> a = Mat<float>::Random(n, n), b = Mat<float>::Random(n, n), c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOPs"] = benchmark::Counter(
      2.0 * n * n * n * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// Y = W·X (kind 0) or G += dY·Xᵀ (kind 1) for an r×k weight over 1,024 tokens, float, one core:
// Eigen's product, uatlab's (train_detail::weights_times, add_outer: whichever kernel they pick),
// or the blocked kernels called directly.
enum class Side { eigen, uatlab, blocked };
void products(benchmark::State& state, int kind, Side side, Eigen::Index r, Eigen::Index k) {
  const Eigen::Index T = 1024;
  const Mat<float> w = Mat<float>::Random(r, k), x = Mat<float>::Random(k, T), dy = Mat<float>::Random(r, T);
  Mat<float> y(r, T), g = Mat<float>::Zero(r, k);
  Eigen::setNbThreads(1);  // Eigen's product on one core, as the kernels
  for (auto _ : state) {
    if (side == Side::eigen && kind == 0)
      y.noalias() = w * x;
    else if (side == Side::eigen)
      g.noalias() += dy * x.transpose();
    else if (side == Side::uatlab && kind == 0)
      train_detail::weights_times(y, w, x);
    else if (side == Side::uatlab)
      train_detail::add_outer(g, dy, x);
    else if (kind == 0)
      train_detail::blocked_product(y, w, x, static_cast<const float*>(nullptr), false);
    else
      train_detail::blocked_outer(g, dy, x);
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(g.data());
  }
  Eigen::setNbThreads(0);  // back to OpenMP's count
  state.counters["GFLOPs"] = benchmark::Counter(
      2.0 * static_cast<double>(r * k * T * state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// The operands of one head of hs rows over B sequences of n tokens: K, Q, V and dO (hs × B·n), A
// and dS for each sequence (n × n), random; the outputs O, dV, dQ, dK (zero), scores and Vᵀ·dO.
struct HeadOperands {
  Mat<float> K, Q, V, dO;
  std::vector<Mat<float>> A, dS;
  Mat<float> O, dV, dQ, dK, scores, vdo;
};
HeadOperands head_operands(Eigen::Index hs, Eigen::Index n, int B) {
  const auto random = [&] { return Mat<float>(Mat<float>::Random(hs, B * n)); };
  const auto zero = [&] { return Mat<float>(Mat<float>::Zero(hs, B * n)); };
  HeadOperands h{random(), random(), random(), random(), {}, {}, zero(), zero(), zero(), zero(), {}, {}};
  for (int b = 0; b < B; ++b)
    h.A.push_back(Mat<float>::Random(n, n)), h.dS.push_back(Mat<float>::Random(n, n));
  return h;
}

// The six products of one attention head and one sequence (scores Kᵀ·Q, V·A; dO·Aᵀ, Vᵀ·dO, K·dS,
// Q·dSᵀ), as attention_forward/backward make them on with_head_view's blocks (head_product.hpp), or
// Eigen's products of the same blocks: a head of hs rows (16 or 32: no fixed-size kernel) over 32
// sequences of n tokens, float, one core.
void head_products(benchmark::State& state, bool eigen, Eigen::Index hs, Eigen::Index n) {
  const int B = 32;
  HeadOperands h = head_operands(hs, n, B);
  auto& [K, Q, V, dO, A, dS, O, dV, dQ, dK, scores, vdo] = h;
  const float scale = 0.25f;
  Eigen::setNbThreads(1);
  for (auto _ : state) {
    for (int b = 0; b < B; ++b) {
      const Eigen::Index c0 = b * n;
      if (eigen) {
        scores.noalias() = K.middleCols(c0, n).transpose() * Q.middleCols(c0, n) * scale;
        O.middleCols(c0, n).noalias() = V.middleCols(c0, n) * A[b];
        dV.middleCols(c0, n).noalias() += dO.middleCols(c0, n) * A[b].transpose();
        vdo.noalias() = V.middleCols(c0, n).transpose() * dO.middleCols(c0, n);
        dQ.middleCols(c0, n).noalias() += K.middleCols(c0, n) * dS[b] * scale;
        dK.middleCols(c0, n).noalias() += Q.middleCols(c0, n) * dS[b].transpose() * scale;
      } else {
        // with_head_view's blocks for these head sizes (no fixed-size kernel: its default branch)
        const auto view = [&](auto& M) { return M.block(0, c0, hs, n); };
        train_detail::set_head_product(scores, view(K).transpose(), view(Q), scale);
        train_detail::set_head_product(view(O), view(V), A[b], 1.0f);
        train_detail::add_head_product(view(dV), view(dO), A[b].transpose(), 1.0f);
        train_detail::set_head_product(vdo, view(V).transpose(), view(dO), 1.0f);
        train_detail::add_head_product(view(dQ), view(K), dS[b], scale);
        train_detail::add_head_product(view(dK), view(Q), dS[b].transpose(), scale);
      }
      benchmark::DoNotOptimize(scores.data());
      benchmark::DoNotOptimize(vdo.data());
    }
  }
  Eigen::setNbThreads(0);
  state.counters["GFLOPs"] = benchmark::Counter(
      6 * 2.0 * static_cast<double>(hs * n * n * B * state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// One of the six products (which: 0 scores, 1 V·A, 2 dO·Aᵀ, 3 Vᵀ·dO, 4 K·dS, 5 Q·dSᵀ) of a head
// of R rows over 64 sequences of N tokens, on the fixed-size blocks with_head_view hands for these
// sizes (head_product.hpp's fixed-size kernels), float, one core.
template <int R, int N>
void fixed_head_products(benchmark::State& state, int which) {
  const int B = 64;
  HeadOperands h = head_operands(R, N, B);
  auto& [K, Q, V, dO, A, dS, O, dV, dQ, dK, scores, vdo] = h;
  const float scale = 0.25f;
  for (auto _ : state) {
    for (int b = 0; b < B; ++b) {
      const auto view = [&](auto& M) { return M.template block<R, N>(0, b * N); };
      switch (which) {
        case 0:
          train_detail::set_head_product(scores, view(K).transpose(), view(Q), scale);
          break;
        case 1:
          train_detail::set_head_product(view(O), view(V), A[b], 1.0f);
          break;
        case 2:
          train_detail::add_head_product(view(dV), view(dO), A[b].transpose(), 1.0f);
          break;
        case 3:
          train_detail::set_head_product(vdo, view(V).transpose(), view(dO), 1.0f);
          break;
        case 4:
          train_detail::add_head_product(view(dQ), view(K), dS[b], scale);
          break;
        default:
          train_detail::add_head_product(view(dK), view(Q), dS[b].transpose(), scale);
      }
      benchmark::DoNotOptimize(scores.data());
      benchmark::DoNotOptimize(vdo.data());
    }
  }
  benchmark::DoNotOptimize(O.data());
  benchmark::DoNotOptimize(dV.data());
  benchmark::DoNotOptimize(dQ.data());
  benchmark::DoNotOptimize(dK.data());
  state.counters["GFLOPs"] = benchmark::Counter(
      2.0 * R * N * N * B * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  // The SIMD paths that ran (bench/run_train.py prints them beside every table): the kernels' (Highway,
  // chosen at run time) and what the build's flags let Eigen's code use (its list omits AVX2 and FMA).
  const char* eigen_isa =
#if defined(__AVX512F__)
      "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
      "AVX2 + FMA";
#elif defined(__AVX__)
      "AVX";
#elif defined(__ARM_NEON)
      "NEON";
#elif defined(__SSE2__)
      "SSE2";
#else
      "no SIMD";
#endif
  benchmark::AddCustomContext("simd", "kernels " + simd::path() + "; Eigen " + eigen_isa + " (" +
                                          Eigen::SimdInstructionSetsInUse() + ")");
  const std::pair<int, int> shapes[] = {{4, 8},    {4, 32},   {8, 8},     {8, 32},    {32, 8},  {32, 32},
                                        {16, 128}, {128, 32}, {32, 128},  {128, 128}, {29, 64}, {62, 64},
                                        {126, 64}, {64, 62},  {512, 128}, {128, 512}};
  const std::pair<Side, const char*> sides[] = {
      {Side::eigen, "/eigen"}, {Side::uatlab, "/uatlab"}, {Side::blocked, "/blocked"}};
  for (int kind : {0, 1})
    for (const auto& [r, k] : shapes)
      for (const auto& [side, label] : sides) {
        // The blocked kernels take any rows from one register's on.
        if (side == Side::blocked && r < simd::half_block_rows<float>()) continue;
        const std::string name = std::string("products/") + (kind == 0 ? "WX/" : "dYXt/") +
                                 std::to_string(r) + "x" + std::to_string(k) + label;
        benchmark::RegisterBenchmark(name.c_str(), products, kind, side, Eigen::Index{r}, Eigen::Index{k});
      }

  for (const auto& [hs, n] : {std::pair<int, int>{16, 64}, {16, 128}, {32, 64}, {32, 128}})
    for (const bool eigen : {true, false}) {
      const std::string name =
          "heads/" + std::to_string(hs) + "x" + std::to_string(n) + (eigen ? "/eigen" : "/uatlab");
      benchmark::RegisterBenchmark(name.c_str(), head_products, eigen, Eigen::Index{hs}, Eigen::Index{n});
    }
  const char* product_names[] = {"KtQ", "VA", "dOAt", "VtdO", "KdS", "QdSt"};
  for (int which = 0; which < 6; ++which) {
    const std::string p = std::string("/") + product_names[which];
    benchmark::RegisterBenchmark(("heads/4x16" + p).c_str(), fixed_head_products<4, 16>, which);
    benchmark::RegisterBenchmark(("heads/4x32" + p).c_str(), fixed_head_products<4, 32>, which);
    benchmark::RegisterBenchmark(("heads/8x16" + p).c_str(), fixed_head_products<8, 16>, which);
    benchmark::RegisterBenchmark(("heads/8x32" + p).c_str(), fixed_head_products<8, 32>, which);
  }
  for (const Config& c : kConfigs)
    benchmark::RegisterBenchmark((std::string("train_step/") + c.name).c_str(), train_step, c)->UseRealTime();
  benchmark::RegisterBenchmark("sgemm_peak", sgemm_peak)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
