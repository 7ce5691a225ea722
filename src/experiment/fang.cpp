#include "uatlab/experiment/fang.hpp"

#include "uatlab/limits.hpp"

#include <Eigen/QR>
#include <cmath>

#include "registry.hpp"
#include "uatlab/construct/fang.hpp"
#include "uatlab/experiment/targets.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab::experiment {

namespace {

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
    for (auto& xi : x)
      xi = rng.uniform(-B, B);
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

std::string csv_of(const std::vector<json>& results, const Row& header) {
  std::vector<Row> rows;
  for (const json& r : results) {
    Row row;
    for (const std::string& k : header)
      row.push_back(r.at(k).is_number_integer() ? r.at(k).dump() : fixed(r.at(k).get<double>(), 6));
    rows.push_back(row);
  }
  return csv_text(header, rows);
}

}  // namespace

namespace {
// The box [-B, B]^d with B > 0 exact, over distinct variables.
Rational box_bound(const std::string& box, const std::vector<std::string>& vars) {
  fang::check_variables(vars);
  const Rational B = parse_rational(box);
  if (B <= 0 || B > 1000000) throw Error("the box bound B must be in (0, 10^6], got " + box);
  return B;
}
}  // namespace

json fit_degree(const FitOptions& o, int N) {
  const int d = static_cast<int>(o.vars.size());
  const Rational Bq = box_bound(o.box, o.vars);
  limits::check_count(N, 1, 16, "fang-fit: blocks N");
  limits::check_count(o.samples, 2, 1 << 22, "fang-fit: samples");
  limits::check_count(o.test, 1, 1 << 22, "fang-fit: test samples");
  const double B = Scalar<Rational>::to_double(Bq);
  const auto target = scalar_expression(o.function, o.vars);
  const fang::Layout L = fang::layout(d, N);
  const Network<double> net = feature_network(d, N, Bq);
  Rng rng(o.seed);
  const Design tr = design(L, net, B, o.samples, rng), te = design(L, net, B, o.test, rng);
  Vec<double> y(o.samples), yt(o.test);
  for (int r = 0; r < o.samples; ++r)
    y(r) = target(tr.x[r]);
  for (int r = 0; r < o.test; ++r)
    yt(r) = target(te.x[r]);
  const Vec<double> w = tr.phi.completeOrthogonalDecomposition().solve(y);  // minimum-norm least squares
  const Vec<double> e = te.phi * w - yt;
  return {{"degree", N},
          {"readout_parameters", L.D + 1},
          {"train_rmse", std::sqrt((tr.phi * w - y).squaredNorm() / o.samples)},
          {"test_rmse", std::sqrt(e.squaredNorm() / o.test)},
          {"test_max_error", e.cwiseAbs().maxCoeff()}};
}

int regression_degree(const RegressionOptions& o) {
  const int N = fang::degree(fang::parse_polynomial(o.polynomial, o.vars));
  if (N < 2) throw Error("the regression needs a polynomial of degree >= 2 (to compare N and N-1 blocks)");
  return N;
}

json regression_point(const RegressionOptions& o, int m, int blocks) {
  const int d = static_cast<int>(o.vars.size());
  const Rational Bq = box_bound(o.box, o.vars);
  const fang::Polynomial p = fang::parse_polynomial(o.polynomial, o.vars);
  const int N = regression_degree(o);
  limits::check_count(m, 1, 1 << 22, "fang-regression: samples m");
  limits::check_count(blocks, 1, 16, "fang-regression: blocks");
  limits::check_count(o.repeats, 1, 100000, "fang-regression: repeats");
  limits::check_count(o.test, 1, 1 << 22, "fang-regression: test samples");
  limits::check_real(o.noise, 0.0, 1e6, "fang-regression: noise");
  const double B = Scalar<Rational>::to_double(Bq);
  auto clean = [&](const std::vector<double>& x) {
    std::vector<Rational> q;
    for (double v : x)
      q.push_back(rational_of(v));
    return Scalar<Rational>::to_double(fang::evaluate(p, q));
  };
  long monomials = 1;  // C(N + d, d): the parameters of a degree-N polynomial
  for (int k = 1; k <= d; ++k)
    monomials = monomials * (N + k) / k;
  const fang::Layout L = fang::layout(d, blocks);
  const Network<double> net = feature_network(d, blocks, Bq);
  Rng rng(o.seed * 7919 + static_cast<std::uint64_t>(m));
  double mse = 0;
  for (int rep = 0; rep < o.repeats; ++rep) {
    const Design tr = design(L, net, B, m, rng), te = design(L, net, B, o.test, rng);
    Vec<double> y(m), yt(o.test);
    for (int r = 0; r < m; ++r)
      y(r) = clean(tr.x[r]) + o.noise * rng.gauss();
    for (int r = 0; r < o.test; ++r)
      yt(r) = clean(te.x[r]);
    const Vec<double> w = tr.phi.completeOrthogonalDecomposition().solve(y);
    mse += (te.phi * w - yt).squaredNorm() / o.test / o.repeats;
  }
  return {{"samples", m},
          {"blocks", blocks},
          {"test_mse", mse},
          {"reference_sigma2_p_over_m", o.noise * o.noise * static_cast<double>(monomials) / m}};
}

