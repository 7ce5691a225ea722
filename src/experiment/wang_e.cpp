// Wang & E (NeurIPS 2024): one experiment per insight, with uatlab's recipe (docs/theory/wang-e.md;
// the paper's own settings and numbers are not available).
#include <algorithm>
#include <cmath>
#include <optional>

#include "registry.hpp"
#include "wang_e.hpp"

#include "uatlab/experiment/table.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/model/network.hpp"

namespace uatlab::experiment {

namespace wang_e {

// A claim on one metric of two cells of grouped tables: a (row_a, col_a) of ga against b (row_b, col_b)
// of gb, on the log10 scale (losses and errors span decades); the second form takes both from one table.
Comparison compare(const std::string& claim, const std::string& comparison, const Grouped& ga,
                   const std::string& row_a, const std::string& col_a, const Grouped& gb,
                   const std::string& row_b, const std::string& col_b, ClaimKind kind = ClaimKind::lower,
                   double margin = 0) {
  Comparison c{claim, comparison, kind, sample(ga, row_a, col_a), sample(gb, row_b, col_b)};
  c.margin = margin;
  return c;
}
Comparison compare(const std::string& claim, const std::string& comparison, const Grouped& g,
                   const std::string& row_a, const std::string& col_a, const std::string& row_b,
                   const std::string& col_b, ClaimKind kind = ClaimKind::lower, double margin = 0) {
  return compare(claim, comparison, g, row_a, col_a, g, row_b, col_b, kind, margin);
}

// ---- language modelling (Tables 2 and 7) -------------------------------------------------------

struct LmShape {
  int d, n, head_size, m;
};
LmShape lm_shape(const Context& c) {
  return c.pick(LmShape{16, 16, 4, 32}, LmShape{32, 64, 8, 128}, LmShape{64, 128, 16, 256});
}

json train_lm(const json& cell, const Context& c, const std::vector<LayerSpec>& layers, bool positional) {
  const LmShape s = lm_shape(c);
  TaskTraining t;
  t.task = "chars";
  t.data.corpus = c.corpus;
  t.data.n = s.n;
  t.data.N = c.pick(64, 8000, 20000);
  t.data.seed = cell.at("seed").get<int>();
  t.val_N = c.pick(16, 256, 1024);
  t.arch.vocab = task("chars").shape(t.data).outputs;
  t.arch.readout = t.arch.vocab;
  t.arch.d = s.d;
  t.arch.max_len = positional ? s.n : 0;
  t.arch.layers = layers;
  t.cfg = config(c, 3e-3, Loss::cross_entropy, t.data.seed);
  t.init_seed = t.data.seed;
  t.adjust = [](Network<double>& net) { spread_rates(net, 0.05, 2.0); };
  return train_task(t);
}

// Type I (adaptive-1) or Type II (adaptive-2) memory: token 2c + b with lags (1, 3, 7), learned
// positions, the LM shape's width.
json train_memory(const json& cell, const Context& c, const std::vector<LayerSpec>& layers) {
  const LmShape s = lm_shape(c);
  TaskTraining t;
  t.task = cell.at("task");
  t.data.lags = {1, 3, 7};
  t.data.n = c.pick(16, 32, 64);
  t.data.N = c.pick(128, 4000, 8000);
  t.data.seed = cell.at("seed").get<int>();
  t.val_N = c.pick(32, 512, 1024);
  t.arch.vocab = task(t.task).shape(t.data).vocab;
  t.arch.readout = 2;
  t.arch.d = s.d;
  t.arch.max_len = t.data.n;
  t.arch.layers = layers;
  t.cfg = config(c, 3e-3, Loss::cross_entropy, t.data.seed);
  t.init_seed = t.data.seed;
  return train_task(t);
}

// A 1a cell's budget rule: the one-layer cells, which serve both rules, carry "equal total".
std::string budget_of(const json& cell) {
  return cell.value("budget", std::string("equal total"));
}

Experiment insight_1a() {
  Experiment e;
  e.name = "wang-e-1a";
  e.summary =
      "Insight 1a (Table 2): depth L vs heads H at equal parameters (and at equal FFN width): language "
      "modelling, Type I and Type II memories";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    using Shapes = std::vector<std::pair<int, int>>;
    const Shapes shapes = c.pick(Shapes{{1, 4}, {2, 2}, {4, 1}}, Shapes{{1, 4}, {2, 2}, {4, 1}},
                                 Shapes{{1, 8}, {2, 4}, {4, 2}, {8, 1}});
    // Language modelling (no "task" key), and the mechanism behind the insight on synthetic data:
    // Type I adaptive memory (one look-up) and Type II (a nested look-up, which needs depth).
    for (int seed = 1; seed <= c.verdict_seeds(); ++seed)
      for (std::string task : {"chars", "adaptive-1", "adaptive-2"})
        for (const char* budget : {"equal total", "equal width"})
          for (auto [L, H] : shapes) {
            // One layer is the same model under both rules (width s.m): it runs once, as "equal
            // total", and the report shows it under both.
            if (L == 1 && std::string(budget) == "equal width") continue;
            json cell = {{"L", L}, {"H", H}, {"seed", seed}, {"steps", steps(c)}, {"budget", budget}};
            if (task != "chars") cell["task"] = task;
            cells.push_back(cell);
          }
    return cells;
  };
  e.run = [](const json& cell, const Context& c) {
    const LmShape s = lm_shape(c);
    const int L = cell.at("L"), H = cell.at("H"), Hmax = L * H;
    // "equal total": the parameters of one layer with Hmax heads and width s.m, spread over L
    // layers: each layer keeps H heads and gets the FFN width that fills its share (deeper models
    // have narrower FFNs). "equal width": every layer has width s.m and H heads, so the attention
    // parameters are equal (L·H heads in all) and the FFN parameters grow with L.
    const int attn = 4 * s.d * s.head_size, norms = 4 * s.d;
    const int budget = Hmax * attn + (2 * s.d + 1) * s.m + s.d + norms;
    const int m = budget_of(cell) == "equal width"
                      ? s.m
                      : std::max(4, (budget / L - H * attn - s.d - norms) / (2 * s.d + 1));
    std::vector<LayerSpec> layers;
    for (int l = 0; l < L; ++l) {
      layers.push_back(attention(H, s.head_size, false, Rpe::none, true));
      layers.push_back(feedforward(m, true));
    }
    json r = cell.contains("task") ? train_memory(cell, c, layers) : train_lm(cell, c, layers, true);
    r["m"] = m;
    return r;
  };
  e.report = [](const std::vector<json>& ran, const Outputs& out, const Context&) {
    // Rule by rule, the one-layer runs under each rule that has deeper runs (a report of the
    // equal-total cells alone, `--only "budget=equal total"`, has no equal-width rows).
    std::vector<json> lines;
    for (const std::string budget : {"equal total", "equal width"}) {
      const bool deeper = std::any_of(ran.begin(), ran.end(), [&](const json& l) {
        return l.at("cell").at("L") != 1 && budget_of(l.at("cell")) == budget;
      });
      for (const json& l : ran)
        if ((l.at("cell").at("L") == 1 && deeper) || budget_of(l.at("cell")) == budget) {
          json c = l;
          c["cell"]["budget"] = budget;
          lines.push_back(c);
        }
    }
    auto model = [](const json& c) {
      return "L=" + label(c.at("L")) + ", H=" + label(c.at("H")) + ", " + budget_of(c);
    };
    auto task = [](const json& c) {
      return c.contains("task")
                 ? std::string(c.at("task") == "adaptive-1" ? "Type I memory" : "Type II memory")
                 : std::string("language modelling");
    };
    Grouped g = group(lines, model, task, [](const json& r) { return r.at("val_loss").get<double>(); });
    std::vector<json> synthetic, lm;
    for (const json& l : lines)
      (l.at("cell").contains("task") ? synthetic : lm).push_back(l);
    if (!lm.empty()) {  // the parameter count of each LM model (the synthetic ones have a smaller vocabulary)
      Grouped p = group(
          lm, model, [](const json&) { return std::string("parameters (LM)"); },
          [](const json& r) { return r.at("parameters").get<double>(); });
      for (std::size_t r = 0; r < g.rows.size(); ++r)
        g.values[r].push_back(p.values[r][0]), g.seeds[r].push_back(p.seeds[r][0]);
      g.cols.push_back("parameters (LM)");
    }
    std::string md = "Validation loss (language modelling: nats/char; Type I/II: cross-entropy):\n\n" +
                     write_grouped(g, "model", out, 5);
    if (!synthetic.empty())
      md += "\n" + grouped_markdown(group(synthetic, model, task,
                                          [](const json& r) { return r.at("val_accuracy").get<double>(); }),
                                    "validation accuracy", 3);
    // Per budget rule and task: the deepest model against the one-layer one. The positive control
    // is the Type II memory at equal width: a nested look-up needs two layers (docs/theory/wang-e.md),
    // whatever the budget rule; a run of the equal-total cells alone takes it at equal total.
    std::vector<Comparison> v;
    std::optional<std::size_t> control;
    for (const std::string budget : {"equal total", "equal width"}) {
      std::vector<std::string> rows;
      for (const std::string& r : g.rows)
        if (r.size() > budget.size() && r.compare(r.size() - budget.size(), std::string::npos, budget) == 0)
          rows.push_back(r);
      if (rows.size() < 2) continue;
      for (const std::string& col : g.cols)
        if (col != "parameters (LM)") {
          v.push_back(compare("more depth lowers the loss (" + budget + ")",
                              rows.back() + " vs " + rows.front() + ", " + col, g, rows.back(), col,
                              rows.front(), col));
          if (col == "Type II memory") control = v.size() - 1;  // equal width's replaces equal total's
        }
    }
    if (control) v[*control].control = true;
    md += verdict_markdown(v);
    write_file_atomic(out.path(".md"), md);
    Grouped t = group(lines, task, model, [](const json& r) { return r.at("val_loss").get<double>(); });
    LinePlot plot{"Wang & E Insight 1a: depth vs heads at equal parameters", "model",
                  "validation cross-entropy"};
    plot.logy = true;
    plot.xtics = t.cols;
    plot.series = row_series(t, -1);
    plot_png(out.path(".png"), plot);
    return md;
  };
  return e;
}

Experiment insight_3b() {
  Experiment e;
  e.name = "wang-e-3b";
  e.summary =
      "Insight 3b (Table 7): DP vs DP-free attention (with RPE), character-level language modelling, with "
      "an adaptive memory as the positive control";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    for (int seed = 1; seed <= c.verdict_seeds(); ++seed) {
      for (std::string rpe : {"lin", "log"})
        for (bool dp : {true, false})
          cells.push_back({{"dp", dp}, {"rpe", rpe}, {"seed", seed}, {"steps", steps(c)}});
      // The positive control: the same models on a Type I adaptive memory, where DP is needed
      // (3a): a set-up that cannot see DP help there cannot show that it does not help on text.
      for (bool dp : {true, false})
        cells.push_back(
            {{"dp", dp}, {"rpe", "lin"}, {"seed", seed}, {"steps", steps(c)}, {"task", "adaptive-1"}});
    }
    return cells;
  };
  e.run = [](const json& cell, const Context& c) {
    const LmShape s = lm_shape(c);
    const Rpe rpe = cell.at("rpe") == "lin" ? Rpe::lin : Rpe::log;
    std::vector<LayerSpec> layers;
    for (int l = 0; l < 2; ++l) {
      layers.push_back(attention(4, s.head_size, !cell.at("dp").get<bool>(), rpe, true));
      layers.push_back(feedforward(s.m, true));
    }
    return cell.contains("task") ? train_memory(cell, c, layers) : train_lm(cell, c, layers, false);
  };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    // Validation loss (the claim), and the loss on the training windows beside it: a model that
    // fits the training text better and held-out text worse is overfitting, not better.
    auto loss = [&](const char* key) {
      return group(
          lines,
          [](const json& c) {
            return std::string(c.at("dp").get<bool>() ? "DP + RPE" : "DP-free (RPE only)");
          },
          [](const json& c) {
            return (c.contains("task") ? "adaptive memory (control), " : "") + label(c.at("rpe")) +
                   "-type RPE";
          },
          [key](const json& r) { return r.at(key).get<double>(); });
    };
    const Grouped g = loss("val_loss"), train = loss("train_loss");
    std::string md = write_grouped(g, "attention (2 layers, 4 heads)", out) +
                     "\nLoss on the training windows:\n\n" +
                     grouped_markdown(train, "attention (2 layers, 4 heads)", 4);
    std::vector<Comparison> v;
    for (const auto& [what, t] : {std::pair{"language modelling", &g}, std::pair{"training windows", &train}})
      for (const std::string& col : t->cols) {
        const bool control = col.rfind("adaptive", 0) == 0;
        if (control && t == &train) continue;
        v.push_back(compare(control ? "DP lowers the loss (adaptive memory)"
                                    : std::string("DP lowers the loss (") + what + ")",
                            "DP + RPE vs DP-free, " + col, *t, "DP + RPE", col, "DP-free (RPE only)", col));
        v.back().control = control;
      }
    md += verdict_markdown(v);
    write_file_atomic(out.path(".md"), md);
    LinePlot plot{"Wang & E Insight 3b: DP vs DP-free on language modelling", "RPE type",
                  "validation cross-entropy"};
    plot.xtics = g.cols;
    plot.series = row_series(g, -1);
    plot_png(out.path(".png"), plot);
    return md;
  };
  return e;
}

