#include "uatlab/construct/fang.hpp"

#include "uatlab/construct/blocks.hpp"

#include <set>

#include "uatlab/limits.hpp"

#include <algorithm>
#include <cctype>

#include "uatlab/model/init.hpp"

namespace uatlab::fang {

namespace {

// b^e, saturating at LLONG_MAX (d^N overflowed, and the message quoted a wrapped number).
long long ipow(long long b, int e) {
  long long r = 1;
  while (e-- > 0)
    r = limits::saturating_mul(r, b);
  return r;
}

// ---- polynomial arithmetic ---------------------------------------------------------------------

void prune(Polynomial& p) {
  for (auto it = p.begin(); it != p.end();)
    it = it->second == 0 ? p.erase(it) : std::next(it);
}

Polynomial add(Polynomial a, const Polynomial& b, const Rational& sign) {
  for (auto& [e, c] : b)
    a[e] += sign * c;
  prune(a);
  return a;
}

int degree_of(const std::vector<int>& e) {
  int t = 0;
  for (int k : e)
    t += k;
  return t;
}

// The product's size is bounded before it is computed: terms, degree, the bits of one
// coefficient and of all of them (a power of a polynomial with long constants grows fast).
Polynomial mul(const Polynomial& a, const Polynomial& b) {
  const long long pairs = static_cast<long long>(a.size()) * static_cast<long long>(b.size());
  if (pairs > limits::kPolynomialTerms)
    throw Error("the polynomial grows beyond " + std::to_string(limits::kPolynomialTerms) + " terms");
  int da = 0, db = 0;
  long long ba = 0, bb = 0;
  for (auto& [e, c] : a)
    da = std::max(da, degree_of(e)), ba = std::max(ba, fraction_bits(c));
  for (auto& [e, c] : b)
    db = std::max(db, degree_of(e)), bb = std::max(bb, fraction_bits(c));
  if (ba + bb > limits::kCoefficientBits || pairs * (ba + bb) > limits::kPolynomialBits)
    throw Error("the polynomial's coefficients grow beyond " + std::to_string(limits::kCoefficientBits) +
                " bits each or " + std::to_string(limits::kPolynomialBits) + " bits in all");
  if (da + db > limits::kPolynomialDegree)
    throw Error("the polynomial's degree exceeds " + std::to_string(limits::kPolynomialDegree));
  Polynomial r;
  for (auto& [ea, ca] : a)
    for (auto& [eb, cb] : b) {
      std::vector<int> e(ea.size());
      for (std::size_t i = 0; i < e.size(); ++i)
        e[i] = ea[i] + eb[i];
      r[e] += ca * cb;
    }
  prune(r);
  return r;
}

class Parser {
 public:
  Parser(const std::string& t, const std::vector<std::string>& vars) : s_(t), vars_(vars) {}
  Polynomial parse() {
    Polynomial p = expr();
    skip();
    if (i_ != s_.size()) fail("unexpected \"" + s_.substr(i_, 1) + "\"");
    return p;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error("polynomial \"" + limits::excerpt(s_) + "\": " + why + " at position " +
                std::to_string(i_ + 1));
  }
  // Parentheses and unary signs recurse: their nesting is bounded (limits::kExpressionDepth).
  struct Nested {
    Parser& p;
    explicit Nested(Parser& parser) : p(parser) {
      if (++p.depth_ > limits::kExpressionDepth)
        p.fail("nested deeper than " + std::to_string(limits::kExpressionDepth) + " levels");
    }
    ~Nested() { --p.depth_; }
  };
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])))
      ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  Polynomial constant(const Rational& c) const {
    Polynomial p;
    if (c != 0) p[std::vector<int>(vars_.size(), 0)] = c;
    return p;
  }
  Polynomial expr() {
    Polynomial p = term();
    for (;;) {
      if (eat('+'))
        p = add(p, term(), 1);
      else if (eat('-'))
        p = add(p, term(), -1);
      else
        return p;
    }
  }
  Polynomial term() {
    Polynomial p = unary();
    for (;;) {
      if (eat('*'))
        p = mul(p, unary());
      else if (eat('/')) {
        Polynomial q = unary();
        const std::vector<int> zero(vars_.size(), 0);
        if (q.size() != 1 || q.begin()->first != zero) fail("division by a non-constant (or zero)");
        p = mul(p, constant(1 / q.begin()->second));
      } else
        return p;
    }
  }
  Polynomial unary() {
    if (eat('-')) {
      const Nested nested(*this);
      return add(Polynomial{}, unary(), -1);
    }
    if (eat('+')) {
      const Nested nested(*this);
      return unary();
    }
    return power();
  }
  Polynomial power() {
    Polynomial base = atom();
    if (!eat('^')) return base;
    skip();
    std::size_t start = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
      ++i_;
    if (start == i_ || i_ - start > 3) fail("expected a small non-negative integer exponent");
    int e = std::stoi(s_.substr(start, i_ - start));
    Polynomial r = constant(1);
    while (e-- > 0)
      r = mul(r, base);
    return r;
  }
  Polynomial atom() {
    skip();
    if (eat('(')) {
      const Nested nested(*this);
      Polynomial p = expr();
      if (!eat(')')) fail("expected \")\"");
      return p;
    }
    if (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.')) {
      std::size_t start = i_;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.'))
        ++i_;
      if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
        std::size_t save = i_++;
        if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
        if (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
          while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
            ++i_;
        } else {
          i_ = save;
        }
      }
      try {
        return constant(parse_rational(s_.substr(start, i_ - start)));
      } catch (const Error& e) {
        i_ = start;
        fail(e.what());
      }
    }
    if (i_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) {
      std::size_t start = i_;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_'))
        ++i_;
      const std::string name = s_.substr(start, i_ - start);
      auto it = std::find(vars_.begin(), vars_.end(), name);
      if (it == vars_.end()) {
        i_ = start;
        fail("unknown variable \"" + name + "\" (--vars lists them)");
      }
      std::vector<int> e(vars_.size(), 0);
      e[it - vars_.begin()] = 1;
      return Polynomial{{e, Rational(1)}};
    }
    fail(i_ < s_.size() ? "unexpected \"" + s_.substr(i_, 1) + "\"" : "unexpected end");
  }
  std::string s_;
  const std::vector<std::string>& vars_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Layout layout(int d, int N) {
  if (d < 1 || N < 1) throw Error("the polynomial construction needs d >= 1 variables and N >= 1 blocks");
  Layout L;
  L.d = d;
  L.N = N;
  L.one = 0;
  L.x0 = 1;
  L.pos0 = 1 + d;
  L.region.assign(N + 1, 0);
  long long at = 1 + 2LL * d;
  for (int b = 1; b <= N; ++b) {
    L.region[b] = static_cast<int>(at);
    at = limits::saturating_add(at, ipow(d, b));
    if (at > 200000)
      throw Error("residual width " + (at == LLONG_MAX ? std::string("beyond 9.2e18") : std::to_string(at)) +
                  " is too large, over 200000 (d^N grows fast: d = " + std::to_string(d) +
                  ", N = " + std::to_string(N) + ")");
  }
  L.D = static_cast<int>(at);
  return L;
}

