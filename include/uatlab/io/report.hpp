// Experiment outputs: tables as CSV and Markdown, plots as PNG (through gnuplot, Debian's
// gnuplot-nox). Every file is written atomically: a failed plot or table leaves nothing behind.
#pragma once

#include <string>
#include <vector>

namespace uatlab {

using Row = std::vector<std::string>;

std::string csv_text(const Row& header, const std::vector<Row>& rows);        // RFC 4180 quoting
std::string markdown_table(const Row& header, const std::vector<Row>& rows);  // GitHub pipes
std::string fixed(double v, int digits);                                      // "%.{digits}g"
// "m ± sd" ("m" when all values are equal)
std::string mean_sd(const std::vector<double>& values, int digits);
double mean(const std::vector<double>& v);
// Σ (x − mean)² / (n − ddof), in two passes (E[x²] − E[x]² loses every digit when the mean is
// large against the spread, labels 1e8 ± 0.1): ddof 1, the sample variance; 0, the population's.
// 0 for n ≤ ddof.
double variance(const std::vector<double>& v, int ddof = 1);
double sd(const std::vector<double>& v);  // sample standard deviation, 0 for one value

struct Series {
  std::string label;
  std::vector<double> x, y, err;  // err empty, or one half-width per point (error bars)
  enum class Style { errorlines, lines, points } style = Style::errorlines;
};

struct LinePlot {
  LinePlot() = default;
  LinePlot(std::string t, std::string x, std::string y)
      : title(std::move(t)), xlabel(std::move(x)), ylabel(std::move(y)) {}
  std::string title, xlabel, ylabel;
  bool logx = false, logy = false;
  double ymin = 0, ymax = 0;  // ymin < ymax: a fixed y range (what leaves it is cut off)
  std::vector<Series> series;
  std::vector<std::string> xtics;  // non-empty: categorical x (x = 0, 1, ... labelled by these)
};

// A heat map of values[row][col] (NaN: no value, drawn blank), each cell labelled with its text.
struct HeatMap {
  std::string title, xlabel, ylabel, cblabel;
  std::vector<std::string> xtics, ytics;
  std::vector<std::vector<double>> values;
  std::vector<std::vector<std::string>> labels;  // optional, same shape
  bool logcb = false;
};

// A line plot draws only its series with points, and nothing at all when none has any (a report
// run on a part of its grid, `reproduce --only`).
void plot_png(const std::string& path, const LinePlot& plot);
void plot_png(const std::string& path, const HeatMap& plot);

}  // namespace uatlab
