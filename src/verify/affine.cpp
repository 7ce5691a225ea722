#include "uatlab/verify/affine.hpp"

#include <algorithm>

#include "../model/network_impl.hpp"  // relu, the library's own enclosure of it

namespace uatlab {

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
      for (const auto& [slope, intercept] : s.pieces)
        s.act.push_back({Scalar<Mpfi>::from(slope), Scalar<Mpfi>::from(intercept)});
      if (!s.direction) group(s, L, c);  // the one-direction path has its own range
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
    // The row the direction reads alone: its residual z_r = t / a_r joins F (S_0 = 1/a_r).
    const bool fold = f->a.size() == 1 && f->a[0].first == r;
    f->fold.push_back(fold);
    Rational s(fold ? Rational(1 / L.w1(0, r)) : Rational(0)), p(0);  // S_m, Σ_{j<m} w_j c_j exactly;
    std::vector<Mpfi> w, sw{Scalar<Mpfi>::from(s)}, sq{Mpfi(0)};      // Q_m = c_{m−1} S_m − that
    for (Eigen::Index u : order) {
      w.push_back(Scalar<Mpfi>::from(L.w2(r, u)));
      s += L.w2(r, u), p -= L.w2(r, u) * L.b1(u, 0);
      sw.push_back(Scalar<Mpfi>::from(s)), sq.push_back(Scalar<Mpfi>::from(Rational(-L.b1(u, 0) * s - p)));
    }
    f->w.push_back(std::move(w)), f->sw.push_back(std::move(sw)), f->sq.push_back(std::move(sq));
  }
  return f;
}

void AffineForward::group(Sub& s, const Layer<Rational>& L, const std::vector<Rational>& c) {
  const Eigen::Index q = L.w1.rows(), d = L.w2.rows(), in = L.w1.cols();
  constexpr Eigen::Index kMaxGroup = 64;  // ψ's pieces cost (units · breakpoints · rows) to form
  s.folded.assign(static_cast<std::size_t>(d), 0);
  // Units join a group only when φ is continuous: at a breakpoint of ψ, units that read s with
  // opposite signs take opposite sides of their jumps, and ψ there may lie outside both of its
  // pieces' limits, which the hull covers. One unit (folded or not) takes one side: covered.
  bool continuous = true;
  for (std::size_t i = 0; i < c.size(); ++i)
    continuous = continuous && s.pieces[i].first * c[i] + s.pieces[i].second ==
                                   s.pieces[i + 1].first * c[i] + s.pieces[i + 1].second;
  const Eigen::Index max_group = continuous ? kMaxGroup : 1;
  for (Eigen::Index u0 = 0; u0 < q;) {
    Eigen::Index f = 0;  // the first entry row u0 reads
    while (f < in && L.w1(u0, f) == 0)
      ++f;
    std::vector<Rational> a = {Rational(1)};  // row u0 + k = a_k · row u0
    Eigen::Index u1 = u0 + 1;
    for (; f < in && u1 < q && u1 - u0 < max_group && L.w1(u1, f) != 0; ++u1) {
      const Rational r = L.w1(u1, f) / L.w1(u0, f);
      bool same = true;  // every entry, those before f included: (1, 1) is no multiple of (0, 1)
      for (Eigen::Index k = 0; k < in && same; ++k)
        same = L.w1(u1, k) == r * L.w1(u0, k);
      if (!same) break;
      a.push_back(r);
    }
    Group g;
    for (Eigen::Index k = f; k < in; ++k)
      if (L.w1(u0, k) != 0) g.w.push_back({k, Scalar<Mpfi>::from(L.w1(u0, k))});
    std::vector<Eigen::Index> rows;
    for (Eigen::Index r = 0; r < d; ++r)
      for (Eigen::Index u = u0; u < u1 && (rows.empty() || rows.back() != r); ++u)
        if (L.w2(r, u) != 0) rows.push_back(r);
    const bool fold = g.w.size() == 1 && std::find(rows.begin(), rows.end(), f) != rows.end() &&
                      !s.folded[static_cast<std::size_t>(f)];
    if (u1 - u0 == 1 && !fold) {
      g.unit = u0;
      s.groups.push_back(std::move(g));
      u0 = u1;
      continue;
    }
    if (fold) s.folded[static_cast<std::size_t>(f)] = 1;
    // ψ's breakpoints: unit u0 + k changes piece where a_k s + b_k crosses a breakpoint of φ.
    std::vector<Rational> beta;
    for (Eigen::Index u = u0; u < u1; ++u)
      for (const Rational& ci : c)
        beta.push_back((ci - L.b1(u, 0)) / a[static_cast<std::size_t>(u - u0)]);
    std::sort(beta.begin(), beta.end());
    beta.erase(std::unique(beta.begin(), beta.end()), beta.end());
    for (const Rational& b : beta)
      g.breaks.push_back(Scalar<Mpfi>::from(b));
    g.rows = rows;
    g.pieces.assign(rows.size(), {});
    for (std::size_t j = 0; j <= beta.size(); ++j) {  // one point inside each piece of ψ
      const Rational x = beta.empty()       ? Rational(0)
                         : j == 0           ? Rational(beta[0] - 1)
                         : j == beta.size() ? Rational(beta.back() + 1)
                                            : Rational((beta[j - 1] + beta[j]) / 2);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const Eigen::Index r = rows[i];
        Rational slope(r == f && fold ? Rational(1 / L.w1(u0, f)) : Rational(0)), intercept(0);
        for (Eigen::Index u = u0; u < u1; ++u) {
          if (L.w2(r, u) == 0) continue;
          const Rational& ak = a[static_cast<std::size_t>(u - u0)];
          const auto& [m, kappa] = s.pieces[static_cast<std::size_t>(
              std::upper_bound(c.begin(), c.end(), Rational(ak * x + L.b1(u, 0))) - c.begin())];
          slope += L.w2(r, u) * m * ak;
          intercept += L.w2(r, u) * (m * L.b1(u, 0) + kappa);
        }
        const auto at = [&](std::size_t k) {  // ψ at breakpoint k, from this piece's side
          return k < beta.size() ? Scalar<Mpfi>::from(Rational(slope * beta[k] + intercept)) : Mpfi(0);
        };
        g.pieces[i].push_back(
            {Scalar<Mpfi>::from(slope), Scalar<Mpfi>::from(intercept), j ? at(j - 1) : Mpfi(0), at(j)});
      }
    }
    s.groups.push_back(std::move(g));
    u0 = u1;
  }
}

