// uatlab reproduce NAME: the shared machinery of the experiments (one training on a task, tables
// grouped over seeds) and the command itself.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "reproduce.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/train/sweep.hpp"

namespace uatlab::cli {

json train_task(const TaskTraining& t) {
  const Dataset data = make_task(t.task, t.data);
  Dataset val;
  if (t.val_N > 0) val = make_task(t.task, validation_options(t.data, t.val_N));
  Network<double> nd(t.arch);
  init_random(nd, t.init_seed, 1.0);
  if (t.adjust) t.adjust(nd);
  Network<float> net = network_cast<float>(nd);
  const TrainReport r = train(net, data, t.val_N > 0 ? &val : nullptr, t.cfg);
  json out = {{"parameters", net.parameter_count()}, {"steps", r.steps}, {"seconds", r.seconds}};
  auto [tl, ta] = evaluate_loss(net, data, t.cfg.loss);
  out["train_loss"] = tl;
  if (ta >= 0) out["train_accuracy"] = ta;
  if (t.val_N > 0) {
    auto [vl, va] = evaluate_loss(net, val, t.cfg.loss);
    out["val_loss"] = vl;
    if (va >= 0) out["val_accuracy"] = va;
    if (t.cfg.loss == Loss::mse) {  // normalise by the variance of the scored targets
      double s = 0, s2 = 0, k = 0;
      for (const Sequence& q : val.sequences)
        for (Eigen::Index c = 0; c < q.y.cols(); ++c)
          if (q.mask.empty() || q.mask[c])
            for (Eigen::Index r2 = 0; r2 < q.y.rows(); ++r2) {
              const double y = Scalar<double>::from(q.y(r2, c));
              s += y, s2 += y * y, k += 1;
            }
      const double var = s2 / k - (s / k) * (s / k);
      out["val_nmse"] = vl / var;
    }
  }
  return out;
}

Grouped group(const std::vector<json>& lines, const std::function<std::string(const json&)>& row,
              const std::function<std::string(const json&)>& col, const std::function<double(const json&)>& value) {
  Grouped g;
  auto slot = [](std::vector<std::string>& keys, const std::string& k) {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == k) return i;
    keys.push_back(k);
    return keys.size() - 1;
  };
  for (const json& l : lines) {
    const std::size_t r = slot(g.rows, row(l["cell"])), c = slot(g.cols, col(l["cell"]));
    if (g.values.size() <= r) g.values.resize(r + 1);
    for (auto& v : g.values) v.resize(g.cols.size());
    g.values[r][c].push_back(value(l["result"]));
  }
  for (auto& v : g.values) v.resize(g.cols.size());
  return g;
}

std::vector<Series> row_series(const Grouped& g, int prefix) {
  std::vector<Series> out;
  for (std::size_t r = 0; r < g.rows.size(); ++r) {
    Series se{g.rows[r], {}, {}, {}};
    for (std::size_t k = 0; k < g.cols.size(); ++k) {
      se.x.push_back(prefix < 0 ? static_cast<double>(k) : std::stod(g.cols[k].substr(static_cast<std::size_t>(prefix))));
      se.y.push_back(mean(g.values[r][k])), se.err.push_back(sd(g.values[r][k]));
    }
    out.push_back(se);
  }
  return out;
}

std::string grouped_markdown(const Grouped& g, const std::string& corner, int digits) {
  Row header = {corner};
  for (const auto& c : g.cols) header.push_back(c);
  std::vector<Row> md;
  for (std::size_t r = 0; r < g.rows.size(); ++r) {
    Row line = {g.rows[r]};
    for (const auto& v : g.values[r]) line.push_back(v.empty() ? "" : mean_sd(v, digits));
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

namespace {

struct ReproduceOpts {
  std::string name, out_dir;
  int threads = 0;
  bool list = false;
  ReproduceContext ctx;
};

std::vector<Experiment> all_experiments() {
  std::vector<Experiment> all = wang_e_experiments();
  for (auto& e : kajitsuka_experiments()) all.push_back(std::move(e));
  return all;
}

int cmd_reproduce(ReproduceOpts& o) {
  const std::vector<Experiment> all = all_experiments();
  if (o.list || o.name.empty()) {
    for (const auto& e : all) std::printf("%-28s %s\n", e.name.c_str(), e.summary.c_str());
    return 0;
  }
  const Experiment* e = nullptr;
  for (const auto& x : all)
    if (x.name == o.name) e = &x;
  if (!e) throw Error("unknown experiment \"" + o.name + "\" (uatlab reproduce --list)");
  if (o.ctx.mode != "smoke" && o.ctx.mode != "quick" && o.ctx.mode != "full") throw Error("--mode must be smoke, quick or full");
  if (o.out_dir.empty()) o.out_dir = "results/" + o.name + "-" + o.ctx.mode;
  make_dirs(o.out_dir);
  const std::vector<json> cells = e->cells(o.ctx);
  SweepOptions so;
  so.results = o.out_dir + "/runs.jsonl";
  so.threads = o.threads;
  so.on_result = [&](std::size_t done, std::size_t total, const json& line) {
    std::fprintf(stderr, "[%zu/%zu] %s -> %s\n", done, total, line["cell"].dump().c_str(), line["result"].dump().c_str());
  };
  std::fprintf(stderr, "%s (%s mode): %zu runs, results in %s\n", e->name.c_str(), o.ctx.mode.c_str(), cells.size(), so.results.c_str());
  const std::vector<json> lines = run_sweep(cells, [&](const json& c) { return e->run(c, o.ctx); }, so);
  if (!sweep_writer()) return 0;
  const std::string md = e->report(lines, {o.out_dir, o.name}, o.ctx);
  std::cout << md;
  return 0;
}

}  // namespace

void add_reproduce_commands(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<ReproduceOpts>();
  o->ctx.corpus = UATLAB_DATA_DIR "/tinyshakespeare.txt";  // data/ of this repository
  auto* r = app.add_subcommand("reproduce", "Run a paper's experiment: a resumable grid of runs, then a table (Markdown + CSV) and a plot");
  r->add_option("name", o->name, "Experiment (--list shows them)");
  r->add_flag("--list", o->list, "List the experiments");
  r->add_option("--mode", o->ctx.mode, "smoke (seconds), quick (minutes) or full")->capture_default_str();
  r->add_option("--corpus", o->ctx.corpus, "Text corpus for language modelling")->capture_default_str();
  r->add_option("--seeds", o->ctx.seeds, "Seeds per cell (default: the mode's)");
  r->add_option("--steps", o->ctx.steps, "Training steps (default: the mode's)");
  r->add_option("--threads", o->threads, "Runs at once (default: all cores)");
  r->add_option("--out-dir", o->out_dir, "Output folder (default results/NAME-MODE); runs.jsonl there makes a rerun resume");
  commands.push_back({r, [o] { return cmd_reproduce(*o); }});
}

}  // namespace uatlab::cli
