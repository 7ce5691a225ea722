// Memorization experiments: `uatlab sweep CONFIG` (a grid of independent trainings, each to 100%
// training accuracy or a step cap: summary CSV, accuracy heat map, smallest memorizing model) and
// the kajitsuka-memorization experiment (docs/memorization.md).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "uatlab/experiment/experiment.hpp"

namespace uatlab::experiment {

// One training of a cell: task (memorize | random-labels), N, n, d, V, classes, m (FF width, 0:
// none), H, s (head size), tied, seed, steps, batch, lr, fixed_v (tied only: the Q=K=V row fixed
// to Lemma 3's projection and frozen). Result: accuracy, loss, memorized, steps, parameters, seconds.
// `trained` and `trained_on`, when given, receive the trained network and its training data.
json train_memorization(const json& cell, Network<float>* trained = nullptr, Dataset* trained_on = nullptr);

// Whether every counted token's argmax of a trained float model is certified on its training data
// (MPFI at 64 bits, then at 256 if some were undecided): the criterion of the experiments that
// compare trained models with constructions (memorization-capacity, memorization-optimal).
bool argmax_certified(const Network<float>& net, const Dataset& data);

// The same criterion at fewer bits of storage: the fewest significand bits b ≤ 24 such that the
// network with every weight rounded to nearest at b bits still has every argmax certified
// (bisection over b, taking "certified" as monotone in b), and the bits that rounded network
// stores (each weight counted by the bits a binary float needs to hold it exactly). The network
// given must itself be certified (b = 24 is the float32 network unchanged).
struct RoundedWeights {
  int bits = 24;
  long long max_bits = 0, total_bits = 0;
};
RoundedWeights fewest_weight_bits(const Network<float>& net, const Dataset& data);

// The presets (name, JSON text) and a config from a preset name, JSON text or a file.
const std::vector<std::pair<std::string, std::string>>& sweep_presets();
json sweep_config(const std::string& text);
// The grid of a config (strictly validated: unknown keys, bad types and ranges are errors).
std::vector<json> sweep_cells(const json& config);
std::string config_key(const json& cell);  // "N=.. n=.. H=.. s=.. m=.."

// summary.csv, accuracy_heatmap.png, min_parameters.png (unless !plots) in dir; returns the
// Markdown table of the smallest memorizing model per N.
std::string summarise_sweep(const std::vector<json>& lines, const std::string& dir, bool plots = true);

// config.json, runs.jsonl (resume) and the summary; "" on non-writing MPI ranks.
std::string run_memorization_sweep(const json& config, const RunOptions& o, bool plots = true);

}  // namespace uatlab::experiment
