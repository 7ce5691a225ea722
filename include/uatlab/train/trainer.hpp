// The training loop: seeded batches, AdamW with warm-up + cosine schedule, gradient clipping,
// frozen tensors, CSV metrics, checkpoints and exact resume.
#pragma once

#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "uatlab/io/dataset.hpp"
#include "uatlab/io/fields.hpp"
#include "uatlab/train/backward.hpp"

namespace uatlab {

// The loss as a field: "mse" or "ce" (parse_loss also takes "cross-entropy").
inline nlohmann::json field_to_json(Loss l) {
  return loss_names(l);
}
inline void field_from_json(const nlohmann::json& j, Loss& out, const std::string& what) {
  if (!j.is_string())
    throw Error(what + ": expected " + loss_names.choices() + ", got " + limits::excerpt(j.dump()));
  out = parse_loss(j.get<std::string>());
}

struct TrainConfig {
  Loss loss = Loss::mse;
  long steps = 1000;
  int batch = 32;
  double lr = 1e-3, min_lr = 0;  // cosine from lr down to min_lr after the warm-up
  long warmup = 0;               // linear warm-up steps: lr·(t+1)/warmup
  double weight_decay = 0, beta1 = 0.9, beta2 = 0.999, adam_eps = 1e-8;
  double clip = 0;                  // > 0: clip the global gradient norm (torch's clip_grad_norm_)
  std::uint64_t seed = 1;           // batch order
  std::vector<std::string> freeze;  // tensor names; "layers.0.*" freezes by prefix
  bool nonnegative_rates = false;   // project the lin/log RPE rates p_h onto p_h ≥ 0 after each step
  long log_every = 10;
  long eval_every = 0;                 // > 0: loss/accuracy on the validation set
  bool stop_at_full_accuracy = false;  // cross-entropy: stop when every training token is right
  long plateau_evals = 0;              // > 0 (with eval_every): stop at a plateau (validation_plateaued)
  double plateau_tolerance = 0.002;    // relative improvement that counts
  bool evaluate_training_set = false;  // after the last step: TrainReport::train_loss/_accuracy
  std::string metrics;                 // CSV path
  std::string checkpoint;              // path; written every checkpoint_every steps and at the end
  long checkpoint_every = 0;

