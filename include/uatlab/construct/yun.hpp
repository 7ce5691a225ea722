// Yun et al. (ICLR 2020): a continuous sequence-to-sequence function compiled into a Transformer by
// the universal-approximation proof. Theory, constants and their status: docs/theory/yun.md;
// what the command reports: docs/yun.md.
//
// The pipeline, one function per stage (δ = 1/K):
//   plan              the proof's constants: column-ID vector u = (1, δ^{-1}, …), shift windows,
//                     global multiplier c, thresholds [t_l, t_r], sentinel J, bound M
//   build_modified    ḡ = g_v ∘ g_c ∘ g_q, exact rational weights: d + dK quantization FF layers
//                     (Φ activations), δ^{-d} selective-shift attention layers (hardmax, 2 heads of
//                     size 1, query bias) + 1 global shift, 1 + d + #contexts value-map FF layers
//   standardize       Lemma 9: softmax with scale λ, each Φ as ReLUs with ramps of width η
//   check_lemma6      the contextual map's four properties and ḡ = f̄ on the grid, in rationals
//   distance          d_p(f, g) by seeded Monte Carlo with a 95% confidence interval
// With positional encoding (Theorem 3) column j gets (j−1)·1 added and f need not be
// permutation equivariant.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/model/network.hpp"

namespace uatlab::yun {

// f: [0,1]^{d×n} → R^{d×n}, evaluated in double; fi, where given, encloses f over a box of
// intervals (MPFI), which the domain certificate needs.
struct Target {
  std::string name;
  std::function<Mat<double>(const Mat<double>&)> f;
  std::function<Mat<Mpfi>(const Mat<Mpfi>&)> fi;
};
// The built-in targets and user expressions: uatlab/experiment/targets.hpp.

// Whether the n columns (tokens) of L are pairwise different (exact comparison).
template <class T>
bool distinct_columns(const Mat<T>& L) {
  for (Eigen::Index a = 0; a < L.cols(); ++a)
    for (Eigen::Index b = a + 1; b < L.cols(); ++b)
      if (L.col(a) == L.col(b)) return false;
  return true;
}

struct Plan {
  int d = 0, n = 0, K = 0;
  bool pe = false;
  Rational delta, J, c, t_l, t_r, M, shift;  // shift: the selective shifts' multiplier s (δ^{-d} without PE)
  Vec<Rational> u;
  std::vector<Rational> windows;  // the IDs b, in increasing order (one selective-shift layer each)
};
Plan plan(int d, int n, int K, bool pe);

struct Counts {
  int quantization = 0, attention = 0, value_map = 0;
  std::size_t parameters = 0;
  // The proof's formulas: d/δ + d (PE: nd/δ + d); δ^{-d} + 1 (PE: nδ^{-d} + 1); 1 + d + n·C(δ^{-d}, n) (PE: 1
  // + d + n·δ^{-dn}).
  long formula_quantization = 0, formula_attention = 0, formula_value_map = 0;
};

struct Modified {
  std::string construction = "yun";  // or "kajitsuka"
  nlohmann::json extra;              // construction-specific facts (Kajitsuka: the memorization report)
  bool float64_ok = true;            // evaluating in double reproduces the grid labels
  unsigned bits = 53;                // otherwise the MPFR bits the certificate used
  Plan plan;
  Network<Rational> net;  // ḡ: hardmax attention, Φ activations, exact weights
  Counts counts;
  std::size_t contexts = 0;  // distinct contextual values (value-map layers)
  // Kajitsuka: the value-map sub-layer F2 and what it was fitted to (for plots along aᵀz).
  Layer<Rational> value_map;
  kajitsuka::ValueMapProfile profile;
  nlohmann::json report() const;
};
// Throws Error when the network would exceed max_layers (the count is in the message).
Modified build_modified(const Target& f, int d, int n, int K, bool pe, long max_layers = 20000);

// Kajitsuka & Sato's Proposition 1 on the same grid: F2(FF) ∘ F(SA) ∘ F1(FF) with F1 one FF
// sub-layer of width dK quantizing onto cell centres (so that no token is 0), F(SA) one rank-1
// softmax head and F2 a memorizing ReLU layer (`value_map`: bounded, or Zhang et al.'s, which
// overshoots between and beyond the data), both from `uatlab memorize` on the grid's
// distinct-column sequences labelled with f at the cube centres (certified in MPFI there). With
// pe, column j gets j added (every grid input is memorized, its tokens distinct by position) and f
// need not be permutation equivariant. `counts.attention` is 1, `counts.value_map` 1 (one FF layer
// of width `contexts`). The report adds the memorization's.
Modified build_kajitsuka(const Target& f, int d, int n, int K, bool pe = false,
                         kajitsuka::ValueMap value_map = kajitsuka::ValueMap::bounded,
                         long max_sequences = 20000);

// Lemma 9: the same network with softmax scale λ and every Φ unit replaced by ReLUs (two per
// breakpoint: width ≤ 4 per unit) that agree with it outside ramps of width η before each breakpoint.
Network<Rational> standardize(const Network<Rational>& modified, const Rational& lambda, const Rational& eta);
// A λ for which the softmax's leak on grid inputs is below about 1e-12 of the smallest window gap.
Rational default_lambda(const Plan& p);

struct Lemma6 {
  // G_δ^+ inputs checked, of which with a sentinel / repeated columns (no sentinel) / distinct
  // columns (no sentinel: G̃_δ). Properties 1-3 are checked on G̃_δ, 4 on the other two.
  long inputs = 0, with_sentinel = 0, repeated = 0, distinct = 0;
  bool exhaustive = false;
  long violations[4] = {0, 0, 0, 0};  // properties 1-4
  double max_abs_gc = 0;              // largest |entry| of g_c seen (must be ≤ M)
  long cubes = 0, cubes_equal = 0;    // distinct-column grid cubes checked and where ḡ = f̄ at two points
  long repeated_cubes = 0, repeated_zero = 0;  // cubes with a repeated column, and where ḡ = 0
  bool ok() const;
  nlohmann::json report() const;
};
// Exhaustive over G_δ^+ when it has at most `limit` inputs, else `limit` seeded samples.
Lemma6 check_lemma6(const Modified& m, const Target& f, long limit, std::uint64_t seed);

// max |ḡ − f̄| over the grid's distinct-column cubes (at each cube's corner and at a random point
// inside), evaluated in MPFR at the precision of g's weights; all cubes up to `limit`, else `limit` sampled.
double grid_max_error(const Network<Mpfr>& g, const Plan& p, const Target& f, long limit, std::uint64_t seed);

struct Distance {
  double value = 0, lo = 0, hi = 0;  // d_p estimate and a 95% confidence interval
  long samples = 0;
};
// Evaluated in S (double, or MPFR at the precision of g's weights for the standard network, whose steep
// ramps cancel catastrophically in double); the target in double.
template <class S>
Distance distance(const Network<S>& g, const Target& f, int d, int n, int p, long samples,
                  std::uint64_t seed);
// MPFR bits for the standard network: the largest magnitude (M) times the steepest ramp (1/η)
// plus 64 bits of working accuracy.
unsigned standard_bits(const Plan& p, const Rational& eta);

}  // namespace uatlab::yun
