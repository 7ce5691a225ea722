// Memorization experiments: `uatlab sweep CONFIG` (a grid of independent trainings, each to 100%
// training accuracy or a step cap; summary CSV and heat maps) and `uatlab reproduce
// kajitsuka-memorization` (the rank-1 experiment of Kajitsuka & Sato, with the reviewers' variant).
#include "uatlab/experiment/memorization.hpp"

#include "uatlab/limits.hpp"
#include "uatlab/verify/analyse.hpp"
#include "uatlab/verify/precision.hpp"

#include <omp.h>
#include <algorithm>
#include <limits>

#include <cmath>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "registry.hpp"
#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/experiment/sweep.hpp"
#include "uatlab/experiment/table.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab::experiment {

// ---- one memorization run ----------------------------------------------------------------------

// A cell: task (memorize | random-labels), N, n, d, V, classes, m (FF width, 0: none), H, s (head
// size), tied, seed, steps, batch, lr, early_stop (default true: stop once every training token is
// right), fixed_v (tied only: the Q=K=V row fixed to Lemma 3's
// projection scaled as the tuned construction scales it, and frozen).
namespace {

// A cell's task options: the keys of the cell that are TaskOptions fields (N, n, d, V, classes, seed).
TaskOptions task_options(const json& cell) {
  TaskOptions o;
  fields_from_json(cell, o, "sweep cell", UnknownKeys::ignore);
  return o;
}

// The cells of a sweep that differ only in the architecture train on the same data (the data seed
// is the cell's seed): each data set is built once, by the first cell that asks, while the others
// wait for it. The last few data sets stay cached (one per thread, plus one: sweep_cells puts the
// cells that share data next to each other); a cell still training keeps its own reference.
class SharedData {
 public:
  std::shared_ptr<const Dataset> get(const json& cell) {
    const std::string key = cell.at("task").get<std::string>() + " " + task_options(cell).to_json().dump();
    std::promise<std::shared_ptr<const Dataset>> made;
    std::shared_future<std::shared_ptr<const Dataset>> data;
    bool build = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = std::find_if(recent_.begin(), recent_.end(), [&](const auto& e) { return e.first == key; });
      if (it != recent_.end()) {
        data = it->second;
        recent_.splice(recent_.begin(), recent_, it);
      } else {
        data = made.get_future().share();
        recent_.emplace_front(key, data);
        build = true;
        if (recent_.size() > static_cast<std::size_t>(omp_get_num_threads()) + 1) recent_.pop_back();
      }
    }
    if (build) try {
        made.set_value(std::make_shared<const Dataset>(make_task(cell.at("task"), task_options(cell))));
      } catch (...) {
        made.set_exception(std::current_exception());
      }
    return data.get();
  }

 private:
  std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_future<std::shared_ptr<const Dataset>>>> recent_;
};

