// The Wang & E helpers that the tables (wang_e.cpp) and the rates (wang_e_rates.cpp) share: layer
// specs, the training recipe, and the trainings of one cell (docs/theory/wang-e.md).
#include <algorithm>
#include <cmath>

#include "wang_e.hpp"

#include "uatlab/model/network.hpp"

namespace uatlab::experiment::wang_e {

LayerSpec attention(int heads, int head_size, bool dp_free, Rpe rpe, bool pre_norm) {
  LayerSpec a;
  a.kind = LayerKind::attention;
  a.heads = heads;
  a.head_size = head_size;
  a.dp_free = dp_free;
  a.rpe = rpe;
  a.causal = true;
  a.pre_norm = pre_norm;
  // the recipe's DP-free heads read the strict past; x_t arrives through the residual
  a.strict_past = dp_free;
  a.sqrt_scaling = !dp_free;
  return a;
}

LayerSpec feedforward(int width, bool pre_norm) {
  LayerSpec f;
  f.kind = LayerKind::feedforward;
  f.width = width;
  f.pre_norm = pre_norm;
  return f;
}

// Spread the heads' RPE rates geometrically over [lo, hi] (like ALiBi's slopes), so that the
// heads start as different memory kernels; training moves them.
void spread_rates(Network<double>& net, double lo, double hi) {
  for (auto& L : net.layers) {
    if (L.spec.kind != LayerKind::attention || (L.spec.rpe != Rpe::lin && L.spec.rpe != Rpe::log)) continue;
    const int H = L.spec.heads;
    for (int h = 0; h < H; ++h)
      L.rpe(h, 0) = std::exp(std::log(lo) + (h + 0.5) / H * (std::log(hi) - std::log(lo)));
  }
}

// Every experiment trains 60 / 3,000 / 10,000 steps in smoke / quick / full mode (or --steps).
long steps(const Context& c) {
  return c.step_count(60, 3000, 10000);
}

TrainConfig config(const Context& c, double lr, Loss loss, std::uint64_t seed) {
  TrainConfig t;
  t.loss = loss;
  t.steps = steps(c);
  t.batch = 32;
  t.lr = lr;
  t.min_lr = lr / 10;
  t.warmup = std::min<long>(100, t.steps / 10);
  t.clip = 1;
  t.seed = seed;
  t.log_every = t.steps;
  t.nonnegative_rates = true;  // the recipe's rates p_h ≥ 0 (projected after each step)
  return t;
}

// A single layer (attention with lin-type RPE + FFN) on a task with fixed lags. The heads read a
// sliding window of the largest lag, and only positions with a full window are scored, so that
// every scored position sees the same lags and a DP-free head's softmax normalises over the same
// past everywhere.
json train_single_layer(const std::string& name, const std::vector<int>& lags, double omega, int H, int m,
                        bool dp, int seed, const Context& c, bool positions, int rope, Rpe rpe) {
  TaskTraining t;
  t.task = name;
  t.data.lags = lags;
  t.data.n = 32;
  t.data.N = c.pick(256, 4000, 8000);
  t.data.seed = seed;
  t.data.boolean = "majority";
  t.data.omega = omega;
  t.data.d = 8;
  const int window = *std::max_element(lags.begin(), lags.end());
  t.data.mask_before = window;
  t.val_N = c.pick(64, 512, 1024);
  const Loss loss = task(t.task).loss;
  t.arch.vocab = task(t.task).shape(t.data).vocab;
  t.arch.d = t.arch.vocab > 0 ? 16 : task(t.task).shape(t.data).d;
  t.arch.readout = task(t.task).shape(t.data).outputs;
  t.arch.max_len = positions ? t.data.n : 0;
  t.arch.layers = {attention(H, 4, !dp, rpe), feedforward(m)};
  t.arch.layers[0].window = window;
  if (dp) t.arch.layers[0].rope = rope;
  t.cfg = config(c, 3e-3, loss, t.data.seed);
  t.init_seed = t.data.seed;
  t.adjust = [](Network<double>& net) { spread_rates(net, 0.05, 2.0); };
  return train_task(t);
}

// ---- memory kernels (Table 8 and its light-tailed counterpart) ---------------------------------

std::string tail_label(const std::string& tail) {
  return tail == "tempered" ? tail : tail + "-tailed";
}

// Without biases the FFN-free DP-free model is linear in x, so the impulse response is ρ̂(s) itself,
// with relative accuracy also where a light tail is far below the biases.
std::vector<double> learned_kernel(const Network<float>& net, int n, int T) {
  Network<double> nd = network_cast<double>(net);
  nd.for_each_tensor([](const std::string&, Mat<double>& m, Layout, Role role) {
    if (role == Role::bias || role == Role::norm_bias) m.setZero();
  });
  std::vector<double> rho(T + 1, 0.0);
  for (int s = 1; s <= T; ++s) {
    Mat<double> x = Mat<double>::Zero(nd.arch.d, n);
    x(0, n - 1 - s) = 1;
    rho[s] = forward(nd, x)(0, n - 1);
  }
  return rho;
}

// One single-layer, FFN-free, DP-free model with H heads on a memory kernel (heavy, light or
// tempered tail, β = 0.5; heavier: the power law at β = kHeavierBeta) over a window of T lags:
// sequences of n = 2T (or T + scored), positions t < T not scored, so that every scored position
// sees exactly the T lags of its target (docs/theory/wang-e.md, kernels).
json train_kernel(const std::string& tail, const std::string& rpe, int H, int T, int seed, const Context& c,
                  int scored) {
  TaskTraining t;
  const bool heavier = tail == "heavier", spike = tail == "spike";
  const int W = spike ? 2 * T : T;  // the window the heads read
  t.task = spike ? std::string("kernel-lags") : "kernel-" + (heavier ? std::string("heavy") : tail);
  if (spike) t.data.lags = {T};
  t.data.n = scored > 0 ? W + scored : 2 * W;
  t.data.N = c.pick(256, 2000, 4000);
  t.data.seed = seed;
  t.data.beta = heavier ? kHeavierBeta : 0.5;
  t.data.window = W;
  t.data.mask_before = W;
  t.val_N = c.pick(64, 256, 512);
  t.data.d = 2;  // row 0 carries x_t, row 1 is free for the heads' output, which the readout reads
  t.arch.d = 2;
  t.arch.readout = 1;
  const bool log = rpe == "log";
  t.arch.layers = {attention(H, 1, true, log ? Rpe::log : Rpe::lin)};
  t.arch.layers[0].window = W;
  t.cfg = config(c, 1e-2, Loss::mse, seed);
  t.init_seed = seed;
  // Lin-type rates start over [0.02, 2]; on the long memories (scored > 0) over [1/W, 2], so that
  // some head starts at the memory's own length scale.
  const double lin_low = scored > 0 ? 1.0 / W : 0.02;
  t.adjust = [log, lin_low](Network<double>& net) {
    log ? spread_rates(net, 0.25, 4.0) : spread_rates(net, lin_low, 2.0);
  };
  // The learned kernel, and the error on the far half of the memory (T/2 < s ≤ T) relative to the
  // kernel's own size there: Σ (ρ̂ − ρ)² / Σ ρ², the MSE/Var of that half's contribution for
  // unit Gaussian inputs. MSE/Var over the whole memory is dominated by the first lags. A spike has
  // nothing on its far half: its cells report the kernel's error over the window and the part of
  // x_{t−T} it reads, ρ̂(T), from the heads' rates and gains (head_kernel; running the model once
  // per lag, as learned_kernel does, costs W forward passes of 2W tokens).
  t.inspect = [&t, T, W, spike](const Network<float>& net, json& r) {
    const std::vector<double> rho = memory_kernel(t.task, t.data);
    if (spike) {
      const HeadKernel k = head_kernel(net);
      double err = 0, l1 = 0;
      for (int s = 1; s <= W; ++s)
        err += (k.kernel[s - 1] - rho[s]) * (k.kernel[s - 1] - rho[s]);
      for (double g : k.gains)
        l1 += std::abs(g);
      r["window_nmse"] = err;  // Σ ρ² = 1
      r["read"] = k.kernel[T - 1];
      r["gains_l1"] = l1;
      return;
    }
    const std::vector<double> got = learned_kernel(net, t.data.n, T);
    double err = 0, size = 0;
    for (int s = T / 2 + 1; s <= T; ++s)
      err += (got[s] - rho[s]) * (got[s] - rho[s]), size += rho[s] * rho[s];
    r["tail_nmse"] = err / size;
    r["kernel"] = std::vector<double>(got.begin() + 1, got.end());
    r["target_kernel"] = std::vector<double>(rho.begin() + 1, rho.begin() + T + 1);
  };
  return train_task(t);
}

}  // namespace uatlab::experiment::wang_e
