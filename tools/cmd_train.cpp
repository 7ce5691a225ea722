// uatlab train | gradient: the training engine from the command line.
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <type_traits>

#include "commands.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/train/trainer.hpp"

namespace uatlab::cli {

using nlohmann::json;

namespace {

struct TrainOpts {
  std::string data, val, task, init_model, out, dtype = "float", loss, resume;
  ArchitectureFlags arch;
  int task_val_N = 0;
  double val_fraction = 0, gain = 1;
  std::uint64_t init_seed = 1;
  TaskOptions task_opt;
  TrainConfig cfg;
};

std::string clock_text(double s) {
  char buf[32];
  if (!std::isfinite(s)) return "?";
  long t = static_cast<long>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

template <class S>
int run_train(TrainOpts& o, const Dataset& data, const Dataset* val, Architecture arch) {
  Network<S> net;
  if (!o.init_model.empty())
    net = load_network<S>(o.init_model);
  else {
    Network<double> nd(arch);
    init_random(nd, o.init_seed, o.gain);
    net = network_cast<S>(nd);
  }
  const bool tty = isatty(2);
  auto log = [&](const Progress& p) {
    if (quiet()) return;
    char line[256];
    std::snprintf(line, sizeof line, "step %ld/%ld  loss %.6g  lr %.3g  |g| %.3g  %.1f steps/s  ETA %s",
                  p.step, p.steps, p.loss, p.lr, p.grad_norm, p.steps_per_second,
                  clock_text(p.eta_seconds).c_str());
    if (tty)
      std::fprintf(stderr, "\r%-100s", line);
    else
      std::fprintf(stderr, "%s\n", line);
    if (tty && p.step == p.steps) std::fprintf(stderr, "\n");
  };
  std::fprintf(stderr, "training %zu parameters (%s) on %zu sequences: %s\n", net.parameter_count(),
               Scalar<S>::name, data.sequences.size(), o.cfg.to_json().dump().c_str());
  const TrainReport r = train(net, data, val, o.cfg, o.resume, log);
  if (tty) std::fprintf(stderr, "\n");
  json rep = training_summary(net, data, val, o.cfg.loss, r);
  save_network(net, o.out, std::is_same_v<S, float> ? "F32" : "F64", Scalar<S>::name);
  rep["model"] = o.out;
  std::cout << rep.dump() << "\n";
  // Within 2% of the best input-blind prediction: say so, a loss of ln 3 means nothing to a newcomer.
  const double chance = rep["chance_loss"].get<double>(), final_loss = rep["train_loss"].get<double>();
  if (chance > 0 && final_loss >= 0.98 * chance)
    std::fprintf(stderr,
                 "uatlab: note: the training loss %.4g ended at chance level (%.4g, the best prediction that "
                 "ignores the input): the network learned nothing. Try more steps, another --lr, a "
                 "wider network or a smaller task (docs/training.md).\n",
                 final_loss, chance);
  return 0;
}

int cmd_train(TrainOpts& o) {
  if (o.data.empty() == o.task.empty()) throw Error("give exactly one of --data FILE and --task NAME");
  // Outputs checked before the work; resuming from the checkpoint it keeps writing is allowed.
  check_outputs(
      {{"--data", o.data}, {"--val", o.val}, {"--init", o.init_model}, {"--task-corpus", o.task_opt.corpus}},
      {{"--out", o.out}, {"--metrics", o.cfg.metrics}, {"--checkpoint", o.cfg.checkpoint}});
  check_outputs({{"--resume", o.resume}}, {{"--out", o.out}, {"--metrics", o.cfg.metrics}});
  limits::check_real(o.val_fraction, 0, 1, "--val-fraction");  // NaN passes CLI11's range check
  const ArchitectureFlags& a = o.arch;
  if (!o.init_model.empty() &&
      (!a.arch.empty() || !a.layers.empty() || a.d || a.vocab || a.input || a.max_len || a.readout))
    throw Error("--init takes the architecture from " + o.init_model +
                ": give no --arch, --layer, --d, --vocab, --input, --max-len or --readout with it");
  Dataset data, val;
  if (!o.task.empty()) {
    const TaskSpec& spec = task(o.task);
    data = make_task(o.task, o.task_opt);
    if (o.task_val_N > 0) val = make_task(o.task, validation_options(o.task_opt, o.task_val_N));
    if (o.loss.empty()) o.loss = loss_names(spec.loss);
    if (o.arch.arch.empty() && o.init_model.empty()) {
      const TaskShape shape = spec.shape(o.task_opt);
      if (o.arch.readout == 0) o.arch.readout = shape.outputs;
      if (o.arch.vocab == 0) o.arch.vocab = shape.vocab;
      if (o.arch.d == 0) o.arch.d = shape.d;
    }
  } else {
    data = read_dataset(o.data);
  }
  if (o.loss.empty()) o.loss = "mse";
  o.cfg.loss = parse_loss(o.loss);
  if (!o.val.empty()) {
    if (!val.sequences.empty()) throw Error("give at most one of --val and --task-val-N");
    val = read_dataset(o.val);
  } else if (o.val_fraction > 0) {
    if (!val.sequences.empty()) throw Error("give at most one of --val-fraction and --task-val-N");
    const std::size_t k =
        static_cast<std::size_t>(o.val_fraction * static_cast<double>(data.sequences.size()));
    if (k == 0 || k >= data.sequences.size())
      throw Error("--val-fraction leaves no training or no validation sequences");
    val = data;
    val.sequences.assign(data.sequences.end() - static_cast<long>(k), data.sequences.end());
    data.sequences.resize(data.sequences.size() - k);
  }
  Architecture arch;
  if (o.init_model.empty()) arch = architecture_from_flags(o.arch);
  if (o.init_model.empty() && o.arch.arch.empty() && o.arch.layers.empty())
    std::fprintf(stderr,
                 "uatlab: note: no --layer given: the network has no attention or feed-forward sub-layer, "
                 "only its embedding and readout (e.g. --layer attention:heads=2,head_size=4 --layer "
                 "feedforward:width=32)\n");
  const Dataset* v = val.sequences.empty() ? nullptr : &val;
  if (o.dtype == "float") return run_train<float>(o, data, v, arch);
  if (o.dtype == "double") return run_train<double>(o, data, v, arch);
  throw Error("--dtype must be float or double");
}

// Every field of an options struct as a flag, from its field table: --PREFIXKEY with '-' for '_',
// the table's help; enumerations (the loss) have flags of their own.
template <class Options>
void add_field_flags(CLI::App* app, Options& options, const std::string& prefix) {
  Options::fields(options, [&](const char* key, auto& member, const char* help) {
    using T = std::decay_t<decltype(member)>;
    std::string flag = "--" + prefix + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if constexpr (std::is_same_v<T, bool>) {
      app->add_flag(flag, member, help);
    } else if constexpr (std::is_same_v<T, std::vector<int>>) {
      app->add_option(flag, member, help)->delimiter(',')->check(CLI::Range(1, 1 << 20));
    } else if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::string>) {
      app->add_option(flag, member, help);
    } else if constexpr (!std::is_enum_v<T>) {
      app->add_option(flag, member, help)->capture_default_str();
    }
  });
}

struct GradientOpts {
  std::string model, data, loss, out;
};

int cmd_gradient(const GradientOpts& o) {
  check_outputs({{"model", o.model}, {"data", o.data}}, {{"--out", o.out}});
  const Network<double> net = [&] {
    try {
      return load_network<double>(o.model);
    } catch (const Error& e) {  // "use MPFR" would mislead: gradient has no other precision
      if (std::string(e.what()).find("beyond the range of double") == std::string::npos) throw;
      throw Error(o.model + ": a weight beyond the range of double, the one precision gradient computes in");
    }
  }();
  const Dataset ds = read_dataset(o.data);
  const Loss l = parse_loss(o.loss);
  std::vector<std::size_t> all(ds.sequences.size());
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = i;
  Network<double> grad = zero_like(net);
  const double value = loss_and_gradient(net, make_batch<double>(ds, all, l, net.arch.out_dim()), l, grad);
  if (!std::isfinite(value))  // JSON has no inf or NaN, and such a loss has no gradient worth writing
    throw Error("the loss over the data is not finite (" + std::to_string(value) + "); nothing written");
  save_network(grad, o.out, "F64", "gradient");
  std::printf("{\"loss\": %.17g}\n", value);
  return 0;
}

}  // namespace

void add_train_commands(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<TrainOpts>();
  auto* t = app.add_subcommand(
      "train", "Train a network (AdamW, hand-written backward) on JSONL data or a built-in task");
  t->add_option("--data", o->data, "Training data (JSONL with labels \"y\", optional \"mask\")");
  t->add_option("--task", o->task, "Built-in task: " + task_names() + " (docs/training.md)");
  add_field_flags(t, o->task_opt, "task-");
  t->add_option("--task-val-N", o->task_val_N,
                "Also make a validation set of this many sequences (chars: from the held-out 10%)");
  t->add_option("--val", o->val, "Validation data (JSONL)");
  t->add_option("--val-fraction", o->val_fraction,
                "Hold out this fraction of the data (the last sequences), from 0 to 1");
  add_architecture_flags(t, o->arch);
  t->add_option("--init", o->init_model, "Start from this model file instead of a random one");
  t->add_option("--init-seed", o->init_seed, "Seed of the random initial weights")->capture_default_str();
  t->add_option("--gain", o->gain, "Initial linear weights ~ U(±gain/sqrt(fan_in))")->capture_default_str();
  t->add_option("--dtype", o->dtype, "float or double")->capture_default_str();
  t->add_option("--loss", o->loss, "mse or ce (default: the task's, else mse)");
  add_field_flags(t, o->cfg, "");
  t->add_option("--resume", o->resume, "Resume from this checkpoint");
  t->add_option("--out,-o", o->out, "Final model (safetensors; F32 for float, F64 for double)")->required();
  commands.push_back({t, [o] { return cmd_train(*o); }});

  auto g = std::make_shared<GradientOpts>();
  auto* gr =
      app.add_subcommand("gradient", "Write d(loss)/d(weights) over a whole dataset (double) as safetensors");
  gr->add_option("model", g->model, "Model file")->required();
  gr->add_option("data", g->data, "Labelled data (JSONL)")->required();
  gr->add_option("--loss", g->loss, "mse or ce")->required();
  gr->add_option("--out,-o", g->out, "Gradient file (same tensor names)")->required();
  commands.push_back({gr, [g] { return cmd_gradient(*g); }});
}

}  // namespace uatlab::cli