json train_on(const json& cell, const Dataset& data, Network<float>* trained) {
  const TaskOptions o = task_options(cell);
  const std::string task = cell.at("task");
  Architecture arch;
  arch.d = o.d;
  arch.readout = uatlab::task(task).shape(o).outputs;
  LayerSpec a;
  a.heads = cell.at("H");
  a.head_size = cell.at("s");
  a.tied_qkv = cell.value("tied", false);
  arch.layers.push_back(a);
  if (cell.at("m").get<int>() > 0) {
    LayerSpec f;
    f.kind = LayerKind::feedforward;
    f.width = cell.at("m");
    arch.layers.push_back(f);
  }
  Network<double> nd(arch);
  init_random(nd, o.seed);
  TrainConfig c;  // the cell's steps, batch, lr and seed; the rest is the sweep's recipe
  fields_from_json(cell, c, "sweep cell", UnknownKeys::ignore);
  c.loss = Loss::cross_entropy;
  c.batch = std::min(c.batch, o.N);
  c.min_lr = c.lr / 10;
  c.warmup = std::min<long>(100, c.steps / 10);
  c.stop_at_full_accuracy = cell.value("early_stop", true);
  c.log_every = 25;
  c.evaluate_training_set = true;
  json out;
  if (cell.value("fixed_v", false)) {
    if (!a.tied_qkv || a.heads != 1 || a.head_size != 1) throw Error("fixed_v needs one tied head of size 1");
    kajitsuka::ContextualOptions co;
    co.tied = true;
    co.search_min_bits = false;
    co.seed = o.seed;
    const kajitsuka::Contextual k = kajitsuka::build_contextual(kajitsuka::analyse(data), co);
    nd.layers[0].wq = matrix_cast<double>(k.net.layers[0].wq);
    c.freeze = {"layers.0.qkv.weight"};
    out["projection_kappa"] = k.projection.achieved;
  }
  Network<float> net = network_cast<float>(nd);
  const TrainReport r = train(net, data, nullptr, c);
  out.update({{"accuracy", r.train_accuracy},
              {"loss", r.train_loss},
              {"memorized", r.train_accuracy == 1.0},
              {"steps", r.steps},
              {"parameters", net.parameter_count()},
              {"seconds", r.seconds}});
  if (trained) *trained = std::move(net);
  return out;
}

}  // namespace

bool argmax_certified(const Network<float>& net, const Dataset& data) {
  const Network<Rational> exact = network_cast<Rational>(net);
  for (unsigned bits : {64u, 256u}) {
    const Predictions p = certify_predictions(exact, data, LabelKind::classes, Rational(0), bits, {}, true);
    if (p.all()) return true;
    if (std::none_of(p.failures.begin(), p.failures.end(),
                     [](const PredictionFailure& f) { return f.kind == FailureKind::undecided; }))
      return false;  // a prediction is wrong: more bits cannot change that
  }
  return false;
}

RoundedWeights fewest_weight_bits(const Network<float>& net, const Dataset& data) {
  // x rounded to nearest (ties to even) at b significand bits: exact in float for b ≤ 24.
  const auto rounded = [](int b, const Network<float>& from) {
    Network<float> to = from;
    to.for_each_tensor([b](Mat<float>& m) {
      m = m.unaryExpr([b](float x) {
        int e = 0;
        const float f = std::frexp(x, &e);  // x = f·2^e, |f| in [1/2, 1)
        return std::ldexp(std::nearbyint(std::ldexp(f, b)), e - b);
      });
    });
    return to;
  };
  int lo = 1, hi = 24;  // hi certifies (the network given); find the least b that does
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (argmax_certified(rounded(mid, net), data))
      hi = mid;
    else
      lo = mid + 1;
  }
  const StoredBits b = count_stored_bits(network_cast<Rational>(rounded(hi, net)));
  return {hi, b.max_bits, b.total_bits};
}

json train_memorization(const json& cell, Network<float>* trained, Dataset* trained_on) {
  const Dataset data = make_task(cell.at("task"), task_options(cell));
  json out = train_on(cell, data, trained);
  if (trained_on) *trained_on = data;
  return out;
}

// ---- uatlab sweep -------------------------------------------------------------------------------

namespace {

const char* kMahdavi = R"({
  "comment": "Mahdavi et al. (ICLR 2024): heads x N, random Gaussian inputs and random labels, one attention layer and a linear classifier on the first token",
  "task": "random-labels", "d": 16, "n": 8, "classes": 2,
  "N": [64, 128, 256, 512, 1024, 2048, 4096, 8192], "H": [1, 2, 4, 8, 16], "s": [4], "m": [0], "seeds": [1, 2],
  "steps": 4000, "batch": 64, "lr": 0.01
})";

const char* kSmall = R"({
  "comment": "A seconds-long sweep for tests",
  "task": "memorize", "d": 4, "n": 4, "V": 16,
  "N": [8, 16], "H": [1], "s": [1], "m": [4, 16], "seeds": [1], "tied": true,
  "steps": 200, "batch": 16, "lr": 0.02
})";

