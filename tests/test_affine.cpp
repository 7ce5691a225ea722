// AffineForward (src/verify/affine.cpp) against exact rationals: its enclosures, by the one-direction
// path, the groups of proportional rows and the affine map per pattern, contain the network's exact
// output at every point of the input box.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "uatlab/io/dataset.hpp"
#include "uatlab/model/network.hpp"
#include "uatlab/verify/affine.hpp"
#include "uatlab/verify/analyse.hpp"

using namespace uatlab;

namespace {

// One residual ReLU feed-forward sub-layer of width 2 on d = 2.
Network<Rational> one_feedforward(const Mat<Rational>& w1, const Mat<Rational>& b1, const Mat<Rational>& w2) {
  Network<Rational> net(Architecture::from_json(
      nlohmann::json::parse(R"({"d":2,"layers":[{"type":"feedforward","width":2}]})")));
  net.layers[0].w1 = w1, net.layers[0].b1 = b1, net.layers[0].w2 = w2;
  return net;
}

Mat<Rational> matrix(Eigen::Index rows, Eigen::Index cols, std::initializer_list<const char*> entries) {
  Mat<Rational> m(rows, cols);
  Eigen::Index i = 0;
  for (const char* e : entries)
    m(i / cols, i % cols) = parse_rational(e), ++i;
  return m;
}

// Every entry of the exact output y inside the enclosure e.
void expect_encloses(const Mat<Mpfi>& e, const Mat<Rational>& y, const std::string& what) {
  ASSERT_EQ(e.rows(), y.rows());
  ASSERT_EQ(e.cols(), y.cols());
  for (Eigen::Index i = 0; i < y.size(); ++i) {
    const Mpfi exact = Scalar<Mpfi>::from(y(i));
    ASSERT_TRUE(lower(e(i)) <= upper(exact) && lower(exact) <= upper(e(i)))
        << what << ": entry " << i << " exact " << y(i).str() << " outside [" << lower(e(i)) << ", "
        << upper(e(i)) << "]";
  }
}

}  // namespace

// Issue 78's false certificate: rows (0, 1) and (1, 1) were grouped as proportional because the
// comparison began at the first row's first non-zero column, and the second unit lost its
// dependence on the first input.
TEST(Affine, AGroupReadsEveryEntryOfItsRows) {
  const Network<Rational> net = one_feedforward(
      matrix(2, 2, {"0", "1", "1", "1"}), matrix(2, 1, {"-1/3", "0"}), matrix(2, 2, {"0", "0", "0", "1"}));
  const Mat<Rational> x = matrix(2, 1, {"10", "1/3"});
  const Mat<Rational> y = forward(net, x);
  EXPECT_EQ(y(1, 0), parse_rational("32/3"));
  const MpfrPrecision precision(64);
  for (bool patterns : {false, true})
    expect_encloses(AffineForward(net, patterns)(matrix_cast<Mpfi>(x)), y,
                    patterns ? "affine with patterns" : "affine");
  // analyse --affine no longer certifies the wrong label (10, 2/3); the right one it certifies.
  Dataset ds;
  ds.d = 2, ds.label_dim = 2;
  ds.sequences.push_back({x, {}, matrix(2, 1, {"10", "2/3"}), {}});
  const Rational tol = parse_rational("1e-6");
  for (bool affine : {false, true}) {
    const Predictions wrong = certify_predictions(net, ds, LabelKind::values, tol, 64, {}, false, affine);
    EXPECT_EQ(wrong.certified, 0) << "affine " << affine;
    ASSERT_EQ(wrong.failures.size(), 1u);
    EXPECT_EQ(wrong.failures[0].kind, FailureKind::wrong);
    ds.sequences[0].y = y;
    EXPECT_TRUE(certify_predictions(net, ds, LabelKind::values, tol, 64, {}, false, affine).all());
    ds.sequences[0].y = matrix(2, 1, {"10", "2/3"});
  }
}

