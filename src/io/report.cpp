#include "uatlab/io/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "uatlab/io/json.hpp"
#include "uatlab/model/scalar.hpp"

namespace uatlab {

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s)
    q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// gnuplot string literal (single quotes; a quote is doubled). Text is in gnuplot's enhanced mode:
// _{..} and ^{..} typeset sub- and superscripts; a literal & is escaped.
std::string gq(const std::string& s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("''") : c == '&' ? std::string("\\&") : std::string(1, c);
  return q + "'";
}

std::string num(double v) {
  return std::isfinite(v) ? fixed(v, 9) : "NaN";
}  // gnuplot's missing value

// Run gnuplot on a script that writes the PNG to a temporary file, then move it into place.
void run_gnuplot(const std::string& path, const std::string& body) {
  check_regular_file(path, true);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + ".png";
  std::string script = "set terminal pngcairo size 900,600 enhanced font 'Sans,11'\nset output " + gq(tmp) +
                       "\n" + body + "\nunset output\n";
  // gnuplot's chatter, shown on failure
  const std::string log = path + ".tmp." + std::to_string(::getpid()) + ".log";
  std::FILE* p = ::popen(("gnuplot > '" + log + "' 2>&1").c_str(), "w");
  if (!p) throw Error("cannot start gnuplot (install gnuplot-nox) to draw " + path);
  std::fwrite(script.data(), 1, script.size(), p);
  const int rc = ::pclose(p);
  std::string said;
  if (rc != 0) try {
      said = read_file(log);
    } catch (const Error&) {
    }
  std::remove(log.c_str());
  if (rc != 0) {
    std::remove(tmp.c_str());
    throw Error("gnuplot failed (exit " + std::to_string(rc) + ") drawing " + path +
                (rc == 127 * 256 ? ": gnuplot is not installed (apt-get install gnuplot-nox)" : ": " + said));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot write " + path);
  }
}

}  // namespace

std::string csv_text(const Row& header, const std::vector<Row>& rows) {
  std::string out;
  auto line = [&](const Row& r) {
    for (std::size_t i = 0; i < r.size(); ++i)
      out += (i ? "," : "") + csv_field(r[i]);
    out += "\n";
  };
  line(header);
  for (const Row& r : rows)
    line(r);
  return out;
}

std::string markdown_table(const Row& header, const std::vector<Row>& rows) {
  std::string out = "|";
  for (const auto& h : header)
    out += " " + h + " |";
  out += "\n|";
  for (std::size_t i = 0; i < header.size(); ++i)
    out += "---|";
  out += "\n";
  for (const Row& r : rows) {
    out += "|";
    for (const auto& c : r)
      out += " " + c + " |";
    out += "\n";
  }
  return out;
}

std::string fixed(double v, int digits) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v)
    s += x;
  return v.empty() ? std::nan("") : s / static_cast<double>(v.size());
}

double variance(const std::vector<double>& v, int ddof) {
  if (v.size() <= static_cast<std::size_t>(ddof)) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v)
    s += (x - m) * (x - m);
  return s / static_cast<double>(v.size() - static_cast<std::size_t>(ddof));
}

double sd(const std::vector<double>& v) {
  return std::sqrt(variance(v));
}

std::string mean_sd(const std::vector<double>& v, int digits) {
  if (v.size() < 2 || sd(v) == 0) return fixed(mean(v), digits);
  return fixed(mean(v), digits) + " ± " + fixed(sd(v), 2);
}

void plot_png(const std::string& path, const LinePlot& plot) {
  LinePlot p = plot;
  p.series.erase(
      std::remove_if(p.series.begin(), p.series.end(), [](const Series& se) { return se.x.empty(); }),
      p.series.end());
  if (p.series.empty()) return;
  std::ostringstream s;
  s << "set title " << gq(p.title) << "\nset xlabel " << gq(p.xlabel) << "\nset ylabel " << gq(p.ylabel)
    << "\nset grid\nset key outside right top\n";
  if (p.logx) s << "set logscale x\n";
  if (p.logy) s << "set logscale y\n";
  if (p.ymin < p.ymax) s << "set yrange [" << num(p.ymin) << ":" << num(p.ymax) << "]\n";
  if (!p.xtics.empty()) {
    s << "set xtics (";
    for (std::size_t i = 0; i < p.xtics.size(); ++i)
      s << (i ? ", " : "") << gq(p.xtics[i]) << " " << i;
    s << ")\nset xrange [-0.5:" << p.xtics.size() - 0.5 << "]\n";
    // Labels longer than the plot is wide (about 70 characters at 900 pixels) overlap: slanted,
    // each ends at its tic.
    std::size_t chars = 0;
    for (const std::string& t : p.xtics)
      chars += t.size() + 2;
    if (chars > 70) s << "set xtics rotate by 30 right\n";
  }
  for (std::size_t k = 0; k < p.series.size(); ++k) {
    const Series& se = p.series[k];
    s << "$d" << k << " << EOD\n";
    for (std::size_t i = 0; i < se.x.size(); ++i)
      s << num(se.x[i]) << " " << num(se.y[i]) << " " << num(se.err.empty() ? 0.0 : se.err[i]) << "\n";
    s << "EOD\n";
  }
  s << "plot ";
  for (std::size_t k = 0; k < p.series.size(); ++k)
    s << (k ? ", " : "") << "$d" << k
      << (p.series[k].style == Series::Style::errorlines ? " using 1:2:3 with yerrorlines lw 2 pt 7"
          : p.series[k].style == Series::Style::lines    ? " using 1:2 with lines lw 2"
                                                         : " using 1:2 with points pt 7 ps 0.8")
      << " title " << gq(p.series[k].label);
  run_gnuplot(path, s.str());
}

void plot_png(const std::string& path, const HeatMap& p) {
  std::ostringstream s;
  const std::size_t rows = p.values.size(), cols = rows ? p.values[0].size() : 0;
  s << "set title " << gq(p.title) << "\nset xlabel " << gq(p.xlabel) << "\nset ylabel " << gq(p.ylabel)
    << "\nset cblabel " << gq(p.cblabel) << "\nset palette rgbformulae 33,13,10\nunset key\n";
  if (p.logcb) s << "set logscale cb\n";
  s << "set xtics (";
  for (std::size_t i = 0; i < p.xtics.size(); ++i)
    s << (i ? ", " : "") << gq(p.xtics[i]) << " " << i;
  s << ")\nset ytics (";
  for (std::size_t i = 0; i < p.ytics.size(); ++i)
    s << (i ? ", " : "") << gq(p.ytics[i]) << " " << i;
  s << ")\nset xrange [-0.5:" << cols - 0.5 << "]\nset yrange [-0.5:" << rows - 0.5 << "]\n$m << EOD\n";
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      s << c << " " << r << " " << num(p.values[r][c]) << "\n";
  s << "EOD\n";
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const std::string text =
          p.labels.empty() ? (std::isfinite(p.values[r][c]) ? fixed(p.values[r][c], 3) : "") : p.labels[r][c];
      if (!text.empty())
        s << "set label " << gq(text) << " at " << c << "," << r << " center front font 'Sans,9'\n";
    }
  s << "plot $m using 1:2:3 with image\n";
  run_gnuplot(path, s.str());
}

}  // namespace uatlab
