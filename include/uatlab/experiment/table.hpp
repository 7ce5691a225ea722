// The one aggregation of sweep lines: a metric grouped by (row, column) keys of the cells, one
// value per seed in each slot; its Markdown (mean ± sd), CSV (mean, sd, runs) and plot series.
#pragma once

#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "uatlab/experiment/experiment.hpp"
#include "uatlab/experiment/stats.hpp"
#include "uatlab/io/report.hpp"

namespace uatlab::experiment {

struct Grouped {
  std::vector<std::string> rows, cols;                       // in first-seen order
  std::vector<std::vector<std::vector<double>>> values;      // [row][col] -> one value per run
  std::vector<std::vector<std::vector<std::string>>> seeds;  // [row][col] -> each run's "seed" ("" if none)
};
Grouped group(const std::vector<json>& lines, const std::function<std::string(const json& cell)>& row,
              const std::function<std::string(const json& cell)>& col,
              const std::function<double(const json& result)>& value);
// The runs of one cell with their seeds (empty when the cell is absent), for the statistics layer.
Sample sample(const Grouped& g, const std::string& row, const std::string& col);
// One plot series per row (mean, sd as the error bar): x is the number after `prefix`
// characters of each column label ("m=32" with prefix 2), or the column's index when prefix < 0
// (categorical; set the plot's xtics to g.cols).
std::vector<Series> row_series(const Grouped& g, int prefix);
// The Markdown of a grouped table: mean ± sd per cell.
std::string grouped_markdown(const Grouped& g, const std::string& corner, int digits);
// Writes the Markdown and CSV (row, column, mean, sd, runs) of a grouped table; returns the Markdown.
std::string write_grouped(const Grouped& g, const std::string& corner, const Outputs& out, int digits = 4);

// The least-squares slope of y on x (NaN with fewer than two points or no spread in x).
double slope(const std::vector<double>& x, const std::vector<double>& y);
// The mean of v with its two-sided Student-t interval at `level` (lo, hi NaN below two values).
struct Interval {
  double mean = std::numeric_limits<double>::quiet_NaN(), lo = mean, hi = mean;
  int runs = 0;
};
Interval mean_interval(const std::vector<double>& v, double level = 0.95);
// The least-squares line of y on x: its slope with the two-sided Student-t interval at `level`
// (n − 2 degrees of freedom; lo, hi NaN below three points) and its sum of squared residuals.
struct LineFit {
  double slope = std::numeric_limits<double>::quiet_NaN(), lo = slope, hi = slope, residual = 0;
  int points = 0;
};
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y, double level = 0.95);

// The text of a JSON value for a label: strings without quotes, numbers as JSON writes them.
std::string label(const json& j);

}  // namespace uatlab::experiment