// ---- single-layer (H, m) grids on fixed sparse memories (Tables 3, 4, 6) ------------------------

enum class Claim { heads_help, width_not_heads, heads_not_width, dp };
struct GridTask {
  std::string name, label;  // the task, and its name in the tables when a grid has several
  std::vector<int> lags;
};
struct GridSpec {
  std::string name, summary;
  std::vector<GridTask> tasks;  // several: a "task" key per cell (and "lags" when they differ)
  std::string title;
  Claim claim = Claim::heads_help;
  bool with_dp = false;  // also DP + RPE heads (Table 6)
  double omega = 4;      // complex-readout frequency
  // Tasks of extra cells only, not of the grid (3a: adaptive memories with more lags than heads);
  // their cells always carry "lags".
  struct Extra {
    GridTask task;
    int few;      // the aiming arms' heads, fewer than the lags
    bool narrow;  // at the grid's smallest FFN width instead of its largest (extra_width)
    std::string claim;
  };
  std::vector<Extra> extras = {};
};

std::string lags_text(const std::vector<int>& lags) {
  std::string t;
  for (int l : lags)
    t += (t.empty() ? "" : ",") + std::to_string(l);
  return t;
}
bool lags_differ(const GridSpec& spec) {
  for (const GridTask& t : spec.tasks)
    if (t.lags != spec.tasks.front().lags) return true;
  return false;
}
const GridTask& task_of(const GridSpec& spec, const json& cell) {
  for (const GridTask& t : spec.tasks)
    if (cell.value("task", t.name) == t.name && cell.value("lags", lags_text(t.lags)) == lags_text(t.lags))
      return t;
  for (const GridSpec::Extra& x : spec.extras)
    if (cell.value("lags", "") == lags_text(x.task.lags)) return x.task;
  throw Error("no task of " + spec.name + " matches the cell " + cell.dump());
}
// The FFN width of an extra task's cells, from the grid's widths ms: the largest, or the smallest
// when narrow; 0 (no cells) when narrow and the grid has one width, where narrow would be wide.
int extra_width(const GridSpec::Extra& x, const std::vector<int>& ms) {
  if (!x.narrow) return ms.back();
  return ms.size() > 1 ? ms.front() : 0;
}
// A column's prefix: the task's label when the grid has several tasks (or extra ones).
std::string prefix(const GridSpec& spec, const GridTask& t) {
  return spec.tasks.size() > 1 || !spec.extras.empty() ? t.label + ", " : std::string();
}

