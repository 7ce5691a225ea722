// uatlab reproduce NAME | sweep CONFIG: the library's experiments (experiment/) from the command line.
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "uatlab/experiment/experiment.hpp"
#include "uatlab/experiment/memorization.hpp"
#include "uatlab/experiment/sweep.hpp"
#include "uatlab/io/lists.hpp"

namespace uatlab::cli {

namespace ex = uatlab::experiment;
using nlohmann::json;

namespace {

struct ReproduceOpts {
  std::string name, out_dir, mode = "quick", corpus = UATLAB_DATA_DIR "/tinyshakespeare.txt";
  std::vector<std::string> only;
  int threads = 0, seeds = 0;
  long steps = 0;
  bool list = false;
};

// A cell's result as one progress line: its numbers, flags and short words (arrays and nested
// objects, such as a kernel's fitted weights, stay in runs.jsonl), at most 200 characters.
std::string progress_summary(const json& result) {
  if (!result.is_object()) return result.is_array() ? "[...]" : result.dump();
  json brief = json::object();
  for (const auto& [key, value] : result.items())
    if (value.is_number() || value.is_boolean() ||
        (value.is_string() && value.get<std::string>().size() <= 40))
      brief[key] = value;
  std::string text = brief.dump();
  if (brief.size() < result.size())
    text += " (+" + std::to_string(result.size() - brief.size()) + " more in runs.jsonl)";
  return text.size() > 200 ? text.substr(0, 197) + "..." : text;
}

int cmd_reproduce(const ReproduceOpts& o) {
  if (o.list || o.name.empty()) {
    for (const ex::Experiment& e : ex::experiments())
      std::printf("%-28s %s\n", e.name.c_str(), e.summary.c_str());
    return 0;
  }
  const ex::Experiment& e = ex::find_experiment(o.name);
  ex::Context c;
  c.mode = ex::mode_names.parse(o.mode);
  c.corpus = o.corpus;
  c.seeds = o.seeds;
  c.steps = o.steps;
  ex::RunOptions run;
  run.out_dir = o.out_dir.empty() ? "results/" + e.name + "-" + o.mode : o.out_dir;
  run.threads = o.threads;
  run.only = o.only;
  run.on_result = [](std::size_t done, std::size_t total, const json& line) {
    if (quiet()) return;
    std::fprintf(stderr, "[%zu/%zu] %s -> %s\n", done, total, line["cell"].dump().c_str(),
                 progress_summary(line["result"]).c_str());
  };
  std::fprintf(stderr, "%s (%s mode): %zu runs, results in %s/runs.jsonl\n", e.name.c_str(), o.mode.c_str(),
               ex::select_cells(e, c, o.only).size(), run.out_dir.c_str());
  std::cout << ex::run_experiment(e, c, run);
  return 0;
}

struct SweepOpts {
  std::string config, out_dir;
  int threads = 0;
  bool no_plots = false;
};

int cmd_sweep(const SweepOpts& o) {
  const json cfg = ex::sweep_config(o.config);
  ex::RunOptions run;
  run.out_dir = o.out_dir;
  run.threads = o.threads;
  run.on_result = [](std::size_t done, std::size_t total, const json& line) {
    if (quiet()) return;
    std::fprintf(stderr, "[rank %d: %zu/%zu] %s: accuracy %.4g in %ld steps\n", sweep_rank(), done, total,
                 ex::config_key(line.at("cell")).c_str(), line.at("result").at("accuracy").get<double>(),
                 line.at("result").at("steps").get<long>());
  };
  if (sweep_writer())
    std::fprintf(stderr, "sweep: %zu runs over %d rank(s), results appended to %s/runs.jsonl\n",
                 ex::sweep_cells(cfg).size(), sweep_ranks(), o.out_dir.c_str());
  std::cout << ex::run_memorization_sweep(cfg, run, !o.no_plots);
  return 0;
}

}  // namespace

void add_reproduce_commands(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<ReproduceOpts>();
  auto* r = app.add_subcommand(
      "reproduce",
      "Run a paper's experiment: a resumable grid of runs, then a table (Markdown + CSV) and a plot");
  r->add_option("name", o->name, "Experiment (--list shows them)");
  r->add_flag("--list", o->list, "List the experiments");
  r->add_option("--mode", o->mode, "smoke (seconds), quick (minutes) or full")->capture_default_str();
  r->add_option("--corpus", o->corpus, "Text corpus for language modelling")->capture_default_str();
  r->add_option("--seeds", o->seeds, "Seeds per cell (default: the mode's)")->check(CLI::Range(1, 1000));
  r->add_option("--steps", o->steps, "Training steps (default: the mode's)")
      ->check(CLI::Range(1L, 100000000L));
  r->add_option("--threads", o->threads, "Runs at once (default: all cores)")->check(CLI::Range(1, 4096));
  r->add_option("--out-dir", o->out_dir,
                "Output folder (default results/NAME-MODE); runs.jsonl there makes a rerun resume");
  r->add_option("--only", o->only,
                "KEY=VALUE (repeatable): run and report only the cells with these values, as runs.jsonl "
                "spells them (part=capacity, T=64); a repeated key keeps any of its values (N=1000 N=3162)");
  commands.push_back({r, [o] { return cmd_reproduce(*o); }});

  auto s = std::make_shared<SweepOpts>();
  std::vector<std::string> presets;
  for (const auto& [name, _] : ex::sweep_presets())
    presets.push_back(name);
  auto* sw = app.add_subcommand("sweep",
                                "Train a grid of memorization models in parallel (resumable; mpirun shards "
                                "it); summary CSV + heat maps");
  sw->add_option("config", s->config, "Config JSON (file or text), or a preset: " + join_list(presets))
      ->required();
  sw->add_option("--out-dir", s->out_dir,
                 "Output folder: runs.jsonl (resume), summary.csv, accuracy_heatmap.png, min_parameters.png")
      ->required();
  sw->add_option("--threads", s->threads, "Runs at once per process (default: all cores)")
      ->check(CLI::Range(1, 4096));
  sw->add_flag("--no-plots", s->no_plots, "Write runs.jsonl and summary.csv only, without the two PNGs");
  commands.push_back({sw, [s] { return cmd_sweep(*s); }});
}

}  // namespace uatlab::cli
