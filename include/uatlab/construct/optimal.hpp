// Memorization with parameters growing like √N in the next-token setting and like √(nN) in the
// sequence-to-sequence setting, after Kajitsuka & Sato (ICLR 2025): one averaging attention layer
// gives every sequence (every token of every sequence) an id on a line, apart by a gap polynomial in
// N, and the deep value map (construct/deep_value_map.hpp) sends the ids to their labels. Theory,
// derivations and what is taken from the paper: docs/theory/optimal-capacity.md.
//
// The stages, one function each in optimal.cpp:
//   prepare    the labelled points: next-token, one per distinct sequence (its last token's label);
//              seq-to-seq, one per counted token; conflicting or unrepresentable labels refused
//   draw       a seeded Gaussian v ∈ Q^d (the tokens' line), one score per relative distance
//              (uniform on [0, 1), dyadic) and, seq-to-seq, a positional table
//   attention  DP-free: the scores alone (T5 table), W_V = vᵀ, W_O = v; causal for next-token
//   ids        t = vᵀz at the counted tokens in MPFI, sorted and certified apart (δ, and next-token
//              the derived bound δ ≥ ‖v‖²·γ / (2e·n·N²), γ the tokens' smallest projected gap)
//   value map  deep::plan and deep::build over the ids (its load reads t = vᵀz)
//   certify    every counted output within the tolerance of its label (AffineForward), the
//              fewest bits, the float64 verdict
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "uatlab/io/dataset.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/network.hpp"
#include "uatlab/names.hpp"
#include "uatlab/progress.hpp"
#include "uatlab/verify/precision.hpp"

namespace uatlab::optimal {

enum class Setting { next_token, seq_to_seq };
inline constexpr EnumNames<Setting::seq_to_seq> setting_names{"setting", {"next-token", "seq-to-seq"}};
static_assert(setting_names.complete());

struct Options {
  Setting setting = Setting::next_token;
  std::string tolerance = "1e-6";  // every counted output within this of its (integer) label
  std::uint64_t seed = 1;
  unsigned max_bits = 1u << 16;
  int blocks = 0;                            // the deep map's B (0: the fewest parameters)
  int draws = 32;                            // draws of (v, scores) before giving up on separating the ids
  long long max_points = limits::kContexts;  // labelled points (ids) accepted
  bool search_min_bits = true;
  // false: stop after the build: the network and its counts (the ids certified apart), nothing else
  // certified (max_error NaN). The plan's counts on the data at a fraction of the certificate's time.
  bool certify = true;
  OnProgress progress;
};

// The ids the attention layer gives the points, and what bounds their separation.
struct Ids {
  std::size_t count = 0;         // q: N distinct sequences (next-token) or counted tokens
  double log10_delta = 0;        // certified lower bound of the smallest gap between two ids
  double log10_delta_bound = 0;  // next-token: log10 of ‖v‖²γ/(2e·n·N²), rounded up (NaN seq-to-seq)
  bool bound_holds = false;      // δ ≥ that bound, certified (next-token)
  double log10_gamma = 0;        // γ = min |vᵀ(x − x')| over distinct tokens (exact), rounded down
  std::size_t vocabulary = 0;    // m, distinct tokens
  double token_gap = 0;          // ε = min ‖x − x'‖ over distinct tokens (double, measured)
  double log10_gamma_bound = 0;  // log10 of √(π/2)·ε/m², the projection's bound (measured)
  int draw = 0;                  // the draw that separated the ids (1-based)
  unsigned bits = 0;             // the precision the ids were certified apart at
  nlohmann::json report() const;
};

struct Memorized {
  Setting setting = Setting::next_token;
  Network<Rational> net;
  std::size_t sequences = 0, distinct = 0;  // given, and after merging duplicates
  int n = 0, d = 0;
  Ids ids;
  nlohmann::json plan;  // deep::Plan::report()
  double max_error = 0;
  unsigned bits_used = 0, min_bits = 0;
  bool float64_works = false;
  double float64_max_error = 0;
  StoredBits stored;
  long long plan_parameters = 0;  // the closed form (deep::value_map_parameters + attention)
  long long label_count = 0;      // L: labels lie in [0, L)
  double seconds_build = 0, seconds_certify = 0, seconds_min_bits = 0;
  nlohmann::json report() const;
};

// The counting lower bound on the bits of any network that memorizes every assignment of labels in
// [0, L) to q points: q·log2 L (there are L^q assignments), as a double rounded down.
double information_bits(std::size_t q, long long L);

// Token ids get an embedding in front (width 4, one seeded Gaussian column per id; its parameters are
// counted); the construction and the certificate run on the embedded vectors. Throws Error naming
// the sequence: ragged lengths, no labels, labels not integers in
// [0, 2^20) or of more than one number, the same sequence (next-token) or token (seq-to-seq) with two
// labels, continuous tokens with d < 4, N beyond limits::kContexts ids; and when no draw separates the ids or
// the certificate is not reached within max_bits.
Memorized memorize(const Dataset& ds, const Options& opt);

}  // namespace uatlab::optimal
