// uatlab polynomial | fang-fit | fang-regression: Fang et al.'s zero-error polynomial blocks
// (construct/fang.hpp) and their two experiments (experiment/fang.hpp).
#include <cmath>
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "uatlab/construct/fang.hpp"
#include "uatlab/experiment/fang.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/limits.hpp"

namespace uatlab::cli {

using nlohmann::json;
namespace ex = uatlab::experiment;

namespace {

struct PolynomialOpts {
  std::string expr, vars = "x1", box = "1", variant = "single-head", out, report;
  int degree = 0;
  std::uint64_t seed = 1;
};

int cmd_polynomial(const PolynomialOpts& o) {
  check_outputs({}, {{"--out", o.out}, {"--report", o.report}});
  const fang::Compiled c =
      fang::compile(o.expr, parse_list(o.vars, "--vars"), parse_rational(o.box), o.variant, o.degree, o.seed);
  const fang::Layout& L = c.layout;
  const fang::Proof& pr = c.proof;
  const int N = L.N;
  std::printf("polynomial  %s  (degree %d in %d variables)\n", fang::to_string(c.p, c.vars).c_str(),
              fang::degree(c.p), L.d);
  std::printf(
      "network     %d blocks (%s), residual width D = %d, %d tokens, linear-score attention, pooled "
      "readout\n",
      N, o.variant.c_str(), L.D, L.d);
  std::printf("            fixed block parameters %zu; readout (the only polynomial-dependent part) %d + 1\n",
              c.net.parameter_count() - static_cast<std::size_t>(L.D + 1), L.D);
  if (fang::variant_names.parse(o.variant) == fang::Variant::single_head)
    std::printf("gates       %s on the box [-%s, %s]^%d (largest |z|/C_b = %s)\n",
                pr.gates ? "proven in their linear regime" : "NOT proven", o.box.c_str(), o.box.c_str(), L.d,
                pr.worst_gate_ratio.str().c_str());
  std::printf("degree      of the network's output in x <= %d (propagated through the layers), N = %d: %s\n",
              pr.degree, N, pr.degree_ok() ? "yes" : "NO");
  std::printf("grid        network == polynomial exactly at all %zu points of the (N+1)^d grid: %s\n",
              pr.grid_points, pr.grid ? "yes" : "NO");
  std::printf("random      and at %zu random rational points: %s\n", pr.random_points,
              pr.random ? "yes" : "NO");
  std::printf("verdict     %s\n", pr.exact() ? "EXACT: zero error on the whole box, proven in GMP rationals"
                                             : "not proven exact");
  if (!o.out.empty()) save_network(c.net, o.out, "F64", "rational");
  if (!o.report.empty()) write_output(o.report, c.report().dump(1) + "\n");
  return pr.exact() ? 0 : 1;
}

struct FitOpts {
  ex::FitOptions fit;
  std::string vars = "x1,x2", csv;
  int degree = 8;
};

// Every number of a table must be finite: an inf RMSE is an error, not a row.
void check_finite(const json& r, const std::vector<const char*>& keys, const std::string& what) {
  for (const char* k : keys)
    if (!std::isfinite(r.at(k).get<double>()))
      throw Error(what + ": " + k + " is not finite (the fit overflowed double); nothing written");
}

int cmd_fit(FitOpts& o) {
  check_outputs({}, {{"--csv", o.csv}});
  o.fit.vars = parse_list(o.vars, "--vars");
  std::vector<json> results;  // every row computed before the table is printed
  for (int N = 1; N <= o.degree; ++N) {
    results.push_back(ex::fit_degree(o.fit, N));
    check_finite(results.back(), {"train_rmse", "test_rmse", "test_max_error"},
                 "degree " + std::to_string(N));
  }
  std::printf(
      "| degree | readout parameters | train RMSE | test RMSE | test max error |\n|---|---|---|---|---|\n");
  for (const json& r : results)
    std::printf("| %d | %d | %.3g | %.3g | %.3g |\n", r["degree"].get<int>(),
                r["readout_parameters"].get<int>(), r["train_rmse"].get<double>(),
                r["test_rmse"].get<double>(), r["test_max_error"].get<double>());
  if (!o.csv.empty()) write_output(o.csv, ex::fit_csv(results));
  return 0;
}

struct RegressionOpts {
  ex::RegressionOptions reg;
  std::string vars = "x1,x2", csv, sizes = "20,50,100,200,500,1000,2000";
};

int cmd_regression(RegressionOpts& o) {
  check_outputs({}, {{"--csv", o.csv}});
  o.reg.vars = parse_list(o.vars, "--vars");
  const int N = ex::regression_degree(o.reg);
  const std::vector<int> sizes = parse_int_list(o.sizes, "--sizes", 2, 1 << 20);
  std::vector<json> results;  // every row computed before the table is printed
  for (int m : sizes)
    for (int blocks : {N, N - 1}) {
      results.push_back(ex::regression_point(o.reg, m, blocks));
      check_finite(results.back(), {"test_mse"}, "m = " + std::to_string(m));
    }
  std::printf("| m | test MSE, %d blocks | test MSE, %d blocks | sigma^2 p/m |\n|---|---|---|---|\n", N,
              N - 1);
  for (std::size_t i = 0; i + 1 < results.size(); i += 2)
    std::printf("| %d | %.3g | %.3g | %.3g |\n", sizes[i / 2], results[i]["test_mse"].get<double>(),
                results[i + 1]["test_mse"].get<double>(),
                results[i]["reference_sigma2_p_over_m"].get<double>());
  if (!o.csv.empty()) write_output(o.csv, ex::regression_csv(results));
  return 0;
}

}  // namespace

void add_fang_commands(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<PolynomialOpts>();
  auto* c = app.add_subcommand(
      "polynomial", "Fang et al.: compile a polynomial into attention blocks, proven exact in rationals");
  c->add_option("expr", o->expr, "The polynomial, e.g. \"3*x1^2*x2 - x2/7 + 1/2\"")->required();
  c->add_option("--vars", o->vars, "Variables, comma separated")->capture_default_str();
  c->add_option("--box", o->box, "Domain [-B, B]^d (B exact)")->capture_default_str();
  c->add_option("--variant", o->variant,
                "single-head (gated, the paper's claim) or multi-head (d heads, no gates)")
      ->capture_default_str();
  c->add_option("--degree", o->degree, "Blocks N (default: the polynomial's degree)")
      ->check(CLI::Range(0, limits::kPolynomialDegree));
  c->add_option("--out,-o", o->out, "Write the network (lossless .json or safetensors)");
  c->add_option("--report", o->report, "Write the proof as JSON");
  c->add_option("--seed", o->seed, "Seed of the random rational points")->capture_default_str();
  commands.push_back({c, [o] { return cmd_polynomial(*o); }});

  auto f = std::make_shared<FitOpts>();
  auto* fit = app.add_subcommand(
      "fang-fit", "Fang et al. universality: fit the blocks' readout to a function, error vs blocks N");
  fit->add_option("function", f->fit.function, "The function (muParser syntax)")->capture_default_str();
  fit->add_option("--vars", f->vars, "Variables, comma separated")->capture_default_str();
  fit->add_option("--box", f->fit.box, "Domain [-B, B]^d (B exact)")->capture_default_str();
  fit->add_option("--degree", f->degree, "The largest number of blocks N")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  fit->add_option("--samples", f->fit.samples, "Training samples")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 22));
  fit->add_option("--test", f->fit.test, "Test samples")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 22));
  fit->add_option("--seed", f->fit.seed, "Seed")->capture_default_str();
  fit->add_option("--csv", f->csv, "Write the table as CSV");
  commands.push_back({fit, [f] { return cmd_fit(*f); }});

  auto r = std::make_shared<RegressionOpts>();
  auto* reg = app.add_subcommand("fang-regression",
                                 "Fang et al. regression: a noisy polynomial, test error vs sample size");
  reg->add_option("polynomial", r->reg.polynomial, "The polynomial (degree >= 2)")->capture_default_str();
  reg->add_option("--vars", r->vars, "Variables, comma separated")->capture_default_str();
  reg->add_option("--box", r->reg.box, "Domain [-B, B]^d (B exact)")->capture_default_str();
  reg->add_option("--noise", r->reg.noise, "Label noise sigma")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  reg->add_option("--sizes", r->sizes, "Sample sizes m, comma separated")->capture_default_str();
  reg->add_option("--repeats", r->reg.repeats, "Repetitions per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  reg->add_option("--seed", r->reg.seed, "Seed")->capture_default_str();
  reg->add_option("--csv", r->csv, "Write the table as CSV");
  commands.push_back({reg, [r] { return cmd_regression(*r); }});
}

}  // namespace uatlab::cli
