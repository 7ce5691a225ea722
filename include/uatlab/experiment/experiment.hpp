// An experiment: a paper's claim as a grid of independent runs ("cells"), run as a resumable
// sweep, then reported as tables (Markdown + CSV) and a plot (PNG). The library holds every
// experiment (experiments()); `uatlab reproduce NAME` only parses flags and calls run_experiment.
//
//   cells(context)         the grid: JSON objects holding every parameter that changes the result
//   run(cell, context)     one cell's result (JSON), deterministic given the cell
//   report(lines, out, c)  the tables and plot from the sweep's lines {"cell", "result"}; returns
//                          the Markdown it wrote
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "uatlab/model/architecture.hpp"
#include "uatlab/model/network.hpp"
#include "uatlab/names.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/train/trainer.hpp"

namespace uatlab::experiment {

using nlohmann::json;

// smoke: seconds (tests); quick: minutes; full: the paper-sized grid (hours).
enum class Mode { smoke, quick, full };
inline constexpr EnumNames<Mode::full> mode_names{"mode", {"smoke", "quick", "full"}};
static_assert(mode_names.complete());

struct Context {
  Mode mode = Mode::quick;
  std::string corpus;  // text corpus of the language-modelling experiments
  int seeds = 0;       // > 0: overrides the mode's number of seeds
  long steps = 0;      // > 0: overrides the mode's training steps
  template <class T>
  T pick(T smoke, T quick, T full) const {
    return mode == Mode::smoke ? smoke : mode == Mode::quick ? quick : full;
  }
  std::vector<int> pick(std::vector<int> smoke, std::vector<int> quick, std::vector<int> full) const {
    return pick<std::vector<int>>(std::move(smoke), std::move(quick), std::move(full));
  }
  int seed_count() const { return seed_count(1, 2, 3); }
  // The seeds of an experiment judged by paired verdicts: 1 / 10 / 10 (or --seeds). An exact rank
  // test over n paired seeds cannot give a one-sided p below 2^-n, so 10 seeds let a family of up
  // to 25 two-outcome claims reach p < 0.05 after Holm (docs/statistics.md); smoke mode decides
  // nothing.
  int verdict_seeds() const { return seed_count(1, 10, 10); }
  int seed_count(int smoke, int quick, int full) const {
    return seeds > 0 ? seeds : pick(smoke, quick, full);
  }
  long step_count(long smoke, long quick, long full) const {
    return steps > 0 ? steps : pick(smoke, quick, full);
  }
};

struct Outputs {
  std::string dir, name;  // files are dir/name.{md,csv,png}
  std::string path(const std::string& ext) const { return dir + "/" + name + ext; }
};

struct Experiment {
  std::string name, summary;
  // The cells open MPFR precision scopes (certificates, fewest-bits searches). Scopes on different
  // threads take turns on one process-wide lock (MpfrPrecision, scalar.hpp), so such cells side by
  // side mostly wait for each other (their timings would count the wait) while the holder's OpenMP
  // loops run on one thread (nested regions are inactive in a sweep's threads): they run one at a
  // time instead, each with every core for its own parallel loops.
  bool serial = false;
  std::function<std::vector<json>(const Context&)> cells;
  std::function<json(const json& cell, const Context&)> run;
  std::function<std::string(const std::vector<json>& lines, const Outputs&, const Context&)> report;
};

// The registry: every experiment of the library, in listing order.
const std::vector<Experiment>& experiments();
const Experiment& find_experiment(const std::string& name);  // throws Error naming the known ones

struct RunOptions {
  std::string out_dir;            // runs.jsonl (resume), NAME.md, NAME.csv, NAME.png
  int threads = 0;                // runs at once (0: all cores)
  std::vector<std::string> only;  // "KEY=VALUE": run and report only the cells with these values
  std::function<void(std::size_t done, std::size_t total, const json& line)> on_result;
};
// The experiment's cells that match every "KEY=VALUE" of `only` (a cell's value as `label` writes
// it: 8, 0.0001, true, lin). Throws Error on a filter without '=' or one that no cell matches.
std::vector<json> select_cells(const Experiment& e, const Context& c, const std::vector<std::string>& only);
// Run the cells not yet in out_dir/runs.jsonl, then report. Returns the Markdown on the writing
// process ("" on other MPI ranks).
std::string run_experiment(const Experiment& e, const Context& c, const RunOptions& o);

// One training on a built-in task, the common core of the training experiments.
struct TaskTraining {
  std::string task;
  TaskOptions data;
  int val_N = 0;  // > 0: a validation set (validation_options)
  Architecture arch;
  TrainConfig cfg;
  std::uint64_t init_seed = 1;
  std::function<void(Network<double>&)> adjust;  // after the random initialisation
  // After training: adds the experiment's own measurements of the trained network to the summary.
  std::function<void(const Network<float>&, json&)> inspect;
};
json train_task(const TaskTraining& t);  // training_summary of the trained float network

}  // namespace uatlab::experiment
