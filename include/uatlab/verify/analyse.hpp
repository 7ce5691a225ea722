// What a model does on its data, certified: `uatlab analyse MODEL DATA` and `uatlab.analyse`.
//
// For any network (trained here, in PyTorch, or constructed) and a labelled dataset:
//   memorization  every counted token's prediction checked in MPFI: for classes, the label's
//                 output is certified above every other (the argmax is certain); for values,
//                 |y − label| is certified within the tolerance. Failures are listed as "wrong"
//                 (certified wrong) or "undecided" (the enclosures overlap at the cap of bits);
//   separation    per token-mixing sub-layer (attention, bproj, sepconv), on its output: a certified lower
//   bound on the distance
//                 between outputs of the same input token in different contexts (Kajitsuka &
//                 Sato's δ, a context being the set of tokens of the sequence) and between outputs
//                 of different tokens, and a direction v along which every token's contexts stay
//                 apart (a certified lower bound on the gap of the projections);
//   precision     the fewest bits at which every prediction is still certified, and whether the
//                 weights rounded to float32, bfloat16 and float16 keep every prediction
//                 (certified in MPFI on the rounded weights).
// docs/analyse.md describes the method and its limits.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "uatlab/io/dataset.hpp"
#include "uatlab/model/ball.hpp"
#include "uatlab/model/network.hpp"
#include "uatlab/names.hpp"
#include "uatlab/progress.hpp"

