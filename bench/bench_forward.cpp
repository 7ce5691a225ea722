// Batched forward pass in float and double on model files written by `uatlab init`.
//   bench_forward --models a.safetensors,b.safetensors --batch 64 --n 16 [google-benchmark flags]
// bench/run.py runs this beside PyTorch on the same files and prints the ratios.
#include <benchmark/benchmark.h>

#include <cstring>
#include <sstream>

#include "uatlab/io/model_file.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/simd.hpp"
#include "uatlab/verify/evaluate.hpp"

using namespace uatlab;

namespace {

template <class S>
void forward_batch(benchmark::State& state, std::string path, int batch, int n) {
  Network<S> net = load_network<S>(path);
  Rng rng(1);
  Dataset ds;
  ds.d = net.arch.d;
  for (int b = 0; b < batch; ++b) {
    Sequence s;
    s.x = Mat<Rational>(net.arch.d, n);
    for (Eigen::Index i = 0; i < s.x.size(); ++i)
      s.x.data()[i] = rational_of(rng.uniform(-1, 1));
    ds.sequences.push_back(std::move(s));
  }
  // Inputs converted once, outside the timed loop (as PyTorch's tensor is built once).
  std::vector<Mat<S>> xs;
  for (auto& s : ds.sequences)
    xs.push_back(matrix_cast<S>(s.x));
  std::vector<Mat<S>> ys(batch);
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int b = 0; b < batch; ++b)
      ys[b] = forward(net, xs[b]);
    benchmark::DoNotOptimize(ys.data());
  }
  state.SetItemsProcessed(state.iterations() * batch);
}

}  // namespace

int main(int argc, char** argv) {
  std::string models;
  int batch = 64, n = 16;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--models") && i + 1 < argc)
      models = argv[++i];
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--n") && i + 1 < argc)
      n = std::atoi(argv[++i]);
    else
      rest.push_back(argv[i]);
  }
  std::stringstream ss(models);
  for (std::string path; std::getline(ss, path, ',');) {
    benchmark::RegisterBenchmark(("forward/double/" + path).c_str(), forward_batch<double>, path, batch, n)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("forward/float/" + path).c_str(), forward_batch<float>, path, batch, n)
        ->UseRealTime();
  }
  // The SIMD kernels' path (the attention's softmax; bench/run.py prints it above its table).
  benchmark::AddCustomContext("simd", "kernels " + simd::path());
  int rc = static_cast<int>(rest.size());
  benchmark::Initialize(&rc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
