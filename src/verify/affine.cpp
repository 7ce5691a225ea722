#include "uatlab/verify/affine.hpp"

#include <algorithm>

#include "../model/network_impl.hpp"  // relu, the library's own enclosure of it

namespace uatlab {

void activation_pieces(const Layer<Rational>& L, std::vector<Rational>& c,
                       std::vector<std::pair<Rational, Rational>>& pieces) {
  if (L.spec.piecewise) {
    c = L.breakpoints, pieces = L.pieces;
  } else {
    c = {Rational(0)}, pieces = {{Rational(0), Rational(0)}, {Rational(1), Rational(0)}};
  }
}

AffineForward::AffineForward(const Network<Rational>& net, bool patterns) {
  Network<Rational> bare = net;  // no sub-layers: positions, pooling, readout
  bare.arch.layers.clear(), bare.layers.clear();
  Network<Rational> head = bare;
  head.arch.pool = false, head.arch.readout = 0;
  head.readout_w = head.readout_b = Mat<Rational>();
  head_ = network_cast<Mpfi>(head);
  bare.arch.max_len = 0, bare.pe = Mat<Rational>::Zero(net.arch.d, 0);
  bare.arch.input = 0, bare.in_w = bare.in_b = Mat<Rational>();  // head_ projects the input
  tail_ = network_cast<Mpfi>(bare);
  for (std::size_t i = 0; i < net.layers.size(); ++i) {
    const LayerSpec& si = net.arch.layers[i];
    Sub s;
    Network<Rational> o = bare;
    o.arch.layers = {si}, o.layers = {net.layers[i]};
    o.arch.pool = false, o.arch.readout = 0;
    o.readout_w = o.readout_b = Mat<Rational>();
    s.alone = network_cast<Mpfi>(o);
    if (si.kind == LayerKind::feedforward && !si.pre_norm && !si.gelu) {
      const Layer<Rational>& L = net.layers[i];
      if (L.pieces.size() > 255) {  // patterns are kept as one byte per unit
        subs_.push_back(std::move(s));
        continue;
      }
      s.direction = direction_of(L);
      if (!s.direction && !patterns) {
        subs_.push_back(std::move(s));
        continue;
      }
      s.ff = &L;
      std::vector<Rational> c;
      activation_pieces(L, c, s.pieces);
      for (const Rational& x : c)
        s.breaks.push_back(Scalar<Mpfi>::from(x));
      for (Eigen::Index u = 0; u < L.w1.rows(); ++u) {
        Unit unit;
        for (Eigen::Index k = 0; k < L.w1.cols(); ++k)
          if (L.w1(u, k) != 0) unit.in.push_back({k, Scalar<Mpfi>::from(L.w1(u, k))});
        unit.bias = Scalar<Mpfi>::from(L.b1(u, 0));
        s.units.push_back(std::move(unit));
      }
      s.cache = std::make_unique<std::map<std::vector<unsigned char>, Affine>>();
    }
    subs_.push_back(std::move(s));
  }
  pool_ = net.arch.pool;
  tokenwise_from_ = net.layers.size();
  while (tokenwise_from_ > 0) {
    const LayerKind k = net.arch.layers[tokenwise_from_ - 1].kind;
    if (k != LayerKind::feedforward && k != LayerKind::layernorm) break;
    --tokenwise_from_;
  }
}

std::unique_ptr<AffineForward::Direction> AffineForward::direction_of(const Layer<Rational>& L) {
  if (L.spec.piecewise || L.w1.rows() < 2) return nullptr;  // ReLU only; one unit gains nothing
  for (Eigen::Index u = 1; u < L.w1.rows(); ++u)
    if (L.w1.row(u) != L.w1.row(0)) return nullptr;
  const Eigen::Index q = L.w1.rows();
  std::vector<Eigen::Index> order(static_cast<std::size_t>(q));
  for (Eigen::Index u = 0; u < q; ++u)
    order[static_cast<std::size_t>(u)] = u;
  std::stable_sort(order.begin(), order.end(),
                   [&](Eigen::Index x, Eigen::Index y) { return L.b1(x, 0) > L.b1(y, 0); });
  auto f = std::make_unique<Direction>();
  for (Eigen::Index k = 0; k < L.w1.cols(); ++k)
    if (L.w1(0, k) != 0) f->a.push_back({k, Scalar<Mpfi>::from(L.w1(0, k))});
  for (Eigen::Index u : order)
    f->c.push_back(Scalar<Mpfi>::from(Rational(-L.b1(u, 0))));
  for (Eigen::Index r = 0; r < L.w2.rows(); ++r) {
    if (L.w2.row(r).isZero() && L.b2(r, 0) == 0) continue;
    f->rows.push_back(r);
    f->b2.push_back(Scalar<Mpfi>::from(L.b2(r, 0)));
    std::vector<Mpfi> w, sw{Mpfi(0)}, sq{Mpfi(0)};
    Rational s(0), p(0);  // S_m and Σ_{j<m} w_j c_j exactly; Q_m = c_{m−1} S_m − that, enclosed once
    for (Eigen::Index u : order) {
      w.push_back(Scalar<Mpfi>::from(L.w2(r, u)));
      s += L.w2(r, u), p -= L.w2(r, u) * L.b1(u, 0);
      sw.push_back(Scalar<Mpfi>::from(s)), sq.push_back(Scalar<Mpfi>::from(Rational(-L.b1(u, 0) * s - p)));
    }
    f->w.push_back(std::move(w)), f->sw.push_back(std::move(sw)), f->sq.push_back(std::move(sq));
  }
  return f;
}

Mat<Mpfi> AffineForward::one_direction(const Direction& f, const Mat<Mpfi>& Z) {
  Mat<Mpfi> out = Z;
  const auto under_upper = [](const Mpfr& x, const Mpfi& c) { return x < upper(c); };
  const auto lower_under = [](const Mpfi& c, const Mpfr& x) { return lower(c) < x; };
  for (Eigen::Index col = 0; col < Z.cols(); ++col) {
    Mpfi t(0);
    for (const auto& [k, a] : f.a)
      t += a * Z(k, col);
    // Units [0, m0): c_j ≤ t on all of t's enclosure (ReLU is the identity there); [m1, q): c_j ≥ t
    // (zero); in between, evaluated one by one.
    const auto m0 = static_cast<std::size_t>(std::upper_bound(f.c.begin(), f.c.end(), lower(t), under_upper) -
                                             f.c.begin());
    const auto m1 =
        std::max(m0, static_cast<std::size_t>(
                         std::lower_bound(f.c.begin(), f.c.end(), upper(t), lower_under) - f.c.begin()));
    const Mpfi from_pivot = m0 ? Mpfi(t - f.c[m0 - 1]) : Mpfi(0);
    for (std::size_t i = 0; i < f.rows.size(); ++i) {
      Mpfi v = Z(f.rows[i], col) + f.b2[i] + Mpfi(f.sw[i][m0] * from_pivot) + f.sq[i][m0];
      for (std::size_t j = m0; j < m1; ++j)
        v += f.w[i][j] * relu(Mpfi(t - f.c[j]));
      out(f.rows[i], col) = v;
    }
  }
  return out;
}

const AffineForward::Affine& AffineForward::affine(const Sub& s,
                                                   const std::vector<unsigned char>& pattern) const {
  {
    const std::shared_lock<std::shared_mutex> lock(mutex_);
    auto it = s.cache->find(pattern);
    if (it != s.cache->end()) return it->second;
  }
  const Layer<Rational>& L = *s.ff;
  const Eigen::Index d = L.w2.rows();
  Mat<Rational> A = Mat<Rational>::Identity(d, d), b = L.b2;
  for (Eigen::Index u = 0; u < L.w1.rows(); ++u) {
    const auto& [slope, intercept] = s.pieces[pattern[static_cast<std::size_t>(u)]];
    for (Eigen::Index r = 0; r < d; ++r) {
      if (L.w2(r, u) == 0) continue;
      if (slope != 0) {
        const Rational ws = L.w2(r, u) * slope;
        for (Eigen::Index k = 0; k < L.w1.cols(); ++k)
          if (L.w1(u, k) != 0) A(r, k) += ws * L.w1(u, k);
      }
      b(r, 0) += L.w2(r, u) * (slope * L.b1(u, 0) + intercept);
    }
  }
  Affine f;
  for (Eigen::Index r = 0; r < d; ++r) {
    Affine::Row row{r, {}, Scalar<Mpfi>::from(b(r, 0))};
    for (Eigen::Index k = 0; k < d; ++k)
      if (A(r, k) != 0) row.terms.push_back({k, Scalar<Mpfi>::from(A(r, k)), A(r, k) == 1});
    const bool own = b(r, 0) == 0 && row.terms.size() == 1 && row.terms[0].k == r && row.terms[0].one;
    if (!own) f.rows.push_back(std::move(row));  // rows that leave z_r as it is are skipped
  }
  const std::unique_lock<std::shared_mutex> lock(mutex_);
  return s.cache->emplace(pattern, std::move(f)).first->second;
}

Mat<Mpfi> AffineForward::feedforward(const Sub& s, const Mat<Mpfi>& Z) const {
  if (s.direction) return one_direction(*s.direction, Z);
  Mat<Mpfi> out = Z;
  std::vector<unsigned char> pattern(s.units.size());
  for (Eigen::Index t = 0; t < Z.cols(); ++t) {
    bool decided = true;
    for (std::size_t u = 0; u < s.units.size() && decided; ++u) {
      Mpfi pre = s.units[u].bias;
      for (const auto& [k, w] : s.units[u].in)
        pre += w * Z(k, t);
      std::size_t k = 0;  // the piece holding the whole enclosure: c_{k−1} ≤ pre < c_k
      while (k < s.breaks.size() && lower(pre) >= upper(s.breaks[k]))
        ++k;
      decided = k == s.breaks.size() || upper(pre) < lower(s.breaks[k]);
      pattern[u] = static_cast<unsigned char>(k);
    }
    if (!decided) {  // the plain enclosure: the library's own forward of this sub-layer
      out.col(t) = forward(s.alone, Mat<Mpfi>(Z.col(t)));
      continue;
    }
    for (const Affine::Row& row : affine(s, pattern).rows) {
      Mpfi v = row.b;
      for (const Affine::Term& term : row.terms)
        v += term.one ? Z(term.k, t) : Mpfi(term.a * Z(term.k, t));
      out(row.r, t) = v;
    }
  }
  return out;
}

Mat<Mpfi> AffineForward::operator()(const Mat<Mpfi>& X, const std::vector<Eigen::Index>& keep) const {
  if (!keep.empty() && pool_) throw Error("AffineForward: output columns asked of a pooled network");
  for (Eigen::Index c : keep)
    if (c < 0 || c >= X.cols())
      throw Error("AffineForward: output column " + std::to_string(c) + " of " + std::to_string(X.cols()));
  Mat<Mpfi> Z = forward(head_, X);
  EvalOptions last;  // the last token-mixing sub-layer: only the queries from the first kept one on
  if (!keep.empty()) last.first_query = *std::min_element(keep.begin(), keep.end());
  for (std::size_t i = 0; i <= subs_.size(); ++i) {
    if (!keep.empty() && i == tokenwise_from_) Z = Mat<Mpfi>(Z(Eigen::all, keep));
    if (i < subs_.size())
      Z = subs_[i].ff ? feedforward(subs_[i], Z)
                      : forward(subs_[i].alone, Z, i + 1 == tokenwise_from_ ? last : EvalOptions{});
  }
  return forward(tail_, Z);
}

}  // namespace uatlab