// A key of the sweep config: an integer or a list of integers, each in [lo, hi].
std::vector<int> int_list(const json& j, const std::string& key, std::vector<int> fallback, int lo, int hi) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  std::vector<int> out;
  auto take = [&](const json& x) {
    if (!x.is_number_integer() || x.get<long long>() < lo || x.get<long long>() > hi)
      throw Error("sweep config: \"" + key + "\" must hold integers from " + std::to_string(lo) + " to " +
                  std::to_string(hi) + ", got " + limits::excerpt(x.dump()));
    out.push_back(x.get<int>());
  };
  if (v.is_array())
    for (const auto& x : v)
      take(x);
  else
    take(v);
  if (out.empty()) throw Error("sweep config: \"" + key + "\" is empty");
  return out;
}

// A key that takes one value (a list is an error, not its first item).
template <class T>
T one_value(const json& j, const std::string& key, T fallback) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  const bool ok = std::is_same_v<T, bool>          ? v.is_boolean()
                  : std::is_same_v<T, std::string> ? v.is_string()
                  : std::is_integral_v<T>          ? v.is_number_integer()
                                                   : v.is_number();
  if (!ok)
    throw Error("sweep config: \"" + key + "\" takes one " +
                (std::is_same_v<T, bool>          ? "true or false"
                 : std::is_same_v<T, std::string> ? "string"
                 : std::is_integral_v<T>          ? "integer"
                                                  : "number") +
                ", got " + limits::excerpt(v.dump()));
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {  // get<T> would wrap it
    const bool fits =
        v.is_number_unsigned()
            ? v.get<unsigned long long>() <= static_cast<unsigned long long>(std::numeric_limits<T>::max())
            : v.get<long long>() >= std::numeric_limits<T>::min();
    if (!fits)
      throw Error("sweep config: \"" + key + "\" is beyond the range of a 32-bit integer, got " +
                  limits::excerpt(v.dump()));
  }
  return v.get<T>();
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& sweep_presets() {
  static const std::vector<std::pair<std::string, std::string>> table = {{"mahdavi-grid", kMahdavi},
                                                                         {"small", kSmall}};
  return table;
}

json sweep_config(const std::string& text) {
  for (const auto& [name, preset] : sweep_presets())
    if (text == name) return json::parse(preset);
  if (!text.empty() && (text.front() == '{' || text.front() == '[')) return parse_json(text, "sweep config");
  return parse_json(read_file(text), "sweep config " + text);
}