// The computed verdicts of an (H, m) grid (Markdown); rows "H=…" (or "DP, H=…", "DP-free, H=…"),
// columns "m=…" (or "<task>, m=…"). "Little to no effect" is an equivalence within a factor of 2
// (±0.3 decades) on MSE / Var, within 5% (±0.02 decades) on a cross-entropy; "DP is not necessary" lets
// DP-free be at most a factor of 10 (1 decade) above DP. control and aiming: 3a's control cells and
// its arms that aim at lags, DP heads with rotary positions and DP-free heads with a T5 table (empty
// for the other grids).
std::string grid_verdicts(const GridSpec& spec, const Grouped& g, const Grouped& control,
                          const Grouped& aiming, const std::vector<int>& Hs, const std::vector<int>& ms) {
  std::vector<Comparison> v;
  std::string measured;
  const std::string h1 = "H=" + std::to_string(Hs.front()), hn = "H=" + std::to_string(Hs.back());
  const std::string m1 = "m=" + std::to_string(ms.front()), mn = "m=" + std::to_string(ms.back());
  if (spec.claim == Claim::heads_help) {
    // The control: on the last task one DP-free head (one monotone average of the past) cannot
    // separate the lags, so more heads must help there (docs/theory/wang-e.md).
    for (const GridTask& t : spec.tasks) {
      const std::string p = prefix(spec, t), mc = p + mn;
      v.push_back(compare("more heads lower the loss", hn + " vs " + h1 + " at " + mc, g, hn, mc, h1, mc));
      v.back().control = &t == &spec.tasks.back();
      double best = 1e300;
      std::string where;
      for (std::size_t r = 0; r < g.rows.size(); ++r)
        for (std::size_t k = 0; k < g.cols.size(); ++k)
          if (g.cols[k].rfind(p, 0) == 0 && !g.values[r][k].empty() && mean(g.values[r][k]) < best)
            best = mean(g.values[r][k]), where = g.rows[r] + ", " + g.cols[k];
      measured += "\n- Measured, not tested: the best cell's mean validation loss" +
                  (p.empty() ? std::string() : " (" + t.label + ")") + " is " + fixed(best, 3) + " (" +
                  where + "), " + (best < 0.01 ? "below" : "not below") + " 0.01.";
    }
  } else if (spec.claim == Claim::width_not_heads || spec.claim == Claim::heads_not_width) {
    // P: the factor claimed to matter (m for 2a, H for 2b; the control), S: the one claimed not to.
    const bool width = spec.claim == Claim::width_not_heads;
    const std::string P = width ? "m" : "H", S = width ? "H" : "m";
    const std::string big_row = width ? h1 : hn, big_col = width ? mn : m1;
    v.push_back(compare("a larger " + P + " lowers the error",
                        (width ? mn + " vs " + m1 + " at " + h1 : hn + " vs " + h1 + " at " + m1), g, big_row,
                        big_col, h1, m1));
    v.back().control = true;
    // The margin: a factor of 2 for an error that spans decades (MSE / Var), 5% for a
    // cross-entropy, whose whole range from chance to a good model is a fraction of a decade.
    const bool ce = task(spec.tasks.front().name).loss == Loss::cross_entropy;
    v.push_back(compare("a larger " + S + " has little to no effect",
                        (width ? hn + " vs " + h1 + " at " + mn : mn + " vs " + m1 + " at " + hn), g, hn, mn,
                        big_row, big_col, ClaimKind::equivalent, ce ? 0.02 : 0.3));
  } else {
    for (const GridTask& t : spec.tasks) {
      const std::string col = prefix(spec, t) + mn;
      if (t.name == "sparse-boolean") {
        v.push_back(compare("DP is not necessary for a fixed memory", "DP-free vs DP, " + hn + ", " + col, g,
                            "DP-free, " + hn, col, "DP, " + hn, col, ClaimKind::not_higher, 1));
        v.push_back(compare("DP is not necessary for a fixed memory, against DP with rotary positions",
                            "DP-free vs DP + rotary, " + hn + ", " + col, g, "DP-free, " + hn, col, aiming,
                            "DP + rotary, " + hn, col, ClaimKind::not_higher, 1));
        v.push_back(compare("DP is not necessary for a fixed memory, both kinds aiming at lags",
                            "DP-free with T5 vs DP + rotary, " + hn + ", " + col, aiming,
                            "DP-free, T5, " + hn, col, aiming, "DP + rotary, " + hn, col,
                            ClaimKind::not_higher, 1));
      } else {  // with the RPE alone, with rotary positions, and the control with absolute positions
        v.push_back(compare("DP is necessary for an adaptive memory", "DP vs DP-free, " + hn + ", " + col, g,
                            "DP, " + hn, col, "DP-free, " + hn, col));
        v.push_back(compare("DP with rotary positions is necessary for an adaptive memory",
                            "DP + rotary vs DP-free, " + hn + ", " + col, aiming, "DP + rotary, " + hn, col,
                            g, "DP-free, " + hn, col));
        v.push_back(compare("DP is necessary for an adaptive memory, both kinds aiming at lags",
                            "DP + rotary vs DP-free with T5, " + hn + ", " + col, aiming,
                            "DP + rotary, " + hn, col, aiming, "DP-free, T5, " + hn, col));
        v.push_back(compare("DP with positions is necessary for an adaptive memory",
                            "DP vs DP-free, both with positions, " + hn + ", " + col, control, "DP, " + hn,
                            col, "DP-free, " + hn, col));
        v.back().control = true;
      }
    }
    for (const GridSpec::Extra& x : spec.extras) {
      const int m = extra_width(x, ms);
      if (m == 0) continue;
      const std::string col = prefix(spec, x.task) + "m=" + std::to_string(m),
                        few = "H=" + std::to_string(x.few),
                        one_each = "H=" + std::to_string(x.task.lags.size());
      v.push_back(compare(x.claim, "DP + rotary vs DP-free with T5, " + few + ", " + col, aiming,
                          "DP + rotary, " + few, col, aiming, "DP-free, T5, " + few, col));
      v.push_back(compare("DP-free heads read that memory with one head per lag",
                          "DP-free with T5, " + one_each + " vs " + few + ", " + col, aiming,
                          "DP-free, T5, " + one_each, col, aiming, "DP-free, T5, " + few, col));
      v.back().control = true;
    }
  }
  return verdict_markdown(v) + measured + (measured.empty() ? "" : "\n");
}