// A differential check of the fast paths: random sparse rational networks whose rows are often
// proportional (with and without entries before the first non-zero one) or all equal (one
// direction), with ReLU, a continuous
// clamp and a discontinuous step as activations, stacked two deep; points and boxes around them.
// Every enclosure (patterns on and off) must contain the exact output at the box's centre and at
// random corners.
TEST(Affine, RandomSparseNetworksAreEnclosedAtEveryPointOfTheBox) {
  std::mt19937 rng(78);
  const char* values[] = {"0", "0", "0", "1", "-1", "2", "1/3", "-5/2", "1/7"};
  const char* activations[] = {
      R"("relu")",
      R"({"type":"piecewise","breakpoints":["-1","1"],"pieces":[["0","-1"],["1","0"],["0","1"]]})",
      R"({"type":"piecewise","breakpoints":["0"],"pieces":[["0","0"],["0","1"]]})"};
  auto draw = [&] { return parse_rational(values[rng() % std::size(values)]); };
  const int d = 3, width = 6, n = 2;
  long boxes = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::string act = activations[trial % 3];
    Network<Rational> net(Architecture::from_json(
        nlohmann::json::parse(R"({"d":3,"layers":[{"type":"feedforward","width":6,"activation":)" + act +
                              R"(},{"type":"feedforward","width":6,"activation":)" + act + "}]}")));
    // Every fourth ReLU trial reads one direction (all rows of W1 equal: the one-direction path).
    const bool one_direction = trial % 12 == 0 || trial % 12 == 9;
    for (auto& L : net.layers) {
      for (Eigen::Index u = 0; u < width; ++u) {
        const unsigned kind =
            rng() % 3;  // 0: fresh row; 1: a multiple of the last; 2: that and one more entry
        for (Eigen::Index k = 0; k < d; ++k)
          L.w1(u, k) = u > 0 && one_direction ? L.w1(u - 1, k)
                       : u > 0 && kind > 0    ? Rational(L.w1(u - 1, k) * (rng() % 2 ? 2 : -1))
                                              : draw();
        if (kind == 2 && !one_direction) L.w1(u, rng() % d) += draw();
        L.b1(u, 0) = draw();
      }
      for (Eigen::Index i = 0; i < L.w2.size(); ++i)
        L.w2(i) = draw();
      for (Eigen::Index r = 0; r < d; ++r)
        L.b2(r, 0) = draw();
    }
    Mat<Rational> x(d, n);
    for (Eigen::Index i = 0; i < x.size(); ++i)
      x(i) = Rational(static_cast<long>(rng() % 41) - 20, 8);
    for (const char* radius : {"0", "1/1000", "1/4"}) {
      const Rational e = parse_rational(radius);
      const MpfrPrecision precision(64);
      Mat<Mpfi> box = matrix_cast<Mpfi>(x);
      for (Eigen::Index i = 0; i < box.size(); ++i)
        box(i) =
            hull(lower(Mpfi(box(i) - Scalar<Mpfi>::from(e))), upper(Mpfi(box(i) + Scalar<Mpfi>::from(e))));
      for (bool patterns : {false, true}) {
        Mat<Mpfi> enclosure;
        try {
          enclosure = AffineForward(net, patterns)(box);
        } catch (const Error&) {  // an unbounded enclosure: nothing claimed
          continue;
        }
        for (int point = 0; point < (e == 0 ? 1 : 5); ++point) {
          Mat<Rational> p = x;
          if (point > 0)
            for (Eigen::Index i = 0; i < p.size(); ++i)
              p(i) += rng() % 2 ? e : Rational(-e);
          expect_encloses(enclosure, forward(net, p),
                          "trial " + std::to_string(trial) + ", radius " + radius + ", point " +
                              std::to_string(point) + (patterns ? ", patterns" : ""));
        }
        ++boxes;
      }
    }
  }
  EXPECT_GT(boxes, 300);  // most boxes give an enclosure (none is claimed where none is given)
}
