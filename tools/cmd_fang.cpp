// uatlab polynomial: Fang et al.'s zero-error polynomial blocks, proven exact in rationals;
// --fit (universality: least-squares readout on a continuous function) and --regression (noisy
// polynomial targets: no approximation-error floor).
#include <Eigen/QR>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <muParser.h>
#include <sstream>

#include "commands.hpp"
#include "uatlab/construct/fang.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab::cli {

using nlohmann::json;

namespace {

struct Opts {
  std::string expr, vars = "x1", variant = "single-head", out, report, fit, regression, csv, sizes = "20,50,100,200,500,1000,2000";
  std::string box = "1";
  int degree = 0, samples = 2000, test = 2000, repeats = 20;
  double noise = 0.1;
  std::uint64_t seed = 1;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) v.push_back(x);
  return v;
}

// A seeded sample of the box; each point's pooled features (plus 1 for the bias).
struct Design {
  Mat<double> phi;  // m × (D + 1)
  std::vector<std::vector<double>> x;
};
Design design(const fang::Layout& L, const Network<double>& features_net, double B, int m, Rng& rng) {
  Design ds;
  ds.phi.resize(m, L.D + 1);
  for (int r = 0; r < m; ++r) {
    std::vector<double> x(L.d);
    for (auto& xi : x) xi = rng.uniform(-B, B);
    ds.phi.row(r).head(L.D) = fang::features(features_net, L, x).transpose();
    ds.phi(r, L.D) = 1;
    ds.x.push_back(x);
  }
  return ds;
}

Network<double> feature_network(int d, int N, const Rational& B) {
  Network<double> f = network_cast<double>(fang::build(d, N, B, fang::Variant::single_head));
  f.arch.readout = 0;  // the pooled residual itself
  return f;
}

int cmd_construct(const Opts& o) {
  const auto vars = split(o.vars);
  const Rational B = parse_rational(o.box);
  const fang::Polynomial p = fang::parse_polynomial(o.expr, vars);
  const int N = o.degree > 0 ? o.degree : std::max(1, fang::degree(p));
  const fang::Variant v = fang::parse_variant(o.variant);
  const fang::Layout L = fang::layout(static_cast<int>(vars.size()), N);
  Network<Rational> net = fang::build(L.d, N, B, v);
  fang::set_readout(net, L, p);
  const fang::Proof pr = fang::prove(net, L, p, B, v, o.seed);
  std::printf("polynomial  %s  (degree %d in %d variables)\n", fang::to_string(p, vars).c_str(), fang::degree(p), L.d);
  std::printf("network     %d blocks (%s), residual width D = %d, %d tokens, linear-score attention, pooled readout\n", N,
              o.variant.c_str(), L.D, L.d);
  std::printf("            fixed block parameters %zu; readout (the only polynomial-dependent part) %d + 1\n",
              net.parameter_count() - static_cast<std::size_t>(L.D + 1), L.D);
  if (v == fang::Variant::single_head)
    std::printf("gates       %s on the box [-%s, %s]^%d (largest |z|/C_b = %s)\n", pr.gates ? "proven in their linear regime" : "NOT proven",
                o.box.c_str(), o.box.c_str(), L.d, pr.worst_gate_ratio.str().c_str());
  std::printf("grid        network == polynomial exactly at all %zu points of the (N+1)^d grid: %s\n", pr.grid_points, pr.grid ? "yes" : "NO");
  std::printf("random      and at %zu random rational points: %s\n", pr.random_points, pr.random ? "yes" : "NO");
  std::printf("verdict     %s\n", pr.exact() ? "EXACT: zero error on the whole box, proven in GMP rationals" : "not proven exact");
  if (!o.out.empty()) save_network(net, o.out, "F64", "rational");
  if (!o.report.empty())
    write_output(o.report, json({{"polynomial", fang::to_string(p, vars)}, {"blocks", N}, {"D", L.D}, {"variant", o.variant},
                                 {"gates", pr.gates}, {"worst_gate_ratio", pr.worst_gate_ratio.str()}, {"grid_points", pr.grid_points},
                                 {"grid", pr.grid}, {"random_points", pr.random_points}, {"random", pr.random}, {"exact", pr.exact()},
                                 {"parameters", net.parameter_count()}})
                               .dump(1) + "\n");
  return pr.exact() ? 0 : 1;
}

int cmd_fit(const Opts& o) {
  const auto vars = split(o.vars);
  const int d = static_cast<int>(vars.size());
  const double B = Scalar<Rational>::to_double(parse_rational(o.box));
  if (o.degree < 1) throw Error("--fit needs --degree K (the largest number of blocks)");
  std::vector<double> xs(d);
  mu::Parser f;
  try {
    for (int i = 0; i < d; ++i) f.DefineVar(vars[i], &xs[i]);
    f.SetExpr(o.fit);
    f.Eval();
  } catch (mu::Parser::exception_type& e) {
    throw Error("function \"" + o.fit + "\": " + e.GetMsg());
  }
  auto target = [&](const std::vector<double>& x) {
    for (int i = 0; i < d; ++i) xs[i] = x[i];
    const double y = f.Eval();
    if (!std::isfinite(y)) throw Error("function \"" + o.fit + "\" is not finite on the box");
    return y;
  };
  std::string csv = "degree,readout_parameters,train_rmse,test_rmse,test_max_error\n";
  std::printf("| degree | readout parameters | train RMSE | test RMSE | test max error |\n|---|---|---|---|---|\n");
  for (int N = 1; N <= o.degree; ++N) {
    const fang::Layout L = fang::layout(d, N);
    const Network<double> net = feature_network(d, N, parse_rational(o.box));
    Rng rng(o.seed);
    Design tr = design(L, net, B, o.samples, rng), te = design(L, net, B, o.test, rng);
    Vec<double> y(o.samples), yt(o.test);
    for (int r = 0; r < o.samples; ++r) y(r) = target(tr.x[r]);
    for (int r = 0; r < o.test; ++r) yt(r) = target(te.x[r]);
    const Vec<double> w = tr.phi.completeOrthogonalDecomposition().solve(y);  // minimum-norm least squares
    const double train = std::sqrt((tr.phi * w - y).squaredNorm() / o.samples);
    const Vec<double> e = te.phi * w - yt;
    const double test = std::sqrt(e.squaredNorm() / o.test), mx = e.cwiseAbs().maxCoeff();
    char line[256];
    std::snprintf(line, sizeof line, "%d,%d,%.6g,%.6g,%.6g\n", N, L.D + 1, train, test, mx);
    csv += line;
    std::printf("| %d | %d | %.3g | %.3g | %.3g |\n", N, L.D + 1, train, test, mx);
  }
  if (!o.csv.empty()) write_output(o.csv, csv);
  return 0;
}