std::vector<int> grid_heads(const GridSpec& spec, const Context& c) {
  return spec.with_dp ? c.pick({1, 2}, {1, 4}, {1, 2, 4, 8}) : c.pick({1, 2}, {1, 2, 4, 8}, {1, 2, 4, 8, 16});
}
std::vector<int> grid_widths(const GridSpec& spec, const Context& c) {
  return spec.with_dp ? c.pick({8}, {16, 64}, {8, 32, 128, 512})
                      : c.pick({8, 16}, {8, 32, 128}, {8, 32, 128, 512});
}

// An (H, m) grid of train_single_layer.
Experiment hm_grid(const GridSpec& spec) {
  Experiment e;
  e.name = spec.name;
  e.summary = spec.summary;
  e.cells = [spec](const Context& c) {
    std::vector<json> cells;
    for (int seed = 1; seed <= c.verdict_seeds(); ++seed)
      for (const GridTask& t : spec.tasks)
        for (bool dp : spec.with_dp ? std::vector<bool>{false, true} : std::vector<bool>{false})
          for (int H : grid_heads(spec, c))
            for (int m : grid_widths(spec, c)) {
              json cell = {{"H", H}, {"m", m}, {"seed", seed}, {"steps", steps(c)}, {"window", "max lag"}};
              if (spec.with_dp) cell["dp"] = dp;
              if (spec.tasks.size() > 1) cell["task"] = t.name;
              if (lags_differ(spec)) cell["lags"] = lags_text(t.lags);
              cells.push_back(cell);
            }
    // 3a's extra arms, at the grid's largest H and m. The positive control: with the RPE as the only
    // position signal a DP head's dot product sees no position, so it cannot pick the lag the token
    // asks for; with learned absolute positions (both arms) it can. The fair DP arm: rotary
    // positions turn a DP head's queries and keys so that its dot product sees the offset between
    // them, the relative position a DP-free head has in its RPE; still no absolute positions. Its
    // DP-free counterpart: a T5 table (one learned bias per lag here) can aim at any lag, where a
    // lin-type head's weights are monotone in the lag.
    // The extra tasks, adaptive memories with more possible lags than the arms' heads: heads that
    // can aim but not choose (DP-free, T5) must carry the lags they do not pick as mixtures for the
    // FFN to decode, or have one head per lag (the control, which shows the set-up can see it).
    auto corner = [&](int seed, bool dp, const GridTask& t, const char* key, const json& value, int H = 0,
                      int m = 0) {
      json cell = {{"H", H > 0 ? H : grid_heads(spec, c).back()},
                   {"m", m > 0 ? m : grid_widths(spec, c).back()},
                   {"seed", seed},
                   {"steps", steps(c)},
                   {"window", "max lag"},
                   {"dp", dp},
                   {"task", t.name},
                   {key, value}};
      if (std::none_of(spec.tasks.begin(), spec.tasks.end(), [&](const GridTask& g) { return &g == &t; }))
        cell["lags"] = lags_text(t.lags);
      cells.push_back(cell);
    };
    if (spec.claim == Claim::dp) {
      for (int seed = 1; seed <= c.verdict_seeds(); ++seed)
        for (bool dp : {false, true})
          corner(seed, dp, spec.tasks.back(), "positions", true);
      for (int seed = 1; seed <= c.verdict_seeds(); ++seed)
        for (const GridTask& t : spec.tasks) {
          corner(seed, true, t, "rope", kRotaryBase);
          corner(seed, false, t, "rpe", "t5");
        }
      for (const GridSpec::Extra& x : spec.extras) {
        const int m = extra_width(x, grid_widths(spec, c));
        if (m == 0) continue;
        for (int seed = 1; seed <= c.verdict_seeds(); ++seed) {
          corner(seed, true, x.task, "rope", kRotaryBase, x.few, m);
          corner(seed, false, x.task, "rpe", "t5", x.few, m);
          corner(seed, false, x.task, "rpe", "t5", static_cast<int>(x.task.lags.size()), m);
        }
      }
    }
    return cells;
  };
  e.run = [spec](const json& cell, const Context& c) {
    const GridTask& t = task_of(spec, cell);
    return train_single_layer(t.name, t.lags, spec.omega, cell.at("H"), cell.at("m"), cell.value("dp", false),
                              cell.at("seed"), c, cell.value("positions", false), cell.value("rope", 0),
                              rpe_names.parse(cell.value("rpe", "lin")));
  };
  e.report = [spec](const std::vector<json>& all, const Outputs& out, const Context& c) {
    // the grid, 3a's control cells, and its arms that can aim at a lag (rotary DP, T5 DP-free)
    std::vector<json> lines, control, aiming;
    for (const json& l : all)
      (l.at("cell").value("positions", false)                                          ? control
       : l.at("cell").value("rope", 0) > 0 || l.at("cell").value("rpe", "lin") == "t5" ? aiming
                                                                                       : lines)
          .push_back(l);
    const bool ce = task(spec.tasks.front().name).loss == Loss::cross_entropy;
    auto row = [spec](const json& c) {
      return (spec.with_dp ? std::string(c.at("dp").get<bool>() ? "DP, " : "DP-free, ") : std::string()) +
             "H=" + label(c.at("H"));
    };
    auto col = [spec](const json& c) { return prefix(spec, task_of(spec, c)) + "m=" + label(c.at("m")); };
    auto value = [ce](const json& r) { return r.at(ce ? "val_loss" : "val_nmse").get<double>(); };
    Grouped g = group(lines, row, col, value);
    std::string md = write_grouped(g, ce ? "validation loss" : "validation MSE / Var(y)", out);
    LinePlot plot{spec.title, "FFN width m", ce ? "validation cross-entropy" : "validation MSE / Var(y)"};
    plot.logx = true;
    plot.logy = !ce;
    if (spec.tasks.size() > 1) {  // one series per row and task
      plot.series.clear();
      for (const GridTask& t : spec.tasks) {
        std::vector<json> mine;
        for (const json& l : lines)
          if (&task_of(spec, l.at("cell")) == &t) mine.push_back(l);
        Grouped gt = group(
            mine, [&](const json& cc) { return t.label + ", " + row(cc); },
            [](const json& cc) { return "m=" + label(cc.at("m")); }, value);
        for (Series& se : row_series(gt, 2))
          plot.series.push_back(std::move(se));
      }
    } else
      plot.series = row_series(g, 2);
    plot_png(out.path(".png"), plot);
    if (ce)  // accuracy beside the loss
      md += "\nValidation accuracy:\n\n" +
            grouped_markdown(
                group(lines, row, col, [](const json& r) { return r.at("val_accuracy").get<double>(); }),
                "accuracy", 3);
    const Grouped gc = group(control, row, col, value);
    if (!control.empty())
      md += "\nThe positive control, with learned absolute positions in both arms:\n\n" +
            grouped_markdown(gc, ce ? "validation loss" : "validation MSE / Var(y)", 4);
    const Grouped gr = group(
        aiming,
        [](const json& cc) {
          return std::string(cc.value("rope", 0) > 0 ? "DP + rotary" : "DP-free, T5") +
                 ", H=" + label(cc.at("H"));
        },
        col, value);
    if (!aiming.empty())
      md +=
          "\nHeads that can aim at a lag without absolute positions: DP heads with rotary positions (RoPE, "
          "base " +
          std::to_string(kRotaryBase) +
          ") and DP-free heads with a T5 table (a learned bias per lag) instead of the lin-type RPE; "
          "compare the grid's rows:\n\n" +
          grouped_markdown(gr, ce ? "validation loss" : "validation MSE / Var(y)", 4);
    md += grid_verdicts(spec, g, gc, gr, grid_heads(spec, c), grid_widths(spec, c));
    write_file_atomic(out.path(".md"), md);
    return md;
  };
  return e;
}

