// What the Wang & E experiments share (wang_e_common.cpp; the tables in wang_e.cpp, the rates and
// the capacity search in wang_e_rates.cpp).
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
TrainConfig config(const Context& c, double lr, Loss loss, std::uint64_t seed);
// The heavier tail's β: ρ(s) ∝ s^-(1+β) = s^-1.125, a log-type head's weights at a rate on the
// capacity cells' grid (k/16), so that one log-type head holds it exactly.
inline constexpr double kHeavierBeta = 0.125;
// A single-layer FFN-free DP-free model with H heads on a heavy-, light-tailed, tempered or heavier-
// tailed (s^-1.125) kernel of T lags: sequences of 2T tokens, or of T + scored when scored > 0. The
// "spike" is the sparse memory x_{t−T} read through a window of W = 2T lags (task kernel-lags):
// sequences of 2W tokens, or W + scored.
json train_kernel(const std::string& tail, const std::string& rpe, int H, int T, int seed, const Context& c,
                  int scored = 0);
// The memory kernel a trained FFN-free DP-free kernel model has learned: ρ̂(s), s = 0 … T (ρ̂(0) = 0),
// the response at the last of n positions to a unit impulse s positions earlier, with every bias
// set to zero, in double.
std::vector<double> learned_kernel(const Network<float>& net, int n, int T);
// The kernel such a model holds over its window of W lags, from its weights, without running it:
// kernel[s − 1] = ρ̂(s) = Σ_h c_h w_h(s), s = 1 … W, with each head's weights w_h over the window
// (head_weights) and its gain c_h = readout · wo_h · wv_h,0 (biases left out, as learned_kernel
// does). Equals learned_kernel on sequences longer than W.
struct HeadKernel {
  std::vector<double> kernel, gains;
};
HeadKernel head_kernel(const Network<float>& net);
// A kernel's row label: "heavy-tailed", "light-tailed", "tempered" (a power law cut off),
// "heavier-tailed".
std::string tail_label(const std::string& tail);
// One attention layer (H heads of size 4, lin-type RPE, DP-free unless dp) + an FFN of width m on a
// task with fixed lags (sparse-boolean: majority; complex-readout: frequency omega), the heads
// reading a window of the largest lag, positions before it not scored. Without `positions` a DP
// head sees positions through the RPE alone, as a DP-free head does; with it, learned absolute
// positions are added to the tokens (3a's positive control). rope > 0 (DP heads only): rotary
// positions with that base (3a's fair DP arm: a relative position its dot product can use); rpe: the
// heads' position bias (lin-type, or a T5 table that can aim at any lag).
inline constexpr int kRotaryBase = 10000;
json train_single_layer(const std::string& task, const std::vector<int>& lags, double omega, int H, int m,
                        bool dp, int seed, const Context& c, bool positions = false, int rope = 0,
                        Rpe rpe = Rpe::lin);

// The model class's own reach on a memory kernel, without training: H DP-free heads of one layer
// represent the kernels ρ̂(s) = Σ_h c_h w_h(s) over the lags s = 1 … W, each head's weights
// w_h = φ(p_h, ·)/Σ_s φ(p_h, s) with φ(p, s) = e^{−p·s} (lin-type RPE) or s^{−p} (log-type) and a
// rate p_h ≥ 0, and c_h the head's gain (its value and output weights). Heads are added greedily:
// each step takes the rate of `rates` that lowers the least-squares error most (orthogonal matching
// pursuit, in MPFR at `bits`), so the errors are upper bounds on the class's best. After 1, 2, …
// heads: the error Σ_s (ρ̂(s) − ρ(s))² / Σ_s ρ(s)² (rho: ρ(1 … W)) and log10 of the gains' size
// Σ_h |c_h| (it can pass double's range). The search stops at max_heads, at W heads, when no rate
// is left that is independent of the chosen ones, or once the error is at most `stop`.
struct Capacity {
  std::vector<double> errors, log10_gains, rates;  // rates: the chosen ones, in order
};
Capacity kernel_capacity(const std::vector<double>& rho, bool log_type, const std::vector<double>& rates,
                         int max_heads, unsigned bits, double stop = 0);
// What gains the size of a float model's leave: the least error of any number of heads whose gains
// keep Σ_h |c_h| ≤ budget, their rates restricted to `rates`. The problem is convex (least squares
// over an ℓ1 ball); FISTA in double, `iterations` at most. error: the fit found; lower: that error
// less the Frank–Wolfe gap, a lower bound on the least error (up to double rounding).
struct BoundedFit {
  double error = 0, lower = 0;
};
BoundedFit bounded_gain_fit(const std::vector<double>& rho, bool log_type, const std::vector<double>& rates,
                            double budget, int iterations);
// The rates the capacity search picks from: 0, 2^−10 … 2^−5, k/16 up to 16, then k/2 up to 60 (all
// exact in binary, so that the in-class kernels' own rates 1/2 and 3/2 are among them).
std::vector<double> capacity_rates();
// The kernels of the capacity cells, ρ(1 … W): "spike", 1 at lag T in a window of W = 2T (the
// sparse memory of kernel-lags), or "heavy" / "light", the trained cells' kernels (β = 1/2) in a
// window of W = T.
std::vector<double> capacity_kernel(const std::string& memory, int T);

}  // namespace uatlab::experiment::wang_e