namespace {

// Block b's product layer (linear scores): single head, S_{j,i} = Σ_p x_p [i = p] = x_i over the
// position one-hot, every super-block written; multi-head, head p reads x_p and writes super-block
// p only. Values: slot one (b = 1) or region R_{b−1}; outputs into R_b (1/n for b = 1 undoes
// Σ_j 1 = n).
void add_product_layer(blocks::Builder& net, const Layout& L, int d, int b, Variant v) {
  LayerSpec att;
  att.kind = LayerKind::attention;
  att.score = Score::linear;
  const int value = static_cast<int>(ipow(d, b - 1));
  att.heads = v == Variant::single_head ? 1 : d;
  att.head_size = v == Variant::single_head ? std::max(d, value) : value;
  net.add(att, [L, d, b, v, value](Layer<Rational>& A) {
    const int s = A.spec.head_size;
    auto set_value = [&](int head) {
      for (int r = 0; r < value; ++r)
        A.wv(head * s + r, b == 1 ? L.one : L.region[b - 1] + r) = 1;
    };
    auto set_output = [&](int head, int p) {
      for (int r = 0; r < value; ++r)
        A.wo(L.region[b] + p * value + r, head * s + r) = b == 1 ? Rational(1, d) : Rational(1);
    };
    for (int p = 0; p < d; ++p) {
      const int head = v == Variant::single_head ? 0 : p;
      A.wk(head * s + (v == Variant::single_head ? p : 0), L.x0 + p) = 1;
      A.wq(head * s + (v == Variant::single_head ? p : 0), L.pos0 + p) = 1;
      if (v == Variant::multi_head) set_value(p);
      set_output(head, p);
    }
    if (v == Variant::single_head) set_value(0);
  });
}

// Block b's gate (single head): for slot a of super-block p, h± = ReLU(±z − C_b·pos_p), z ← z − h⁺ + h⁻,
// with C_b = B^b.
void add_gate(blocks::Builder& net, const Layout& L, int d, int b, const Rational& B) {
  const int size = static_cast<int>(ipow(d, b)), value = static_cast<int>(ipow(d, b - 1));
  Rational C = 1;
  for (int k = 0; k < b; ++k)
    C *= B;
  net.add(blocks::feedforward(2 * size), [L, b, size, value, C](Layer<Rational>& F) {
    for (int a = 0; a < size; ++a) {
      const int slot = L.region[b] + a, p = a / value;
      F.w1(2 * a, slot) = 1;
      F.w1(2 * a, L.pos0 + p) = -C;
      F.w1(2 * a + 1, slot) = -1;
      F.w1(2 * a + 1, L.pos0 + p) = -C;
      F.w2(slot, 2 * a) = -1;
      F.w2(slot, 2 * a + 1) = 1;
    }
  });
}

}  // namespace

