#include "uatlab/train/tasks.hpp"

#include <algorithm>
#include <cmath>

#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab {

namespace {

Dataset sparse_boolean(const TaskOptions& o) {
  if (o.lags.empty()) throw Error("sparse-boolean needs at least one lag");
  const int M = static_cast<int>(o.lags.size()), TM = *std::max_element(o.lags.begin(), o.lags.end());
  for (int l : o.lags)
    if (l < 1) throw Error("lags must be >= 1");
  if (o.n <= TM) throw Error("sequence length n = " + std::to_string(o.n) + " must exceed the largest lag " + std::to_string(TM));
  Rng rng(o.seed);
  std::vector<int> table(static_cast<std::size_t>(1) << M);
  for (auto& v : table) v = rng.uniform() < 0.5;
  auto f = [&](const std::vector<int>& bits) {
    int ones = 0, code = 0;
    for (int i = 0; i < M; ++i) ones += bits[i], code |= bits[i] << i;
    if (o.boolean == "parity") return ones % 2;
    if (o.boolean == "majority") return 2 * ones > M ? 1 : 0;
    if (o.boolean == "and") return ones == M ? 1 : 0;
    if (o.boolean == "table") return table[code];
    throw Error("boolean function \"" + o.boolean + "\": expected parity, majority, and or table");
  };
  Dataset ds;
  ds.token_input = true, ds.label_dim = 1;
  for (int i = 0; i < o.N; ++i) {
    Sequence s;
    for (int t = 0; t < o.n; ++t) s.tokens.push_back(rng.uniform() < 0.5);
    s.y = Mat<Rational>::Zero(1, o.n);
    s.mask.assign(o.n, 0);
    for (int t = TM; t < o.n; ++t) {
      std::vector<int> bits;
      for (int l : o.lags) bits.push_back(s.tokens[t - l]);
      s.y(0, t) = f(bits);
      s.mask[t] = 1;
    }
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

Dataset kernel(const TaskOptions& o, bool heavy) {
  if (o.beta <= 0) throw Error("kernel tasks need beta > 0");
  std::vector<double> rho(o.n + 1, 0.0);
  double zeta = 0;
  for (int k = 1; k < 200000; ++k) zeta += std::pow(k, -(1 + o.beta));
  zeta += std::pow(200000.0, -o.beta) / o.beta;  // tail of Σ k^{-(1+β)}
  for (int s = 1; s <= o.n; ++s)
    rho[s] = heavy ? std::pow(s, -(1 + o.beta)) / zeta : (1 - std::exp(-o.beta)) * std::exp(-o.beta * (s - 1));
  Rng rng(o.seed);
  Dataset ds;
  ds.d = 1, ds.label_dim = 1;
  for (int i = 0; i < o.N; ++i) {
    std::vector<double> x(o.n);
    for (auto& v : x) v = rng.gauss();
    Sequence s;
    s.x = Mat<Rational>(1, o.n);
    s.y = Mat<Rational>(1, o.n);
    s.mask.assign(o.n, 1);
    for (int t = 0; t < o.n; ++t) {
      s.x(0, t) = rational_of(x[t]);
      double y = 0;
      for (int k = 1; k <= t; ++k) y += rho[k] * x[t - k];
      s.y(0, t) = rational_of(y);
      if (t < o.mask_before) s.mask[t] = 0;
    }
    ds.sequences.push_back(std::move(s));
  }
  return ds;
}

}  // namespace

Dataset make_task(const std::string& name, const TaskOptions& o) {
  if (o.N < 1 || o.n < 1) throw Error("tasks need N >= 1 and n >= 1");
  if (name == "memorize") return kajitsuka::demo_dataset(o.N, o.n, o.d, o.V, o.seed);
  if (name == "sparse-boolean") return sparse_boolean(o);
  if (name == "kernel-heavy") return kernel(o, true);
  if (name == "kernel-light") return kernel(o, false);
  throw Error("unknown task \"" + name + "\" (memorize, sparse-boolean, kernel-heavy, kernel-light)");
}

std::string task_loss(const std::string& name) { return name == "memorize" || name == "sparse-boolean" ? "ce" : "mse"; }

int task_outputs(const std::string& name, const TaskOptions&) {
  if (name == "memorize") return 3;
  if (name == "sparse-boolean") return 2;
  return 1;
}

}  // namespace uatlab
