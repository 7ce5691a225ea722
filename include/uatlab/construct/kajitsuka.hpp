// Kajitsuka & Sato (ICLR 2024): one layer, one head, rank-1 softmax attention is a contextual
// mapping (Theorem 2), and with Zhang et al.'s feed-forward layer a one-layer Transformer
// memorizes any consistently labelled, tokenwise separated dataset. Theory and constants:
// docs/theory/kajitsuka-sato.md; what the commands report: docs/kajitsuka-sato.md.
//
// The pipeline, one function per stage:
//   analyse            check Theorem 2's hypotheses, measure r_min, r_max, ε, |V|
//   find_projection    Lemma 3: a seeded random unit v with |vᵀ(x−x')| ≥ κ‖x−x'‖ over V ∪ {0}
//   build_contextual   W_K = vᵀ, W_Q = c·vᵀ, W_V = vᵀ, W_O = ε/(4 r_max)·v  (faithful or tuned c),
//                      certify the context ids' separation with MPFI, find the bits it needs
//   memorize           + an interpolating ReLU layer on the context ids (Zhang et al.'s, or the
//                      bounded interpolant with knots at the data), certified end to end
//   hardmax_counterexample  Theorem 1's collinear pair, exact in rationals
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "uatlab/io/dataset.hpp"
#include "uatlab/model/network.hpp"
#include "uatlab/names.hpp"
#include "uatlab/progress.hpp"

