// The one model definition: a network's weights in scalar type S, and its forward pass.
//
// Tokens are columns. An input sequence is X ∈ S^{d×n}; every sub-layer maps d×n to d×n:
//   attention    Z + Σ_h W_O^h (W_V^h Z + b_V) σ[λ·(W_K^h Z + b_K)ᵀ(W_Q^h Z + b_Q) + B_h] + b_O
//   feedforward  Z + W_2 φ(W_1 Z + b_1 1ᵀ) + b_2 1ᵀ
//   layernorm    γ ⊙ (Z − μ)/√(var + ε) + β, column by column
// σ acts on columns (column k holds query k's scores over the keys l). A pre_norm sub-layer feeds
// LayerNorm(Z) to its branch and adds the result to Z. See docs/ARCHITECTURE.md.
#pragma once

#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "uatlab/model/architecture.hpp"
#include "uatlab/model/ball.hpp"
#include "uatlab/model/scalar.hpp"

namespace uatlab {

// How a parameter matrix maps to its PyTorch tensor (row-major):
//   Vector      k×1  ↔ (k)
//   Matrix      r×c  ↔ (r, c), element (i, j) ↔ [i][j]    (nn.Linear weights: the paper's W)
//   TokenMajor  d×L  ↔ (L, d), column j ↔ row j            (embedding, positional table)
enum class Layout { Vector, Matrix, TokenMajor };

// What a parameter is, whatever its name: initialisation (init_random) and any other rule that
// depends on the kind of tensor read this, never the name.
enum class Role { embedding, position, weight, bias, norm_gain, norm_bias, rpe_slope, rpe_table };

template <class S>
struct Layer {
  LayerSpec spec;
  Mat<S> wq, wk, wv, wo, bq, bk, bv, bo;  // attention (tied_qkv: wq/bq serve Q, K and V)
  Mat<S> rpe;                             // H×1 slopes p_h (lin, log) or H×buckets table (t5)
  Mat<S> w1, b1, w2, b2;                  // feedforward
  Mat<S> wp, filter;                      // bproj: W_P (length×length); sepconv: heads×kernel taps
  Mat<S> norm_w, norm_b;                  // layer norm: pre_norm or a layernorm sub-layer
  // Constants of the architecture, in S.
  S score_scale;  // λ, times 1/√head_size with sqrt_scaling
  S eps;
  std::vector<S> breakpoints;
  std::vector<std::pair<S, S>> pieces;  // (slope, intercept)
};

template <class S>
struct Network {
  Architecture arch;
  Mat<S> embed;                 // d×vocab
  Mat<S> in_w, in_b;            // d×input, d×1: the input projection
  Mat<S> pe;                    // d×max_len
  Mat<S> readout_w, readout_b;  // k×d, k×1
  std::vector<Layer<S>> layers;

  Network() = default;
  // All weights zero, shaped by the architecture; constants parsed into S. For Mpfr/Mpfi, open
  // an MpfrPrecision first: constants are rounded/enclosed at the working precision.
  explicit Network(Architecture a);

  // Visit every parameter as f(name, matrix, layout), f(name, matrix, layout, role) or f(matrix),
  // in a fixed order (docs/formats.md). f(matrix) builds no name, for code that runs every step.
  template <class F>
  void for_each_tensor(F&& f) {
    visit(*this, f);
  }
  template <class F>
  void for_each_tensor(F&& f) const {
    visit(*this, f);
  }
  std::size_t parameter_count() const;

