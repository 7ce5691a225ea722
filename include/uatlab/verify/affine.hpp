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
//
// A ReLU sub-layer whose units all read one direction a (every row of W1 equal, as Zhang's value
// map and the bounded one are built) is h_j = ReLU(t − c_j) of t = aᵀz: with the units sorted by
// c_j, those with c_j ≤ t over the whole enclosure of t are a prefix [0, m) and contribute
// Σ_{j<m} w_j (t − c_j) = S_m·(t − c_{m−1}) + Q_m, S_m = Σ_{j<m} w_j and Q_m = Σ_{j<m} w_j (c_{m−1} − c_j)
// exact prefix sums (the pivot c_{m−1} keeps the product small and Q_m near the value, so the
// rounding stays near one ulp of the output), those with c_j ≥ t contribute nothing: O(log q) per
// token instead of O(q). When the enclosure straddles some c_j, the row's F(t) = Σ_j w_j ReLU(t − c_j)
// is enclosed by its range there, the hull of F at the enclosure's two ends and at the c_j between
// (F(c_j) = Q_{j+1}, exact), and within F's values at the breakpoints around it: no wider than the
// unit-by-unit sum beyond rounding, and independent of the slopes (a steep ramp of width η is two
// units of slope ±1/η, whose own enclosures would add 1/η times the width). When a reads one entry
// that the sub-layer also writes, that entry's residual t/a is part of F (S_0 = 1/a).
#pragma once

#include <map>
#include <memory>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "uatlab/model/network.hpp"

namespace uatlab {

// φ of a feed-forward sub-layer as breakpoints c and pieces (slope, intercept), piece k on
// [c_{k−1}, c_k): its piecewise-linear activation, or ReLU's two pieces (not for GELU).
template <class S>
void activation_pieces(const Layer<S>& L, std::vector<S>& c, std::vector<std::pair<S, S>>& pieces) {
  if (L.spec.piecewise) {
    c = L.breakpoints, pieces = L.pieces;
  } else {
    c = {S(0)}, pieces = {{S(0), S(0)}, {S(1), S(0)}};
  }
}

// A continuous-input network evaluated on interval inputs: positional encoding, then every plain
// feed-forward sub-layer (ReLU or piecewise linear, no layer norm) as above, other sub-layers and
// columns with a unit whose enclosure meets a breakpoint through the library's MPFI forward, then
// pooling and readout. Construct it at the MPFR precision it will run at (an MpfrPrecision scope);
// the affine maps of the patterns met are cached, and operator() may run on several threads. It
// keeps pointers into `net`, which must outlive it.
class AffineForward {
 public:
  // patterns = false: only one-direction sub-layers get their own path; other feed-forward
  // sub-layers run through the plain MPFI forward (no affine map per activation pattern, whose
  // exact products cost more than they save on a trained network). analyse does so by default.
  explicit AffineForward(const Network<Rational>& net, bool patterns = true);
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
  struct Direction {  // a one-direction ReLU sub-layer (above), units sorted by c_j
    std::vector<std::pair<Eigen::Index, Mpfi>> a;
    std::vector<Mpfi> c;                // c_j, ascending
    std::vector<Eigen::Index> rows;     // the output rows some unit writes
    std::vector<std::vector<Mpfi>> w;   // per row: w_j in the sorted order
    std::vector<std::vector<Mpfi>> sw;  // per row: S_m, m = 0 … q (exact sums, enclosed)
    std::vector<std::vector<Mpfi>> sq;  // per row: Q_m
    std::vector<Mpfi> b2;               // per row
    std::vector<char> fold;             // per row: its residual is part of F (t reads it alone)
  };
  // Columns whose pattern is undecided (an enclosure meets a breakpoint) are enclosed group by
  // group. A group is a run of consecutive units whose rows of W1 are multiples a_k·w of one row w
  // (a standardized Φ unit is such a run: ReLUs of ±(wᵀz + b) − t_k, with slopes of order 1/η):
  // together they add ψ_r(s) to row r, s = wᵀz, ψ_r piecewise linear with the units' breakpoints,
  // and the enclosure is ψ_r's image over the interval of s, the hull of its pieces there, which
  // does not grow with the pieces' slopes as the sum of the units' own enclosures does. When w
  // reads one entry z_f that the group also writes, the residual z_f = s / w_f is folded into ψ_f.
  // A piece between two breakpoints also keeps ψ's values at its ends (exact, enclosed): its image
  // lies between them, which bounds a steep piece (slope 1/η) whatever the precision, where
  // slope × interval + intercept at 128 bits would lose log2(1/η) bits to cancellation. A unit alone
  // (no fold) is enclosed as the plain forward does: φ of its pre-activation times W2.
  struct Piece {
    Mpfi slope, intercept, left, right;  // ψ = slope·s + intercept; ψ at the piece's ends
  };
  struct Group {
    std::vector<std::pair<Eigen::Index, Mpfi>> w;
    std::vector<Mpfi> breaks;                // ψ's breakpoints in s, ascending
    std::vector<Eigen::Index> rows;          // the rows ψ writes
    std::vector<std::vector<Piece>> pieces;  // per row: ψ_r on each piece
    Eigen::Index unit = -1;                  // a unit alone: its index, no pieces
    static Mpfi image(const std::vector<Mpfi>& breaks, const std::vector<Piece>& pieces, const Mpfi& x);
  };
  struct Sub {
    std::unique_ptr<Direction> direction;
    const Layer<Rational>* ff = nullptr;  // the rational layer if a plain feed-forward sub-layer
    std::vector<Unit> units;
    std::vector<Mpfi> breaks;
    std::vector<std::pair<Rational, Rational>> pieces;
    std::vector<std::pair<Mpfi, Mpfi>> act;  // the activation's pieces, enclosed
    std::vector<Group> groups;
    std::vector<char> folded;  // per row: its residual is folded into a group's ψ
    Network<Mpfi> alone;       // the sub-layer alone, for the plain MPFI forward
    std::unique_ptr<std::map<std::vector<unsigned char>, Affine>> cache;
  };
  // One sequence's working numbers, made once at the precision in force and reused by every
  // sub-layer: a deep value map is thousands of sub-layers of two units on a column of four, and
  // a temporary per operation made memory allocation a third of the certificate's time.
  struct Scratch {
    Mpfi t, v, p, r;
    std::vector<Mpfi> rows;
    std::vector<unsigned char> pattern;
  };
  // Both replace Z's rows that the sub-layer writes, in place.
  void feedforward(const Sub& s, Mat<Mpfi>& Z, Scratch& w) const;
  static void one_direction(const Direction& f, Mat<Mpfi>& Z, Scratch& w);
  static std::unique_ptr<Direction> direction_of(const Layer<Rational>& L);
  static void group(Sub& s, const Layer<Rational>& L, const std::vector<Rational>& c);
  // Column t of out from z (that column before the sub-layer), unit group by unit group.
  void undecided(const Sub& s, const Mat<Mpfi>& z, Mat<Mpfi>& out, Eigen::Index t) const;
  const Affine& affine(const Sub& s, const std::vector<unsigned char>& pattern) const;

  Network<Mpfi> head_, tail_;  // positions; pooling and readout
  std::vector<Sub> subs_;
  std::size_t tokenwise_from_ = 0;  // sub-layers from here on act on each token alone
  bool pool_ = false;
  mutable std::shared_mutex mutex_;
};

}  // namespace uatlab