void AffineForward::undecided(const Sub& s, const Mat<Mpfi>& z, Mat<Mpfi>& out, Eigen::Index t) const {
  const Layer<Mpfi>& L = s.alone.layers[0];
  for (Eigen::Index r = 0; r < z.rows(); ++r)
    out(r, t) = s.folded[static_cast<std::size_t>(r)] ? L.b2(r, 0) : Mpfi(z(r, 0) + L.b2(r, 0));
  for (const Group& g : s.groups) {
    if (g.unit >= 0) {
      const Unit& unit = s.units[static_cast<std::size_t>(g.unit)];
      Mpfi pre = unit.bias;
      for (const auto& [k, w] : unit.in)
        pre += w * z(k, 0);
      const Mpfi h = piecewise(s.breaks, s.act, pre);
      for (Eigen::Index r = 0; r < L.w2.rows(); ++r)
        if (!mpfi_is_zero(L.w2(r, g.unit).backend().data())) out(r, t) += L.w2(r, g.unit) * h;
      continue;
    }
    Mpfi x(0);
    for (const auto& [k, w] : g.w)
      x += w * z(k, 0);
    for (std::size_t i = 0; i < g.rows.size(); ++i)
      out(g.rows[i], t) += Group::image(g.breaks, g.pieces[i], x);
  }
}

Mpfi AffineForward::Group::image(const std::vector<Mpfi>& c, const std::vector<Piece>& pieces,
                                 const Mpfi& x) {
  return hull_of_pieces(
      c, pieces.size(), x, [&](std::size_t i, const Mpfr& a, const Mpfr& b, Mpfr& lo, Mpfr& hi) {
        const Piece& p = pieces[i];
        const Mpfi img = p.slope * hull(a, b) + p.intercept;
        lo = lower(img), hi = upper(img);
        if (i == 0 || i == c.size()) return true;  // unbounded: no end values
        lo = std::max(lo, std::min(lower(p.left), lower(p.right)));
        hi = std::min(hi, std::max(upper(p.left), upper(p.right)));
        return lo <= hi;  // empty: [a, b] met only the breakpoints' enclosures, not the piece itself
      });
}

namespace {

// An enclosure's ends in place (lower() and upper() return new numbers).
const __mpfr_struct* lo(const Mpfi& x) {
  return &x.backend().data()->left;
}
const __mpfr_struct* hi(const Mpfi& x) {
  return &x.backend().data()->right;
}
mpfi_ptr raw(Mpfi& x) {
  return x.backend().data();
}
mpfi_srcptr raw(const Mpfi& x) {
  return x.backend().data();
}

}  // namespace

