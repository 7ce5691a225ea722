// Built-in, seeded task generators for `uatlab train --task NAME` (recipes: docs/training.md).
//   memorize          Kajitsuka & Sato's family: N sequences of n distinct random tokens from |V| in R^d,
//                     3 classes, a function of (token, vocabulary set); loss ce, readout 3
//   random-labels     Mahdavi et al.'s: N sequences of n Gaussian tokens N(0, I/d) in R^d, a uniformly
//                     random class (of `classes`) on the first token, the others unscored; loss ce
//   sparse-boolean    token ids 0/1; y_t = f(x_{t−T1}, …, x_{t−TM}) with f parity | majority | and |
//                     product (of ±1 values) | table (a seeded truth table); loss ce, 2 classes;
//                     tokens t < T_M masked out
//   complex-readout   the same fixed sparse memory with a complex read-out: x_t ~ U[−1,1], given as
//                     the first coordinate of a token in R^d (the rest 0: room in the residual
//                     stream), y_t = Π_i sin(ω π x_{t−T_i}); loss mse
//   adaptive-1        Wang & E's Type I adaptive memory: token id 2c + b (payload b ∈ {0,1}, code
//                     c < C = number of lags); the lag depends on the current code, t1 = T[c_t],
//                     y_t = b_{t−t1}; loss ce, 2 classes
//   adaptive-2        Type II (nested): t2 = t1 + T[c_{t−t1}], y_t = b_{t−t1} xor b_{t−t2}
//   chars             character-level language modelling: windows of n characters of a text corpus,
//                     y_t = the next character; training windows from the first 90%, validation
//                     windows from the last 10%; loss ce, one class per distinct character
//   kernel-heavy      x_t ~ N(0,1), the first coordinate of a token in R^d (rest 0),
//                     y_t = Σ_{s=1}^{t} ρ(s) x_{t−s} with ρ(s) = s^{−(1+β)}/ζ(1+β); loss mse
//   kernel-light      the same with ρ(s) = (1 − e^{−β}) e^{−β(s−1)}
//   kernel-tempered   the same with ρ(s) ∝ s^{−(1+β)} e^{−s/λ} (λ = cutoff; sum 1 over s ≥ 1):
//                     a power law cut off exponentially, inside neither RPE class
//   kernel-lags       the same with weight 1/M at each of the M lags (a fixed sparse memory with a
//                     linear read-out: the mean of x_{t−T_i})
//                     kernels: with window T > 0 the sums stop at s = T (for attention with the
//                     same window); any task: positions t < mask_before are not scored
#pragma once

#include <string>
#include <vector>

#include "uatlab/io/dataset.hpp"
#include "uatlab/io/fields.hpp"
#include "uatlab/train/backward.hpp"

namespace uatlab {

struct TaskOptions {
  int N = 1000, n = 32, d = 4, V = 64;  // sequences, length; memorize, random-labels, complex-readout,
                                        // kernels: dimension; memorize: vocabulary; recall: keys
  std::vector<int> lags = {1, 4, 9};    // sparse-boolean, complex-readout, adaptive-*, kernel-lags
  std::string boolean = "parity";
  double beta = 0.5;        // kernels: tail exponent / rate
  double cutoff = 8;        // kernel-tempered: the cutoff length λ
  int classes = 2;          // random-labels; recall: values
  int mask_before = 0;      // any task: positions t < this are not scored
  int window = 0;           // kernels: > 0 truncates the sum at s ≤ window
  double omega = 2;         // complex-readout: frequency
  std::string corpus;       // chars: text file
  bool validation = false;  // chars: draw from the validation split
  std::uint64_t seed = 1;

  // The field table (io/fields.hpp): every field with its JSON key (Python's keyword) and help; the
  // CLI's flag is --task-KEY with '-' for '_'.
  template <class Self, class F>
  static void fields(Self& o, F&& f) {
    f("N", o.N, "Sequences");
    f("n", o.n, "Sequence length");
    f("d", o.d, "Tasks memorize, random-labels, complex-readout, kernel-*: token dimension");
    f("V", o.V, "Task memorize: vocabulary size; recall: keys");
    f("lags", o.lags,
      "Tasks sparse-boolean, complex-readout, kernel-lags: lags; adaptive-*: the lag table, e.g. 1,4,9");
    f("boolean", o.boolean, "Task sparse-boolean: parity, majority, and, product, table");
    f("beta", o.beta, "Task kernels: tail exponent / decay rate");
    f("cutoff", o.cutoff, "Task kernel-tempered: cutoff length lambda");
    f("classes", o.classes, "Tasks random-labels: classes; recall: values");
    f("mask_before", o.mask_before, "Any task: do not score positions t < K");
    f("window", o.window, "Task kernels: truncate the memory at s <= T (0: the whole past)");
    f("omega", o.omega, "Task complex-readout: frequency");
    f("corpus", o.corpus, "Task chars: text corpus");
    f("validation", o.validation, "Task chars: draw from the held-out 10% (the validation split)");
    f("seed", o.seed, "Task data seed");
  }
  nlohmann::json to_json() const { return fields_to_json(*this); }
  // Over the defaults; an unknown key or a value of the wrong type is an Error naming it.
  static TaskOptions from_json(const nlohmann::json& j, const std::string& what = "task options") {
    TaskOptions o;
    fields_from_json(j, o, what);
    return o;
  }
};

// The memory kernel ρ(0 … n) of a kernel-* task (ρ(0) = 0), the weights its targets sum with;
// throws Error for other tasks.
std::vector<double> memory_kernel(const std::string& name, const TaskOptions& o);

// A task's shapes: token ids (vocab > 0) or continuous tokens in R^d, and the readout size.
struct TaskShape {
  int vocab = 0, d = 0, outputs = 0;
};

// One row of the task table (ggml's op-table pattern): a new task is one row in tasks.cpp.
struct TaskSpec {
  const char* name;
  Loss loss;
  Dataset (*generate)(const TaskOptions&);
  TaskShape (*shape)(const TaskOptions&);
  std::vector<double> (*kernel)(const TaskOptions&) = nullptr;  // kernel-*: ρ(0 … n)
};
const std::vector<TaskSpec>& tasks();
const TaskSpec& task(const std::string& name);  // throws Error listing the known names
std::string task_names();                       // "memorize, random-labels, ..."

// The task's data (N, n >= 1 checked first).
Dataset make_task(const std::string& name, const TaskOptions& o);
// The options of a task's validation set of N sequences: the held-out split (chars) or fresh
// draws under another seed (the training seed + 1000003), the one rule for every caller.
TaskOptions validation_options(const TaskOptions& o, int N);
// The distinct characters of a corpus, sorted (the chars task's vocabulary).
std::string corpus_alphabet(const std::string& text);
// The demo data of the main job and the "memorize" task: N sequences of n distinct tokens drawn
// from a vocabulary of |V| random tokens in R^d (norms in [1, 2]), labels (three classes) a seeded
// function of (token, vocabulary set); all numbers exact decimals.
Dataset demo_dataset(int N, int n, int d, int V, std::uint64_t seed);
// N distinct sequences of n tokens (repeats allowed) drawn uniformly from |V| tokens made as
// demo_dataset's, labels uniform in [0, L): one per token, or one per sequence (the last token's,
// as a dataset line {"y": label} reads). The data of the optimal-capacity experiments.
Dataset labelled_dataset(int N, int n, int d, int V, int L, bool per_token, std::uint64_t seed);

}  // namespace uatlab
