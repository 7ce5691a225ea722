// Built-in, seeded task generators for `uatlab train --task NAME` (recipes: ../shared/theory/).
//   memorize          Kajitsuka & Sato's family: N sequences of n distinct random tokens from |V| in R^d,
//                     3 classes, a function of (token, vocabulary set); loss ce, readout 3
//   sparse-boolean    token ids 0/1; y_t = f(x_{t−T1}, …, x_{t−TM}) with f parity | majority | and |
//                     table (a seeded truth table); loss ce, 2 classes; tokens t < T_M masked out
//   kernel-heavy      x_t ~ N(0,1) in R^1, y_t = Σ_{s=1}^{t} ρ(s) x_{t−s}, ρ(s) = s^{−(1+β)}/ζ(1+β)
//   kernel-light      the same with ρ(s) = (1 − e^{−β}) e^{−β(s−1)}; loss mse; tokens t < mask_before masked
#pragma once

#include <string>
#include <vector>

#include "uatlab/io/dataset.hpp"

namespace uatlab {

struct TaskOptions {
  int N = 1000, n = 32, d = 4, V = 64;  // memorize: sequences, length, dimension, vocabulary
  std::vector<int> lags = {1, 4, 9};    // sparse-boolean
  std::string boolean = "parity";
  double beta = 0.5;                    // kernels: tail exponent / rate
  int mask_before = 0;                  // kernels: positions t < this are not scored
  std::uint64_t seed = 1;
};

Dataset make_task(const std::string& name, const TaskOptions& o);
// The loss and output size a task is trained with.
std::string task_loss(const std::string& name);
int task_outputs(const std::string& name, const TaskOptions& o);

}  // namespace uatlab