// Stages: the positions (slot one and a one-hot of the position), then for each degree b = 1 … N
// a product layer and, in the single-head variant, its gate; sum pooling and a readout that the
// polynomial's coefficients fill (with_readout).
Network<Rational> build(int d, int N, const Rational& B, Variant v) {
  if (B <= 0) throw Error("the domain bound B must be positive");
  const Layout L = layout(d, N);
  blocks::Builder net(L.D, d);
  net.positions([&](Mat<Rational>& pe) {
       for (int i = 0; i < d; ++i) {
         pe(L.one, i) = 1;
         pe(L.pos0 + i, i) = 1;
       }
     })
      .pool()
      .readout(1, [](Mat<Rational>&, Mat<Rational>&) {});
  for (int b = 1; b <= N; ++b) {
    add_product_layer(net, L, d, b, v);
    if (v == Variant::single_head) add_gate(net, L, d, b, B);
  }
  return net.build();
}

template <class S>
Mat<S> input(const Layout& L, const std::vector<S>& x) {
  if (static_cast<int>(x.size()) != L.d)
    throw Error("the point has " + std::to_string(x.size()) + " coordinates, the network expects " +
                std::to_string(L.d));
  Mat<S> X = Mat<S>::Zero(L.D, L.d);
  for (int i = 0; i < L.d; ++i)
    for (int p = 0; p < L.d; ++p)
      X(L.x0 + p, i) = x[p];
  return X;
}
template Mat<Rational> input<Rational>(const Layout&, const std::vector<Rational>&);
template Mat<double> input<double>(const Layout&, const std::vector<double>&);

Polynomial parse_polynomial(const std::string& text, const std::vector<std::string>& vars) {
  if (vars.empty()) throw Error("no variables given (--vars x1,x2,...)");
  check_variables(vars);
  if (static_cast<long long>(text.size()) > limits::kExpressionLength)
    throw Error("polynomial of " + std::to_string(text.size()) + " characters: the limit is 100000");
  return Parser(text, vars).parse();
}

void check_variables(const std::vector<std::string>& vars) {
  std::set<std::string> seen;
  for (const std::string& v : vars) {
    const bool name =
        !v.empty() && (std::isalpha(static_cast<unsigned char>(v[0])) || v[0] == '_') &&
        std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
    if (!name) throw Error("variable \"" + v + "\" is not a name (letters, digits, _)");
    if (!seen.insert(v).second) throw Error("variable \"" + v + "\" is listed twice");
  }
}