  // The field table (io/fields.hpp): every field with its JSON key and help; the CLI's flag is
  // --KEY with '-' for '_'.
  template <class Self, class F>
  static void fields(Self& c, F&& f) {
    f("loss", c.loss, "mse or ce");
    f("steps", c.steps, "Optimizer steps");
    f("batch", c.batch, "Sequences per step");
    f("lr", c.lr, "Peak learning rate");
    f("min_lr", c.min_lr, "Final learning rate of the cosine schedule");
    f("warmup", c.warmup, "Linear warm-up steps");
    f("weight_decay", c.weight_decay, "AdamW decoupled weight decay");
    f("beta1", c.beta1, "AdamW beta1");
    f("beta2", c.beta2, "AdamW beta2");
    f("adam_eps", c.adam_eps, "AdamW epsilon");
    f("clip", c.clip, "Clip the global gradient norm (0: off)");
    f("seed", c.seed, "Batch-order seed");
    f("freeze", c.freeze, "Tensor names not to train; \"layers.0.*\" by prefix (repeat)");
    f("nonnegative_rates", c.nonnegative_rates, "Project the lin/log RPE rates onto p >= 0 after each step");
    f("log_every", c.log_every, "Progress and metrics every K steps");
    f("eval_every", c.eval_every, "Validation every K steps");
    f("stop_at_full_accuracy", c.stop_at_full_accuracy, "ce: stop once every training token is right");
    f("plateau_evals", c.plateau_evals,
      "Stop once the last K validations have not lowered the best validation loss by plateau_tolerance");
    f("plateau_tolerance", c.plateau_tolerance, "Relative improvement of the validation loss that counts");
    f("evaluate_training_set", c.evaluate_training_set,
      "After the last step: loss and accuracy over every training sequence");
    f("metrics", c.metrics, "Metrics CSV");
    f("checkpoint", c.checkpoint, "Checkpoint file (weights + AdamW state)");
    f("checkpoint_every", c.checkpoint_every, "Checkpoint every K steps");
  }
  nlohmann::json to_json() const { return fields_to_json(*this); }
  // Over the defaults; an unknown key or a value of the wrong type is an Error naming it; validated.
  static TrainConfig from_json(const nlohmann::json& j, const std::string& what = "train options");
  // Throws Error naming the field outside its range (steps <= 2^31, batch <= 2^20, rates finite
  // and >= 0, betas in [0, 1), adam_eps > 0); train() calls it first.
  void validate() const;
};

// Loss and gradient of a batch with OpenMP over the batch: each thread runs forward and backward
// on its share of the sequences (its own trace and gradient), then the gradients are summed.
// The workspace keeps those buffers between steps.
template <class S>
struct Workspace {
  std::vector<Batch<S>> parts;
  std::vector<Trace<S>> traces;
  std::vector<Network<S>> grads;
  // Wall-clock seconds spent in each phase of batch_gradient, summed over calls (where the time
  // goes, for benchmarks): forward (with the batch split), backward, and the reduction of the
  // threads' gradients.
  double seconds_forward = 0, seconds_backward = 0, seconds_reduce = 0;
};
template <class S>
double batch_gradient(const Network<S>& net, const Batch<S>& batch, Loss loss, Network<S>& grad,
                      Workspace<S>& ws);

// Learning rate at step t (0-based).
double learning_rate(const TrainConfig& c, long t);

// AdamW with torch's semantics (decoupled decay, bias correction); moments are networks too.
template <class S>
struct AdamW {
  Network<S> m, v;
  long step = 0;  // updates done
  explicit AdamW(const Network<S>& net) : m(zero_like(net)), v(zero_like(net)) {}
  // Returns the global gradient norm before clipping (frozen tensors excluded).
  double update(Network<S>& net, Network<S>& grad, const TrainConfig& c, double lr);
};

struct TrainReport {
  long steps = 0;
  double loss = 0, accuracy = -1;           // last logged training loss / accuracy (-1: not classification)
  double val_loss = -1, val_accuracy = -1;  // last evaluation (-1: none)
  // Over every training sequence after the last step, from the data converted once for training
  // (config.evaluate_training_set; NaN and -1 otherwise; accuracy -1 for mse as well).
  double train_loss = std::numeric_limits<double>::quiet_NaN(), train_accuracy = -1;
  double seconds = 0;
  bool stopped_early = false;  // a criterion stopped it: full accuracy or a plateau
  bool plateaued = false;      // the validation loss reached a plateau (config.plateau_evals)
};

// The plateau criterion on the validation losses of a run so far, in order: true when there are
// more than `evals` of them and the best of the last `evals` is not below the best before them by
// more than `tolerance` times that best (relative; losses are positive). `evals` = 0: never.
bool validation_plateaued(const std::vector<double>& val_losses, long evals, double tolerance);

struct Progress {
  long step, steps;
  double loss, lr, grad_norm, steps_per_second, eta_seconds;
};

// Train in place. `resume` (a checkpoint path) restores weights, moments and the step count; the
// batch order is a function of (seed, step), so a resumed run continues exactly.
template <class S>
TrainReport train(Network<S>& net, const Dataset& data, const Dataset* validation, const TrainConfig& config,
                  const std::string& resume = "", const std::function<void(const Progress&)>& on_log = {});

// Mean loss and accuracy (cross-entropy; -1 otherwise) over a whole dataset.
template <class S>
std::pair<double, double> evaluate_loss(const Network<S>& net, const Dataset& data, Loss loss);

// The chance level of a dataset: the loss of the best prediction that ignores the input, one
// constant for every scored token. Cross-entropy: the entropy of the scored labels' frequencies
// (ln 3 for three balanced classes); mse: the mean over output coordinates of the scored targets'
// variance. A training whose loss ends there has learned nothing.
double chance_loss(const Dataset& data, Loss loss);

// The result of a training as JSON, the one format of `uatlab train` and the experiments:
// parameters, steps, seconds, stopped_early, loss (+ accuracy: the last logged), train_loss
// (+ train_accuracy for ce) over the whole training set, chance_loss (chance_loss of the training
// set), and with a validation set val_loss
// (+ val_accuracy; mse: val_nmse = val MSE / variance of the scored validation targets).
template <class S>
nlohmann::json training_summary(const Network<S>& net, const Dataset& data, const Dataset* validation,
                                Loss loss, const TrainReport& report);

}  // namespace uatlab
