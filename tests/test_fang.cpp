// Fang et al.'s polynomial blocks: parser, the construction's invariant, and the exactness proof
// (which must also fail when its hypotheses do).
#include <gtest/gtest.h>

#include "uatlab/construct/fang.hpp"

using namespace uatlab;
namespace fg = uatlab::fang;

TEST(Fang, ParsesPolynomialsExactly) {
  const std::vector<std::string> v = {"x", "y"};
  fg::Polynomial p = fg::parse_polynomial("(x + 1/2)^2 - 0.25 + 3*x*y/6", v);
  EXPECT_EQ(p.size(), 3u);
  EXPECT_EQ((p[{2, 0}]), Rational(1));
  EXPECT_EQ((p[{1, 0}]), Rational(1));
  EXPECT_EQ((p[{1, 1}]), Rational(1, 2));
  EXPECT_EQ(fg::degree(p), 2);
  EXPECT_EQ(fg::evaluate(p, {Rational(2), Rational(-1)}), Rational(5));
  for (const char* bad : {"x +", "z*x", "x/y", "x^", "(x", "2 $ x"})
    EXPECT_THROW(fg::parse_polynomial(bad, v), Error) << bad;
}

TEST(Fang, PooledRegionsAreTensorPowers) {
  const fg::Layout L = fg::layout(2, 3);
  EXPECT_EQ(L.D, 1 + 4 + 2 + 4 + 8);
  for (auto variant : {fg::Variant::single_head, fg::Variant::multi_head}) {
    Network<Rational> net = fg::build(2, 3, Rational(1), variant);
    net.arch.readout = 0;  // the pooled residual itself
    const std::vector<Rational> x = {Rational(2, 3), Rational(-3, 7)};
    Mat<Rational> g = forward(net, fg::input(L, x));
    // G^{(2)} = x ⊗ x, index (i1, i2) at i1*d + i2.
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        EXPECT_EQ(g(L.region[2] + 2 * i + j, 0), x[i] * x[j]);
    EXPECT_EQ(g(L.region[3] + 4 * 1 + 2 * 0 + 1, 0), x[1] * x[0] * x[1]);
  }
}

TEST(Fang, ProvesZeroErrorForEveryShape) {
  struct Case {
    const char* expr;
    std::vector<std::string> vars;
    const char* box;
  };
  for (const Case& c :
       {Case{"x1^4 - 2*x1 + 1/9", {"x1"}, "1"}, Case{"3*x1^2*x2 - x2/7 + (x1 + 1/2)^3", {"x1", "x2"}, "1"},
        Case{"x1*x2*x3 - x3^2", {"x1", "x2", "x3"}, "2"}, Case{"7", {"x1", "x2"}, "1"}}) {
    for (auto variant : {fg::Variant::single_head, fg::Variant::multi_head}) {
      const fg::Polynomial p = fg::parse_polynomial(c.expr, c.vars);
      const int N = std::max(1, fg::degree(p));
      const fg::Layout L = fg::layout(static_cast<int>(c.vars.size()), N);
      Network<Rational> net = fg::build(L.d, N, parse_rational(c.box), variant);
      fg::set_readout(net, L, p);
      const fg::Proof pr = fg::prove(net, L, p, parse_rational(c.box), variant, 3);
      EXPECT_TRUE(pr.exact()) << c.expr;
      EXPECT_EQ(pr.grid_points, static_cast<std::size_t>(std::pow(N + 1, L.d)));
    }
  }
}

TEST(Fang, TheProofFailsOutsideTheBoxAndForWrongReadouts) {
  const std::vector<std::string> v = {"x1", "x2"};
  const fg::Polynomial p = fg::parse_polynomial("x1^2*x2 + x2", v);
  const fg::Layout L = fg::layout(2, 3);
  Network<Rational> net = fg::build(2, 3, Rational(1), fg::Variant::single_head);  // gates for [-1, 1]^2
  fg::set_readout(net, L, p);
  fg::Proof wide = fg::prove(net, L, p, Rational(3), fg::Variant::single_head, 1);  // claimed on [-3, 3]^2
  EXPECT_FALSE(wide.gates);
  EXPECT_FALSE(wide.exact());
  // A network of this layout that computes a higher degree than N is refused by the degree bound,
  // whatever the grid says: here block 1's query also reads x_1.
  {
    const fg::Layout L2 = fg::layout(2, 2);
    Network<Rational> deep = fg::build(2, 2, Rational(1), fg::Variant::multi_head);
    fg::set_readout(deep, L2, fg::parse_polynomial("x1*x2", v));
    const fg::Proof ok =
        fg::prove(deep, L2, fg::parse_polynomial("x1*x2", v), Rational(1), fg::Variant::multi_head, 1);
    EXPECT_EQ(ok.degree, 2);
    EXPECT_TRUE(ok.exact());
    deep.layers[0].wq(0, L2.x0) = Rational(1, 1000);
    const fg::Proof bad =
        fg::prove(deep, L2, fg::parse_polynomial("x1*x2", v), Rational(1), fg::Variant::multi_head, 1);
    EXPECT_EQ(bad.degree, 3);
    EXPECT_FALSE(bad.degree_ok());
    EXPECT_FALSE(bad.exact());
  }
  // A readout for a different polynomial must fail the grid.
  Network<Rational> other = net;
  fg::set_readout(other, L, fg::parse_polynomial("x1^2*x2", v));
  EXPECT_FALSE(fg::prove(other, L, p, Rational(1), fg::Variant::single_head, 1).grid);
  // A degree above the blocks is refused.
  EXPECT_THROW(fg::set_readout(net, L, fg::parse_polynomial("x1^4", v)), Error);
}