int degree(const Polynomial& p) {
  int deg = 0;
  for (auto& [e, c] : p)
    deg = std::max(deg, degree_of(e));
  return deg;
}

Rational evaluate(const Polynomial& p, const std::vector<Rational>& x) {
  Rational y = 0;
  for (auto& [e, c] : p) {
    Rational t = c;
    for (std::size_t i = 0; i < e.size(); ++i)
      for (int k = 0; k < e[i]; ++k)
        t *= x[i];
    y += t;
  }
  return y;
}

std::string to_string(const Polynomial& p, const std::vector<std::string>& vars) {
  std::string s;
  for (auto it = p.rbegin(); it != p.rend(); ++it) {
    s += (s.empty() ? "" : " + ") + it->second.str();
    for (std::size_t i = 0; i < vars.size(); ++i)
      if (it->first[i]) s += "*" + vars[i] + (it->first[i] > 1 ? "^" + std::to_string(it->first[i]) : "");
  }
  return s.empty() ? "0" : s;
}

void set_readout(Network<Rational>& net, const Layout& L, const Polynomial& p) {
  if (degree(p) > L.N)
    throw Error("the polynomial has degree " + std::to_string(degree(p)) + ", the network has " +
                std::to_string(L.N) + " blocks");
  net.readout_w.setZero();
  net.readout_b.setZero();
  for (auto& [e, c] : p) {
    std::vector<int> idx;  // sorted multi-index of the monomial
    for (int i = 0; i < L.d; ++i)
      for (int k = 0; k < e[i]; ++k)
        idx.push_back(i);
    if (idx.empty()) {
      net.readout_b(0, 0) = c;
      continue;
    }
    long flat = 0;
    for (int i : idx)
      flat = flat * L.d + i;  // i_1 outermost
    net.readout_w(0, L.region[idx.size()] + flat) = c;
  }
}

