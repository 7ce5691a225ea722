// Wang & E (NeurIPS 2024): one experiment per insight, with uatlab's recipe (docs/theory/wang-e.md;
// the paper's own settings and numbers are not available).
#include <cmath>

#include "uatlab/experiment/experiment.hpp"
#include "uatlab/experiment/table.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/model/network.hpp"

namespace uatlab::experiment {

namespace {

LayerSpec attention(int heads, int head_size, bool dp_free, Rpe rpe, bool pre_norm = false) {
  LayerSpec a;
  a.kind = LayerKind::attention;
  a.heads = heads;
  a.head_size = head_size;
  a.dp_free = dp_free;
  a.rpe = rpe;
  a.causal = true;
  a.pre_norm = pre_norm;
  // the recipe's DP-free heads read the strict past; x_t arrives through the residual
  a.strict_past = dp_free;
  a.sqrt_scaling = !dp_free;
  return a;
}

LayerSpec feedforward(int width, bool pre_norm = false) {
  LayerSpec f;
  f.kind = LayerKind::feedforward;
  f.width = width;
  f.pre_norm = pre_norm;
  return f;
}

// Spread the heads' RPE rates geometrically over [lo, hi] (like ALiBi's slopes), so that the
// heads start as different memory kernels; training moves them.
void spread_rates(Network<double>& net, double lo, double hi) {
  for (auto& L : net.layers) {
    if (L.spec.kind != LayerKind::attention || (L.spec.rpe != Rpe::lin && L.spec.rpe != Rpe::log)) continue;
    const int H = L.spec.heads;
    for (int h = 0; h < H; ++h)
      L.rpe(h, 0) = std::exp(std::log(lo) + (h + 0.5) / H * (std::log(hi) - std::log(lo)));
  }
}

// Every experiment trains 60 / 3,000 / 10,000 steps in smoke / quick / full mode (or --steps).
long steps(const Context& c) {
  return c.step_count(60, 3000, 10000);
}

TrainConfig config(const Context& c, double lr, Loss loss, std::uint64_t seed) {
  TrainConfig t;
  t.loss = loss;
  t.steps = steps(c);
  t.batch = 32;
  t.lr = lr;
  t.min_lr = lr / 10;
  t.warmup = std::min<long>(100, t.steps / 10);
  t.clip = 1;
  t.seed = seed;
  t.log_every = t.steps;
  return t;
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

Experiment table_1a() {
  Experiment e;
  e.name = "wang-e-1a";
  e.summary =
      "Insight 1a (Table 2): depth L vs heads H at equal parameters: language modelling, Type I and Type II "
      "memories";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    using Shapes = std::vector<std::pair<int, int>>;
    const Shapes shapes = c.pick(Shapes{{1, 4}, {2, 2}, {4, 1}}, Shapes{{1, 4}, {2, 2}, {4, 1}},
                                 Shapes{{1, 8}, {2, 4}, {4, 2}, {8, 1}});
    // Language modelling (no "task" key), and the mechanism behind the insight on synthetic data:
    // Type I adaptive memory (one look-up) and Type II (a nested look-up, which needs depth).
    for (int seed = 1; seed <= c.seed_count(); ++seed)
      for (std::string task : {"chars", "adaptive-1", "adaptive-2"})
        for (auto [L, H] : shapes) {
          json cell = {{"L", L}, {"H", H}, {"seed", seed}, {"steps", steps(c)}};
          if (task != "chars") cell["task"] = task;
          cells.push_back(cell);
        }
    return cells;
  };
  e.run = [](const json& cell, const Context& c) {
    const LmShape s = lm_shape(c);
    const int L = cell.at("L"), H = cell.at("H"), Hmax = L * H;
    // Parameter budget of one layer with Hmax heads and width s.m, spread over L layers: each
    // layer keeps H heads and gets the FFN width that fills its share.
    const int attn = 4 * s.d * s.head_size, norms = 4 * s.d;
    const int budget = Hmax * attn + (2 * s.d + 1) * s.m + s.d + norms;
    const int m = std::max(4, (budget / L - H * attn - s.d - norms) / (2 * s.d + 1));
    std::vector<LayerSpec> layers;
    for (int l = 0; l < L; ++l) {
      layers.push_back(attention(H, s.head_size, false, Rpe::none, true));
      layers.push_back(feedforward(m, true));
    }
    json r;
    if (!cell.contains("task"))
      r = train_lm(cell, c, layers, true);
    else {  // token 2c + b with lags (1, 3, 7), learned positions
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
      r = train_task(t);
    }
    r["m"] = m;
    return r;
  };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    auto model = [](const json& c) { return "L=" + label(c.at("L")) + ", H=" + label(c.at("H")); };
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
        g.values[r].push_back(p.values[r][0]);
      g.cols.push_back("parameters (LM)");
    }
    std::string md = "Validation loss (language modelling: nats/char; Type I/II: cross-entropy):\n\n" +
                     write_grouped(g, "model", out, 5);
    if (!synthetic.empty())
      md += "\n" + grouped_markdown(group(synthetic, model, task,
                                          [](const json& r) { return r.at("val_accuracy").get<double>(); }),
                                    "validation accuracy", 3);
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

Experiment table_3b() {
  Experiment e;
  e.name = "wang-e-3b";
  e.summary = "Insight 3b (Table 7): DP vs DP-free attention (with RPE), character-level language modelling";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    for (int seed = 1; seed <= c.seed_count(); ++seed)
      for (std::string rpe : {"lin", "log"})
        for (bool dp : {true, false})
          cells.push_back({{"dp", dp}, {"rpe", rpe}, {"seed", seed}, {"steps", steps(c)}});
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
    return train_lm(cell, c, layers, false);
  };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    Grouped g = group(
        lines,
        [](const json& c) { return std::string(c.at("dp").get<bool>() ? "DP + RPE" : "DP-free (RPE only)"); },
        [](const json& c) { return label(c.at("rpe")) + "-type RPE"; },
        [](const json& r) { return r.at("val_loss").get<double>(); });
    const std::string md = write_grouped(g, "attention (2 layers, 4 heads)", out);
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

struct GridSpec {
  std::string name, summary, task, title;
  std::vector<int> lags;
  bool with_dp = false;  // also DP + RPE heads (Table 6)
  double omega = 4;      // complex-readout frequency
};

Experiment hm_grid(const GridSpec& spec) {
  Experiment e;
  e.name = spec.name;
  e.summary = spec.summary;
  e.cells = [spec](const Context& c) {
    std::vector<json> cells;
    const std::vector<int> Hs =
        spec.with_dp ? c.pick({1, 2}, {1, 4}, {1, 2, 4, 8}) : c.pick({1, 2}, {1, 2, 4, 8}, {1, 2, 4, 8, 16});
    const std::vector<int> ms = spec.with_dp ? c.pick({8}, {16, 64}, {8, 32, 128, 512})
                                             : c.pick({8, 16}, {8, 32, 128}, {8, 32, 128, 512});
    for (int seed = 1; seed <= c.seed_count(); ++seed)
      for (bool dp : spec.with_dp ? std::vector<bool>{false, true} : std::vector<bool>{false})
        for (int H : Hs)
          for (int m : ms) {
            json cell = {{"H", H}, {"m", m}, {"seed", seed}, {"steps", steps(c)}};
            if (spec.with_dp) cell["dp"] = dp;
            cells.push_back(cell);
          }
    return cells;
  };
  e.run = [spec](const json& cell, const Context& c) {
    TaskTraining t;
    t.task = spec.task;
    t.data.lags = spec.lags;
    t.data.n = 32;
    t.data.N = c.pick(256, 4000, 8000);
    t.data.seed = cell.at("seed").get<int>();
    t.data.boolean = "majority";
    t.data.omega = spec.omega;
    t.data.d = 8;
    t.val_N = c.pick(64, 512, 1024);
    const bool dp = cell.value("dp", false);
    const Loss loss = task(spec.task).loss;
    t.arch.vocab = task(spec.task).shape(t.data).vocab;
    t.arch.d = t.arch.vocab > 0 ? 16 : task(spec.task).shape(t.data).d;
    t.arch.readout = task(spec.task).shape(t.data).outputs;
    t.arch.layers = {attention(cell.at("H"), 4, !dp, Rpe::lin), feedforward(cell.at("m"))};
    t.cfg = config(c, 3e-3, loss, t.data.seed);
    t.init_seed = t.data.seed;
    t.adjust = [](Network<double>& net) { spread_rates(net, 0.05, 2.0); };
    return train_task(t);
  };
  e.report = [spec](const std::vector<json>& lines, const Outputs& out, const Context&) {
    const bool ce = task(spec.task).loss == Loss::cross_entropy;
    auto row = [spec](const json& c) {
      return (spec.with_dp ? std::string(c.at("dp").get<bool>() ? "DP, " : "DP-free, ") : std::string()) +
             "H=" + label(c.at("H"));
    };
    auto value = [ce](const json& r) { return r.at(ce ? "val_loss" : "val_nmse").get<double>(); };
    Grouped g = group(
        lines, row, [](const json& c) { return "m=" + label(c.at("m")); }, value);
    std::string md = write_grouped(g, ce ? "validation loss" : "validation MSE / Var(y)", out);
    LinePlot plot{spec.title, "FFN width m", ce ? "validation cross-entropy" : "validation MSE / Var(y)"};
    plot.logx = true;
    plot.logy = !ce;
    plot.series = row_series(g, 2);
    plot_png(out.path(".png"), plot);
    if (ce) {  // accuracy beside the loss
      Grouped a = group(
          lines, row, [](const json& c) { return "m=" + label(c.at("m")); },
          [](const json& r) { return r.at("val_accuracy").get<double>(); });
      md += "\nValidation accuracy:\n\n" + grouped_markdown(a, "accuracy", 3);
      write_file_atomic(out.path(".md"), md);
    }
    return md;
  };
  return e;
}

// ---- memory kernels (Table 8 and its light-tailed counterpart) ---------------------------------

Experiment table_4a() {
  Experiment e;
  e.name = "wang-e-4a";
  e.summary =
      "Insight 4a (Table 8): log vs lin RPE, H heads, single-layer FFN-free DP-free, heavy and light-tailed "
      "kernels";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    for (int seed = 1; seed <= c.seed_count(); ++seed)
      for (std::string tail : {"heavy", "light"})
        for (std::string rpe : {"log", "lin"})
          for (int H : c.pick({1, 2}, {1, 2, 4, 8}, {1, 2, 4, 8, 16, 32}))
            cells.push_back({{"tail", tail},
                             {"rpe", rpe},
                             {"H", H},
                             {"seed", seed},
                             {"window", "n/2"},
                             {"steps", steps(c)}});
    return cells;
  };
  e.run = [](const json& cell, const Context& c) {
    TaskTraining t;
    t.task = "kernel-" + cell.at("tail").get<std::string>();
    t.data.n = c.pick(32, 64, 128);
    t.data.N = c.pick(256, 2000, 4000);
    t.data.seed = cell.at("seed").get<int>();
    // Every scored position sees the same window of T = n/2 lags, in the target and in the heads,
    // so a head's softmax normalises over the same lags everywhere (docs/theory/wang-e.md, kernels).
    t.data.beta = 0.5;
    t.data.window = t.data.n / 2;
    t.data.mask_before = t.data.n / 2;
    t.val_N = c.pick(64, 256, 512);
    t.data.d = 2;  // row 0 carries x_t, row 1 is free for the heads' output, which the readout reads
    t.arch.d = 2;
    t.arch.readout = 1;
    const bool log = cell.at("rpe") == "log";
    t.arch.layers = {attention(cell.at("H"), 1, true, log ? Rpe::log : Rpe::lin)};
    t.arch.layers[0].window = t.data.window;
    t.cfg = config(c, 1e-2, Loss::mse, t.data.seed);
    t.init_seed = t.data.seed;
    t.adjust = [log](Network<double>& net) {
      log ? spread_rates(net, 0.25, 4.0) : spread_rates(net, 0.02, 2.0);
    };
    return train_task(t);
  };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    Grouped g = group(
        lines, [](const json& c) { return label(c.at("tail")) + "-tailed, " + label(c.at("rpe")) + "-type"; },
        [](const json& c) { return "H=" + label(c.at("H")); },
        [](const json& r) { return r.at("val_nmse").get<double>(); });
    const std::string md = write_grouped(g, "validation MSE / Var(y)", out);
    LinePlot plot{"Wang & E Insight 4a: memory kernels, log vs lin RPE", "heads H",
                  "validation MSE / Var(y)"};
    plot.logx = plot.logy = true;
    plot.series = row_series(g, 2);
    plot_png(out.path(".png"), plot);
    return md;
  };
  return e;
}

}  // namespace

std::vector<Experiment> wang_e_experiments() {
  return {
      table_1a(),
      hm_grid(
          {"wang-e-1b",
           "Insight 1b (Table 3): H x m grid, single-layer DP-free, sparse Boolean (majority of lags 1,4,9)",
           "sparse-boolean",
           "Wang & E Insight 1b: single-layer DP-free on a sparse Boolean memory",
           {1, 4, 9}}),
      hm_grid(
          {"wang-e-2a",
           "Insight 2a (Table 4): complex read-out sin(4 pi x_{t-1}) of a simple memory: m matters, H barely",
           "complex-readout",
           "Wang & E Insight 2a: complex read-out sin(4 pi x_{t-1})",
           {1}}),
      hm_grid({"wang-e-3a",
               "Insight 3a (Table 6): DP vs DP-free, single layer, sparse Boolean (majority of lags 1,4,9)",
               "sparse-boolean",
               "Wang & E Insight 3a: DP vs DP-free on a sparse Boolean memory",
               {1, 4, 9},
               true}),
      table_3b(),
      table_4a()};
}

}  // namespace uatlab::experiment
