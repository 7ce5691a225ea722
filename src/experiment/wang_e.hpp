// What the Wang & E experiments share (wang_e.cpp: the tables; wang_e_rates.cpp: the rates).
#pragma once

#include <string>
#include <vector>

#include "uatlab/experiment/experiment.hpp"

namespace uatlab::experiment::wang_e {

// A causal attention sub-layer: DP-free heads read the strict past; DP heads scale by 1/√head_size.
LayerSpec attention(int heads, int head_size, bool dp_free, Rpe rpe, bool pre_norm = false);
LayerSpec feedforward(int width, bool pre_norm = false);
// The heads' RPE rates spread geometrically over [lo, hi].
void spread_rates(Network<double>& net, double lo, double hi);
long steps(const Context& c);  // 60 / 3,000 / 10,000 (or --steps)
int seeds(const Context& c);   // 1 / 3 / 5 (or --seeds)
TrainConfig config(const Context& c, double lr, Loss loss, std::uint64_t seed);
// A single-layer FFN-free DP-free model with H heads on a heavy-, light-tailed or tempered kernel of
// T lags.
json train_kernel(const std::string& tail, const std::string& rpe, int H, int T, int seed, const Context& c);
// The memory kernel a trained FFN-free DP-free kernel model has learned: ρ̂(s), s = 0 … T (ρ̂(0) = 0),
// the response at the last of n positions to a unit impulse s positions earlier, with every bias
// set to zero, in double.
std::vector<double> learned_kernel(const Network<float>& net, int n, int T);
// A kernel's row label: "heavy-tailed", "light-tailed", "tempered" (a power law cut off).
std::string tail_label(const std::string& tail);
// One attention layer (H heads of size 4, lin-type RPE, DP-free unless dp) + an FFN of width m on a
// task with fixed lags (sparse-boolean: majority; complex-readout: frequency omega), the heads
// reading a window of the largest lag, positions before it not scored; positions: learned
// absolute positional encodings.
json train_single_layer(const std::string& task, const std::vector<int>& lags, double omega, int H, int m,
                        bool dp, int seed, const Context& c, bool positions = false);

Experiment rates();  // wang_e_rates.cpp

}  // namespace uatlab::experiment::wang_e
