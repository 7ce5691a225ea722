#include "uatlab/experiment/table.hpp"

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
    if (g.values.size() <= r) g.values.resize(r + 1);
    for (auto& v : g.values)
      v.resize(g.cols.size());
    g.values[r][c].push_back(value(l.at("result")));
  }
  for (auto& v : g.values)
    v.resize(g.cols.size());
  return g;
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

}  // namespace uatlab::experiment