 private:
  template <class Self, class F>
  static void visit(Self& net, F& f);
};

// The GELU a feed-forward sub-layer runs (erf or tanh form) and its derivative: the one dispatch of
// the forward pass and the training's backward.
template <class S>
S gelu_of(const LayerSpec& s, const S& v) {
  return s.gelu_tanh ? S(gelu_tanh(v)) : S(gelu(v));
}
template <class S>
S gelu_slope_of(const LayerSpec& s, const S& v) {
  return s.gelu_tanh ? S(gelu_tanh_derivative(v)) : S(gelu_derivative(v));
}

struct EvalOptions {
  // Hardmax: the keys whose score is within this of the column's maximum share the weight, in every
  // arithmetic (0: the maximum itself, exactly). Intervals certify each key's membership (its score
  // surely within the tolerance of the maximum, or surely not) or throw.
  double hardmax_tolerance = 0;
  // Attention sub-layers compute the queries from this one on only; the columns before it keep
  // their residual input (not the sub-layer's output). For certificates that read later columns
  // alone past the last token-mixing sub-layer (a next-token output): causal attention costs the
  // last query's keys instead of every query's. Refused with a capture of the patterns.
  Eigen::Index first_query = 0;
  // Called after each sub-layer with its index (progress of a long evaluation: the certified
  // engine's report per layer); may throw to stop.
  std::function<void(std::size_t)> after_layer;
};

// What a forward pass leaves behind when asked (uatlab eval --capture, Network.run in Python):
// residual[0] is the input to the first sub-layer (embedded, positions added) and residual[i + 1]
// the residual stream after sub-layer i (d×n, tokens as columns); pattern[i] holds one n×n matrix
// per head of an attention sub-layer i (row: query, column: key, as PyTorch and TransformerLens
// print them; empty for other sub-layers).
template <class S>
struct Activations {
  std::vector<Mat<S>> residual;
  std::vector<std::vector<Mat<S>>> pattern;
};

// Continuous input X (d×n) → output (out_dim×n); capture (when given) is filled as above.
template <class S>
Mat<S> forward(const Network<S>& net, const Mat<S>& x, const EvalOptions& opt = {},
               Activations<S>* capture = nullptr);
// Token ids as the input columns the embedding gives them (d×n; ids outside the vocabulary refused).
template <class S>
Mat<S> embed_tokens(const Network<S>& net, const std::vector<int>& ids);
// Token ids through the embedding → output.
template <class S>
Mat<S> forward_tokens(const Network<S>& net, const std::vector<int>& ids, const EvalOptions& opt = {},
                      Activations<S>* capture = nullptr);

// Throws Error when this scalar type cannot evaluate the network (rationals: no exp/log/sqrt).
template <class S>
void check_evaluable(const Architecture& a);

// The bits the weights of an Mpfr/Mpfi network carry (0 for other scalars, or no weights):
// functions handed such a network evaluate it at that precision.
template <class S>
unsigned weight_bits(const Network<S>& net) {
  unsigned bits = 0;
  if constexpr (std::is_same_v<S, Mpfr> || std::is_same_v<S, Mpfi>)
    net.for_each_tensor([&](const std::string&, const Mat<S>& m, Layout) {
      if (bits == 0 && m.size() > 0) bits = bits_of(m(0, 0));
    });
  return bits;
}

// Convert a network between scalar types (exact through rationals, then rounded once).
template <class T, class S>
Network<T> network_cast(const Network<S>& src) {
  Network<T> dst(src.arch);
  std::vector<const Mat<S>*> from;
  src.for_each_tensor([&](const std::string&, const Mat<S>& m, Layout) { from.push_back(&m); });
  std::size_t i = 0;
  dst.for_each_tensor([&](const std::string&, Mat<T>& m, Layout) { m = matrix_cast<T>(*from[i++]); });
  return dst;
}

// ---------------------------------------------------------------------------------------------
template <class S>
template <class Self, class F>
void Network<S>::visit(Self& net, F& f) {
  // The name is built only for callbacks that take one: f(matrix) visits without any string.
  auto call = [&f](const std::string& prefix, const char* suffix, auto& m, Layout layout, Role role) {
    if constexpr (std::is_invocable_v<F&, decltype(m)>)
      f(m);
    else if constexpr (std::is_invocable_v<F&, const std::string&, decltype(m), Layout, Role>)
      f(prefix + suffix, m, layout, role);
    else
      f(prefix + suffix, m, layout);
  };
  const std::string none;
  const Architecture& a = net.arch;
  if (a.input > 0) {
    call(none, "input.weight", net.in_w, Layout::Matrix, Role::weight);
    call(none, "input.bias", net.in_b, Layout::Vector, Role::bias);
  }
  if (a.vocab > 0) call(none, "embed.weight", net.embed, Layout::TokenMajor, Role::embedding);
  if (a.max_len > 0) call(none, "pe.weight", net.pe, Layout::TokenMajor, Role::position);
  for (std::size_t i = 0; i < net.layers.size(); ++i) {
    auto& l = net.layers[i];
    const LayerSpec& s = l.spec;
    const std::string p = "layers." + std::to_string(i) + ".";
    if (s.pre_norm) {
      call(p, "norm.weight", l.norm_w, Layout::Vector, Role::norm_gain);
      call(p, "norm.bias", l.norm_b, Layout::Vector, Role::norm_bias);
    }
    switch (s.kind) {
      case LayerKind::attention:
        if (s.tied_qkv) {
          call(p, "qkv.weight", l.wq, Layout::Matrix, Role::weight);
          if (s.bias) call(p, "qkv.bias", l.bq, Layout::Vector, Role::bias);
        } else {
          call(p, "q.weight", l.wq, Layout::Matrix, Role::weight);
          call(p, "k.weight", l.wk, Layout::Matrix, Role::weight);
          call(p, "v.weight", l.wv, Layout::Matrix, Role::weight);
          if (s.bias) {
            call(p, "q.bias", l.bq, Layout::Vector, Role::bias);
            call(p, "k.bias", l.bk, Layout::Vector, Role::bias);
            call(p, "v.bias", l.bv, Layout::Vector, Role::bias);
          }
        }
        call(p, "o.weight", l.wo, Layout::Matrix, Role::weight);
        if (s.bias) call(p, "o.bias", l.bo, Layout::Vector, Role::bias);
        if (s.rpe == Rpe::lin || s.rpe == Rpe::log) call(p, "rpe.p", l.rpe, Layout::Vector, Role::rpe_slope);
        if (s.rpe == Rpe::t5) call(p, "rpe.table", l.rpe, Layout::Matrix, Role::rpe_table);
        break;
      case LayerKind::feedforward:
        call(p, "fc1.weight", l.w1, Layout::Matrix, Role::weight);
        call(p, "fc1.bias", l.b1, Layout::Vector, Role::bias);
        call(p, "fc2.weight", l.w2, Layout::Matrix, Role::weight);
        call(p, "fc2.bias", l.b2, Layout::Vector, Role::bias);
        break;
      case LayerKind::layernorm:
        call(p, "weight", l.norm_w, Layout::Vector, Role::norm_gain);
        call(p, "bias", l.norm_b, Layout::Vector, Role::norm_bias);
        break;
      case LayerKind::bproj:
      case LayerKind::sepconv:
        if (s.kind == LayerKind::bproj)
          call(p, "p.weight", l.wp, Layout::Matrix, Role::weight);
        else
          call(p, "filter", l.filter, Layout::Matrix, Role::weight);
        call(p, "o.weight", l.wo, Layout::Matrix, Role::weight);
        if (s.bias) call(p, "o.bias", l.bo, Layout::Vector, Role::bias);
        break;
    }
  }
  if (a.readout > 0) {
    call(none, "readout.weight", net.readout_w, Layout::Matrix, Role::weight);
    call(none, "readout.bias", net.readout_b, Layout::Vector, Role::bias);
  }
}

// Tensor shape as PyTorch sees it.
template <class S>
std::vector<std::int64_t> torch_shape(const Mat<S>& m, Layout l) {
  switch (l) {
    case Layout::Vector:
      return {m.rows()};
    case Layout::Matrix:
      return {m.rows(), m.cols()};
    case Layout::TokenMajor:
      return {m.cols(), m.rows()};
  }
  return {};
}

// Visit a parameter matrix's elements in the row-major order of its PyTorch tensor (torch_shape):
// the one element order of every exchange with PyTorch (safetensors, Python).
template <class M, class F>
void for_each_torch_element(M& m, Layout l, F&& f) {
  if (l == Layout::Matrix) {
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j)
        f(m(i, j));
  } else {  // Vector, TokenMajor: column-major memory is PyTorch's row-major
    for (Eigen::Index k = 0; k < m.size(); ++k)
      f(m.data()[k]);
  }
}

extern template struct Network<float>;
extern template struct Network<double>;
extern template struct Network<Mpfr>;
extern template struct Network<Mpfi>;
extern template struct Network<Rational>;
extern template struct Network<Ball53>;
extern template struct Network<Ball113>;

}  // namespace uatlab