std::vector<json> sweep_cells(const json& cfg) try {
  static const std::set<std::string> known = {"comment", "task",  "d",  "n",         "V",     "classes",
                                              "N",       "H",     "s",  "m",         "seeds", "tied",
                                              "steps",   "batch", "lr", "early_stop"};
  if (!cfg.is_object()) throw Error("sweep config must be a JSON object");
  for (auto it = cfg.begin(); it != cfg.end(); ++it)
    if (!known.count(it.key())) throw Error("sweep config: unknown key \"" + it.key() + "\"");
  const std::string task = one_value<std::string>(cfg, "task", "memorize");
  if (task != "memorize" && task != "random-labels")
    throw Error("sweep config: task must be memorize or random-labels");
  std::vector<int> seeds = int_list(cfg, "seeds", {1}, 1, 1 << 20);
  if (cfg.contains("seeds") && cfg.at("seeds").is_number_integer()) {  // a count
    const int k = seeds[0];
    limits::check_count(k, 1, 1000, "sweep config: seeds (a count)");
    seeds.clear();
    for (int i = 1; i <= k; ++i)
      seeds.push_back(i);
  }
  const int d = one_value<int>(cfg, "d", 4), steps = one_value<int>(cfg, "steps", 2000),
            batch = one_value<int>(cfg, "batch", 64), V = one_value<int>(cfg, "V", 64),
            classes = one_value<int>(cfg, "classes", 2);
  const double lr = one_value<double>(cfg, "lr", 0.01);
  const bool tied = one_value<bool>(cfg, "tied", false);
  const bool early_stop = one_value<bool>(cfg, "early_stop", true);  // stop once every token is right
  if (cfg.contains("comment")) one_value<std::string>(cfg, "comment", "");
  limits::check_count(d, 1, 4096, "sweep config: d");
  limits::check_count(steps, 0, 1 << 30, "sweep config: steps");
  limits::check_count(batch, 1, 1 << 20, "sweep config: batch");
  limits::check_count(V, 1, 1 << 20, "sweep config: V");
  limits::check_count(classes, 2, 1 << 20, "sweep config: classes");
  limits::check_real(lr, 1e-12, 1e3, "sweep config: lr");
  const std::vector<int> Ns = int_list(cfg, "N", {100}, 1, 1 << 20), ns = int_list(cfg, "n", {8}, 1, 1 << 16),
                         Hs = int_list(cfg, "H", {1}, 1, 1024), ss = int_list(cfg, "s", {1}, 1, 1 << 16),
                         ms = int_list(cfg, "m", {0}, 0, 1 << 20);
  long long total = 1;
  for (std::size_t k : {Ns.size(), ns.size(), Hs.size(), ss.size(), ms.size(), seeds.size()})
    total = limits::saturating_mul(total, static_cast<long long>(k));
  if (total > 1000000) throw Error("sweep config: more than 10^6 runs in the grid");
  // The cells of one data set (N, n, seed) next to each other (SharedData), from the largest model
  // down, so that a sweep ends on small models and no core waits long for the last one.
  const auto down = [](std::vector<int> v) {
    std::sort(v.rbegin(), v.rend());
    return v;
  };
  std::vector<json> cells;
  for (int N : Ns)
    for (int n : ns)
      for (int seed : seeds)
        for (int H : down(Hs))
          for (int s : down(ss))
            for (int m : down(ms)) {
              json c = {{"task", task}, {"N", N},         {"n", n},         {"d", d},
                        {"H", H},       {"s", s},         {"m", m},         {"seed", seed},
                        {"tied", tied}, {"steps", steps}, {"batch", batch}, {"lr", lr}};
              if (task == "memorize")
                c["V"] = V;
              else
                c["classes"] = classes;
              if (!early_stop) c["early_stop"] = false;  // absent when true: older runs.jsonl still match
              cells.push_back(c);
            }
  return cells;
} catch (const nlohmann::json::exception& e) {  // a JSON value of an unexpected type
  throw Error(std::string("sweep config") + ": malformed (" + e.what() + ")");
}

std::string config_key(const json& c) {
  return "N=" + std::to_string(c.at("N").get<int>()) + " n=" + std::to_string(c.at("n").get<int>()) +
         " H=" + std::to_string(c.at("H").get<int>()) + " s=" + std::to_string(c.at("s").get<int>()) +
         " m=" + std::to_string(c.at("m").get<int>());
}