int cmd_regression(const Opts& o) {
  const auto vars = split(o.vars);
  const int d = static_cast<int>(vars.size());
  const fang::Polynomial p = fang::parse_polynomial(o.regression, vars);
  const int N = fang::degree(p);
  if (N < 2) throw Error("--regression needs a polynomial of degree >= 2 (to compare N and N-1 blocks)");
  const double B = Scalar<Rational>::to_double(parse_rational(o.box));
  auto clean = [&](const std::vector<double>& x) {
    std::vector<Rational> q;
    for (double v : x) q.push_back(rational_of(v));
    return Scalar<Rational>::to_double(fang::evaluate(p, q));
  };
  long monomials = 1;  // C(N + d, d)
  for (int k = 1; k <= d; ++k) monomials = monomials * (N + k) / k;
  std::string csv = "samples,blocks,test_mse,reference_sigma2_p_over_m\n";
  std::printf("| m | test MSE, %d blocks | test MSE, %d blocks | sigma^2 p/m (p = %ld) |\n|---|---|---|---|\n", N, N - 1, monomials);
  for (const std::string& ms : split(o.sizes)) {
    const int m = std::stoi(ms);
    double mse[2] = {0, 0};
    for (int blocks : {N, N - 1}) {
      const fang::Layout L = fang::layout(d, blocks);
      const Network<double> net = feature_network(d, blocks, parse_rational(o.box));
      Rng rng(o.seed * 7919 + static_cast<std::uint64_t>(m));
      for (int rep = 0; rep < o.repeats; ++rep) {
        Design tr = design(L, net, B, m, rng), te = design(L, net, B, 500, rng);
        Vec<double> y(m), yt(500);
        for (int r = 0; r < m; ++r) y(r) = clean(tr.x[r]) + o.noise * rng.gauss();
        for (int r = 0; r < 500; ++r) yt(r) = clean(te.x[r]);
        const Vec<double> w = tr.phi.completeOrthogonalDecomposition().solve(y);
        mse[blocks == N ? 0 : 1] += (te.phi * w - yt).squaredNorm() / 500 / o.repeats;
      }
    }
    const double ref = o.noise * o.noise * static_cast<double>(monomials) / m;
    char line[256];
    std::snprintf(line, sizeof line, "%d,%d,%.6g,%.6g\n%d,%d,%.6g,%.6g\n", m, N, mse[0], ref, m, N - 1, mse[1], ref);
    csv += line;
    std::printf("| %d | %.3g | %.3g | %.3g |\n", m, mse[0], mse[1], ref);
  }
  if (!o.csv.empty()) write_output(o.csv, csv);
  return 0;
}

}  // namespace

void add_fang_commands(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("polynomial", "Fang et al.: compile a polynomial into attention blocks, proven exact in rationals");
  c->add_option("expr", o->expr, "The polynomial, e.g. \"3*x1^2*x2 - x2/7 + 1/2\"");
  c->add_option("--vars", o->vars, "Variables, comma separated")->capture_default_str();
  c->add_option("--box", o->box, "Domain [-B, B]^d (B exact)")->capture_default_str();
  c->add_option("--variant", o->variant, "single-head (gated, the paper's claim) or multi-head (d heads, no gates)")->capture_default_str();
  c->add_option("--degree", o->degree, "Blocks N (default: the polynomial's degree; with --fit: the largest N)");
  c->add_option("--out,-o", o->out, "Write the network (lossless .json or safetensors)");
  c->add_option("--report", o->report, "Write the proof as JSON");
  c->add_option("--fit", o->fit, "Universality: fit the readout to this function (muParser syntax) for N = 1..--degree");
  c->add_option("--regression", o->regression, "Regression: this polynomial plus noise, test error against sample size");
  c->add_option("--noise", o->noise, "Regression: label noise sigma")->capture_default_str();
  c->add_option("--sizes", o->sizes, "Regression: sample sizes")->capture_default_str();
  c->add_option("--repeats", o->repeats, "Regression: repetitions per size")->capture_default_str();
  c->add_option("--samples", o->samples, "Fit: training samples")->capture_default_str();
  c->add_option("--test", o->test, "Fit: test samples")->capture_default_str();
  c->add_option("--seed", o->seed, "Seed")->capture_default_str();
  c->add_option("--csv", o->csv, "Write the --fit / --regression table as CSV");
  commands.push_back({c, [o] {
                        if (!o->fit.empty()) return cmd_fit(*o);
                        if (!o->regression.empty()) return cmd_regression(*o);
                        if (o->expr.empty()) throw Error("give a polynomial, --fit FUNCTION or --regression POLYNOMIAL");
                        return cmd_construct(*o);
                      }});
}

}  // namespace uatlab::cli
