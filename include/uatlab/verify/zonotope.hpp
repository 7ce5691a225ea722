// Affine forms (a zonotope) through a network: analyse's third region method (--region-method
// zonotope, docs/analyse.md). Interval propagation forgets that the entries of a layer depend on the
// same inputs, so every layer widens what the one before it left (the wrapping effect); affine forms
// keep each value's dependence on the input box as a linear function of shared noise symbols; what
// is not linear (the curvature of exp, GELU, 1/√v, the products of attention) and the rounding go to
// a remainder per value, which becomes a symbol of its own where a matrix is passed on.
#pragma once

#include "uatlab/model/network.hpp"

namespace uatlab {

// The values of a rows×cols matrix over a box, in m shared noise symbols e ∈ [−1, 1]^m: entry
// (i, k) is c(i, k) + G.row(i + rows·k)·e + t with |t| ≤ r(i, k). For every input of the box there
// is one e (the same for every entry) with which every entry holds. The first symbols are the box's
// coordinates (x0's entries, column-major); those after them were remainders once. Plain binary64; the bounds
// that make it sound are explained in zonotope.cpp.
struct Zonotope {
  Eigen::MatrixXd c, G, r;
  Eigen::Index rows() const { return c.rows(); }
  Eigen::Index cols() const { return c.cols(); }
  // Entry (i, k), or entry (i, k) less entry (j, k) when j >= 0 (a class margin: the difference of
  // the forms, which keeps what the two share), enclosed at the working precision.
  Mpfi enclose(Eigen::Index i, Eigen::Index k, Eigen::Index j = -1) const;
};

// Throws Error naming the first sub-layer the zonotope forward cannot follow (hardmax attention,
// the mixers, pooling).
void check_zonotope_supported(const Architecture& a);

// Throws Error where the forms of n tokens of in_rows numbers (x0's shape below) would not fit the
// memory budget with `threads` of them at work at once; zonotope_forward checks it too.
void check_zonotope_memory(const Architecture& a, Eigen::Index n, Eigen::Index in_rows, int threads);

// The network's output over every input of the box x0 ± e: x0 the network's input after its
// embedding (d×n for a token-id network, the continuous tokens otherwise), e ≥ 0 the radius on
// every coordinate. The weights and constants come from `net` in MPFI (each taken as the nearest
// double of its enclosure, the distance kept as a radius). Throws Error when a bound leaves
// double's range or a linearisation has nothing to linearise (the enclosure is then undecided).
Zonotope zonotope_forward(const Network<Mpfi>& net, const Mat<Mpfi>& x0, const Rational& e);

}  // namespace uatlab
