// Kajitsuka & Sato's experiments: kajitsuka-delta (the measured separation δ of the context ids
// against Theorem 2's bound, over |V|) and kajitsuka-memorization (memorization.cpp).
#include <set>

#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/experiment/experiment.hpp"
#include "uatlab/experiment/memorization.hpp"
#include "uatlab/experiment/table.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/report.hpp"

namespace uatlab::experiment {

namespace {

// The demo family with n = 3, d = 2, N = 2|V|, seed 1, through build_contextual; faithful mode only
// up to |V| = 5 (its precision grows like |V|^4: 100,948 bits at |V| = 5).
Experiment delta_experiment() {
  Experiment e;
  e.name = "kajitsuka-delta";
  e.summary =
      "Kajitsuka & Sato Thm 2: certified context-id separation delta vs the theorem's bound over |V| "
      "(faithful and tuned)";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    for (int V : c.pick({4, 8}, {4, 5, 6, 8, 12, 16, 24, 32, 48, 64}, {4, 5, 6, 8, 12, 16, 24, 32, 48, 64}))
      for (const char* mode : {"faithful", "tuned"})
        if (std::string(mode) == "tuned" || V <= c.pick(4, 5, 5)) cells.push_back({{"V", V}, {"mode", mode}});
    return cells;
  };
  e.run = [](const json& cell, const Context&) {
    const int V = cell.at("V");
    const Dataset ds = kajitsuka::demo_dataset(2 * V, 3, 2, V, 1);
    const kajitsuka::Facts f = kajitsuka::analyse(ds);
    kajitsuka::ContextualOptions opt;
    opt.mode = kajitsuka::parse_mode(cell.at("mode"));
    opt.max_bits = 262144;
    const json r = kajitsuka::build_contextual(f, opt).report();
    return json{{"V", V},
                {"N", 2 * V},
                {"n", 3},
                {"d", 2},
                {"mode", cell.at("mode")},
                {"c", r.at("c")},
                {"c_theorem", r.at("c_theorem")},
                {"log10_delta", r.at("log10_delta")},
                {"log10_delta_bound", r.at("log10_delta_bound")},
                {"bits_used", r.at("bits_used")},
                {"min_bits", r.at("min_bits")},
                {"eps", f.eps},
                {"r_min", f.r_min},
                {"r_max", f.r_max}};
  };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    const Row header = {
        "V",         "N",        "n",   "d",     "mode", "c", "c_theorem", "log10_delta", "log10_delta_bound",
        "bits_used", "min_bits", "eps", "r_min", "r_max"};
    std::vector<Row> csv, md;
    Series bound{"Theorem 2 bound", {}, {}, {}}, faithful{"measured, faithful", {}, {}, {}},
        tuned{"measured, tuned", {}, {}, {}};
    std::set<int> bound_seen;
    for (const json& l : lines) {
      const json& r = l.at("result");
      Row row;
      for (const std::string& k : header)
        row.push_back(label(r[k]));
      csv.push_back(row);
      md.push_back({r.at("V").dump(), r.at("N").dump(), label(r.at("mode")), fixed(r.at("c"), 4),
                    fixed(r.at("log10_delta"), 4), fixed(r.at("log10_delta_bound"), 4),
                    r.at("bits_used").dump(), r.at("min_bits").dump()});
      const double V = r.at("V");
      if (bound_seen.insert(r.at("V").get<int>()).second) {
        bound.x.push_back(V);
        bound.y.push_back(-r.at("log10_delta_bound").get<double>());
      }
      Series& s = r.at("mode") == "faithful" ? faithful : tuned;
      s.x.push_back(V), s.y.push_back(-r.at("log10_delta").get<double>());
    }
    write_file_atomic(out.path(".csv"), csv_text(header, csv));
    const std::string text = markdown_table(
        {"|V|", "N", "mode", "c", "log10 δ measured", "log10 δ bound", "bits used", "min bits"}, md);
    write_file_atomic(out.path(".md"), text);
    LinePlot plot{"Context-id separation: measured vs Theorem 2's delta", "|V| (n = 3, d = 2, N = 2|V|)",
                  "-log10 delta (larger = closer contexts)"};
    plot.logx = plot.logy = true;
    plot.series = {bound, faithful, tuned};
    plot_png(out.path(".png"), plot);
    return text;
  };
  return e;
}

}  // namespace

std::vector<Experiment> kajitsuka_experiments() {
  return {kajitsuka_memorization_experiment(), delta_experiment()};
}

}  // namespace uatlab::experiment
