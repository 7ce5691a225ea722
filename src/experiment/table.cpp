#include "uatlab/experiment/table.hpp"

#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <cstdio>

#include "uatlab/io/json.hpp"

namespace uatlab::experiment {

std::string label(const json& j) {
  return j.is_string() ? j.get<std::string>() : j.dump();
}

Grouped group(const std::vector<json>& lines, const std::function<std::string(const json&)>& row,
              const std::function<std::string(const json&)>& col,
              const std::function<double(const json&)>& value) {
  Grouped g;
  auto slot = [](std::vector<std::string>& keys, const std::string& k) {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == k) return i;
    keys.push_back(k);
    return keys.size() - 1;
  };
  for (const json& l : lines) {
    const std::size_t r = slot(g.rows, row(l.at("cell"))), c = slot(g.cols, col(l.at("cell")));
    if (g.values.size() <= r) g.values.resize(r + 1), g.seeds.resize(r + 1);
    for (std::size_t k = 0; k < g.values.size(); ++k)
      g.values[k].resize(g.cols.size()), g.seeds[k].resize(g.cols.size());
    g.values[r][c].push_back(value(l.at("result")));
    g.seeds[r][c].push_back(l.at("cell").contains("seed") ? label(l.at("cell").at("seed")) : std::string());
  }
  for (std::size_t k = 0; k < g.values.size(); ++k)
    g.values[k].resize(g.cols.size()), g.seeds[k].resize(g.cols.size());
  return g;
}

Sample sample(const Grouped& g, const std::string& row, const std::string& col) {
  for (std::size_t r = 0; r < g.rows.size(); ++r)
    for (std::size_t k = 0; k < g.cols.size(); ++k)
      if (g.rows[r] == row && g.cols[k] == col) return {g.values[r][k], g.seeds[r][k]};
  return {};
}

std::vector<Series> row_series(const Grouped& g, int prefix) {
  std::vector<Series> out;
  for (std::size_t r = 0; r < g.rows.size(); ++r) {
    Series se{g.rows[r], {}, {}, {}};
    for (std::size_t k = 0; k < g.cols.size(); ++k) {
      se.x.push_back(prefix < 0 ? static_cast<double>(k)
                                : std::stod(g.cols[k].substr(static_cast<std::size_t>(prefix))));
      se.y.push_back(mean(g.values[r][k]));
      se.err.push_back(sd(g.values[r][k]));
    }
    out.push_back(se);
  }
  return out;
}

std::string grouped_markdown(const Grouped& g, const std::string& corner, int digits) {
  Row header = {corner};
  for (const auto& c : g.cols)
    header.push_back(c);
  std::vector<Row> md;
  for (std::size_t r = 0; r < g.rows.size(); ++r) {
    Row line = {g.rows[r]};
    for (const auto& v : g.values[r])
      line.push_back(v.empty() ? "" : mean_sd(v, digits));
    md.push_back(line);
  }
  return markdown_table(header, md);
}

std::string write_grouped(const Grouped& g, const std::string& corner, const Outputs& out, int digits) {
  std::vector<Row> csv;
  for (std::size_t r = 0; r < g.rows.size(); ++r)
    for (std::size_t c = 0; c < g.cols.size(); ++c)
      if (const auto& v = g.values[r][c]; !v.empty())
        csv.push_back({g.rows[r], g.cols[c], fixed(mean(v), 9), fixed(sd(v), 9), std::to_string(v.size())});
  write_file_atomic(out.path(".csv"), csv_text({"row", "column", "mean", "sd", "runs"}, csv));
  const std::string text = grouped_markdown(g, corner, digits);
  write_file_atomic(out.path(".md"), text);
  return text;
}

double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = std::min(x.size(), y.size());
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < n; ++i)
    mx += x[i], my += y[i];
  mx /= static_cast<double>(n), my /= static_cast<double>(n);
  double sxy = 0, sxx = 0;
  for (std::size_t i = 0; i < n; ++i)
    sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  return sxx > 0 ? sxy / sxx : std::numeric_limits<double>::quiet_NaN();
}

Interval mean_interval(const std::vector<double>& v, double level) {
  Interval r;
  r.runs = static_cast<int>(v.size());
  if (v.empty()) return r;
  r.mean = mean(v);
  if (v.size() < 2) return r;
  const boost::math::students_t dist(static_cast<double>(v.size() - 1));
  const double half =
      boost::math::quantile(dist, 0.5 + level / 2) * sd(v) / std::sqrt(static_cast<double>(v.size()));
  r.lo = r.mean - half, r.hi = r.mean + half;
  return r;
}

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y, double level) {
  LineFit f;
  f.points = static_cast<int>(std::min(x.size(), y.size()));
  f.slope = slope(x, y);
  if (!std::isfinite(f.slope)) return f;
  const double a = mean(y) - f.slope * mean(x), mx = mean(x);
  double sxx = 0;
  for (int i = 0; i < f.points; ++i)
    f.residual += (y[i] - a - f.slope * x[i]) * (y[i] - a - f.slope * x[i]), sxx += (x[i] - mx) * (x[i] - mx);
  if (f.points < 3) return f;
  const boost::math::students_t dist(static_cast<double>(f.points - 2));
  const double half =
      boost::math::quantile(dist, 0.5 + level / 2) * std::sqrt(f.residual / (f.points - 2) / sxx);
  f.lo = f.slope - half, f.hi = f.slope + half;
  return f;
}

}  // namespace uatlab::experiment