namespace uatlab::kajitsuka {

// The dataset as Theorem 2 sees it. Context key = (token, vocabulary set of its sequence): all a
// permutation-equivariant layer without positional encoding can distinguish.
struct Facts {
  int d = 0, n = 0;
  std::vector<Vec<Rational>> vocab;      // V: distinct tokens, in order of first appearance
  std::vector<std::vector<int>> tokens;  // per sequence: vocabulary index of each token
  std::vector<std::vector<int>> sets;    // distinct vocabulary sets (sorted indices)
  std::vector<int> set_of;               // per sequence: index into sets
  std::vector<int> first_with_set;       // per set: a sequence that has it
  Rational r_min_sq, r_max_sq, eps_sq;   // exact squared norms / distances
  double r_min = 0, r_max = 0, eps = 0;  // their square roots, for reports
  int label_dim = 0;                     // 0 when the dataset has no labels
  nlohmann::json report() const;         // N, n, d, V, r_min, r_max, eps
};

// Throws Error listing every violation (sequence and token indices, 1-based): unequal lengths,
// duplicate tokens inside a sequence, zero tokens (r_min = 0), token-id input, fewer than two
// distinct tokens. With require_labels, also missing labels and inconsistent labels (the same
// token in sequences with the same vocabulary set labelled differently).
Facts analyse(const Dataset& ds, bool require_labels = false);

struct Projection {
  Vec<Rational> v;         // unit up to rounding: v = u/‖u‖ rounded to doubles
  double achieved = 0;     // min over pairs of V ∪ {0} of |vᵀ(x−x')| / ‖x−x'‖ (measured, double)
  double required = 0;     // Lemma 3's κ = √(8/(πd)) / (|V|+1)²
  bool certified = false;  // |vᵀ(x−x')| ≥ κ‖v‖‖x−x'‖ for every pair, proven in MPFI
  int tries = 0;
};
// Lemma 3's inequality |vᵀ(x − x')| ≥ κ‖v‖‖x − x'‖ over every pair of V ∪ {0}, with
// κ² = 8/(π d (|V|+1)⁴), certified in MPFI (false when it fails or is undecided).
bool lemma3_holds(const Facts& f, const Vec<Rational>& v);
// Seeded Gaussian directions until one meets Lemma 3 in double and then lemma3_holds.
Projection find_projection(const Facts& f, std::uint64_t seed, int max_tries = 100000);

enum class Mode { faithful, tuned };
inline constexpr EnumNames<Mode::tuned> mode_names{"mode", {"faithful", "tuned"}};
static_assert(mode_names.complete());

struct ContextualOptions {
  Mode mode = Mode::tuned;
  bool tied = false;  // W_Q = W_K = W_V = √c·vᵀ, W_O scaled by 1/√c
  std::uint64_t seed = 1;
  unsigned max_bits = 1u << 20;  // the faithful construction at |V| = 6 needs about 300,000
  bool search_min_bits = true;
  OnProgress progress;  // the precision tried, the sequences certified (contextual and memorize)
};

// The outcome of certifying the context ids at one precision.
struct Separation {
  bool certified = false;  // every pair of different contexts provably apart
  // δ over every pair of different contexts: log10 of the smallest distance, with same-token pairs
  // at their computed (midpoint) distance and different-token pairs at their certified lower bound
  // cross_lower; its certified lower bound (-inf when not certified); and the same-token part alone
  // (+inf when no token occurs in two vocabulary sets).
  double log10_delta = 0, log10_delta_lo = 0, log10_delta_same_token = 0;
  double r = 0;                 // certified upper bound on the largest context-id norm
  bool r_within_bound = false;  // r ≤ r_max + ε/4 (the theorem's norm condition), certified
  double cross_lower = 0;       // certified lower bound on distances between contexts of different tokens
  // An estimate for the fewest-bits search, not a certificate: the least spare_bits
  // (verify/precision.hpp) of the two conditions, over every pair (−inf when not certified).
  double spare_bits = 0;
};

struct Contextual {
  Network<Rational> net;  // the attention sub-layer alone (exact weights)
  Projection projection;
  Mode mode = Mode::tuned;
  bool tied = false;
  Rational c;            // the score scale inside W_Q (tied: (√c)² as rounded)
  double c_theorem = 0;  // the paper's c, for comparison
  double c_gap = 0;      // the smallest c meeting the 2 log n + 3 gap condition on the measured projections
  double log10_delta_bound = 0;  // the theorem's δ
  double r_bound = 0;            // r_max + ε/4
  Separation separation;         // at bits_used
  unsigned bits_used = 0, min_bits = 0;
  std::size_t contexts = 0;
  nlohmann::json report() const;
};

// Certify the separation of the context ids computed by `attention` (one attention sub-layer) in
// MPFI at `bits`. decide_only: only `certified` is wanted (the fewest-bits probes), so the pairs
// stop at the first that is not certified apart and the other fields are partial.
Separation certify_separation(const Network<Rational>& attention, const Facts& f, unsigned bits,
                              bool decide_only = false);

Contextual build_contextual(const Facts& f, const ContextualOptions& opt);
// The fewest bits at which the contextual map's separation is still certified (a bisection below
// c.bits_used; build_contextual runs it when opt.search_min_bits, memorize after its certificate).
unsigned contextual_min_bits(const Contextual& c, const Facts& f, const ContextualOptions& opt);

// The feed-forward value map on the context ids (see value_map_layer in kajitsuka.cpp):
// zhang (Zhang et al.: biases between the data, slopes that alternate and grow, unbounded outside)
// or bounded (knots at the data, the piecewise-linear interpolant, flat outside), both one layer of
// q units; or deep (construct/deep_value_map.hpp: bit extraction, parameters growing like √q·log,
// integer labels, d ≥ 4).
enum class ValueMap { zhang, bounded, deep };
inline constexpr EnumNames<ValueMap::deep> value_map_names{"value map", {"zhang", "bounded", "deep"}};
static_assert(value_map_names.complete());

// What the value map was fitted to, for plots: the sorted projections t_i = aᵀz_i of the context
// ids and the first output row's target label − z (doubles).
struct ValueMapProfile {
  std::vector<double> t, target;
};

// Certified bound on F(t) = b2 + Σ_j w2_{row,j} ReLU(t + b1_j) over all real t (MPFI at `bits`):
// infinite when the final slope Σ_j w2_{row,j} is not exactly 0.
struct ValueMapBound {
  double sup = 0, final_slope = 0;
};
ValueMapBound value_map_bound(const Layer<Rational>& ff, int row, unsigned bits);
// F(t) of the same layer at each t, in MPFR at `bits` (the weights cancel
// catastrophically in double), for plots.
std::vector<double> value_map_curve(const Layer<Rational>& ff, int row, const std::vector<double>& ts,
                                    unsigned bits);

struct Memorized {
  Contextual contextual;
  Network<Rational> net;   // attention + value map (+ readout when labels are shorter than d)
  std::size_t hidden = 0;  // q: distinct contexts
  double max_error = 0;    // largest |output − label| enclosure bound at bits_used
  double seconds_contextual = 0, seconds_construct_certify = 0, seconds_min_bits = 0;
  unsigned bits_used = 0, min_bits = 0;
  bool float64_works = false;
  double float64_max_error = 0;
  std::size_t params_attention = 0, params_ff = 0, params_total = 0;  // stored
  // The Zhang form's count (uatlab's, not a formula from the paper): 4d (2d tied) + d + q + dq.
  std::size_t zhang_form_attention = 0, zhang_form_ff = 0, zhang_form_total = 0;
  ValueMap value_map = ValueMap::zhang;
  nlohmann::json deep_plan;  // deep: deep::Plan::report()
  ValueMapProfile profile;
  double value_map_sup = 0;  // certified sup over all t and output rows of |F(t)| (inf: unbounded; NaN: deep)
  double target_max = 0;     // max |label − z| over the contexts, what F must reach
  nlohmann::json report() const;
};

struct MemorizeOptions {
  ContextualOptions contextual;
  std::string tolerance = "1e-6";  // every output within this of its label
  ValueMap value_map = ValueMap::zhang;
  int blocks = 0;  // deep: B (0: the fewest parameters)
};

// Certified memorization: every training sequence is evaluated through the whole network in
// MPFI and each output enclosure lies within the tolerance of its label. Throws Error if the
// precision cap is reached first.
Memorized memorize(const Dataset& ds, const MemorizeOptions& opt);

// Evaluate `net` on every sequence in MPFI at `bits`; the largest upper bound of
// |output − label| over the tokens whose label counts (the dataset's mask; all without one: an Error
// when none counts), or +inf when an enclosure is undecided/unbounded. Stops early (returning some
// value above stop_above) once one sequence exceeds stop_above. dependency_free: feed-forward
// sub-layers through AffineForward (verify/affine.hpp), as the deep value map needs. order (when
// not empty) is the order the sequences start in; spare (when given) receives per sequence the
// estimate spare_bits (verify/precision.hpp) of its closest output to `tolerance` (NaN where skipped).
double certified_max_error(const Network<Rational>& net, const Dataset& ds, unsigned bits,
                           double stop_above = std::numeric_limits<double>::infinity(),
                           const OnProgress& progress = {}, bool dependency_free = false,
                           const std::vector<std::size_t>& order = {}, std::vector<double>* spare = nullptr,
                           double tolerance = 0);

// Theorem 1. Tokens λ·u on a line, Λ1 = {1,3,5,7}, Λ2 = {1,2,6,7} (same min, max and mean),
// u = (3/5, 4/5): the two sequences, unlabelled.
Dataset theorem1_pair();
// Theorem 1 on that pair: random one-layer hardmax attentions in exact rationals, and the softmax
// construction.
struct HardmaxCounterexample {
  Dataset data;
  int draws = 0;
  std::vector<int> heads_tried;
  int identical = 0;              // draws whose token-1 outputs were exactly equal
  std::string log10_softmax_gap;  // the softmax construction's certified distance for token 1
  bool softmax_separates = false;
  nlohmann::json report() const;
};
HardmaxCounterexample hardmax_counterexample(int draws, std::uint64_t seed);

}  // namespace uatlab::kajitsuka