std::string fit_csv(const std::vector<json>& r) {
  return csv_of(r, {"degree", "readout_parameters", "train_rmse", "test_rmse", "test_max_error"});
}
std::string regression_csv(const std::vector<json>& r) {
  return csv_of(r, {"samples", "blocks", "test_mse", "reference_sigma2_p_over_m"});
}

namespace {

std::vector<json> results_of(const std::vector<json>& lines) {
  std::vector<json> r;
  for (const json& l : lines)
    r.push_back(l.at("result"));
  return r;
}

}  // namespace

Experiment fang_fit() {
  Experiment e;
  e.name = "fang-fit";
  e.summary =
      "Fang et al.: fixed polynomial blocks + least-squares readout fit exp(x1)sin(3x2) on [-1,1]^2, error "
      "vs blocks N";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    for (int N = 1; N <= c.pick(3, 8, 8); ++N)
      cells.push_back({{"N", N}, {"samples", c.pick(200, 2000, 2000)}});
    return cells;
  };
  e.run = [](const json& cell, const Context&) {
    FitOptions o;
    o.samples = o.test = cell.at("samples");
    return fit_degree(o, cell.at("N"));
  };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    const std::vector<json> r = results_of(lines);
    write_file_atomic(out.path(".csv"), fit_csv(r));
    std::vector<Row> md;
    Series rmse{"test RMSE", {}, {}, {}}, worst{"test max error", {}, {}, {}};
    for (const json& x : r) {
      md.push_back({x.at("degree").dump(), x.at("readout_parameters").dump(), fixed(x.at("train_rmse"), 3),
                    fixed(x.at("test_rmse"), 3), fixed(x.at("test_max_error"), 3)});
      rmse.x.push_back(x.at("degree")), rmse.y.push_back(x.at("test_rmse"));
      worst.x.push_back(x.at("degree")), worst.y.push_back(x.at("test_max_error"));
    }
    const std::string text =
        markdown_table({"degree", "readout parameters", "train RMSE", "test RMSE", "test max error"}, md);
    write_file_atomic(out.path(".md"), text);
    LinePlot plot{"Fixed blocks + least-squares readout: f = exp(x1)*sin(3*x2) on [-1,1]^2",
                  "blocks N (= polynomial degree)", "error"};
    plot.logy = true;
    plot.series = {rmse, worst};
    plot_png(out.path(".png"), plot);
    return text;
  };
  return e;
}

Experiment fang_regression() {
  Experiment e;
  e.name = "fang-regression";
  e.summary =
      "Fang et al.: noisy cubic x1^3 - 2x1x2 + x2^2/2 + 1/4 (sigma 0.1), test MSE vs samples m with 3 and 2 "
      "blocks";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    const int N = regression_degree(RegressionOptions{});
    for (int m : c.pick({20, 100}, {20, 50, 100, 200, 500, 1000, 2000}, {20, 50, 100, 200, 500, 1000, 2000}))
      for (int blocks : {N, N - 1})
        cells.push_back({{"m", m}, {"blocks", blocks}, {"repeats", c.pick(4, 20, 20)}});
    return cells;
  };
  e.run = [](const json& cell, const Context&) {
    RegressionOptions o;
    o.repeats = cell.at("repeats");
    return regression_point(o, cell.at("m"), cell.at("blocks"));
  };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    const std::vector<json> r = results_of(lines);
    write_file_atomic(out.path(".csv"), regression_csv(r));
    const int N = regression_degree(RegressionOptions{});
    Series full{std::to_string(N) + " blocks (= degree)", {}, {}, {}},
        fewer{std::to_string(N - 1) + " blocks", {}, {}, {}}, ref{"sigma^2 p / m", {}, {}, {}};
    std::vector<Row> md;
    for (const json& x : r) {
      Series& s = x.at("blocks") == N ? full : fewer;
      s.x.push_back(x.at("samples")), s.y.push_back(x.at("test_mse"));
      if (x.at("blocks") == N) {
        ref.x.push_back(x.at("samples")), ref.y.push_back(x.at("reference_sigma2_p_over_m"));
        md.push_back({x.at("samples").dump(), fixed(x.at("test_mse"), 3), "",
                      fixed(x.at("reference_sigma2_p_over_m"), 3)});
      } else if (!md.empty()) {
        md.back()[2] = fixed(x.at("test_mse"), 3);
      }
    }
    const std::string text = markdown_table({"m", "test MSE, " + std::to_string(N) + " blocks",
                                             "test MSE, " + std::to_string(N - 1) + " blocks", "sigma^2 p/m"},
                                            md);
    write_file_atomic(out.path(".md"), text);
    LinePlot plot{"Regression on x1^3 - 2*x1*x2 + x2^2/2 + 1/4 + N(0, 0.1^2)", "training samples m",
                  "test MSE against the noiseless target"};
    plot.logx = plot.logy = true;
    plot.series = {full, fewer, ref};
    plot_png(out.path(".png"), plot);
    return text;
  };
  return e;
}

}  // namespace uatlab::experiment