namespace uatlab {

enum class LabelKind { classes, values };
inline constexpr EnumNames<LabelKind::values> label_kind_names{"labels", {"classes", "values"}};
static_assert(label_kind_names.complete());

enum class RegionMethod { intervals, mean_value, zonotope, balls };
inline constexpr EnumNames<RegionMethod::balls> region_method_names{
    "region method", {"intervals", "mean-value", "zonotope", "balls"}};
static_assert(region_method_names.complete());

struct AnalyseOptions {
  std::string labels = "auto";          // "classes", "values"; auto: classes when every label is an
                                        // integer in [0, outputs) and there are >= 2 outputs
  std::string tolerance = "1e-6";       // values: |y − label| allowed
  unsigned bits = 64, max_bits = 4096;  // MPFI precision: start, and the cap of the doubling
  bool min_bits = true, rounding = true, separation = true;
  // Without the fewest-bits search and without a region by an MPFI method (both need the MPFI
  // precision that certifies the points): the predictions (and the rounded weights') decided by the
  // certified engine's balls (verify/certified.hpp) where they decide every one, MPFI otherwise.
  // false: MPFI always.
  bool engine = true;
  bool stop_early = true;  // rounded weights: stop at the first failure (the verdict, not the count)
  // bfloat16/float16: the weights rounded through float32, as PyTorch's module.to(dtype) of a
  // float64 model makes them (the default), or straight to the format (direct_rounding).
  bool direct_rounding = false;
  // Continuous inputs: feed-forward sub-layers through AffineForward (verify/affine.hpp), which
  // steep staircases (the deep value map) need; slower on wide dense layers.
  bool affine = false;
  long max_separation_tokens = 20000;  // the pairwise distances are quadratic in the tokens
  // Region certificates (non-empty: an exact ε ≥ 0): every prediction certified for every input in
  // the ℓ∞ box of radius ε around each token's input vector (its embedding for token ids), with a
  // certified margin per token, and per sequence the largest ε found certified by a search of
  // epsilon_steps bisection steps.
  std::string epsilon;
  int epsilon_steps = 16;
  // How the box is propagated: intervals (each input coordinate an interval through the network)
  // or the mean-value form, y(x) ∈ y(x0) + J(B)·(x − x0) with the Jacobian J enclosed over the box B
  // by the training passes in intervals, intersected with the intervals' enclosure; the zonotope;
  // or balls: the box as balls through the certified engine's tier (ball:53, or ball:113 where the
  // points needed it), fast but looser than intervals on deep networks.
  RegionMethod region_method = RegionMethod::intervals;
  std::uint64_t seed = 1;  // the random directions tried for the projection
  OnProgress progress;
};

// wrong: certified wrong; undecided: the intervals at this precision decide nothing
enum class FailureKind { wrong, undecided };
inline constexpr EnumNames<FailureKind::undecided> failure_kind_names{"failure", {"wrong", "undecided"}};
static_assert(failure_kind_names.complete());

struct PredictionFailure {
  std::size_t sequence = 0, token = 0;  // from 0
  FailureKind kind = FailureKind::wrong;
  std::string label;      // the label (class or values), as text
  std::string predicted;  // the argmax of the midpoints / the output midpoints
};

struct Predictions {
  LabelKind kind = LabelKind::classes;
  long long tokens = 0, certified = 0;
  unsigned bits = 0;  // the MPFI precision of this verdict (0: decided by the certified engine)
  std::string tier;   // the engine's tiers that decided ("ball:53", or "ball:53 (38), ball:113 (2)"
                      // with the sequences each decided); empty: MPFI at bits
  std::vector<PredictionFailure> failures;
  // Per sequence and counted token, a certified lower bound (rounded down) on the margin: classes,
  // the label's output less every other's (> 0: certified); values, the tolerance less |y − label|
  // (>= 0: certified); −inf where the enclosures decide nothing.
  std::vector<std::vector<double>> margin;
  // Per sequence, an estimate (not a certificate) of the bits it could lose and stay certified:
  // log2(1 + 2·margin/width) at its closest prediction, where the width of an enclosure grows about
  // 2× per bit taken away; −inf where a prediction is not certified, +inf where every enclosure
  // is a point. Empty for sequences skipped after a failure.
  std::vector<double> spare_bits;
  bool all() const { return certified == tokens; }
  // The sequences from the least spare to the most (a probe at fewer bits fails soonest this way),
  // and the fewest bits the estimates suggest (0: none).
  std::vector<std::size_t> hardest_first() const;
  unsigned guess_min_bits() const;
};

struct LayerSeparation {
  std::size_t layer = 0;                    // the token-mixing sub-layer's index
  std::string source;                       // its source name (LayerSpec::source), if any
  long long same_token_pairs = 0;           // pairs (same token, different contexts)
  double log10_delta = 0, log10_cross = 0;  // certified lower bounds (−inf: zero; NaN: no pair)
  double delta = 0, cross = 0;              // the same, as numbers
  double projection_gap = 0;                // certified min gap along v of different contexts
  std::vector<double> v;                    // unit direction
};

struct Region {
  std::string epsilon;                  // as asked (exact)
  Predictions predictions;              // certified over the boxes of radius epsilon
  std::vector<double> largest_epsilon;  // per sequence: the largest ε found certified (rounded down; 0: none)
  RegionMethod method = RegionMethod::intervals;
  int steps = 0;    // bisection steps of that search
  long at_cap = 0;  // sequences still certified where the doubling stops (2^20·epsilon)
};

struct Analysis {
  Predictions predictions;
  std::optional<Region> region;  // analyse --epsilon
  unsigned min_bits = 0;         // 0: not computed (not all certified)
  // The fewest bits at which labels_at_rounded_bits holds (same search; the precision MPFR carries
  // for it; 0: not computed, or none up to max_bits): "bits" in the sense of a b-bit machine,
  // beside min_bits' certified sense.
  unsigned rounded_bits = 0;
  std::vector<std::pair<std::string, Predictions>> rounded;  // float32, bfloat16, float16
  std::vector<std::pair<std::string, long long>> overflow;   // weights out of each format's range
  bool direct_rounding = false;                              // how they were rounded (AnalyseOptions)
  std::vector<LayerSeparation> layers;
  std::string separation_note;  // why separation was not computed, if it was not
  nlohmann::json report() const;
  std::string summary() const;  // a few lines for people
};

// Every prediction of `net` on the counted tokens of `ds`, certified in MPFI at `bits`. With
// stop_at_failure, sequences not yet started are skipped once one prediction fails (all() is then
// still exact; the counts and failures are partial). affine: as AnalyseOptions::affine. order
// (when not empty, a permutation of the sequences) is the order they are started in. epsilon (when
// not empty, one radius >= 0 per sequence): each sequence's inputs widened to the ℓ∞ box of that
// radius (continuous inputs, or the embedded tokens), so a certificate holds for every input in it.
Predictions certify_predictions(const Network<Rational>& net, const Dataset& ds, LabelKind kind,
                                const Rational& tolerance, unsigned bits, const OnProgress& progress = {},
                                bool stop_at_failure = false, bool affine = false,
                                const std::vector<std::size_t>& order = {},
                                const std::vector<Rational>& epsilon = {},
                                RegionMethod method = RegionMethod::intervals);

// The same verdict from the certified engine's ball tiers (ball:53, then ball:113 where a sequence's
// widths exceed 1e-9·max(1, |y|)), at points; a sequence no tier encloses is undecided. tier says
// which decided.
Predictions engine_predictions(const Network<Rational>& net, const Dataset& ds, LabelKind kind,
                               const Rational& tolerance, const OnProgress& progress = {});

// Whether the network itself, evaluated in MPFR at `bits` with round-to-nearest at every operation
// (its weights rounded to nearest there too, no AffineForward), gives every label: the argmax for
// classes, |y − label| <= tolerance for values. A measurement of that one evaluator, exact in it; not
// a certificate of the network.
bool labels_at_rounded_bits(const Network<Rational>& net, const Dataset& ds, LabelKind kind,
                            const Rational& tolerance, unsigned bits);

// The region verdict (certify_predictions with epsilon, intervals) in one of the engine's ball tiers
// (B: Ball53 or Ball113): each input coordinate (the embedded tokens for token ids) a ball of radius
// epsilon[i], rounded up, through `net` (the network in B, made once by the caller).
Predictions engine_region_predictions(const Network<Ball53>& net, const Dataset& ds, LabelKind kind,
                                      const Rational& tolerance, const std::vector<Rational>& epsilon);
Predictions engine_region_predictions(const Network<Ball113>& net, const Dataset& ds, LabelKind kind,
                                      const Rational& tolerance, const std::vector<Rational>& epsilon);

// x rounded to nearest (ties to even) in a binary format with p significand bits and normal
// exponents down to emin (subnormals below 2^emin), exactly; `overflow` set when |x| rounds
// beyond the largest finite value (x is then returned unchanged).
Rational round_to_format(const Rational& x, int p, int emin, int emax, bool& overflow);
// The narrow formats analyse stores weights in: significand bits, normal exponent range.
struct WeightFormat {
  const char* name;
  int p, emin, emax;
};
inline constexpr WeightFormat kWeightFormats[] = {
    {"float32", 24, -126, 127}, {"bfloat16", 8, -126, 127}, {"float16", 11, -14, 15}};
// How analyse rounds a weight to a format: bfloat16 and float16 through float32 (PyTorch's path)
// unless direct; the path's name for reports ("float32 then bfloat16").
Rational round_weight(const Rational& x, const std::string& format, bool direct, bool& overflow);
std::string rounding_path(const std::string& format, bool direct);

LabelKind label_kind(const std::string& labels, const Dataset& ds, int outputs);

// The certified separation after every token-mixing sub-layer, in MPFI at `bits` and double with
// directed rounding (separation.cpp): the distances between the outputs of one token in different
// contexts (δ) and of different tokens, and the gap along the best of a few seeded directions.
// Throws Error when an enclosure cannot be evaluated (e.g. a hardmax it leaves undecided).
std::vector<LayerSeparation> layer_separations(const Network<Rational>& net, const Dataset& ds, unsigned bits,
                                               std::uint64_t seed, const OnProgress& progress = {});

Analysis analyse(const Network<Rational>& net, const Dataset& ds, const AnalyseOptions& o);

// log10 of each layer's certified separations against the layer (PNG).
void plot_separation(const Analysis& a, const std::string& path);

}  // namespace uatlab
