// Training forward and backward, layer by layer (the llm.c pattern): the forward pass over a
// batch caches what each sub-layer's backward needs; the backward walks the sub-layers in reverse
// and accumulates gradients into a Network<S> of the same shape (gradients are a network too).
//
// A batch is many sequences side by side: the token matrix is d×T with T = Σ n_b, so the linear
// maps (projections, feed-forward, readout) are single large matrix products over all tokens and
// only attention works sequence by sequence.
#pragma once

#include <vector>

#include "uatlab/io/dataset.hpp"
#include "uatlab/model/network.hpp"
#include "uatlab/names.hpp"

namespace uatlab {

enum class Loss { mse, cross_entropy };
inline constexpr EnumNames<Loss::cross_entropy> loss_names{"loss", {"mse", "ce"}};
static_assert(loss_names.complete());
Loss parse_loss(const std::string& s);  // loss_names, and "cross-entropy" for ce

template <class S>
struct Batch {
  Mat<S> x;                         // d×T continuous tokens (empty for token ids)
  std::vector<int> ids;             // T token ids (token input)
  std::vector<Eigen::Index> start;  // B+1 column offsets: sequence b is columns start[b] .. start[b+1]-1
  Mat<S> target;                    // k×T regression targets (mse)
  std::vector<int> label;           // T class labels (cross-entropy)
  std::vector<char> mask;           // T flags: 1 = the token counts in the loss
  Eigen::Index tokens() const { return start.back(); }
  int sequences() const { return static_cast<int>(start.size()) - 1; }
};

// Gather sequences `which` of a labelled dataset. Cross-entropy labels must be integers in
// [0, out_dim); mse labels must have out_dim numbers per token. Throws Error naming the sequence.
template <class S>
Batch<S> make_batch(const Dataset& ds, const std::vector<std::size_t>& which, Loss loss, int out_dim);

using QueryRange = std::pair<Eigen::Index, Eigen::Index>;

// A DP-free head over sequences of one length n whose products go by FFT (src/train/
// lag_convolution.hpp): the lags its mask allows, their weights and each query's normaliser, kept
// from the forward pass for the backward.
struct LagHead {
  long n = 0, lo = 0, hi = -1;  // lags δ = query − key in [lo, hi] (within ±(n − 1); none if hi < lo)
  std::vector<double> w;        // w(δ) = exp(B(δ) − max B), entry δ − lo
  std::vector<double> z;        // per query, Σ w over its keys (0: it has none)
  std::vector<long> direct;     // queries whose z is too small beside Σ w for an FFT: done directly
  long fft_size = 0;            // L ≥ n + max(hi, 0) − min(lo, 0): no wrap-around in any product
};

template <class S>
struct LayerTrace {
  Mat<S> in;                 // Z entering the sub-layer
  Mat<S> xhat, rstd;         // layer norm: normalised input (d×T) and 1/σ per column (1×T)
  Mat<S> u;                  // pre_norm: the branch input LayerNorm(in)
  Mat<S> q, k, v, o;         // attention: projections (H·s×T; tied: q only) and head outputs before W_O
  std::vector<Mat<S>> a;     // attention weights, one n_b×q_b matrix per (sequence, head), or one
                             // n×n per head (DP-free heads over sequences of one length n)
  std::vector<LagHead> lag;  // DP-free heads by FFT: one per head (and a stays empty)
  std::vector<QueryRange> queries;  // attention: per sequence, the queries computed, [first, end)
                                    // (q_b = end − first; empty: all). When set, o, and q unless
                                    // tied, hold only those columns, sequence after sequence
                                    // (H·s × Σ q_b), and q_in the input at them (d × Σ q_b).
  Mat<S> q_in;
  Mat<S> h, act;  // feed-forward pre-activation h (m×T) and φ(h); h empty for ReLU outside
                  // intervals (φ(h) > 0 exactly where h > 0)
};

template <class S>
struct Trace {
  std::vector<LayerTrace<S>> layers;
  Mat<S> z;  // the residual stream after the last sub-layer
  Mat<S> y;  // network output (out_dim×T)
  Mat<S> p;  // cross-entropy: the softmax of y over the classes, per token (for the backward pass)
  S loss{};
  Eigen::Index counted = 0;  // tokens in the loss
  // Set when this trace covers part of a larger batch: backward normalises by the whole batch's
  // count, and a part without counted tokens is not an error.
  Eigen::Index normaliser = 0;
  bool part_of_batch = false;
};

// Throws Error unless the forward and backward passes below take the architecture: no hardmax
// attention, no piecewise activation, no pooling.
void check_differentiable(const Architecture& a);

// Forward over the batch, filling the trace; returns the mean loss over counted tokens (mse: also
// over the out_dim coordinates, as torch's mse_loss). Throws Error for hardmax (no gradient).
template <class S>
S forward_train(const Network<S>& net, const Batch<S>& batch, Loss loss, Trace<S>& trace);

// Accumulate d(loss)/d(parameters) into grad (same architecture; call zero_like first).
template <class S>
void backward(const Network<S>& net, const Batch<S>& batch, Loss loss, const Trace<S>& trace,
              Network<S>& grad);

// The same from a given dLoss/dy (out_dim×T; uncounted tokens are not zeroed here). With dinput,
// also the gradient with respect to the input (the embedded tokens: d×T; the raw tokens before an
// input projection: input×T). In intervals (Mpfi) every step encloses: a ReLU whose input
// enclosure reaches 0 has the slope [0, 1]; the gradient at every point of the input box lies in
// the result (analyse's mean-value region certificate).
template <class S>
void backward_from(const Network<S>& net, const Batch<S>& batch, const Trace<S>& trace, Mat<S> dY,
                   Network<S>& grad, Mat<S>* dinput);

template <class S>
Network<S> zero_like(const Network<S>& net) {
  Network<S> g(net.arch);
  g.for_each_tensor([](const std::string&, Mat<S>& m, Layout) { m.setZero(); });
  return g;
}

// A gradient that receives nothing: every matrix empty. backward_from into it computes only the
// gradient with respect to the input (dinput), skipping the weights' products (analyse's mean-value
// form needs no more).
template <class S>
Network<S> input_only_like(const Network<S>& net) {
  Network<S> g(net.arch);
  g.for_each_tensor([](const std::string&, Mat<S>& m, Layout) { m.resize(0, 0); });
  return g;
}

// loss and gradient in one call
template <class S>
S loss_and_gradient(const Network<S>& net, const Batch<S>& batch, Loss loss, Network<S>& grad);

// float and double train (libuatlab); MPFR checks them (tests/test_backward.cpp; its instances are
// in the library uatlab::train_mpfr, -luatlab_train_mpfr). Each scalar's forward and
// backward passes are instantiated in translation units of their own
// (src/train/{forward,backward}_<scalar>.cpp), so that no includer compiles them again and no
// single file compiles all of them (each stays under 2 GB of compiler memory, docs/building.md).
#define UATLAB_TRAIN_FORWARD_INSTANCES(PREFIX, S)                                                \
  PREFIX template S forward_train<S>(const Network<S>&, const Batch<S>&, Loss, Trace<S>&);       \
  PREFIX template S loss_and_gradient<S>(const Network<S>&, const Batch<S>&, Loss, Network<S>&); \
  PREFIX template Batch<S> make_batch<S>(const Dataset&, const std::vector<std::size_t>&, Loss, int);
#define UATLAB_TRAIN_BACKWARD_INSTANCES(PREFIX, S)                                                          \
  PREFIX template void backward<S>(const Network<S>&, const Batch<S>&, Loss, const Trace<S>&, Network<S>&); \
  PREFIX template void backward_from<S>(const Network<S>&, const Batch<S>&, const Trace<S>&, Mat<S>,        \
                                        Network<S>&, Mat<S>*);
#define UATLAB_TRAIN_INSTANCES(PREFIX, S)   \
  UATLAB_TRAIN_FORWARD_INSTANCES(PREFIX, S) \
  UATLAB_TRAIN_BACKWARD_INSTANCES(PREFIX, S)
UATLAB_TRAIN_INSTANCES(extern, float)
UATLAB_TRAIN_INSTANCES(extern, double)
UATLAB_TRAIN_INSTANCES(extern, Mpfr)
UATLAB_TRAIN_INSTANCES(extern, Mpfi)

}  // namespace uatlab