// The parts of 4a: `short`, the memories of Table 8 over 32 lags (64 in full mode), and `long`, a
// heavier tail (s^-1.125) over T = 512 lags (1,024 in full mode), where a sum of few exponentials is
// furthest from the power law; 64 scored positions per sequence (--only part=short: minutes; long:
// about an hour here).
bool long_memory(const json& cell) {
  return cell.value("part", "") == "long";
}

Experiment insight_4a() {
  Experiment e;
  e.name = "wang-e-4a";
  e.summary =
      "Insight 4a (Table 8): log vs lin RPE, H heads, single-layer FFN-free DP-free, heavy and light-tailed "
      "kernels and a tempered one inside neither class; a heavier tail over T = 512 lags";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    for (int seed = 1; seed <= c.verdict_seeds(); ++seed)
      for (std::string tail : {"heavy", "light", "tempered"})
        for (std::string rpe : {"log", "lin"})
          for (int H : c.pick({1, 2}, {1, 2, 4, 8}, {1, 2, 4, 8, 16, 32}))
            cells.push_back({{"part", "short"},
                             {"tail", tail},
                             {"rpe", rpe},
                             {"H", H},
                             {"seed", seed},
                             {"window", "n/2"},
                             {"steps", steps(c)}});
    for (int seed = 1; seed <= c.verdict_seeds(); ++seed)
      for (std::string rpe : {"log", "lin"})
        for (int H : c.pick({1, 2}, {1, 4, 16}, {1, 4, 16}))
          cells.push_back({{"part", "long"},
                           {"tail", "heavier"},
                           {"rpe", rpe},
                           {"H", H},
                           {"seed", seed},
                           {"T", c.pick(16, 512, 1024)},
                           {"scored", c.pick(8, 64, 64)},
                           {"steps", steps(c)}});
    return cells;
  };
  e.run = [](const json& cell, const Context& c) {
    if (long_memory(cell))
      return train_kernel(cell.at("tail"), cell.at("rpe"), cell.at("H"), cell.at("T"), cell.at("seed"), c,
                          cell.at("scored"));
    return train_kernel(cell.at("tail"), cell.at("rpe"), cell.at("H"), c.pick(16, 32, 64), cell.at("seed"),
                        c);
  };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    std::vector<json> short_lines, long_lines;
    for (const json& l : lines)
      (long_memory(l.at("cell")) ? long_lines : short_lines).push_back(l);
    const auto row = [](const json& c) {
      return tail_label(c.at("tail")) + ", " + label(c.at("rpe")) + "-type";
    };
    const auto col = [](const json& c) { return "H=" + label(c.at("H")); };
    const auto nmse = [](const json& r) { return r.at("val_nmse").get<double>(); };
    std::vector<Comparison> v;
    std::string md;
    if (!short_lines.empty()) {
      const Grouped g = group(short_lines, row, col, nmse);
      md += write_grouped(g, "validation MSE / Var(y)", out);
      // Log against lin at one head and at the most heads (a family small enough for Holm): heavy
      // tails favour log (4a), light tails lin (4b). The control: at H = 1 the heavy-tailed kernel
      // is one log-type head exactly and no lin-type head.
      const std::string one = g.cols.front(), most = g.cols.back();
      for (const std::string& h : {one, most}) {
        v.push_back(compare("log-type RPE fits a heavy-tailed memory better",
                            "log vs lin, heavy-tailed, " + h, g, "heavy-tailed, log-type", h,
                            "heavy-tailed, lin-type", h));
        v.back().control = h == one;
        v.push_back(compare("lin-type RPE fits a light-tailed memory better",
                            "lin vs log, light-tailed, " + h, g, "light-tailed, lin-type", h,
                            "light-tailed, log-type", h));
      }
      // The tempered tail is inside neither class: no claim of the paper (exploratory), which type
      // fits it better at the most heads, and whether heads help each type there.
      const std::string T = tail_label("tempered");
      v.push_back(compare("(exploratory) log-type RPE fits a tempered memory better",
                          "log vs lin, " + T + ", " + most, g, T + ", log-type", most, T + ", lin-type",
                          most));
      for (const std::string rpe : {"log", "lin"}) {
        const std::string r = T + ", " + rpe + "-type";
        v.push_back(compare("(exploratory) outside the class, more heads lower the error",
                            r + ", " + most + " vs " + one, g, r, most, r, one));
      }
      LinePlot plot{"Wang & E Insight 4a: memory kernels, log vs lin RPE", "heads H",
                    "validation MSE / Var(y)"};
      plot.logx = plot.logy = true;
      plot.series = row_series(g, 2);
      plot_png(out.path(".png"), plot);
    }
    if (!long_lines.empty()) {
      // "Lin-type heads improve little" where a sum of exponentials is furthest from the memory:
      // the heavier tail over the longest window. A log-type head holds s^-1.125 exactly (the
      // control); whether lin-type heads gain from 1 to the most heads is an equivalence test
      // with a margin of one decade of MSE/Var, "improves little" read as "within a factor 10".
      const int T = long_lines.front().at("cell").at("T"),
                scored = long_lines.front().at("cell").at("scored");
      const std::string memory = "heavier-tailed (s^-1.125), T = " + std::to_string(T);
      const auto far_nmse = [](const json& r) { return r.at("tail_nmse").get<double>(); };
      const Grouped g = group(long_lines, row, col, nmse), far = group(long_lines, row, col, far_nmse);
      const Outputs lo{out.dir, out.name + "-long"};
      md += "\nThe long memory: " + memory + ", " + std::to_string(scored) +
            " scored positions per sequence:\n\n" + write_grouped(g, "validation MSE / Var(y)", lo) +
            "\nIts far half (lags " + std::to_string(T / 2 + 1) + " to " + std::to_string(T) +
            "), the error relative to that half's own size:\n\n" +
            grouped_markdown(far, "far-half MSE / Var", 4);
      const std::string one = g.cols.front(), most = g.cols.back(), R = tail_label("heavier");
      v.push_back(compare("log-type RPE fits a heavier-tailed long memory better",
                          "log vs lin, " + memory + ", " + one, g, R + ", log-type", one, R + ", lin-type",
                          one));
      v.back().control = true;
      v.push_back(compare("log-type RPE fits a heavier-tailed long memory better",
                          "log vs lin, " + memory + ", " + most, g, R + ", log-type", most, R + ", lin-type",
                          most));
      v.push_back(compare("lin-type RPE improves little with more heads on a heavier-tailed long memory",
                          "lin, " + memory + ", " + most + " vs " + one, g, R + ", lin-type", most,
                          R + ", lin-type", one, ClaimKind::equivalent, 1.0));
      LinePlot plot{"Wang & E Insight 4a: " + memory, "heads H", "validation MSE / Var(y)"};
      plot.logx = plot.logy = true;
      plot.series = row_series(g, 2);
      plot_png(lo.path(".png"), plot);
    }
    md += verdict_markdown(v);
    write_file_atomic(out.path(".md"), md);
    return md;
  };
  return e;
}

