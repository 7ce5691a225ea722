// Training forward/backward, written once for every scalar (float, double; MPFR for the
// finite-difference tests). Notation follows network.hpp: tokens are columns, column k of a score
// matrix holds query k's scores over keys l.
#pragma once

#include <algorithm>
#include <cmath>
#include <exception>
#include <iterator>
#include <limits>

#include <omp.h>

#include "../model/network_impl.hpp"
#include "head_product.hpp"
#include "lag_convolution.hpp"
#include "uatlab/train/backward.hpp"

namespace uatlab {

namespace train_detail {

// The feed-forward activation φ of h = W_1 Z + b_1, and a gradient times its derivative φ'(h),
// where the trace keeps h: GELU (erf or tanh form), or ReLU over intervals. The plain ReLU goes
// with its products (relu_from_act below).
template <class S>
void activate(const LayerSpec& s, const Mat<S>& h, Mat<S>& out) {  // out keeps its memory
  eigen_assert(s.gelu || Scalar<S>::interval);
  if constexpr (Scalar<S>::interval) {
    if (!s.gelu) {
      out = h.unaryExpr([](const S& v) { return relu(v); });  // no comparison of overlapping intervals
      return;
    }
  }
  out = h.unaryExpr([&](const S& v) { return gelu_of(s, v); });
}
template <class S>
void times_activation_slope(const LayerSpec& s, const Mat<S>& h, Mat<S>& g) {  // g ⊙= φ'(h)
  eigen_assert(s.gelu || Scalar<S>::interval);
  if constexpr (Scalar<S>::interval) {
    if (!s.gelu) {
      // Over an enclosure of h the slope is 1, 0, or anything in [0, 1] (Clarke's gradient, where
      // h may be 0): g times [0, 1] is the hull of 0 and g.
      for (Eigen::Index i = 0; i < g.size(); ++i) {
        if (lower(h(i)) > 0) continue;
        if (upper(h(i)) < 0) {
          g(i) = S(0);
          continue;
        }
        const Mpfr zero(0);
        g(i) = hull(std::min(lower(g(i)), zero), std::max(upper(g(i)), zero));
      }
      return;
    }
  }
  g.array() *= h.unaryExpr([&](const S& v) { return gelu_slope_of(s, v); }).array();
}

// Whether the trace keeps only φ(h) = ReLU(h): then φ'(h) = [φ(h) > 0] exactly (h > 0 just where
// its ReLU is), so h need not be stored, and the activation can be applied by the product's kernel.
// Intervals keep h (the slope of an enclosure that straddles 0 is not its ReLU's), GELU keeps h.
template <class S>
bool relu_from_act(const LayerSpec& s) {
  return !s.gelu && !Scalar<S>::interval;
}

// LayerNorm over each column, caching x̂ and 1/σ. One column at a time, while it is in the cache:
// the same operations as the six passes over the whole matrix before (the same numbers to the bit
// where d is a multiple of a SIMD register; Eigen's column sums may order a remainder otherwise),
// 1.7× faster at d = 64 and 2.6× at d = 128 (float, 2,048 tokens, one core; docs/benchmarks.md).
template <class S>
Mat<S> ln_forward(const Mat<S>& z, const Mat<S>& w, const Mat<S>& b, const S& eps, Mat<S>& xhat,
                  Mat<S>& rstd) {
  const S inv_d = S(1) / S(static_cast<long>(z.rows()));
  xhat.resize(z.rows(), z.cols());
  rstd.resize(1, z.cols());
  Mat<S> out(z.rows(), z.cols());
  for (Eigen::Index c = 0; c < z.cols(); ++c) {
    const S mean = z.col(c).sum() * inv_d;
    auto x = xhat.col(c);
    x = z.col(c).array() - mean;
    const S var = x.cwiseProduct(x).sum() * inv_d;
    rstd(0, c) = S(1) / Scalar<S>::sqrt(var + eps);
    x *= rstd(0, c);
    out.col(c) = x.cwiseProduct(w.col(0)) + b.col(0);
  }
  return out;
}

// dx = rstd · (dx̂ − mean(dx̂) − x̂ · mean(dx̂ ⊙ x̂)), dx̂ = dout ⊙ γ.
template <class S>
Mat<S> ln_backward(const Mat<S>& dout, const Mat<S>& xhat, const Mat<S>& rstd, const Mat<S>& w, Mat<S>& gw,
                   Mat<S>& gb) {
  add_column_sum(gw, dout.cwiseProduct(xhat));
  add_column_sum(gb, dout);
  const S inv_d = S(1) / S(static_cast<long>(dout.rows()));
  Mat<S> dx(dout.rows(), dout.cols());
  for (Eigen::Index c = 0; c < dout.cols(); ++c) {
    Vec<S> dxhat = dout.col(c).cwiseProduct(w.col(0));
    S m1 = dxhat.sum() * inv_d, m2 = dxhat.dot(xhat.col(c)) * inv_d;
    dx.col(c) = (dxhat - Vec<S>::Constant(dout.rows(), m1) - xhat.col(c) * m2) * rstd(0, c);
  }
  return dx;
}

// A head's weights from its scores (A holds Kᵀ Q·scale, or zeros for a DP-free head; column k is
// query q0 + k of n): the position bias, then the softmax or normalisation over keys.
template <class S>
void head_weights(const Layer<S>& L, Eigen::Index h, Mat<S>& A, const EvalOptions& opt, Eigen::Index q0 = 0) {
  if (L.spec.rpe != Rpe::none) add_position_bias(A, L, static_cast<int>(h), q0);
  normalise_columns(A, L.spec, opt, q0);
}

// What scores_backward keeps across its calls within one attention sub-layer (one per thread): per
// query Σ_l A(l,k)·dA(l,k), and by offset l − q (entry l − q + n − 1) the bias's derivative ∂B/∂p
// (lin, log) or the t5 bucket. Those depend on the layer and the length n alone: they are computed
// again only when n changes, not for every head and sequence.
template <class S>
struct ScoresScratch {
  Eigen::Matrix<S, 1, Eigen::Dynamic> dot;
  Vec<S> slope;
  std::vector<int> bucket;

