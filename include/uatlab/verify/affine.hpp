// Interval evaluation without MPFI's dependency loss on piecewise-linear feed-forward sub-layers.
//
// Plain interval arithmetic evaluates ReLU(K t + 1) − ReLU(K t) on an enclosure of width w as an
// interval of width 2Kw, although the function is constant away from its ramp: every steep step
// of a staircase adds its slope times the input's width, and deep stacks of such steps (bit
// extraction, quantization) lose all their bits. AffineForward avoids this: on a column whose
// every unit's pre-activation enclosure lies inside one piece of φ, a feed-forward sub-layer is the
// affine map z ↦ A z + b with A = I + W2 S W1 and b = W2 (S b1 + κ) + b2 (S: the pieces' slopes,
// κ: their intercepts), formed exactly in rationals (slopes that cancel cancel exactly) and
// applied once. The enclosure stays sound: every z in the input box goes through the same pieces.
#pragma once

#include <map>
#include <memory>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "uatlab/model/network.hpp"

namespace uatlab {

// φ of a feed-forward sub-layer as breakpoints c and pieces (slope, intercept), piece k on
// [c_{k−1}, c_k): its piecewise-linear activation, or ReLU's two pieces.
void activation_pieces(const Layer<Rational>& L, std::vector<Rational>& c,
                       std::vector<std::pair<Rational, Rational>>& pieces);

// A continuous-input network evaluated on interval inputs: positional encoding, then every plain
// feed-forward sub-layer (ReLU or piecewise linear, no layer norm) as above, other sub-layers and
// columns with a unit whose enclosure meets a breakpoint through the library's MPFI forward, then
// pooling and readout. Construct it at the MPFR precision it will run at (an MpfrPrecision scope);
// the affine maps of the patterns met are cached, and operator() may run on several threads. It
// keeps pointers into `net`, which must outlive it.
class AffineForward {
 public:
  explicit AffineForward(const Network<Rational>& net);
  // keep (when not empty): the output columns wanted, in the order given. From the first sub-layer
  // after which every sub-layer is token-wise (feed-forward or layer norm), only they are carried
  // through (a next-token certificate needs the last token alone); refused with pooling.
  Mat<Mpfi> operator()(const Mat<Mpfi>& X, const std::vector<Eigen::Index>& keep = {}) const;

 private:
  // z ↦ A z + b, kept as the rows that differ from z's own: row r is Σ_k A(r, k) z_k + b_r (a
  // coefficient of exactly 1 adds z_k without a product). Deep stacks of narrow steps touch one or
  // two rows of the stream per sub-layer.
  struct Affine {
    struct Term {
      Eigen::Index k;
      Mpfi a;
      bool one;
    };
    struct Row {
      Eigen::Index r;
      std::vector<Term> terms;
      Mpfi b;
    };
    std::vector<Row> rows;
  };
  struct Unit {  // one hidden unit: its nonzero input weights and output weights
    std::vector<std::pair<Eigen::Index, Mpfi>> in;
    Mpfi bias;
  };
  struct Sub {
    const Layer<Rational>* ff = nullptr;  // the rational layer if a plain feed-forward sub-layer
    std::vector<Unit> units;
    std::vector<Mpfi> breaks;
    std::vector<std::pair<Rational, Rational>> pieces;
    Network<Mpfi> alone;  // the sub-layer alone, for the plain MPFI forward
    std::unique_ptr<std::map<std::vector<unsigned char>, Affine>> cache;
  };
  Mat<Mpfi> feedforward(const Sub& s, const Mat<Mpfi>& Z) const;
  const Affine& affine(const Sub& s, const std::vector<unsigned char>& pattern) const;

  Network<Mpfi> head_, tail_;  // positions; pooling and readout
  std::vector<Sub> subs_;
  std::size_t tokenwise_from_ = 0;  // sub-layers from here on act on each token alone
  bool pool_ = false;
  mutable std::shared_mutex mutex_;
};

}  // namespace uatlab
