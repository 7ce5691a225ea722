// The architecture of a network: everything but the weights.
//
// A network maps an input (d×n continuous tokens, m×n ones through a linear input projection to d,
// or n token ids through an embedding) through an optional absolute positional encoding, a sequence of
// residual sub-layers and an optional linear readout. The architecture is plain data, identical for every
// scalar type; it travels as JSON in every model file (docs/formats.md). Numbers that must stay exact
// (softmax scale, layer-norm epsilon, piecewise-linear activations) are kept as their decimal/rational text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "uatlab/names.hpp"

namespace uatlab {

// bproj and sepconv: Yun et al.'s cheaper token mixers, in place of attention (docs/mixers.md).
enum class LayerKind { attention, feedforward, layernorm, bproj, sepconv };
inline constexpr EnumNames<LayerKind::sepconv> layer_kind_names{
    "layer type", {"attention", "feedforward", "layernorm", "bproj", "sepconv"}};
static_assert(layer_kind_names.complete());
inline bool mixes_tokens(LayerKind k) {
  return k == LayerKind::attention || k == LayerKind::bproj || k == LayerKind::sepconv;
}
enum class Score { softmax, hardmax, linear };  // linear: scores used as they are (no normalisation)
inline constexpr EnumNames<Score::linear> score_names{"score", {"softmax", "hardmax", "linear"}};
static_assert(score_names.complete());
enum class Rpe { none, lin, log, t5 };  // relative-position bias added to the scores
inline constexpr EnumNames<Rpe::t5> rpe_names{"rpe", {"none", "lin", "log", "t5"}};
static_assert(rpe_names.complete());

// φ(x) = slope_i·x + intercept_i on the i-th piece; pieces are (−∞,c_1), [c_1,c_2), …, [c_k,∞).
struct Piecewise {
  std::vector<std::string> breakpoints;                     // k, strictly increasing
  std::vector<std::pair<std::string, std::string>> pieces;  // k + 1 (slope, intercept)
  bool in_yun_class() const;  // at most three pieces, at least one constant (Yun et al.'s Φ)
};

struct LayerSpec {
  LayerKind kind = LayerKind::attention;
  bool pre_norm = false;     // attention/feedforward: Z + f(LayerNorm(Z)) with its own γ, β
  std::string eps = "1e-5";  // layer-norm epsilon (pre_norm or a layernorm sub-layer)

  // attention: Z + Σ_h W_O^h W_V^h Z σ[λ·(W_K^h Z)ᵀ(W_Q^h Z) + B_h]
  int heads = 1, head_size = 1;
  Score score = Score::softmax;
  std::string scale = "1";    // λ
  bool sqrt_scaling = false;  // also multiply the scores by 1/√head_size
  Rpe rpe = Rpe::none;        // B_h: lin −p_h|i−j|, log −p_h log|i−j| (0 on the diagonal), T5 buckets
  int t5_buckets = 32, t5_max_distance = 128;
  // > 0: rotary position embedding (RoPE) with this base: in every head the coordinate pairs
  // (2i, 2i+1) of a query or key at position t are turned by the angle t·θ_i, θ_i = rope^(−2i/s),
  // so that q·k depends on the tokens and their offset alone (head_size even; not dp_free/tied)
  int rope = 0;
  bool dp_free = false;      // scores are B_h alone (no dot product)
  bool causal = false;       // query k attends to keys l ≤ k only
  bool strict_past = false;  // with causal: keys l < k only (query 0 attends to nothing: output 0)
  int window = 0;         // > 0, with causal: keys l ≥ k − window only (a sliding window over the past)
  bool tied_qkv = false;  // W_Q = W_K = W_V (one matrix per head)
  bool bias = false;      // biases on the Q, K, V and O projections

  // bproj: Z + W_O Z W_P + b_O 1ᵀ, W_P the leading n×n block of a length×length matrix (causal:
  // its entries (l, k) with l > k are not used, so token k mixes tokens l ≤ k only).
  int length = 0;
  // sepconv: Z + W_O M + b_O 1ᵀ, M(c, t) = Σ_j f_{h(c), j} Z(c, t − j) (causal, j = 0..kernel−1) or
  // Z(c, t + j − (kernel−1)/2) (centred, kernel odd), zero outside the sequence; the `heads`
  // filters of `kernel` taps are shared by d/heads consecutive dimensions each. Also uses causal
  // and bias (on W_O) above.
  int kernel = 0;

  // feedforward: Z + W_2 φ(W_1 Z + b_1 1ᵀ) + b_2 1ᵀ
  int width = 0;
  bool piecewise = false;  // φ = activation below instead of ReLU
  bool gelu = false;       // φ = GELU, x·Φ(x) (PyTorch's exact erf form), instead of ReLU
  bool gelu_tanh = false;  // with gelu: its tanh form instead (PyTorch's approximate="tanh", GPT-2's)
  Piecewise activation;

  // Where the sub-layer came from, for reports (from_torch: PyTorch's module name, e.g.
  // "layers.0.self_attn"); empty when it has no other name than its index.
  std::string source;

  bool needs_transcendental() const;  // exp, log or sqrt somewhere in this sub-layer
  std::string describe() const;       // one line for people, with [source] when there is one
  std::string describe_kind() const;  // the same without the source
};

// The keys that query k of an n-token sequence attends to: l in [first, end). The one masking
// rule (causal, strict_past, window) of every forward, backward and export; empty (first == end)
// only for query 0 under strict_past.
struct KeyRange {
  long first = 0, end = 0;
};
inline KeyRange attended_keys(const LayerSpec& s, long k, long n) {
  const long end = s.causal ? k + 1 - (s.strict_past ? 1 : 0) : n;
  const long first = s.window > 0 && k > s.window ? k - s.window : 0;
  return {first, end < first ? first : end};
}

struct Architecture {
  int d = 0;          // token dimension
  int vocab = 0;      // > 0: inputs are token ids through a d×vocab embedding
  int input = 0;      // > 0: inputs are vectors of this many numbers, projected to d (W_in x + b_in)
  int max_len = 0;    // > 0: absolute positional encoding, a learned/constructed d×max_len table
  int readout = 0;    // > 0: linear readout to this many outputs per token
  bool pool = false;  // "pool": "sum": the tokens are summed before the readout (one output column)
  std::vector<LayerSpec> layers;

  int out_dim() const { return readout > 0 ? readout : d; }
  int in_dim() const { return input > 0 ? input : d; }  // numbers per continuous input token
  // The data fits the input (one wording for every reader of data): token ids for a network with a
  // vocabulary, continuous tokens otherwise; continuous tokens of in_dim() numbers. Throw Error.
  void check_token_kind(bool token_ids) const;
  void check_width(long long numbers_per_token) const;
  bool needs_transcendental() const;
  // Every invariant of an architecture, whoever built it (from_json, a construction, a test):
  // throws Error naming the first inconsistency. Network<S> validates before allocating.
  void validate() const;
  // The number of weights a Network of this architecture holds, in closed form (nothing is
  // allocated); validate() refuses more than limits::kSize. Equal to Network::parameter_count().
  long long parameter_count() const;

  nlohmann::json to_json() const;
  static Architecture from_json(const nlohmann::json& j);  // validates
};

// T5's relative-position bucket of key l for query k (rel = l − k), computed in double as in
// the reference code; bidirectional unless causal.
int t5_bucket(int rel, bool bidirectional, int num_buckets, int max_distance);

}  // namespace uatlab
