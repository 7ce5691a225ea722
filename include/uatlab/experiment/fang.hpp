// Fang et al.'s experiments on the fixed polynomial blocks (docs/fang.md):
//   fit         universality: least-squares readout of N blocks' pooled features to a continuous
//               function on [-B, B]^d, error against N (experiment fang-fit)
//   regression  a noisy polynomial of degree N: test error against the sample size m with N and
//               N - 1 blocks (experiment fang-regression)
#pragma once

#include <string>
#include <vector>

#include "uatlab/experiment/experiment.hpp"
#include "uatlab/io/report.hpp"

namespace uatlab::experiment {

struct FitOptions {
  std::string function = "exp(x1)*sin(3*x2)";  // muParser syntax
  std::vector<std::string> vars = {"x1", "x2"};
  std::string box = "1";  // B, exact
  int samples = 2000, test = 2000;
  std::uint64_t seed = 1;
};
// N blocks: {"degree", "readout_parameters", "train_rmse", "test_rmse", "test_max_error"}.
json fit_degree(const FitOptions& o, int N);

struct RegressionOptions {
  std::string polynomial = "x1^3 - 2*x1*x2 + x2^2/2 + 1/4";
  std::vector<std::string> vars = {"x1", "x2"};
  std::string box = "1";
  double noise = 0.1;
  int repeats = 20, test = 500;
  std::uint64_t seed = 1;
};
int regression_degree(const RegressionOptions& o);  // N (>= 2, checked)
// m samples, `blocks` blocks: {"samples", "blocks", "test_mse", "reference_sigma2_p_over_m"}.
json regression_point(const RegressionOptions& o, int m, int blocks);

// The CSV rows of either result list (the columns named in each result, in that order).
std::string fit_csv(const std::vector<json>& results);
std::string regression_csv(const std::vector<json>& results);

}  // namespace uatlab::experiment
