// One training step (forward + backward + AdamW, float32) on the configurations, plus a
// large SGEMM as the machine's attainable peak. bench/run_train.py runs this beside PyTorch.
//   bench_train [google-benchmark flags]
#include <benchmark/benchmark.h>
#include <omp.h>

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

}  // namespace

int main(int argc, char** argv) {
  for (const Config& c : kConfigs)
    benchmark::RegisterBenchmark((std::string("train_step/") + c.name).c_str(), train_step, c)->UseRealTime();
  benchmark::RegisterBenchmark("sgemm_peak", sgemm_peak)->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