std::string summarise_sweep(const std::vector<json>& lines, const std::string& dir, bool plots) {
  // One row per configuration (its seeds grouped), through the one aggregation (group).
  auto all = [](const json&) { return std::string("runs"); };
  auto metric = [&](const char* key) {
    return group(lines, config_key, all, [key](const json& r) { return r.at(key).get<double>(); });
  };
  const Grouped acc = metric("accuracy"), steps = metric("steps"), params = metric("parameters");
  const Grouped mem =
      group(lines, config_key, all, [](const json& r) { return r.at("memorized").get<bool>() ? 1.0 : 0.0; });
  std::map<std::string, json> cell_of;
  for (const json& l : lines)
    cell_of.emplace(config_key(l.at("cell")), l.at("cell"));
  struct Config {
    json cell;
    long params;
    double accuracy;
    bool memorized;  // every seed at 100% training accuracy
  };
  std::vector<Config> configs;
  std::vector<Row> rows;
  std::set<long> param_set;
  std::set<int> n_set;
  for (std::size_t r = 0; r < acc.rows.size(); ++r) {
    const json& c = cell_of.at(acc.rows[r]);
    const std::vector<double>& a = acc.values[r][0];
    const long p = static_cast<long>(params.values[r][0].back());
    configs.push_back({c, p, mean(a), mean(mem.values[r][0]) == 1.0});
    auto num = [&](const char* k) { return std::to_string(c.at(k).get<int>()); };
    rows.push_back({num("N"), num("n"), num("H"), num("s"), num("m"), std::to_string(p),
                    std::to_string(a.size()), fixed(mean(a), 6), fixed(sd(a), 3),
                    fixed(mean(mem.values[r][0]), 3), fixed(mean(steps.values[r][0]), 5)});
    param_set.insert(p);
    n_set.insert(c.at("N").get<int>());
  }
  const Row header = {"N",          "n",    "H",        "s",           "m",
                      "parameters", "runs", "accuracy", "accuracy_sd", "memorized_fraction",
                      "steps"};
  write_file_atomic(dir + "/summary.csv", csv_text(header, rows));

  const std::vector<long> P(param_set.begin(), param_set.end());
  const std::vector<int> N(n_set.begin(), n_set.end());
  HeatMap h{"Training accuracy (mean over seeds)", "N (sequences)", "parameters", "accuracy", {}, {}, {}, {}};
  for (int x : N)
    h.xtics.push_back(std::to_string(x));
  for (long p : P)
    h.ytics.push_back(std::to_string(p));
  h.values.assign(P.size(), std::vector<double>(N.size(), std::nan("")));
  std::vector<std::vector<int>> count(P.size(), std::vector<int>(N.size(), 0));
  for (const Config& k : configs) {  // configurations with equal parameter counts are averaged
    const std::size_t r = std::lower_bound(P.begin(), P.end(), k.params) - P.begin();
    const std::size_t c = std::lower_bound(N.begin(), N.end(), k.cell.at("N").get<int>()) - N.begin();
    double& v = h.values[r][c];
    v = (std::isnan(v) ? 0 : v * count[r][c]) + k.accuracy;
    v /= ++count[r][c];
  }
  if (plots) plot_png(dir + "/accuracy_heatmap.png", h);

  LinePlot mp{"Smallest model that memorizes (every seed at 100% training accuracy)", "N (sequences)",
              "parameters"};
  mp.logx = mp.logy = true;
  Series s{"smallest memorizing model", {}, {}, {}};
  std::vector<Row> md;
  for (int x : N) {
    long best = -1;
    for (const Config& k : configs)
      if (k.cell.at("N").get<int>() == x && k.memorized && (best < 0 || k.params < best)) best = k.params;
    md.push_back({std::to_string(x), best < 0 ? "none in the grid" : std::to_string(best)});
    if (best > 0) {
      s.x.push_back(x);
      s.y.push_back(static_cast<double>(best));
    }
  }
  if (plots && !s.x.empty()) {
    mp.series.push_back(s);
    plot_png(dir + "/min_parameters.png", mp);
  }
  return markdown_table({"N", "smallest memorizing parameters"}, md);
}

std::string run_memorization_sweep(const json& cfg, const RunOptions& o, bool plots) {
  const std::vector<json> cells = sweep_cells(cfg);  // a bad config fails before any folder is made
  Experiment sweep;
  sweep.name = "sweep";
  sweep.cells = [cells](const Context&) { return cells; };
  auto shared = std::make_shared<SharedData>();
  sweep.run = [shared](const json& cell, const Context&) {
    return train_on(cell, *shared->get(cell), nullptr);
  };
  sweep.report = [plots](const std::vector<json>& lines, const Outputs& out, const Context&) {
    return summarise_sweep(lines, out.dir, plots);
  };
  make_dirs(o.out_dir);
  if (sweep_writer()) write_file_atomic(o.out_dir + "/config.json", cfg.dump(2) + "\n");
  return run_experiment(sweep, Context{}, o);
}

// ---- reproduce kajitsuka-memorization -----------------------------------------------------------

