// A deep value map whose parameter count grows like √q·log, not like q: bit extraction with deep
// narrow ReLU sub-layers, in the manner of Vardi, Yehudai & Shamir (ICLR 2022). It maps q context
// ids z_i (the attention layer's outputs) to integer labels. Theory: docs/theory/deep-value-map.md.
//
// The ids are projected on a direction a, t = aᵀz, sorted and cut into B blocks of s consecutive
// ids. The first four entries of the residual stream serve as registers τ, E, C and y:
//   load     τ ← t, every other entry ← 0                                   (one sub-layer, 2d units)
//   select   a staircase of B − 1 steep steps on τ: τ ← t − base_j, E ← E_j (block j's payload, a
//            dyadic of P bits), y ← the label of block j's first id          (one sub-layer, 2B − 2)
//   extract  for each of the s − 1 thresholds of a block: β layers move its offset (β bits) from E
//            into τ, so that τ = t − θ_k; one layer sets C = [τ ≥ 0]; ρ + 1 layers add C times the
//            label change at θ_k (ρ + 1 bits of E) to y                     (2, 3 and 4 units each)
// The readout returns y. Every step has a margin: its pre-activations are ≥ 1 away from its kinks
// on the data, so that the map is exact and AffineForward certifies it at about P bits.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "uatlab/model/network.hpp"

namespace uatlab::deep {

// One context id: an enclosure [lo, hi] of t = aᵀz and its label; sorted, hi_i < lo_{i+1}.
struct Point {
  Rational lo, hi;
  long label = 0;
};

struct Plan {
  int blocks = 0, block_size = 0;  // B and s
  int beta = 0, rho = 0;           // bits per threshold offset; labels < 2^rho
  int grid_exponent = 0;           // thresholds on the grid h = 2^-grid_exponent
  long long payload_bits = 0;      // P = (s − 1)(β + ρ + 1)
  long long depth = 0;             // feed-forward sub-layers of the value map
  long long parameters = 0;        // stored parameters of the whole network (attention included)
  nlohmann::json report() const;
};

// The plan with B blocks, or (blocks = 0) the B of fewest stored parameters over a geometric grid.
// attention: the attention network the value map follows. Throws Error when d < 4, when two
// enclosures overlap, or when a label is negative or ≥ 2^20.
Plan plan(const Network<Rational>& attention, const std::vector<Point>& points, int blocks = 0);

// The stored parameters of the value map alone in d dimensions (load, select, extract and the
// readout of y) with B blocks of s ids, β bits per threshold offset and labels below 2^ρ: a layer
// of w units stores w(2d + 1) + d numbers, so
//   (4d² + 3d) + (2(B − 1)(2d + 1) + d) + (s − 1)[β(5d + 2) + (7d + 3) + (ρ + 1)(9d + 4)] + d + 1.
// The one count of the plan (the architecture's parameter_count agrees; a test checks).
long long value_map_parameters(int d, long long blocks, long long block_size, long long beta, int rho);

// The planner's choice without data: the B (over plan()'s geometric grid, and B = q, a plain
// staircase) of fewest value-map parameters for q ids when every threshold offset takes β bits,
// the plan-only count of docs/theory/deep-value-map.md.
struct PlanCount {
  long long blocks = 0, block_size = 0, parameters = 0;
};
PlanCount plan_count(int d, long long q, long long beta, int rho);

// attention + load + select + extract + a readout of y (one output per token).
Network<Rational> build(const Network<Rational>& attention, const Vec<Rational>& a,
                        const std::vector<Point>& points, const Plan& plan);

}  // namespace uatlab::deep
