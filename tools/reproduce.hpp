// `uatlab reproduce NAME`: a paper's experiment as a grid of independent runs (a sweep, so it
// resumes), then a table (Markdown + CSV) and a plot (PNG) in the output folder.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "uatlab/io/report.hpp"
#include "uatlab/model/architecture.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/train/trainer.hpp"

namespace uatlab::cli {

using nlohmann::json;

struct ReproduceContext {
  std::string mode = "quick";  // smoke (seconds, for tests) | quick | full
  std::string corpus;          // text corpus for language-modelling experiments
  int seeds = 0;               // > 0: override the mode's number of seeds
  long steps = 0;              // > 0: override the mode's training steps
  template <class T> T pick(T smoke, T quick, T full) const { return mode == "smoke" ? smoke : mode == "quick" ? quick : full; }
  std::vector<int> pick(std::vector<int> smoke, std::vector<int> quick, std::vector<int> full) const {
    return pick<std::vector<int>>(std::move(smoke), std::move(quick), std::move(full));
  }
  int seed_count() const { return seeds > 0 ? seeds : pick(1, 2, 3); }
  long step_count(long smoke, long quick, long full) const { return steps > 0 ? steps : pick(smoke, quick, full); }
};

struct Outputs {
  std::string dir, name;  // files are dir/name.{md,csv,png}
  std::string path(const std::string& ext) const { return dir + "/" + name + ext; }
};

struct Experiment {
  std::string name, summary;
  std::function<std::vector<json>(const ReproduceContext&)> cells;
  std::function<json(const json& cell, const ReproduceContext&)> run;
  // Writes the table and plot from the sweep's lines ({"cell", "result"}), returns the Markdown.
  std::function<std::string(const std::vector<json>& lines, const Outputs&, const ReproduceContext&)> report;
};

std::vector<Experiment> wang_e_experiments();
std::vector<Experiment> kajitsuka_experiments();

// One training on a built-in task, the common core of the experiments: returns parameters,
// steps, seconds, train_loss, val_loss (+ accuracies for ce, + val_nmse = val MSE / variance of
// the validation targets for mse).
struct TaskTraining {
  std::string task;
  TaskOptions data;
  int val_N = 0;
  Architecture arch;
  TrainConfig cfg;
  std::uint64_t init_seed = 1;
  std::function<void(Network<double>&)> adjust;  // after the random initialisation
};
json train_task(const TaskTraining& t);

// Per-cell metric grouped by keys (all seeds of a cell together).
struct Grouped {
  std::vector<std::string> rows, cols;                     // in first-seen order
  std::vector<std::vector<std::vector<double>>> values;   // [row][col] -> one value per seed
};
Grouped group(const std::vector<json>& lines, const std::function<std::string(const json& cell)>& row,
              const std::function<std::string(const json& cell)>& col, const std::function<double(const json& result)>& value);
// One plot series per row of a grouped table (mean, sd as the error bar): x is the number after
// `prefix` characters of each column label ("m=32" with prefix 2), or the column's index when
// prefix < 0 (categorical; set the plot's xtics to g.cols).
std::vector<Series> row_series(const Grouped& g, int prefix);
// The Markdown of a grouped table: mean ± sd per cell.
std::string grouped_markdown(const Grouped& g, const std::string& corner, int digits);
// The Markdown and CSV of a grouped table (mean ± sd per cell; the CSV has mean, sd and count).
std::string write_grouped(const Grouped& g, const std::string& corner, const Outputs& out, int digits = 4);

}  // namespace uatlab::cli