// One tied rank-1 head + ReLU FF over (N, FF width), with the reviewers' fixed-v variant.
Experiment kajitsuka_memorization() {
  Experiment e;
  e.name = "kajitsuka-memorization";
  e.summary =
      "Kajitsuka & Sato: one tied rank-1 head + ReLU FF memorizes (N x FF width), and the reviewers' fixed-v "
      "variant";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    const std::vector<int> Ns = c.pick({10}, {25, 50, 100, 200}, {25, 50, 100, 200, 400, 800});
    const std::vector<int> ms = c.pick({8}, {16, 64, 256, 1024}, {16, 64, 256, 1024, 4096});
    const int seeds = c.seed_count();
    const long steps = c.step_count(100, 4000, 20000);
    for (int seed = 1; seed <= seeds; ++seed)
      for (bool fixed_v : {false, true})
        for (int N : Ns)
          for (int m : ms)
            cells.push_back({{"task", "memorize"},
                             {"N", N},
                             {"n", 8},
                             {"d", 4},
                             {"V", 64},
                             {"H", 1},
                             {"s", 1},
                             {"m", m},
                             {"tied", true},
                             {"fixed_v", fixed_v},
                             {"seed", seed},
                             {"steps", steps},
                             {"batch", 64},
                             {"lr", 0.01}});
    return cells;
  };
  e.run = [](const json& cell, const Context&) { return train_memorization(cell); };
  e.report = [](const std::vector<json>& lines, const Outputs& out, const Context&) {
    auto row = [](const json& c) {
      return std::string(c.at("fixed_v").get<bool>() ? "fixed v, " : "trained, ") +
             "N=" + std::to_string(c.at("N").get<int>());
    };
    Grouped g = group(
        lines, row, [](const json& c) { return "m=" + std::to_string(c.at("m").get<int>()); },
        [](const json& r) { return r.at("accuracy").get<double>(); });
    std::string md = write_grouped(g, "training accuracy", out);
    md +=
        "\n" + grouped_markdown(
                   group(
                       lines, row, [](const json& c) { return "m=" + std::to_string(c.at("m").get<int>()); },
                       [](const json& r) { return r.at("loss").get<double>(); }),
                   "training loss", 3);
    // The construction's size for the same data (Zhang form, tied: 2d + d + q + dq with q contexts).
    std::vector<Row> cons;
    std::set<std::pair<int, int>> seen;
    for (const json& l : lines) {
      const json& c = l.at("cell");
      if (!seen.insert({c.at("N").get<int>(), c.at("seed").get<int>()}).second) continue;
      TaskOptions o;
      o.N = c.at("N");
      o.n = c.at("n");
      o.d = c.at("d");
      o.V = c.at("V");
      o.seed = c.at("seed").get<std::uint64_t>();
      const kajitsuka::Facts f = kajitsuka::analyse(make_task("memorize", o));
      std::size_t q = 0;
      for (const auto& s : f.sets)
        q += s.size();
      const std::size_t d = static_cast<std::size_t>(o.d);
      cons.push_back({std::to_string(o.N), std::to_string(c.at("seed").get<int>()), std::to_string(q),
                      std::to_string(2 * d + d + q + d * q)});
    }
    md += "\nThe construction for the same data (`uatlab memorize`, tied, Zhang form):\n\n" +
          markdown_table({"N", "seed", "contexts q", "construction parameters"}, cons);
    md +=
        "\nTrained model parameters: 2d (tied head and W_O) + FF (2dm + m + d) + readout (3d + 3), d = 4.\n";
    write_file_atomic(out.path(".md"), md);
    LinePlot plot{"Kajitsuka & Sato memorization: one tied rank-1 head + ReLU FF (d = 4, n = 8)",
                  "FF width m", "training accuracy"};
    plot.logx = true;
    plot.series = row_series(g, 2);
    plot_png(out.path(".png"), plot);
    return md;
  };
  return e;
}

}  // namespace uatlab::experiment
