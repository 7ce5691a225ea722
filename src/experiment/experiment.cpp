#include "uatlab/experiment/experiment.hpp"

#include <algorithm>
#include <array>

#include "registry.hpp"
#include "uatlab/experiment/sweep.hpp"
#include "uatlab/experiment/table.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab::experiment {

// The registry, in listing order. A new experiment: its factory in registry.hpp, a row here, the
// count below, its name in tests/test_reproduce.py and its page in docs/.
constexpr std::array factories{wang_e::insight_1a, wang_e::insight_1b,    wang_e::insight_2a,
                               wang_e::insight_2b, wang_e::insight_3a,    wang_e::insight_3b,
                               wang_e::insight_4a, wang_e::rates,         kajitsuka_memorization,
                               kajitsuka_delta,    memorization_capacity, memorization_optimal,
                               fang_fit,           fang_regression,       yun_certified,
                               yun_mixers,         yun_mixers_data};
static_assert(factories.size() == 17,
              "an experiment was added or removed: update the count and its listings");

const std::vector<Experiment>& experiments() {
  static const std::vector<Experiment> all = [] {
    std::vector<Experiment> v;
    for (auto make : factories)
      v.push_back(make());
    return v;
  }();
  return all;
}

const Experiment& find_experiment(const std::string& name) {
  std::vector<std::string> known;
  for (const Experiment& e : experiments()) {
    if (e.name == name) return e;
    known.push_back(e.name);
  }
  throw Error("unknown experiment \"" + name + "\" (" + join_list(known) + ")");
}

std::vector<json> select_cells(const Experiment& e, const Context& c, const std::vector<std::string>& only) {
  // KEY=VALUE filters: a cell is kept when it matches every key, and one of the values given for
  // a key that is repeated (--only N=1000 --only N=3162: both).
  std::vector<std::pair<std::string, std::vector<std::string>>> filters;
  for (const std::string& f : only) {
    const std::size_t eq = f.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error("--only \"" + f + "\": expected KEY=VALUE, as a cell of runs.jsonl spells it");
    const std::string key = f.substr(0, eq);
    auto it = std::find_if(filters.begin(), filters.end(), [&](const auto& k) { return k.first == key; });
    if (it == filters.end()) it = filters.insert(filters.end(), {key, {}});
    it->second.push_back(f.substr(eq + 1));
  }
  std::vector<json> cells = e.cells(c);
  for (const auto& [key, values] : filters) {
    std::vector<json> kept;
    for (json& cell : cells)
      if (cell.contains(key) && std::find(values.begin(), values.end(), label(cell.at(key))) != values.end())
        kept.push_back(std::move(cell));
    if (kept.empty())
      throw Error("--only " + key + "=" + join_list(values) + ": no cell of " + e.name + " (" +
                  mode_names(c.mode) + " mode) matches it and the filters before it");
    cells = std::move(kept);
  }
  return cells;
}

std::string run_experiment(const Experiment& e, const Context& c, const RunOptions& o) {
  if (o.out_dir.empty()) throw Error("an experiment needs an output folder");
  const std::vector<json> cells = select_cells(e, c, o.only);
  make_dirs(o.out_dir);
  SweepOptions so;
  so.results = o.out_dir + "/runs.jsonl";
  so.threads = e.serial ? 1 : o.threads;
  so.on_result = o.on_result;
  const std::vector<json> lines = run_sweep(
      cells, [&](const json& cell) { return e.run(cell, c); }, so);
  if (!sweep_writer()) return "";
  try {
    return e.report(lines, {o.out_dir, e.name}, c);
  } catch (const nlohmann::json::exception& x) {  // a stored line lacks a field (reports read with .at)
    throw Error(so.results + ": a stored result lacks what the report reads (" + x.what() +
                "); remove that line to run its cell again");
  }
}

json train_task(const TaskTraining& t) {
  const Dataset data = make_task(t.task, t.data);
  Dataset val;
  if (t.val_N > 0) val = make_task(t.task, validation_options(t.data, t.val_N));
  Network<double> nd(t.arch);
  init_random(nd, t.init_seed, 1.0);
  if (t.adjust) t.adjust(nd);
  Network<float> net = network_cast<float>(nd);
  const TrainReport r = train(net, data, t.val_N > 0 ? &val : nullptr, t.cfg);
  json summary = training_summary(net, data, t.val_N > 0 ? &val : nullptr, t.cfg.loss, r);
  if (t.inspect) t.inspect(net, summary);
  return summary;
}

}  // namespace uatlab::experiment