void AffineForward::one_direction(const Direction& f, Mat<Mpfi>& Z, Scratch& w) {
  const std::size_t q = f.c.size();
  // Units [0, m0) have c_j ≤ x on all of x's enclosure (ReLU is the identity there), [m1, q) have
  // c_j ≥ x (zero); those in between straddle it.
  const auto split = [&](const Mpfi& x) {
    const auto m0 = static_cast<std::size_t>(
        std::partition_point(f.c.begin(), f.c.end(),
                             [&](const Mpfi& c) { return !mpfr_less_p(lo(x), hi(c)); }) -
        f.c.begin());
    const auto m1 = static_cast<std::size_t>(
        std::partition_point(f.c.begin(), f.c.end(),
                             [&](const Mpfi& c) { return mpfr_less_p(lo(c), hi(x)); }) -
        f.c.begin());
    return std::make_pair(m0, std::max(m0, m1));
  };
  // v = row i's F(x) = S_m0·(x − c_{m0−1}) + Q_m0 (pivot 0 when m0 = 0) + the straddled units one by one.
  const auto sum = [&](std::size_t i, const Mpfi& x, std::size_t m0, std::size_t m1, Mpfi& v) {
    mpfi_set(raw(v), raw(f.sq[i][m0]));
    if (!mpfi_is_zero(raw(f.sw[i][m0]))) {
      if (m0) {
        mpfi_sub(raw(w.p), raw(x), raw(f.c[m0 - 1]));
        mpfi_mul(raw(w.r), raw(f.sw[i][m0]), raw(w.p));
      } else {
        mpfi_mul(raw(w.r), raw(f.sw[i][m0]), raw(x));
      }
      mpfi_add(raw(v), raw(v), raw(w.r));
    }
    for (std::size_t j = m0; j < m1; ++j)
      v += f.w[i][j] * relu(Mpfi(x - f.c[j]));
  };
  // On [c_{m0−1}, c_{m1}], F lies between its values at the breakpoints there, F(c_j) = Q_{j+1}
  // (exact): this bounds x on a steep ramp (slope 1/η), where the sum above loses log2(1/η) bits.
  // v is narrowed in place.
  const auto between = [&](std::size_t i, std::size_t m0, std::size_t m1, Mpfi& v) {
    if (m0 == 0 || m1 >= q) return;
    const __mpfr_struct *l = lo(f.sq[i][m0]), *h = hi(f.sq[i][m0]);
    for (std::size_t j = m0; j <= m1; ++j) {
      if (mpfr_less_p(lo(f.sq[i][j + 1]), l)) l = lo(f.sq[i][j + 1]);
      if (mpfr_greater_p(hi(f.sq[i][j + 1]), h)) h = hi(f.sq[i][j + 1]);
    }
    mpfi_ptr r = raw(v);
    if (mpfi_nan_p(r)) {  // no information: the breakpoints' values alone
      mpfi_interv_fr(r, l, h);
      return;
    }
    if (mpfr_less_p(&r->left, l)) mpfr_set(&r->left, l, MPFR_RNDD);  // one precision: exact
    if (mpfr_greater_p(&r->right, h)) mpfr_set(&r->right, h, MPFR_RNDU);
    if (!mpfr_lessequal_p(&r->left, &r->right))
      throw Error("two enclosures of one value do not meet (an internal error)");
  };
  // Row i's new value: its residual (unless folded into F) + its bias + F's enclosure in w.v.
  const auto write = [&](std::size_t i, Eigen::Index col) {
    Mpfi& z = Z(f.rows[i], col);
    if (f.fold[i]) {
      mpfi_add(raw(z), raw(f.b2[i]), raw(w.v));
    } else {
      mpfi_add(raw(w.p), raw(z), raw(f.b2[i]));
      mpfi_add(raw(z), raw(w.p), raw(w.v));
    }
  };
  for (Eigen::Index col = 0; col < Z.cols(); ++col) {
    mpfi_set_ui(raw(w.t), 0);
    for (const auto& [k, a] : f.a) {
      mpfi_mul(raw(w.p), raw(a), raw(Z(k, col)));
      mpfi_add(raw(w.t), raw(w.t), raw(w.p));
    }
    const Mpfi& t = w.t;  // read before any row is written (rows read only themselves after)
    const auto [m0, m1] = split(t);
    for (std::size_t i = 0; i < f.rows.size(); ++i) {
      if (m1 == m0) {  // affine on all of t's enclosure
        sum(i, t, m0, m1, w.v);
        between(i, m0, m1, w.v);
        write(i, col);
        continue;
      }
      // F is piecewise linear: its range on t's enclosure is the hull of its values at the two ends
      // and at the breakpoints between. Summing the straddled units' own enclosures instead would
      // add |w_j|·width for each, which grows with the slopes (a steep ramp is two units of slope
      // ±1/η) and with their number.
      Mpfr l, h;
      bool any = false;
      for (const __mpfr_struct* x : {lo(t), hi(t)}) {
        Mpfi p;
        mpfi_set_fr(raw(p), x);  // one precision: exact
        const auto [a0, a1] = split(p);
        sum(i, p, a0, a1, w.v);
        between(i, a0, a1, w.v);
        l = any ? std::min(l, lower(w.v)) : lower(w.v), h = any ? std::max(h, upper(w.v)) : upper(w.v);
        any = true;
      }
      for (std::size_t j = m0; j < m1; ++j)
        l = std::min(l, lower(f.sq[i][j + 1])), h = std::max(h, upper(f.sq[i][j + 1]));
      w.v = hull(l, h);
      between(i, m0, m1, w.v);
      write(i, col);
    }
  }
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

void AffineForward::feedforward(const Sub& s, Mat<Mpfi>& Z, Scratch& w) const {
  if (s.direction) return one_direction(*s.direction, Z, w);
  w.pattern.resize(s.units.size());
  for (Eigen::Index t = 0; t < Z.cols(); ++t) {
    bool decided = true;
    for (std::size_t u = 0; u < s.units.size() && decided; ++u) {
      mpfi_set(raw(w.t), raw(s.units[u].bias));
      for (const auto& [k, a] : s.units[u].in) {
        mpfi_mul(raw(w.p), raw(a), raw(Z(k, t)));
        mpfi_add(raw(w.t), raw(w.t), raw(w.p));
      }
      std::size_t k = 0;  // the piece holding the whole enclosure: c_{k−1} ≤ pre < c_k
      while (k < s.breaks.size() && mpfr_greaterequal_p(lo(w.t), hi(s.breaks[k])))
        ++k;
      decided = k == s.breaks.size() || mpfr_less_p(hi(w.t), lo(s.breaks[k]));
      w.pattern[u] = static_cast<unsigned char>(k);
    }
    if (!decided) {
      const Mat<Mpfi> z = Z.col(t);
      undecided(s, z, Z, t);
      continue;
    }
    // Every new row from the old column, then swapped in.
    const Affine& f = affine(s, w.pattern);
    if (w.rows.size() < f.rows.size()) w.rows.resize(f.rows.size());
    for (std::size_t i = 0; i < f.rows.size(); ++i) {
      Mpfi& v = w.rows[i];
      mpfi_set(raw(v), raw(f.rows[i].b));
      for (const Affine::Term& term : f.rows[i].terms) {
        if (term.one) {
          mpfi_add(raw(v), raw(v), raw(Z(term.k, t)));
        } else {
          mpfi_mul(raw(w.p), raw(term.a), raw(Z(term.k, t)));
          mpfi_add(raw(v), raw(v), raw(w.p));
        }
      }
    }
    for (std::size_t i = 0; i < f.rows.size(); ++i)
      Z(f.rows[i].r, t).swap(w.rows[i]);
  }
}

Mat<Mpfi> AffineForward::operator()(const Mat<Mpfi>& X, const std::vector<Eigen::Index>& keep) const {
  if (!keep.empty() && pool_) throw Error("AffineForward: output columns asked of a pooled network");
  for (Eigen::Index c : keep)
    if (c < 0 || c >= X.cols())
      throw Error("AffineForward: output column " + std::to_string(c) + " of " + std::to_string(X.cols()));
  Mat<Mpfi> Z = forward(head_, X);
  EvalOptions last;  // the last token-mixing sub-layer: only the queries from the first kept one on
  if (!keep.empty()) last.first_query = *std::min_element(keep.begin(), keep.end());
  Scratch w;
  for (std::size_t i = 0; i <= subs_.size(); ++i) {
    if (!keep.empty() && i == tokenwise_from_) Z = Mat<Mpfi>(Z(Eigen::all, keep));
    if (i == subs_.size()) break;
    if (subs_[i].ff)
      feedforward(subs_[i], Z, w);
    else
      Z = forward(subs_[i].alone, Z, i + 1 == tokenwise_from_ ? last : EvalOptions{});
  }
  return forward(tail_, Z);
}

}  // namespace uatlab