namespace {

Rational abs_q(const Rational& q) {
  return q < 0 ? Rational(-q) : q;
}
Mat<Rational> abs_m(const Mat<Rational>& m) {
  return m.unaryExpr([](const Rational& q) { return abs_q(q); });
}

// The largest degree (in x) among the slots with a nonzero weight in `w`'s row r; −1 for none.
int row_degree(const Mat<Rational>& w, Eigen::Index r, const std::vector<int>& deg) {
  int m = -1;
  for (Eigen::Index c = 0; c < w.cols(); ++c)
    if (w(r, c) != 0) m = std::max(m, deg[c]);
  return m;
}

// Bound propagation (exact rationals) for the gate precondition; see prove(). Alongside, an upper
// bound on the degree in x of every slot of every token (−1: identically 0), with the gates in
// their linear regime: x slots 1, the rest 0 at the input; a linear-score head adds
// deg q_i + deg k_j + deg v_j; a gate keeps or clears its slot. `degree` gets the output's bound.
bool gates_hold(const Network<Rational>& net, const Layout& L, const Rational& B, Rational& worst,
                int& degree) {
  const int n = L.d;
  std::vector<std::vector<int>> deg(n, std::vector<int>(L.D, 0));
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < L.d; ++p)
      deg[i][L.x0 + p] = 1;
  // Slots the layers write: pos slots must be written by none (their values stay the table's 0/1).
  std::vector<Mat<Rational>> U(n);
  for (int i = 0; i < n; ++i) {
    U[i] = net.pe.col(i).unaryExpr([](const Rational& q) { return abs_q(q); });
    for (int p = 0; p < L.d; ++p)
      U[i](L.x0 + p, 0) += B;
  }
  worst = 0;
  for (const Layer<Rational>& layer : net.layers) {
    const LayerSpec& s = layer.spec;
    if (s.kind == LayerKind::attention) {
      if (s.score != Score::linear || s.bias || s.rpe != Rpe::none || s.dp_free || s.causal || s.tied_qkv ||
          s.rope > 0)
        return false;
      const Mat<Rational> aq = abs_m(layer.wq), ak = abs_m(layer.wk), av = abs_m(layer.wv),
                          ao = abs_m(layer.wo);
      for (int r = L.pos0; r < L.pos0 + L.d; ++r)
        if (ao.row(r).sum() != 0) return false;
      std::vector<Mat<Rational>> add(n, Mat<Rational>::Zero(L.D, 1));
      const int hs = s.head_size;
      for (int h = 0; h < s.heads; ++h)
        for (int i = 0; i < n; ++i) {
          Mat<Rational> acc = Mat<Rational>::Zero(hs, 1);
          const Mat<Rational> q = aq.middleRows(h * hs, hs) * U[i];
          for (int j = 0; j < n; ++j) {
            const Rational score =
                (ak.middleRows(h * hs, hs) * U[j]).col(0).dot(q.col(0)) * abs_q(layer.score_scale);
            acc += (av.middleRows(h * hs, hs) * U[j]) * score;
          }
          add[i] += ao.middleCols(h * hs, hs) * acc;
        }
      for (int i = 0; i < n; ++i)
        U[i] += add[i];
      std::vector<std::vector<int>> next = deg;
      for (int h = 0; h < s.heads; ++h)
        for (int i = 0; i < n; ++i) {
          int head = -1;  // the head's degree at token i
          for (int j = 0; j < n; ++j) {
            int dq = -1, dk = -1, dv = -1;
            for (int r = h * hs; r < (h + 1) * hs; ++r) {
              dq = std::max(dq, row_degree(layer.wq, r, deg[i]));
              dk = std::max(dk, row_degree(layer.wk, r, deg[j]));
              dv = std::max(dv, row_degree(layer.wv, r, deg[j]));
            }
            if (dq >= 0 && dk >= 0 && dv >= 0) head = std::max(head, dq + dk + dv);
          }
          for (Eigen::Index r = 0; r < L.D; ++r)
            if (head >= 0 && ao.row(r).segment(h * hs, hs).sum() != 0)
              next[i][r] = std::max(next[i][r], head);
        }
      deg = std::move(next);
    } else if (s.kind == LayerKind::feedforward) {
      // Every hidden pair must be a gate h± = ReLU(±z_a − C·pos_q) feeding ∓1 back into slot a.
      if (s.width % 2 || s.piecewise || s.gelu) return false;
      for (Eigen::Index r = 0; r < layer.b1.size(); ++r)
        if (layer.b1(r, 0) != 0) return false;
      for (Eigen::Index r = 0; r < layer.b2.size(); ++r)
        if (layer.b2(r, 0) != 0) return false;
      std::vector<Mat<Rational>> next = U;
      for (int k = 0; k < s.width; k += 2) {
        int a = -1, q = -1;
        Rational C;
        for (Eigen::Index c = 0; c < layer.w1.cols(); ++c) {
          const Rational& u = layer.w1(k, c);
          if (u == 0) continue;
          if (u == 1 && a < 0)
            a = static_cast<int>(c);
          else if (u < 0 && c >= L.pos0 && c < L.pos0 + L.d && q < 0) {
            q = static_cast<int>(c);
            C = -u;
          } else
            return false;
        }
        if (a < 0 || q < 0) return false;
        for (Eigen::Index c = 0; c < layer.w1.cols(); ++c) {
          const Rational want = c == a ? Rational(-1) : c == q ? Rational(-C) : Rational(0);
          if (layer.w1(k + 1, c) != want) return false;
        }
        for (Eigen::Index r = 0; r < layer.w2.rows(); ++r) {
          if (layer.w2(r, k) != (r == a ? -1 : 0) || layer.w2(r, k + 1) != (r == a ? 1 : 0)) return false;
        }
        for (int i = 0; i < n; ++i) {
          const Rational pos = net.pe(q, i);  // exact: no layer writes the pos slots (checked above)
          if (pos == 0) {
            next[i](a, 0) = 0;  // −ReLU(z) + ReLU(−z) = −z: the slot is cleared for every z
            deg[i][a] = -1;
          } else if (pos == 1) {  // kept exactly when |z| ≤ C
            if (U[i](a, 0) > C) return false;
            worst = std::max(worst, Rational(U[i](a, 0) / C));
          } else
            return false;
        }
      }
      U = std::move(next);
    } else {
      return false;
    }
  }
  degree = 0;  // the readout of the pooled stream: Σ_i readout · X_i, plus a constant
  for (int i = 0; i < n; ++i)
    degree = std::max(degree, row_degree(net.readout_w, 0, deg[i]));
  return true;
}

}  // namespace

