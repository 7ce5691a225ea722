// Fang, Ouyang, Zhou & Cheng (2022): attention blocks generate any polynomial with zero error.
// The paper's block equations are not available; this is uatlab's own construction from
// docs/theory/fang.md, and every use of it is proven exact by computation (prove()).
//
// Layout: x ∈ R^d becomes n = d tokens in a residual stream of width
// D = 1 + 2d + Σ_{b=1..N} d^b, slots [one | x_1..x_d | pos_1..pos_d | R_1 | … | R_N]. Token i holds
// x in the x slots (the network's input) and one + pos_i (the positional table). Block b is a
// linear-score attention (scores S_{j,i} = x_i: keys read x, queries read the one-hot position)
// that writes x_i · G^{(b−1)} into every super-block of R_b, then a ReLU gate that keeps only
// super-block i at token i. Summing the tokens (pool) gives G^{(b)} = x^{⊗b}; the readout picks
// one entry per monomial. Only the readout depends on the polynomial.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "uatlab/model/network.hpp"
#include "uatlab/names.hpp"

namespace uatlab::fang {

struct Layout {
  int d = 0, N = 0, D = 0;
  int one = 0, x0 = 1, pos0 = 0;
  std::vector<int> region;  // region[b] = first slot of R_b (b = 1..N), size d^b
};
Layout layout(int d, int N);

enum class Variant { single_head, multi_head };  // gated single head (the paper's claim) | d heads, no gates
inline constexpr EnumNames<Variant::multi_head> variant_names{"variant", {"single-head", "multi-head"}};
static_assert(variant_names.complete());

// N blocks with the readout zero (set_readout fills it). B bounds |x_k| on the domain box
// [−B, B]^d; the single-head gates use C_b = B^b.
Network<Rational> build(int d, int N, const Rational& B, Variant v);

// The network's input for a point x: D×d, x in the x slots of every token.
template <class S>
Mat<S> input(const Layout& L, const std::vector<S>& x);

// Polynomials with exact coefficients: exponent vector → coefficient.
using Polynomial = std::map<std::vector<int>, Rational>;
// "3*x1^2*x2 - x2/7 + (x1 + 1/2)^3": + − * / (by constants) ^ (non-negative integer powers),
// parentheses, decimal and rational constants. Throws Error naming the position of a problem;
// nesting, degree and terms are bounded (limits.hpp).
Polynomial parse_polynomial(const std::string& text, const std::vector<std::string>& vars);
// Variables are distinct names (letters, digits, _; not starting with a digit); throws Error.
void check_variables(const std::vector<std::string>& vars);
int degree(const Polynomial& p);
Rational evaluate(const Polynomial& p, const std::vector<Rational>& x);
std::string to_string(const Polynomial& p, const std::vector<std::string>& vars);

// The canonical readout: c_0 on the bias, c_α on the entry of G^{(|α|)} with the sorted index of α.
void set_readout(Network<Rational>& net, const Layout& L, const Polynomial& p);

struct Proof {
  bool gates = false;           // every gate works in its linear regime on the box (bound propagation)
  Rational worst_gate_ratio;    // max over kept slots of (bound on |z|) / C_b
  int degree = -1;              // certified bound on the output's degree in x (−1: gates not proven)
  std::size_t grid_points = 0;  // (N+1)^d product grid inside the box
  bool grid = false;            // network == polynomial exactly at every grid point
  std::size_t random_points = 0;
  bool random = false;  // and at random rational points of the box
  int N = 0;            // the layout's blocks: the grid proves equality for degree ≤ N
  bool degree_ok() const { return gates && degree >= 0 && degree <= N; }
  bool exact() const { return degree_ok() && grid && random; }
};
// The proof of docs/theory/fang.md for any network of this layout (not only build()'s): (1) the
// gate precondition by exact bound propagation over the box, which makes the network a
// polynomial there, and a bound on its degree propagated through the same layers (it must be
// ≤ N = L.N); (2) equality with p on a product grid of (N+1)^d points, which then proves equality
// as polynomials on the whole box; (3) random rational points, reported separately.
Proof prove(const Network<Rational>& net, const Layout& L, const Polynomial& p, const Rational& B, Variant v,
            std::uint64_t seed);

// The whole compiler as one call (what `uatlab polynomial` and `uatlab.polynomial` run): parse
// the polynomial, build N blocks (N = its degree unless given; below it is refused), set the
// readout, prove. report() is the proof and the network's size as JSON.
struct Compiled {
  Polynomial p;
  std::vector<std::string> vars;
  Layout layout;
  Network<Rational> net;
  Proof proof;
  std::string variant;
  nlohmann::json report() const;
};
Compiled compile(const std::string& expr, const std::vector<std::string>& vars, const Rational& B,
                 const std::string& variant = "single-head", int degree = 0, std::uint64_t seed = 1);

// Pooled features Σ_i X_i^{(N)} (D numbers) of the readout-free network, in double.
Vec<double> features(const Network<double>& net, const Layout& L, const std::vector<double>& x);

}  // namespace uatlab::fang