  void prepare(const LayerSpec& s, Eigen::Index n) {
    if (s.rpe == Rpe::lin || s.rpe == Rpe::log) {
      if (slope.size() == 2 * n - 1) return;
      slope.resize(2 * n - 1);
      for (Eigen::Index o = 0; o < slope.size(); ++o)
        slope(o) = rpe_slope<S>(s.rpe, std::labs(static_cast<long>(o - (n - 1))));
    } else if (s.rpe == Rpe::t5 && bucket.size() != static_cast<std::size_t>(2 * n - 1)) {
      bucket.clear();
      for (Eigen::Index o = 0; o < 2 * n - 1; ++o)
        bucket.push_back(
            t5_bucket(static_cast<int>(o - (n - 1)), !s.causal, s.t5_buckets, s.t5_max_distance));
    }
  }
};

// Head h's bias parameters' gradient from the bias's gradient by offset (entry l − q + n − 1).
template <class S>
void rpe_gradient(const LayerSpec& s, Eigen::Index h, const Vec<S>& by_offset, ScoresScratch<S>& scratch,
                  Mat<S>& drpe) {
  const Eigen::Index n = (by_offset.size() + 1) / 2;
  if (n == 0 || s.rpe == Rpe::none) return;
  scratch.prepare(s, n);
  if (s.rpe == Rpe::t5) {
    for (Eigen::Index o = 0; o < by_offset.size(); ++o)
      drpe(h, scratch.bucket[static_cast<std::size_t>(o)]) += by_offset(o);
  } else {
    drpe(h, 0) += scratch.slope.dot(by_offset);
  }
}

// dA → dS in place (softmax or linear scores) for head h with weights A (column k: query q0 + k),
// then the gradient of its position bias into drpe.
template <class S>
void scores_backward(const LayerSpec& s, Eigen::Index h, const Mat<S>& A, Mat<S>& dS,
                     ScoresScratch<S>& scratch, Mat<S>& drpe, Eigen::Index q0 = 0) {
  const Eigen::Index n = A.rows(), queries = A.cols();
  if (s.score == Score::softmax) {  // dS = A ⊙ (dA − 1·dot), whole matrix at once
    if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
      eigen_assert(dS.rows() == n && dS.cols() == queries);
      simd::softmax_backward_columns(simd::SoftmaxBackward<S>{A.data(), dS.data(), n, queries});
    } else {
      auto& dot = scratch.dot;
      dot = A.cwiseProduct(dS).colwise().sum();
      dS.array().rowwise() -= dot.array();
      dS.array() *= A.array();
    }
  } else {  // linear: masked scores do not exist (hardmax is refused before training)
    for (Eigen::Index k = 0; k < queries; ++k) {
      const KeyRange r = attended_keys(s, q0 + k, n);
      dS.col(k).head(r.first).setZero();
      dS.col(k).tail(n - r.end).setZero();
    }
  }
  if (n == 0 || s.rpe == Rpe::none) return;
  scratch.prepare(s, n);
  if (s.rpe == Rpe::lin || s.rpe == Rpe::log) {
    // each query's sum a dot product with a run of the slopes by offset (the offset 0 has slope 0)
    S acc(0);
    for (Eigen::Index k = 0; k < queries; ++k) {
      eigen_assert(q0 + k < n);
      acc += dS.col(k).dot(scratch.slope.segment(n - 1 - q0 - k, n));
    }
    drpe(h, 0) += acc;
  } else {  // t5
    for (Eigen::Index k = 0; k < queries; ++k)
      for (Eigen::Index l = 0; l < n; ++l)
        drpe(h, scratch.bucket[static_cast<std::size_t>(l - q0 - k + n - 1)]) += dS(l, k);
  }
}

// Per sequence, the positions [first, end) from its first to its last token counted in the loss
// ({0, 0} when none is); empty when every sequence counts its first and last token, so that there
// is nothing to leave out (the usual batch, every token counted).
template <class S>
void counted_queries(const Batch<S>& batch, std::vector<QueryRange>& out) {
  out.assign(static_cast<std::size_t>(batch.sequences()), QueryRange{0, 0});
  bool whole = true;
  for (int b = 0; b < batch.sequences(); ++b) {
    const auto first = batch.mask.begin() + batch.start[b], end = batch.mask.begin() + batch.start[b + 1];
    const auto counted = [](char m) { return m != 0; };
    const auto lo = std::find_if(first, end, counted);
    if (lo == end) {
      whole = whole && first == end;
      continue;
    }
    const auto hi = std::find_if(std::make_reverse_iterator(end), std::make_reverse_iterator(lo), counted);
    out[b] = {lo - first, hi.base() - first};
    whole = whole && lo == first && hi.base() == end;
  }
  if (whole) out.clear();
}

// Where the last attention's columns sit, one layout for its forward and backward passes. With
// queries set (LayerTrace::queries), o, and q unless tied (q is then K and V too), hold only the
// queries computed, sequence after sequence: sequence b's start at off[b]. Otherwise every matrix
// is over all tokens.
struct QueryLayout {
  const std::vector<Eigen::Index>& start;
  const std::vector<QueryRange>& queries;
  bool compact, tied;
  std::vector<Eigen::Index> off;  // B + 1 offsets when compact