Proof prove(const Network<Rational>& net, const Layout& L, const Polynomial& p, const Rational& B, Variant v,
            std::uint64_t seed) {
  Proof pr;
  // (1) Gates. With them in their linear regime (or without gates), every sub-layer is a
  // polynomial map, so the output is a polynomial in x of total degree ≤ N on the box.
  pr.gates = gates_hold(net, L, B, pr.worst_gate_ratio, pr.degree);
  if (v == Variant::multi_head) pr.gates = pr.gates && pr.worst_gate_ratio == 0;
  if (!pr.gates) pr.degree = -1;
  pr.N = L.N;
  // (2) The product grid {−B + 2Bk/N : k = 0..N}^d.
  std::vector<int> k(L.d, 0);
  pr.grid = true;
  for (;;) {
    std::vector<Rational> x(L.d);
    for (int i = 0; i < L.d; ++i)
      x[i] = -B + 2 * B * Rational(k[i], L.N);
    Mat<Rational> y = forward(net, input(L, x));
    pr.grid = pr.grid && y(0, 0) == evaluate(p, x);
    ++pr.grid_points;
    int i = 0;
    while (i < L.d && ++k[i] > L.N)
      k[i++] = 0;
    if (i == L.d) break;
  }
  // (3) Random rational points of the box.
  Rng rng(seed);
  pr.random = true;
  for (int t = 0; t < 20; ++t) {
    std::vector<Rational> x(L.d);
    for (auto& xi : x)
      xi = B * Rational(static_cast<long>(rng.uniform() * 2001) - 1000, 1000);
    pr.random = pr.random && forward(net, input(L, x))(0, 0) == evaluate(p, x);
    ++pr.random_points;
  }
  return pr;
}

Vec<double> features(const Network<double>& net, const Layout& L, const std::vector<double>& x) {
  return forward(net, input(L, x)).col(0);
}

}  // namespace uatlab::fang

namespace uatlab::fang {

Compiled compile(const std::string& expr, const std::vector<std::string>& vars, const Rational& B,
                 const std::string& variant, int degree, std::uint64_t seed) {
  Compiled c;
  c.vars = vars;
  c.variant = variant;
  limits::check_count(degree, 0, limits::kPolynomialDegree, "degree (blocks N)");  // the CLI's and Python's
  c.p = parse_polynomial(expr, vars);
  if (degree != 0 && degree < fang::degree(c.p))
    throw Error("degree " + std::to_string(degree) + " is below the polynomial's degree " +
                std::to_string(fang::degree(c.p)) + ": N blocks compute polynomials of degree <= N");
  const int N = degree > 0 ? degree : std::max(1, fang::degree(c.p));
  const Variant v = variant_names.parse(variant);
  c.layout = layout(static_cast<int>(vars.size()), N);
  c.net = build(c.layout.d, N, B, v);
  set_readout(c.net, c.layout, c.p);
  c.proof = prove(c.net, c.layout, c.p, B, v, seed);
  return c;
}

nlohmann::json Compiled::report() const {
  return {{"polynomial", to_string(p, vars)},
          {"blocks", layout.N},
          {"D", layout.D},
          {"variant", variant},
          {"gates", proof.gates},
          {"worst_gate_ratio", proof.worst_gate_ratio.str()},
          {"degree_bound", proof.degree},
          {"grid_points", proof.grid_points},
          {"grid", proof.grid},
          {"random_points", proof.random_points},
          {"random", proof.random},
          {"exact", proof.exact()},
          {"parameters", net.parameter_count()}};
}

}  // namespace uatlab::fang