Experiment insight_1b() {
  return hm_grid(
      {"wang-e-1b",
       "Insight 1b (Table 3): H x m grid, single-layer DP-free, sparse Boolean (majority of lags 1,2,3 "
       "and of lags 1,4,9), a window of the largest lag",
       {{"sparse-boolean", "lags 1,2,3", {1, 2, 3}}, {"sparse-boolean", "lags 1,4,9", {1, 4, 9}}},
       "Wang & E Insight 1b: single-layer DP-free on sparse Boolean memories",
       Claim::heads_help});
}

Experiment insight_2a() {
  return hm_grid(
      {"wang-e-2a",
       "Insight 2a (Table 4): complex read-out sin(4 pi x_{t-1}) of a simple memory: m matters, H barely",
       {{"complex-readout", "", {1}}},
       "Wang & E Insight 2a: complex read-out sin(4 pi x_{t-1})",
       Claim::width_not_heads});
}

Experiment insight_2b() {
  return hm_grid(
      {"wang-e-2b",
       "Insight 2b (exploratory: the second Table 3 caption, read as Table 5, is probably a duplicate): many "
       "memories and a simple read-out, majority of lags 1,2,4,8,12: H matters, m barely",
       {{"sparse-boolean", "", {1, 2, 4, 8, 12}}},
       "Wang & E Insight 2b: a simple read-out of many memories",
       Claim::heads_not_width});
}

Experiment insight_3a() {
  GridSpec spec{
      "wang-e-3a",
      "Insight 3a (Table 6): DP vs DP-free, single layer, on a fixed memory (majority of lags 1,4,9) "
      "and an adaptive one (the lag chosen by the current token); one with 8 possible lags",
      {{"sparse-boolean", "fixed memory", {1, 4, 9}}, {"adaptive-1", "adaptive memory", {1, 4, 9}}},
      "Wang & E Insight 3a: DP vs DP-free, fixed and adaptive memories",
      Claim::dp,
      true};
  const GridTask eight{"adaptive-1", "adaptive memory, 8 lags", {1, 3, 5, 7, 9, 11, 13, 15}},
      sixteen{
          "adaptive-1", "adaptive memory, 16 lags", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
  spec.extras = {
      {eight, 4, false, "DP is necessary for an adaptive memory with more lags than heads"},
      {sixteen, 4, false, "DP is necessary for an adaptive memory with 4 times as many lags as heads"},
      {eight, 4, true, "DP is necessary for an adaptive memory with more lags than heads and a narrow FFN"}};
  return hm_grid(spec);
}

}  // namespace wang_e

}  // namespace uatlab::experiment