  QueryLayout(const std::vector<Eigen::Index>& start, const std::vector<QueryRange>& queries, bool tied)
      : start(start), queries(queries), compact(!queries.empty()), tied(tied), off(1, 0) {
    for (const auto& [q0, q1] : queries)
      off.push_back(off.back() + q1 - q0);
  }
  QueryRange range(int b) const {  // sequence b's queries, within the sequence
    return compact ? queries[b] : QueryRange{0, start[b + 1] - start[b]};
  }
  Eigen::Index o_col(int b) const { return compact ? off[b] : start[b]; }  // its first in o
  Eigen::Index q_col(int b) const {                                        // and in q
    return compact && !tied ? off[b] : start[b] + range(b).first;
  }
  Eigen::Index o_cols(Eigen::Index tokens) const { return compact ? off.back() : tokens; }
  // out = M's columns at the queries; M += P, P's columns at the queries.
  template <class S>
  void gather(const Mat<S>& M, Mat<S>& out) const {
    out.resize(M.rows(), off.back());
    for (std::size_t b = 0; b < queries.size(); ++b)
      out.middleCols(off[b], off[b + 1] - off[b]) =
          M.middleCols(start[b] + queries[b].first, off[b + 1] - off[b]);
  }
  template <class S>
  void scatter_add(const Mat<S>& P, Mat<S>& M) const {
    for (std::size_t b = 0; b < queries.size(); ++b)
      M.middleCols(start[b] + queries[b].first, off[b + 1] - off[b]) +=
          P.middleCols(off[b], off[b + 1] - off[b]);
  }
};

// The length every sequence of the batch has, or 0 when they differ.
inline Eigen::Index common_length(const std::vector<Eigen::Index>& start) {
  const Eigen::Index n = start.size() > 1 ? start[1] - start[0] : 0;
  for (std::size_t b = 1; b + 1 < start.size(); ++b)
    if (start[b + 1] - start[b] != n) return 0;
  return n;
}

// A DP-free head's weights do not depend on the tokens, only on its position bias: when every
// sequence has one length n, one n×n matrix per head serves the whole batch, and the B products
// per head (V_b A, dO_b Aᵀ, V_bᵀ dO_b) become one each over the sequences stacked as rows: row
// b·hs + i of the stack is row h·hs + i of M over sequence b's columns.
template <class S>
void stack_head(const Mat<S>& M, Eigen::Index h, Eigen::Index hs, Eigen::Index n, Mat<S>& P) {
  const Eigen::Index B = M.cols() / n;
  P.resize(B * hs, n);
  for (Eigen::Index b = 0; b < B; ++b)
    P.middleRows(b * hs, hs) = M.block(h * hs, b * n, hs, n);
}
template <class S>
void unstack_head(const Mat<S>& P, Eigen::Index h, Eigen::Index hs, Eigen::Index n, Mat<S>& M) {
  for (Eigen::Index b = 0; b < M.cols() / n; ++b)
    M.block(h * hs, b * n, hs, n) = P.middleRows(b * hs, hs);
}

// body(state, b) for every sequence b < B, state = init() per thread; then done(state) per thread,
// one at a time. Across threads, unless called inside a parallel region (a part of batch_gradient's
// batch, one training of a sweep): there a nested region would only make a team of one, at the
// price of a fork.
template <class Init, class Body, class Done>
void for_each_sequence(int B, Init&& init, Body&& body, Done&& done) {
  if (omp_in_parallel()) {
    auto state = init();
    for (int b = 0; b < B; ++b)
      body(state, b);
    done(state);
    return;
  }
#pragma omp parallel
  {
    auto state = init();
#pragma omp for schedule(dynamic)
    for (int b = 0; b < B; ++b)
      body(state, b);
#pragma omp critical
    done(state);
  }
}

// DP-free softmax heads over sequences of one length n go by FFT in float training from
// lag::kMinLength tokens on (lag_convolution.hpp); double and multiprecision keep the n×n products,
// which the finite-difference tests check and the FFT path is tested against.
template <class S>
bool by_lags(const LayerSpec& s, Eigen::Index n) {
  return std::is_same_v<S, float> && s.dp_free && s.score == Score::softmax && n >= lag::kMinLength;
}

// body(h) for every head, across threads unless inside a parallel region (one training of a
// sweep); each head writes only its own rows, so the result does not depend on the thread count.
// An exception leaves the region as an exception_ptr (one thrown inside would end the process).
template <class Body>
void for_each_head(Eigen::Index H, Body&& body) {
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) if (!omp_in_parallel())
  for (Eigen::Index h = 0; h < H; ++h) {
    try {
      body(h);
    } catch (...) {
#pragma omp critical(uatlab_for_each_head)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// The heads of a DP-free sub-layer by FFT, forward (into t.o, keeping t.lag) and backward (into dV
// and drpe), in double. The matrices are transposed once (T × H·hs) so that each head's channel over
// each sequence is a contiguous run (lag::forward's columns): stacking rows of the H·hs × T matrices
// directly reads and writes one entry per cache line.
template <class S>
void lag_columns(const Mat<S>& Mt, Eigen::Index h, Eigen::Index hs, Eigen::Index n, Eigen::MatrixXd& out) {
  const Eigen::Index B = Mt.rows() / n;
  out.resize(n, hs * B);
  for (Eigen::Index i = 0; i < hs; ++i)
    for (Eigen::Index b = 0; b < B; ++b)
      out.col(i * B + b) = Mt.col(h * hs + i).segment(b * n, n).template cast<double>();
}
template <class S>
void set_lag_columns(const Eigen::MatrixXd& in, Eigen::Index h, Eigen::Index hs, Eigen::Index n, Mat<S>& Mt) {
  const Eigen::Index B = Mt.rows() / n;
  for (Eigen::Index i = 0; i < hs; ++i)
    for (Eigen::Index b = 0; b < B; ++b)
      Mt.col(h * hs + i).segment(b * n, n) = in.col(i * B + b).template cast<S>();
}
template <class S>
void lag_heads_forward(const Layer<S>& L, const Mat<S>& V, Eigen::Index n, LayerTrace<S>& t) {
  if constexpr (std::is_same_v<S, float>) {
    const LayerSpec& s = L.spec;
    const Eigen::Index hs = s.head_size;
    t.a.clear();
    t.lag.resize(static_cast<std::size_t>(s.heads));
    const Mat<S> Vt = V.transpose();
    Mat<S> Ot(Vt.rows(), Vt.cols());
    for_each_head(s.heads, [&](Eigen::Index h) {
      LagHead& head = t.lag[static_cast<std::size_t>(h)];
      head = lag::allowed_lags(s, n);
      lag::set_weights(head, bias_by_offset(L, static_cast<int>(h), n).template cast<double>());
      Eigen::MatrixXd Vh, Oh;
      lag_columns(Vt, h, hs, n, Vh);
      lag::forward(head, Vh, Oh);
      set_lag_columns(Oh, h, hs, n, Ot);
    });
    t.o = Ot.transpose();
  }
}
template <class S>
void lag_heads_backward(const Layer<S>& L, const Mat<S>& V, const Mat<S>& dO, const LayerTrace<S>& t,
                        Mat<S>& dV, Mat<S>& drpe) {
  if constexpr (std::is_same_v<S, float>) {
    const LayerSpec& s = L.spec;
    const Eigen::Index hs = s.head_size;
    eigen_assert(t.lag.size() == static_cast<std::size_t>(s.heads));
    const Mat<S> Vt = V.transpose(), dOt = dO.transpose(), Ot = t.o.transpose();
    Mat<S> dVt(Vt.rows(), Vt.cols());
    for_each_head(s.heads, [&](Eigen::Index h) {
      const LagHead& head = t.lag[static_cast<std::size_t>(h)];
      const Eigen::Index n = head.n;
      Eigen::MatrixXd Vh, dOh, Oh, dVh;
      lag_columns(Vt, h, hs, n, Vh);
      lag_columns(dOt, h, hs, n, dOh);
      lag_columns(Ot, h, hs, n, Oh);
      Eigen::VectorXd dbias;
      lag::backward(head, Vh, dOh, Oh, dVh, dbias);
      set_lag_columns(dVh, h, hs, n, dVt);
      ScoresScratch<S> scores;
      rpe_gradient(s, h, Vec<S>(dbias.cast<S>()), scores, drpe);
    });
    dV = dVt.transpose();
  }
}

// Rotary positions on the query and key columns of a batch (positions restart with every sequence;
// a compact layout holds only each sequence's computed queries), or back on their gradients.
template <class S>
void rotate_queries_keys(const LayerSpec& s, const std::vector<Eigen::Index>& start, const QueryLayout& at,
                         Mat<S>& q, Mat<S>& k, bool inverse) {
  Eigen::Index longest = 0;
  for (std::size_t b = 0; b + 1 < start.size(); ++b)
    longest = std::max(longest, start[b + 1] - start[b]);
  const RotaryTable<S> T = rotary_table<S>(s, longest);
  for (int b = 0; b + 1 < static_cast<int>(start.size()); ++b) {
    const QueryRange r = at.range(b);
    rotate(q, T, at.q_col(b), r.second - r.first, r.first, inverse);
    rotate(k, T, start[b], start[b + 1] - start[b], 0, inverse);
  }
}

template <class S>
void attention_forward(const Layer<S>& L, const Mat<S>& in, const std::vector<Eigen::Index>& start,
                       LayerTrace<S>& t, Mat<S>& Z) {
  const LayerSpec& s = L.spec;
  const Eigen::Index H = s.heads, hs = s.head_size;
  const Eigen::Index n_common = common_length(start);
  if (s.dp_free && n_common > 0) t.queries.clear();  // one A per head: every query, shared anyway
  const QueryLayout at(start, t.queries, s.tied_qkv);
  if (s.tied_qkv) {
    weights_times(t.q, L.wq, in, s.bias ? &L.bq : nullptr);
  } else {
    weights_times(t.v, L.wv, in, s.bias ? &L.bv : nullptr);
    if (!s.dp_free) {
      if (at.compact) {
        at.gather(in, t.q_in);
        weights_times(t.q, L.wq, t.q_in, s.bias ? &L.bq : nullptr);
      } else {
        weights_times(t.q, L.wq, in, s.bias ? &L.bq : nullptr);
      }
      weights_times(t.k, L.wk, in, s.bias ? &L.bk : nullptr);
      if (s.rope > 0) rotate_queries_keys(s, start, at, t.q, t.k, false);
    }
  }
  const Mat<S>& Q = t.q;
  const Mat<S>& K = s.tied_qkv ? t.q : t.k;
  const Mat<S>& V = s.tied_qkv ? t.q : t.v;
  const int B = static_cast<int>(start.size()) - 1;
  t.o.resize(H * hs, at.o_cols(in.cols()));  // every column is set below, head by head
  EvalOptions opt;                           // t.a is kept between steps: same shapes reuse their memory
  if (const Eigen::Index n = n_common; s.dp_free && n > 0 && by_lags<S>(s, n)) {
    lag_heads_forward(L, V, n, t);
  } else if (const Eigen::Index n = n_common; s.dp_free && n > 0) {  // one A per head
    t.lag.clear();
    t.a.resize(H);
    Mat<S> P, PA;
    for (Eigen::Index h = 0; h < H; ++h) {
      Mat<S>& A = t.a[h];
      A.setZero(n, n);
      head_weights(L, h, A, opt);
      stack_head(V, h, hs, n, P);
      // A causal head attends to no later key: A (keys × queries) is upper triangular, and
      // Eigen's triangular products skip its zero half.
      if (s.causal)
        PA.noalias() = P * A.template triangularView<Eigen::Upper>();
      else
        PA.noalias() = P * A;
      unstack_head(PA, h, hs, n, t.o);
    }
  } else {
    t.lag.clear();
    t.a.resize(static_cast<std::size_t>(B) * H);
    for_each_sequence(
        B, [] { return 0; },
        [&](int, int b) {
          const Eigen::Index c0 = start[b], n = start[b + 1] - start[b];
          const QueryRange range = at.range(b);  // not a structured binding: clang 14 cannot capture one
          const Eigen::Index q0 = range.first, q1 = range.second;
          for (Eigen::Index h = 0; h < H; ++h)
            with_head_view<S>(hs, h, c0, n, q1 - q0, [&](auto view, auto cols) {
              Mat<S>& A = t.a[static_cast<std::size_t>(b) * H + h];
              if (s.dp_free)
                A.setZero(n, q1 - q0);
              else
                set_head_product(A, view(K).transpose(), cols(Q, at.q_col(b), q1 - q0), L.score_scale);
              head_weights(L, h, A, opt, q0);
              set_head_product(cols(t.o, at.o_col(b), q1 - q0), view(V), A, S(1));
            });
        },
        [](int) {});
  }
  if (at.compact) {
    Mat<S> wo_o;
    weights_times(wo_o, L.wo, t.o);
    at.scatter_add(wo_o, Z);
    if (s.bias) add_bias(Z, L.bo);  // every column: the residual stream keeps the others
  } else {
    add_weights_times(Z, L.wo, t.o, s.bias ? &L.bo : nullptr);
  }
}

// dZ: gradient of the residual stream after the sub-layer; returns the gradient w.r.t. `in`.
template <class S>
Mat<S> attention_backward(const Layer<S>& L, Layer<S>& G, const Mat<S>& in,
                          const std::vector<Eigen::Index>& start, const LayerTrace<S>& t, const Mat<S>& dZ,
                          bool need_din) {
  const LayerSpec& s = L.spec;
  const Eigen::Index H = s.heads, hs = s.head_size, T = in.cols();
  // The layout of the forward pass: dO and dQ as o and q (dZ is zero away from the queries:
  // nothing after this sub-layer mixes tokens).
  const QueryLayout at(start, t.queries, s.tied_qkv);
  Mat<S> dZq;
  if (at.compact) at.gather(dZ, dZq);
  const Mat<S>& dZo = at.compact ? dZq : dZ;
  add_outer(G.wo, dZo, t.o, s.bias ? &G.bo : nullptr);  // dZ is zero away from dZo's columns
  Mat<S> dO;
  weights_times(dO, L.wo.transpose(), dZo);
  const Mat<S>& Q = t.q;
  const Mat<S>& K = s.tied_qkv ? t.q : t.k;
  const Mat<S>& V = s.tied_qkv ? t.q : t.v;
  Mat<S> dQ = Mat<S>::Zero(H * hs, s.dp_free ? 0 : Q.cols()), dK = Mat<S>::Zero(H * hs, s.dp_free ? 0 : T),
         dV = Mat<S>::Zero(H * hs, T);
  const int B = static_cast<int>(start.size()) - 1;
  Mat<S> drpe = Mat<S>::Zero(L.rpe.rows(), L.rpe.cols());
  if (const Eigen::Index n = common_length(start); s.dp_free && n > 0 && by_lags<S>(s, n)) {
    lag_heads_backward(L, V, dO, t, dV, drpe);
  } else if (const Eigen::Index n = common_length(start); s.dp_free && n > 0) {  // one A per head (forward)
    Mat<S> Pv, Pd, PdA, dS;
    ScoresScratch<S> scores;
    for (Eigen::Index h = 0; h < H; ++h) {
      const Mat<S>& A = t.a[h];
      stack_head(dO, h, hs, n, Pd);
      stack_head(V, h, hs, n, Pv);
      // Σ_b V_bᵀ dO_b: dS is linear in dA for a fixed A. Causal: A is upper triangular (forward),
      // and dS is needed where A can be non-zero (zeros below, so that A ⊙ dS stays finite).
      if (s.causal) {
        PdA.noalias() = Pd * A.transpose().template triangularView<Eigen::Lower>();
        dS.resize(n, n);
        dS.template triangularView<Eigen::StrictlyLower>().setZero();
        dS.template triangularView<Eigen::Upper>() = Pv.transpose() * Pd;
      } else {
        PdA.noalias() = Pd * A.transpose();
        dS.noalias() = Pv.transpose() * Pd;
      }
      unstack_head(PdA, h, hs, n, dV);
      scores_backward(s, h, A, dS, scores, drpe);
    }
  } else {
    struct Scratch {
      Mat<S> my_rpe;  // this thread's share of drpe
      Mat<S> dS;      // dA, then dS in place; kept across sequences
      ScoresScratch<S> scores;
    };
    for_each_sequence(
        B,
        [&] {
          return Scratch{Mat<S>::Zero(L.rpe.rows(), L.rpe.cols()), {}, {}};
        },
        [&](Scratch& scratch, int b) {
          Mat<S>& my_rpe = scratch.my_rpe;
          Mat<S>& dS = scratch.dS;
          const Eigen::Index c0 = start[b], n = start[b + 1] - start[b];
          const QueryRange range = at.range(b);  // not a structured binding: clang 14 cannot capture one
          const Eigen::Index q0 = range.first, q1 = range.second;
          for (Eigen::Index h = 0; h < H; ++h)
            with_head_view<S>(hs, h, c0, n, q1 - q0, [&](auto view, auto cols) {
              const Mat<S>& A = t.a[static_cast<std::size_t>(b) * H + h];
              const auto dOh = cols(dO, at.o_col(b), q1 - q0);
              add_head_product(view(dV), dOh, A.transpose(), S(1));
              set_head_product(dS, view(V).transpose(), dOh, S(1));
              scores_backward(s, h, A, dS, scratch.scores, my_rpe, q0);
              if (!s.dp_free) {
                add_head_product(cols(dQ, at.q_col(b), q1 - q0), view(K), dS, L.score_scale);
                add_head_product(view(dK), cols(Q, at.q_col(b), q1 - q0), dS.transpose(), L.score_scale);
              }
            });
        },
        [&](const Scratch& scratch) { drpe += scratch.my_rpe; });
  }
  if (s.rpe != Rpe::none && G.rpe.size()) G.rpe += drpe;  // (empty: an input-only gradient)
  if (s.rope > 0) rotate_queries_keys(s, start, at, dQ, dK, true);
  Mat<S> din;
  if (s.tied_qkv) {
    Mat<S> dP = dV;
    if (!s.dp_free) dP += dQ + dK;
    add_outer(G.wq, dP, in, s.bias ? &G.bq : nullptr);
    if (need_din) weights_times(din, L.wq.transpose(), dP);
    return din;
  }
  add_outer(G.wv, dV, in, s.bias ? &G.bv : nullptr);
  if (need_din) weights_times(din, L.wv.transpose(), dV);
  if (!s.dp_free) {
    add_outer(G.wq, dQ, at.compact ? t.q_in : in, s.bias ? &G.bq : nullptr);
    add_outer(G.wk, dK, in, s.bias ? &G.bk : nullptr);
    if (need_din) {
      if (at.compact) {
        Mat<S> dq_in;
        weights_times(dq_in, L.wq.transpose(), dQ);
        at.scatter_add(dq_in, din);
      } else {
        add_weights_times(din, L.wq.transpose(), dQ);
      }
      add_weights_times(din, L.wk.transpose(), dK);
    }
  }
  return din;
}

// The token mixers (bproj, sepconv), sequence by sequence: t.o caches mix(in) before W_O.
template <class S>
void mixer_forward(const Layer<S>& L, const Mat<S>& in, const std::vector<Eigen::Index>& start,
                   LayerTrace<S>& t, Mat<S>& Z) {
  t.o.resize(in.rows(), in.cols());
  for (std::size_t b = 0; b + 1 < start.size(); ++b) {
    const Eigen::Index c0 = start[b], n = start[b + 1] - start[b];
    const Mat<S> X = in.middleCols(c0, n);
    t.o.middleCols(c0, n) =
        L.spec.kind == LayerKind::bproj ? Mat<S>(X * bproj_matrix(L, n)) : sepconv_mix(L, X);
  }
  add_weights_times(Z, L.wo, t.o, L.spec.bias ? &L.bo : nullptr);
}

template <class S>
Mat<S> mixer_backward(const Layer<S>& L, Layer<S>& G, const Mat<S>& in,
                      const std::vector<Eigen::Index>& start, const LayerTrace<S>& t, const Mat<S>& dZ) {
  const LayerSpec& s = L.spec;
  add_outer(G.wo, dZ, t.o, s.bias ? &G.bo : nullptr);
  Mat<S> dM;
  weights_times(dM, L.wo.transpose(), dZ);
  Mat<S> din = Mat<S>::Zero(in.rows(), in.cols());
  const Eigen::Index d = in.rows();
  for (std::size_t b = 0; b + 1 < start.size(); ++b) {
    const Eigen::Index c0 = start[b], n = start[b + 1] - start[b];
    const auto X = in.middleCols(c0, n);
    const auto dMb = dM.middleCols(c0, n);
    if (s.kind == LayerKind::bproj) {
      din.middleCols(c0, n).noalias() = dMb * bproj_matrix(L, n).transpose();
      if (G.wp.size() == 0) continue;  // an input-only gradient
      Mat<S> dP = X.transpose() * dMb;
      for (Eigen::Index k = 0; k < n && s.causal; ++k)
        for (Eigen::Index l = k + 1; l < n; ++l)
          dP(l, k) = S(0);  // entries the forward does not use
      G.wp.topLeftCorner(n, n) += dP;
      continue;
    }
    const Eigen::Index per = d / s.heads;
    for (int j = 0; j < s.kernel; ++j) {
      const Eigen::Index off = sepconv_offset(s, j);
      const Eigen::Index t0 = std::max<Eigen::Index>(0, -off), t1 = std::min<Eigen::Index>(n, n - off);
      if (t0 >= t1) continue;
      for (Eigen::Index c = 0; c < d; ++c) {
        const auto g = dMb.row(c).segment(t0, t1 - t0);
        din.row(c).segment(c0 + t0 + off, t1 - t0) += L.filter(c / per, j) * g;
        if (G.filter.size()) G.filter(c / per, j) += g.dot(X.row(c).segment(t0 + off, t1 - t0));
      }
    }
  }
  return din;
}

}  // namespace train_detail

template <class S>
S forward_train(const Network<S>& net, const Batch<S>& batch, Loss loss, Trace<S>& trace) {
  using namespace train_detail;
  const Architecture& a = net.arch;
  check_differentiable(a);
  const Eigen::Index T = batch.tokens();
  Mat<S> Z;
  const bool ids = static_cast<Eigen::Index>(batch.ids.size()) == T && batch.x.size() == 0;
  a.check_token_kind(a.vocab > 0 ? ids : !batch.ids.empty());  // what the batch holds
  if (a.vocab > 0) {
    Z.resize(a.d, T);
    for (Eigen::Index c = 0; c < T; ++c) {
      const int id = batch.ids[c];
      if (id < 0 || id >= a.vocab)
        throw Error("token id " + std::to_string(id) + " outside the vocabulary of " +
                    std::to_string(a.vocab));
      Z.col(c) = net.embed.col(id);
    }
  } else {
    a.check_width(batch.x.rows());
    if (a.input > 0)
      weights_times(Z, net.in_w, batch.x, &net.in_b);  // the input projection: W_in x + b_in
    else
      Z = batch.x;
  }
  if (a.max_len > 0)
    for (int b = 0; b < batch.sequences(); ++b) {
      const Eigen::Index n = batch.start[b + 1] - batch.start[b];
      if (n > a.max_len)
        throw Error("sequence length " + std::to_string(n) + " exceeds max_len " + std::to_string(a.max_len));
      Z.middleCols(batch.start[b], n) += net.pe.leftCols(n);
    }
  trace.layers.resize(net.layers.size());
  // After the last token-mixing sub-layer every sub-layer and the readout work token by token, so
  // its outputs matter only at the tokens counted in the loss: an attention sub-layer there computes
  // only the queries from the first to the last counted token of each sequence.
  std::size_t last_mixer = net.layers.size();
  for (std::size_t i = 0; i < net.layers.size(); ++i)
    if (net.layers[i].spec.kind != LayerKind::feedforward && net.layers[i].spec.kind != LayerKind::layernorm)
      last_mixer = i;
  for (std::size_t i = 0; i < net.layers.size(); ++i) {
    const Layer<S>& L = net.layers[i];
    LayerTrace<S>& t = trace.layers[i];
    t.queries.clear();
    if (i == last_mixer) counted_queries(batch, t.queries);
    t.in = Z;
    if (L.spec.kind == LayerKind::layernorm) {
      Z = ln_forward(t.in, L.norm_w, L.norm_b, L.eps, t.xhat, t.rstd);
      continue;
    }
    if (L.spec.pre_norm) t.u = ln_forward(t.in, L.norm_w, L.norm_b, L.eps, t.xhat, t.rstd);
    const Mat<S>& in = L.spec.pre_norm ? t.u : t.in;
    if (L.spec.kind == LayerKind::attention)
      attention_forward(L, in, batch.start, t, Z);
    else if (L.spec.kind != LayerKind::feedforward)
      mixer_forward(L, in, batch.start, t, Z);
    else {
      if (relu_from_act<S>(L.spec)) {
        relu_weights_times(t.act, L.w1, in, &L.b1);
        t.h.resize(0, 0);
      } else {
        weights_times(t.h, L.w1, in, &L.b1);
        activate(L.spec, t.h, t.act);
      }
      add_weights_times(Z, L.w2, t.act, &L.b2);
    }
  }
  trace.z = std::move(Z);
  if (a.readout > 0) {
    weights_times(trace.y, net.readout_w, trace.z, &net.readout_b);
  } else {
    trace.y = trace.z;
  }
  // Loss over counted tokens. Cross-entropy works on yᵀ (T×C), one class per column, so that every
  // pass (the maximum, exp, the sum, the division) runs along T contiguous numbers however few the
  // classes are (three for memorize: over y's own 3-number columns each pass was scalar, a tenth of
  // the kajitsuka sweep's time). With y shifted by each token's maximum, its loss is
  // log Σ exp(y) − y_label; exp(y) over the sums is the softmax the backward pass needs (trace.p,
  // C×T as y).
  S total(0);
  if (loss == Loss::cross_entropy) {
    Mat<S> pt = trace.y.transpose();
    const Eigen::Index C = pt.cols();
    Vec<S> high = pt.col(0);  // per token: the maximum over the classes
    for (Eigen::Index j = 1; j < C; ++j)
      high = high.cwiseMax(pt.col(j));
    pt.colwise() -= high;
    for (Eigen::Index c = 0; c < T; ++c)
      if (batch.mask[c]) total -= pt(c, batch.label[c]);
    if constexpr (std::is_floating_point_v<S>)
      pt = pt.array().exp();  // Eigen's packet exp
    else
      pt = pt.unaryExpr([](const S& v) { return S(Scalar<S>::exp(v)); });
    const Vec<S> sums = pt.rowwise().sum();
    if constexpr (std::is_floating_point_v<S>) {
      // log Σ exp = log1p(the sum without one maximal term, which is exactly 1): a confident
      // token's loss keeps its digits instead of rounding to 0 with the sum. The terms that are not
      // 1, plus the 1s beyond the first (exp rounds to 1 near the maximum too); Eigen's packet
      // log1p over the counted tokens at once.
      thread_local Eigen::Array<S, Eigen::Dynamic, 1> others, ones;
      others.setZero(T);
      ones.setZero(T);
      for (Eigen::Index j = 0; j < C; ++j) {
        const auto one = (pt.col(j).array() == S(1)).template cast<S>();
        others += pt.col(j).array() * (S(1) - one);
        ones += one;
      }
      Eigen::Index counted = 0;
      for (Eigen::Index c = 0; c < T; ++c)
        if (batch.mask[c]) others(counted++) = others(c) + (ones(c) - S(1));
      total += others.head(counted).log1p().sum();
    } else {
      for (Eigen::Index c = 0; c < T; ++c)
        if (batch.mask[c]) total += Scalar<S>::log(sums(c));
    }
    pt.array().colwise() /= sums.array();
    trace.p = pt.transpose();
  }
  trace.counted = std::count_if(batch.mask.begin(), batch.mask.end(), [](char m) { return m != 0; });
  if (loss == Loss::mse && trace.counted == T)
    total = (trace.y - batch.target).squaredNorm();
  else if (loss == Loss::mse)
    for (Eigen::Index c = 0; c < T; ++c)
      if (batch.mask[c]) total += (trace.y.col(c) - batch.target.col(c)).squaredNorm();
  if (trace.counted == 0) {
    if (!trace.part_of_batch) throw Error("the batch has no tokens counted in the loss (all masked)");
    return trace.loss = S(0);
  }
  const S denom = S(static_cast<long>(trace.counted * (loss == Loss::mse ? trace.y.rows() : 1)));
  trace.loss = total / denom;
  return trace.loss;
}

template <class S>
void backward(const Network<S>& net, const Batch<S>& batch, Loss loss, const Trace<S>& trace,
              Network<S>& grad) {
  const Eigen::Index T = batch.tokens();
  // dLoss/dy: whole matrices, then the tokens not counted set to zero.
  const Eigen::Index counted = trace.normaliser > 0 ? trace.normaliser : trace.counted;
  const S denom = S(static_cast<long>(counted * (loss == Loss::mse ? trace.y.rows() : 1)));
  Mat<S> dY;
  if (loss == Loss::mse) {
    dY = (trace.y - batch.target) * (S(2) / denom);
  } else {  // (softmax − one-hot) / denom
    dY = trace.p / denom;
    for (Eigen::Index c = 0; c < T; ++c)
      if (batch.mask[c]) dY(batch.label[c], c) -= S(1) / denom;
  }
  for (Eigen::Index c = 0; c < T; ++c)
    if (!batch.mask[c]) dY.col(c).setZero();
  backward_from<S>(net, batch, trace, std::move(dY), grad, nullptr);
}

template <class S>
void backward_from(const Network<S>& net, const Batch<S>& batch, const Trace<S>& trace, Mat<S> dY,
                   Network<S>& grad, Mat<S>* dinput) {
  using namespace train_detail;
  const Architecture& a = net.arch;
  const Eigen::Index T = batch.tokens();
  Mat<S> dZ;
  if (a.readout > 0) {
    add_outer(grad.readout_w, dY, trace.z, &grad.readout_b);
    weights_times(dZ, net.readout_w.transpose(), dY);
  } else {
    dZ = std::move(dY);
  }
  for (std::size_t i = net.layers.size(); i-- > 0;) {
    const Layer<S>& L = net.layers[i];
    Layer<S>& G = grad.layers[i];
    const LayerTrace<S>& t = trace.layers[i];
    if (L.spec.kind == LayerKind::layernorm) {
      dZ = ln_backward(dZ, t.xhat, t.rstd, L.norm_w, G.norm_w, G.norm_b);
      continue;
    }
    const Mat<S>& in = L.spec.pre_norm ? t.u : t.in;
    // The gradient through the branch is needed upstream, or by this sub-layer's own LayerNorm;
    // the first sub-layer of a network with continuous tokens and no positions has neither.
    const bool need_din = i > 0 || a.vocab > 0 || a.input > 0 || a.max_len > 0 || L.spec.pre_norm || dinput;
    Mat<S> din;
    if (L.spec.kind == LayerKind::attention)
      din = attention_backward(L, G, in, batch.start, t, dZ, need_din);
    else if (L.spec.kind != LayerKind::feedforward)
      din = mixer_backward(L, G, in, batch.start, t, dZ);
    else {
      add_outer(G.w2, dZ, t.act, &G.b2);
      Mat<S> dh;
      if (relu_from_act<S>(L.spec)) {
        relu_gated_times(dh, L.w2.transpose(), dZ, t.act);
      } else {
        weights_times(dh, L.w2.transpose(), dZ);
        times_activation_slope(L.spec, t.h, dh);
      }
      add_outer(G.w1, dh, in, &G.b1);
      if (need_din) weights_times(din, L.w1.transpose(), dh);
    }
    if (!need_din) break;  // i = 0: nothing upstream reads dZ
    if (L.spec.pre_norm)
      dZ += ln_backward(din, t.xhat, t.rstd, L.norm_w, G.norm_w, G.norm_b);
    else
      dZ += din;
  }
  if (a.vocab > 0 && grad.embed.size())
    for (Eigen::Index c = 0; c < T; ++c)
      grad.embed.col(batch.ids[c]) += dZ.col(c);
  if (a.input > 0) add_outer(grad.in_w, dZ, batch.x, &grad.in_b);
  if (a.max_len > 0 && grad.pe.size())
    for (int b = 0; b < batch.sequences(); ++b) {
      const Eigen::Index n = batch.start[b + 1] - batch.start[b];
      grad.pe.leftCols(n) += dZ.middleCols(batch.start[b], n);
    }
  if (dinput) {  // with respect to the input: the embedded tokens, or the raw ones before a projection
    if (a.input > 0)
      weights_times(*dinput, net.in_w.transpose(), dZ);
    else
      *dinput = std::move(dZ);
  }
}

template <class S>
S loss_and_gradient(const Network<S>& net, const Batch<S>& batch, Loss loss, Network<S>& grad) {
  Trace<S> trace;
  S l = forward_train(net, batch, loss, trace);
  backward(net, batch, loss, trace, grad);
  return l;
}

template <class S>
Batch<S> make_batch(const Dataset& ds, const std::vector<std::size_t>& which, Loss loss, int out_dim) {
  Batch<S> b;
  b.start.push_back(0);
  Eigen::Index T = 0;
  for (std::size_t i : which)
    T += static_cast<Eigen::Index>(ds.sequences.at(i).n());
  if (!ds.token_input) b.x.resize(ds.d, T);
  if (loss == Loss::mse) b.target.resize(out_dim, T);
  Eigen::Index c = 0;
  for (std::size_t i : which) {
    const Sequence& s = ds.sequences[i];
    const Eigen::Index n = static_cast<Eigen::Index>(s.n());
    const std::string where = "sequence " + std::to_string(i + 1) + ": ";
    if (s.y.size() == 0) throw Error(where + "no labels (\"y\") to train on");
    if (loss == Loss::mse && s.y.rows() != out_dim)
      throw Error(where + "labels have " + std::to_string(s.y.rows()) +
                  " numbers per token, the network outputs " + std::to_string(out_dim));
    if (loss == Loss::cross_entropy && s.y.rows() != 1)
      throw Error(where + "cross-entropy needs one class label per token");
    for (Eigen::Index k = 0; k < n; ++k, ++c) {
      // Entry by entry: Eigen's unaryExpr would copy each rational before converting it.
      if (ds.token_input)
        b.ids.push_back(s.tokens[k]);
      else
        for (Eigen::Index r = 0; r < ds.d; ++r)
          b.x(r, c) = Scalar<S>::from(s.x(r, k));
      if (loss == Loss::mse)
        for (Eigen::Index r = 0; r < out_dim; ++r)
          b.target(r, c) = Scalar<S>::from(s.y(r, k));
      else {
        const long y = class_label(s.y(0, k), out_dim);
        if (y < 0)
          throw Error(where + "class label " + s.y(0, k).str() + " is not an integer in [0, " +
                      std::to_string(out_dim) + ")");
        b.label.push_back(static_cast<int>(y));
      }
      b.mask.push_back(s.mask.empty() ? 1 : s.mask[k]);
    }
    b.start.push_back(c);
  }
  return b;
}

}  // namespace uatlab
