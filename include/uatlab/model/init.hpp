// Seeded random weights, identical on every platform (xoshiro256** seeded by splitmix64, own
// mappings to uniform and Gaussian draws).
#pragma once

#include <cstdint>

#include "uatlab/model/network.hpp"

namespace uatlab {

// By parameter role (Role): linear weights U(±gain/√fan_in); biases U(±0.1); layer-norm
// γ = 1 + U(±0.1), β = U(±0.1);
// lin/log slopes p_h U(0, 1); T5 tables U(±1); embeddings U(±1); positional tables U(±0.5).
void init_random(Network<double>& net, std::uint64_t seed, double gain = 1.0);

// Uniform doubles in [0, 1) from a seed; the same sequence everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  double uniform();  // [0, 1)
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  double gauss();  // N(0, 1) by Box–Muller
  std::uint64_t next();

 private:
  std::uint64_t s_[4];
};

}  // namespace uatlab
