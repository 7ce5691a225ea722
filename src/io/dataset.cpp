#include "uatlab/io/dataset.hpp"

#include "uatlab/io/json.hpp"

namespace uatlab {

using nlohmann::json;

namespace {

Rational number(const json& v) {
  if (v.is_string()) return parse_rational(v.get<std::string>());
  if (v.is_number_integer()) return parse_rational(v.dump());
  throw Error("expected a number, got " + v.dump());
}

// n entries, each a number (k = 1) or an array of k numbers → k×n.
Mat<Rational> columns(const json& v, const std::string& field, bool allow_scalars) {
  if (!v.is_array() || v.empty()) throw Error("\"" + field + "\" must be a non-empty array");
  const bool scalars = !v[0].is_array();
  if (scalars && !allow_scalars)
    throw Error("\"" + field + "\" must be an array of tokens, each an array of numbers");
  const std::size_t k = scalars ? 1 : v[0].size();
  if (k == 0) throw Error("\"" + field + "\" entry 0 is empty");
  Mat<Rational> m(static_cast<Eigen::Index>(k), static_cast<Eigen::Index>(v.size()));
  for (std::size_t j = 0; j < v.size(); ++j) {
    if (scalars) {
      if (v[j].is_array()) throw Error("\"" + field + "\" mixes numbers and arrays");
      m(0, j) = number(v[j]);
      continue;
    }
    if (!v[j].is_array() || v[j].size() != k)
      throw Error("\"" + field + "\" entry " + std::to_string(j) + " has " +
                  (v[j].is_array() ? std::to_string(v[j].size()) : "no") + " values, entry 0 has " +
                  std::to_string(k));
    for (std::size_t i = 0; i < k; ++i)
      m(i, j) = number(v[j][i]);
  }
  return m;
}

}  // namespace

void label_last_token(Sequence& s, const Vec<Rational>& label) {
  const auto n = static_cast<Eigen::Index>(s.n());
  s.y = Mat<Rational>::Zero(label.size(), n);
  s.y.col(n - 1) = label;
  s.mask.assign(static_cast<std::size_t>(n), 0);
  s.mask.back() = 1;
}

Dataset parse_dataset(const std::string& text, const std::string& what) try {
  Dataset ds;
  std::size_t start = 0, line_no = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = what + " line " + std::to_string(line_no);
    try {
      json j = parse_json(line, "JSON", true);
      if (!j.is_object()) throw Error("a line must be a JSON object");
      for (auto& [k, _] : j.items())
        if (k != "x" && k != "tokens" && k != "y" && k != "mask")
          throw Error("unknown field \"" + k + "\" (expected x or tokens, and y, mask)");
      if (j.contains("x") == j.contains("tokens"))
        throw Error("a line needs exactly one of \"x\" and \"tokens\"");
      Sequence s;
      const bool tokens = j.contains("tokens");
      if (!ds.sequences.empty() && tokens != ds.token_input) throw Error("mixes \"x\" and \"tokens\" lines");
      ds.token_input = tokens;
      if (tokens) {
        const json& t = j["tokens"];
        if (!t.is_array() || t.empty()) throw Error("\"tokens\" must be a non-empty array of ids");
        for (auto& id : t) {
          if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > (1LL << 31) - 1)
            throw Error("token id " + id.dump() + " is not a non-negative integer");
          s.tokens.push_back(id.get<int>());
        }
      } else {
        s.x = columns(j["x"], "x", false);
        if (ds.sequences.empty())
          ds.d = static_cast<int>(s.x.rows());
        else if (s.x.rows() != ds.d)
          throw Error("tokens have " + std::to_string(s.x.rows()) +
                      " numbers, earlier lines have d = " + std::to_string(ds.d));
      }
      bool sequence_label = false;
      if (j.contains("y")) {
        const json& y = j["y"];
        // One label for the sequence (its last token's): a number, or a flat array of k != n numbers.
        sequence_label = !y.is_array() || (!y.empty() && !y[0].is_array() && y.size() != s.n());
        if (sequence_label) {
          const Mat<Rational> label = columns(y.is_array() ? y : json::array({y}), "y", true).transpose();
          if (j.contains("mask"))
            throw Error("\"y\" is one label, the last token's; a \"mask\" beside it contradicts it");
          label_last_token(s, label);
        } else {
          s.y = columns(y, "y", true);
          if (static_cast<std::size_t>(s.y.cols()) != s.n())
            throw Error("\"y\" has " + std::to_string(s.y.cols()) + " labels for " + std::to_string(s.n()) +
                        " tokens");
        }
      }
      if (!ds.sequences.empty() && sequence_label != ds.sequence_labels)
        throw Error(std::string("mixes lines with one label per sequence and lines with one per token") +
                    " (this line has " + (sequence_label ? "one per sequence" : "none or one per token") +
                    ")");
      ds.sequence_labels = sequence_label;
      if (j.contains("mask")) {
        const json& m = j["mask"];
        if (!m.is_array() || m.size() != s.n())
          throw Error("\"mask\" must be an array of " + std::to_string(s.n()) + " 0/1 values");
        for (auto& b : m) {
          if (!b.is_number_integer() || (b.get<long long>() != 0 && b.get<long long>() != 1))
            throw Error("\"mask\" entry " + b.dump() + " is not 0 or 1");
          s.mask.push_back(static_cast<char>(b.get<int>()));
        }
      }
      const int k = static_cast<int>(s.y.rows());
      if (!ds.sequences.empty() && k != ds.label_dim)
        throw Error("labels have dimension " + std::to_string(k) + ", earlier lines have " +
                    std::to_string(ds.label_dim));
      ds.label_dim = k;
      ds.sequences.push_back(std::move(s));
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
  }
  if (ds.sequences.empty()) throw Error(what + ": no sequences");
  return ds;
} catch (const nlohmann::json::exception& e) {  // a JSON value of an unexpected type
  throw Error(std::string(what) + ": malformed (" + e.what() + ")");
}

Dataset read_dataset(const std::string& path) {
  return parse_dataset(read_file(path), path);
}

std::string format_dataset(const Dataset& ds) {
  using nlohmann::json;
  std::string out;
  for (const Sequence& s : ds.sequences) {
    json line;
    if (ds.token_input)
      line["tokens"] = s.tokens;
    else {
      json x = json::array();
      for (Eigen::Index k = 0; k < s.x.cols(); ++k) {
        json tok = json::array();
        for (Eigen::Index i = 0; i < s.x.rows(); ++i)
          tok.push_back(s.x(i, k).str());
        x.push_back(tok);
      }
      line["x"] = x;
    }
    if (ds.sequence_labels) {  // the last token's label alone, as it was read
      json y = json::array();
      for (Eigen::Index i = 0; i < s.y.rows(); ++i)
        y.push_back(s.y(i, s.y.cols() - 1).str());
      line["y"] = s.y.rows() == 1 ? y[0] : y;
    } else if (s.y.size() > 0) {
      json y = json::array();
      for (Eigen::Index k = 0; k < s.y.cols(); ++k) {
        if (s.y.rows() == 1)
          y.push_back(s.y(0, k).str());
        else {
          json v = json::array();
          for (Eigen::Index i = 0; i < s.y.rows(); ++i)
            v.push_back(s.y(i, k).str());
          y.push_back(v);
        }
      }
      line["y"] = y;
    }
    if (!s.mask.empty() && !ds.sequence_labels) {
      json m = json::array();
      for (char b : s.mask)
        m.push_back(static_cast<int>(b));
      line["mask"] = m;
    }
    out += line.dump() + "\n";
  }
  return out;
}

}  // namespace uatlab
