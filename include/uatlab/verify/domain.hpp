// Certified error bounds over the whole input domain [0,1]^{d×n}, beyond the papers' sampled
// checks: for a network g and a target f with an interval form, upper bounds on the essential
// supremum of max_entries |g − f| and on d_p(f, g) = (∫ Σ_entries |g − f|^p dx)^{1/p}.
//
// The method, one stage each:
//   1. The network's leading coordinatewise feed-forward sub-layers (every hidden unit reads one
//      entry and writes that entry: the proofs' quantization stages) are composed exactly, in
//      rationals, into one piecewise-affine map per input entry (i, j) on [0, 1]: pieces (a, b)
//      on which the entry becomes α t + β.
//   2. The domain splits into cells, one product of pieces each. On a cell where every α is 0
//      (the quantization is constant there), the rest of the network runs once in MPFI on that
//      point; elsewhere (the ramps of a standardized network) on the interval image, which
//      encloses every output of the cell. AffineForward encloses each standardized Φ unit's ReLUs
//      as one function (its range) and each softmax output within its values, so that this
//      enclosure depends neither on the ramps' width η nor on the softmax scale λ: the ramps' share
//      of d_p^p is at most their measure (∝ η) times this supremum^p, and vanishes with η.
//   3. On each cell, f is enclosed in MPFI over boxes, bisected where the bound is loosest
//      (branch and bound) within a budget of boxes; |g − f| ≤ max(ḡ − f_lo, f̄ − g_lo) per
//      entry, and d_p^p ≤ Σ_boxes vol · Σ_entries bound^p.
// The cell boundaries (finitely many hyperplanes) have measure 0 and are not covered by the
// supremum; everything else is. The bounds are also given on the regular cells alone, with the
// measure of what that leaves out: a cell is regular when the front is constant on it and, given
// a reference network (the modified network of a standardized one), equal to the reference's
// front there, so that the rest is "outside the ramps" of the standardization.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "uatlab/construct/yun.hpp"
#include "uatlab/progress.hpp"

namespace uatlab {

struct DomainOptions {
  std::vector<int> ps = {1, 2};
  long max_cells = 1L << 20;  // refuse a finer partition
  long max_boxes = 200000;    // branch and bound: shared by the regular cells, one box for each other
  unsigned bits = 128;        // MPFI precision of the network (and of f)
  const Network<Rational>* reference = nullptr;  // optional: see regular cells above
  OnProgress progress;
};

struct DomainBound {
  int front_layers = 0;  // the leading coordinatewise sub-layers composed exactly
  long cells = 0, cells_regular = 0, boxes = 0;
  bool finite = false;              // every cell's bound is finite
  double sup = 0;                   // ess sup over the domain of max_entries |g − f| (upper bound)
  double sup_distinct = 0;          // the same over regular cells whose quantized columns are distinct
  std::vector<double> dp;           // upper bounds on d_p(f, g), one per p
  std::vector<double> dp_flat;      // (∫ over the regular cells only)^{1/p} ...
  double excluded_measure = 0;      // ... which leave out this much of the domain (upper bound)
  double sup_flat = 0;              // ess sup over the regular cells
  double sup_excluded = 0;          // ess sup over the others (a standardized network's ramps)
  std::vector<double> dp_distinct;  // (∫ over the regular cells with distinct columns)^{1/p}: the
                                    // rest of d_p^p comes from repeated columns (and ramps)
  nlohmann::json report(const std::vector<int>& ps) const;
};

// Throws Error when f has no interval form, when the partition exceeds max_cells, or when the
// network is not one on [0,1]^{d×n} (its d must equal d).
DomainBound certify_domain(const Network<Rational>& g, const yun::Target& f, int d, int n,
                           const DomainOptions& o);

}  // namespace uatlab
