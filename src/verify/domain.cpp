#include "uatlab/verify/domain.hpp"

#include <mpfr.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

#include "../chunks.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/verify/affine.hpp"
#include "uatlab/verify/bounds.hpp"
#include "uatlab/verify/precision.hpp"

namespace uatlab {

using nlohmann::json;

namespace {

// Rounded up, and +inf for NaN: a bound that stays a bound.
double up(const Mpfr& x) {
  return mpfr_number_p(x.backend().data()) ? to_double_up(x) : kInf;
}

// ---- stage 1: the coordinatewise front, composed exactly -----------------------------------------

struct Piece {  // on the open interval (a, b) of the input entry t, the entry becomes α t + β
  Rational a, b, alpha, beta;
};

// Whether every hidden unit of L reads at most one entry and writes only that entry, with a
// ReLU or piecewise-linear activation: such a sub-layer acts on each entry separately.
bool coordinatewise(const Layer<Rational>& L) {
  if (L.spec.kind != LayerKind::feedforward || L.spec.pre_norm || L.spec.gelu) return false;
  for (Eigen::Index u = 0; u < L.w1.rows(); ++u) {
    Eigen::Index reads = -1;
    int count = 0;
    for (Eigen::Index c = 0; c < L.w1.cols(); ++c)
      if (L.w1(u, c) != 0) reads = c, ++count;
    if (count > 1) return false;
    for (Eigen::Index r = 0; r < L.w2.rows(); ++r)
      if (L.w2(r, u) != 0 && r != reads) return false;
  }
  return true;
}

// One entry (row `row`) through the coordinatewise layers, starting from t + offset on (0, 1).
std::vector<Piece> entry_map(const std::vector<const Layer<Rational>*>& front, int row,
                             const Rational& offset) {
  std::vector<Piece> pieces = {{Rational(0), Rational(1), Rational(1), offset}};
  for (const Layer<Rational>* L : front) {
    std::vector<Rational> c;
    std::vector<std::pair<Rational, Rational>> act;
    activation_pieces(*L, c, act);
    std::vector<Eigen::Index> units;  // the units reading this entry
    for (Eigen::Index u = 0; u < L->w1.rows(); ++u)
      if (L->w1(u, row) != 0) units.push_back(u);
    std::vector<Piece> next;
    for (const Piece& p : pieces) {
      // Split where a unit's pre-activation w·(αt + β) + b crosses a breakpoint.
      std::vector<Rational> cuts = {p.a, p.b};
      if (p.alpha != 0)
        for (Eigen::Index u : units) {
          const Rational w = L->w1(u, row), b = L->b1(u, 0);
          for (const Rational& ck : c) {
            const Rational t = (ck - b - w * p.beta) / (w * p.alpha);
            if (t > p.a && t < p.b) cuts.push_back(t);
          }
        }
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
        Piece q{cuts[k], cuts[k + 1], p.alpha, Rational(p.beta + L->b2(row, 0))};
        const Rational mid = p.alpha * (q.a + q.b) / 2 + p.beta;  // the entry inside the piece
        for (Eigen::Index u : units) {
          const Rational w = L->w1(u, row), v = L->w2(row, u), pre = w * mid + L->b1(u, 0);
          const auto& [slope, intercept] = act[std::upper_bound(c.begin(), c.end(), pre) - c.begin()];
          q.alpha += v * slope * w * p.alpha;
          q.beta += v * (slope * (w * p.beta + L->b1(u, 0)) + intercept);
        }
        if (!next.empty() && next.back().alpha == q.alpha && next.back().beta == q.beta &&
            next.back().b == q.a)
          next.back().b = q.b;  // the same affine map: merge
        else
          next.push_back(q);
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

// ---- stage 3: f against g's enclosure on one cell, branch and bound ------------------------------

struct Box {
  Mat<Rational> lo, hi;       // d×n
  std::vector<double> upper;  // per p: vol · Σ_entries bound^p (certified, rounded up)
  double sup = 0;             // max_entries bound
  double gap = 0;             // upper − a midpoint estimate (what bisecting may gain), for p[0]
  bool operator<(const Box& o) const { return gap < o.gap; }
};

Box bound_box(const Mat<Rational>& lo, const Mat<Rational>& hi, const Mat<Mpfi>& Y, const yun::Target& f,
              const std::vector<int>& ps) {
  Box B{lo, hi, {}, 0, 0};
  Mat<Mpfi> X(lo.rows(), lo.cols());
  Mat<double> centre(lo.rows(), lo.cols());
  Rational vol(1);
  for (Eigen::Index i = 0; i < lo.size(); ++i) {
    X(i) = hull(lower(Scalar<Mpfi>::from(lo(i))), upper(Scalar<Mpfi>::from(hi(i))));
    centre(i) = Scalar<Rational>::to_double(Rational((lo(i) + hi(i)) / 2));
    vol *= hi(i) - lo(i);
  }
  const Mat<Mpfi> F = f.fi(X);
  const Mat<double> fc = f.f(centre);
  const Mpfi v = Scalar<Mpfi>::from(vol);
  std::vector<Mpfi> sum(ps.size(), Mpfi(0));
  double est = 0;
  for (Eigen::Index i = 0; i < F.size(); ++i) {
    const Mpfr e = upper(Mpfi(mp::abs(Mpfi(Y(i) - F(i)))));  // ≥ |g − f| at every point of the box
    const Mpfi ei = hull(e, e);  // the bound as an exact interval; its powers round outward
    for (std::size_t k = 0; k < ps.size(); ++k)
      sum[k] += mp::pow(ei, ps[k]);
    B.sup = std::max(B.sup, up(e));
    est += std::pow(std::abs(Scalar<Mpfi>::to_double(Y(i)) - fc(i)), ps[0]);
  }
  for (std::size_t k = 0; k < ps.size(); ++k)
    B.upper.push_back(up(upper(Mpfi(sum[k] * v))));
  B.gap = B.upper[0] - est * Scalar<Rational>::to_double(vol);
  return B;
}

// Bisect the loosest box (largest gap) along its widest entry until `budget` boxes.
std::vector<Box> branch_and_bound(Box first, const Mat<Mpfi>& Y, const yun::Target& f,
                                  const std::vector<int>& ps, long budget) {
  std::priority_queue<Box> open;
  open.push(std::move(first));
  long count = 1;
  while (count < budget && std::isfinite(open.top().upper[0]) && open.top().gap > 0) {
    Box B = open.top();
    open.pop();
    Eigen::Index widest = 0;
    for (Eigen::Index i = 1; i < B.lo.size(); ++i)
      if (B.hi(i) - B.lo(i) > B.hi(widest) - B.lo(widest)) widest = i;
    const Rational mid = (B.lo(widest) + B.hi(widest)) / 2;
    Mat<Rational> left_hi = B.hi, right_lo = B.lo;
    left_hi(widest) = mid, right_lo(widest) = mid;
    open.push(bound_box(B.lo, left_hi, Y, f, ps));
    open.push(bound_box(right_lo, B.hi, Y, f, ps));
    ++count;
  }
  std::vector<Box> out;
  for (; !open.empty(); open.pop())
    out.push_back(open.top());
  return out;
}

// The leading coordinatewise sub-layers of a network.
std::vector<const Layer<Rational>*> front_of(const Network<Rational>& g) {
  std::vector<const Layer<Rational>*> front;
  while (front.size() < g.layers.size() && coordinatewise(g.layers[front.size()]))
    front.push_back(&g.layers[front.size()]);
  return front;
}

// One piecewise-affine map per input entry e = i + d·j (positions added).
std::vector<std::vector<Piece>> entry_maps(const Network<Rational>& g,
                                           const std::vector<const Layer<Rational>*>& front, int d, int n) {
  std::vector<std::vector<Piece>> maps;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < d; ++i)
      maps.push_back(entry_map(front, i, g.arch.max_len > 0 ? g.pe(i, j) : Rational(0)));
  return maps;
}

}  // namespace

DomainBound certify_domain(const Network<Rational>& g, const yun::Target& f, int d, int n,
                           const DomainOptions& o) {
  if (!f.fi)
    throw Error("target \"" + f.name +
                "\" has no interval form; the domain certificate needs one (built-in targets have it)");
  if (g.arch.input > 0 || g.arch.vocab > 0)
    throw Error(
        "the domain certificate takes networks of continuous tokens in R^d (no input projection or "
        "token ids)");
  if (g.arch.d != d)
    throw Error("the network has d = " + std::to_string(g.arch.d) + ", the domain d = " + std::to_string(d));
  limits::check_count(o.bits, 2, limits::kPrecisionBits, "the bits of the domain certificate");
  limits::check_count(o.max_cells, 1, 1LL << 30, "--certify-cells");
  limits::check_count(o.max_boxes, 1, 1LL << 30, "--certify-boxes");
  for (int p : o.ps)
    limits::check_count(p, 1, 16, "the exponent p of d_p");
  DomainBound r;
  // Stage 1: the front, and the rest of the network (positions already added by the front).
  const std::vector<const Layer<Rational>*> front = front_of(g);
  r.front_layers = static_cast<int>(front.size());
  Network<Rational> back = g;
  back.arch.layers.erase(back.arch.layers.begin(), back.arch.layers.begin() + r.front_layers);
  back.layers.erase(back.layers.begin(), back.layers.begin() + r.front_layers);
  back.arch.max_len = 0;
  back.pe = Mat<Rational>::Zero(d, 0);
  const bool exact = [&] {  // no softmax, log bias or norm: constant cells are evaluated exactly
    try {
      check_evaluable<Rational>(back.arch);
      return true;
    } catch (const Error&) {
      return false;
    }
  }();
  const std::vector<std::vector<Piece>> maps = entry_maps(g, front, d, n);  // entry e = i + d·j
  long long cells = 1;
  for (const auto& m : maps)
    cells = limits::saturating_mul(cells, static_cast<long long>(m.size()));
  std::vector<std::vector<Piece>> ref_maps;
  if (o.reference) {
    if (o.reference->arch.d != d) throw Error("the reference network has another d");
    ref_maps = entry_maps(*o.reference, front_of(*o.reference), d, n);
  }
  // Whether entry e of a cell with the piece p is quantized as the reference quantizes it.
  auto as_reference = [&](int e, const Piece& p) {
    if (!o.reference) return true;
    const auto& m = ref_maps[static_cast<std::size_t>(e)];
    const Rational t = (p.a + p.b) / 2;
    auto it =
        std::upper_bound(m.begin(), m.end(), t, [](const Rational& x, const Piece& q) { return x < q.a; });
    if (it == m.begin()) return false;
    --it;
    return t < it->b && it->alpha == 0 && it->beta == p.beta;
  };
  if (cells > o.max_cells)
    throw Error("the domain splits into " + std::to_string(cells) + " cells, over the limit of " +
                std::to_string(o.max_cells) + " (--certify-cells)");
  r.cells = static_cast<long>(cells);
  struct Cell {
    Mat<Rational> lo, hi;              // the box of inputs
    Mat<Rational> image_lo, image_hi;  // the front's image of it (equal: constant, the point)
    Mat<Mpfi> Y;                       // g's enclosure over the cell
    bool constant = true, regular = true, distinct = false, finite = false;
    Rational measure;
    std::vector<double> upper;
    double sup = 0;
    long boxes = 0;
  };
  std::vector<Cell> cs(static_cast<std::size_t>(r.cells));
  for (long cell = 0; cell < r.cells; ++cell) {
    Cell& c = cs[static_cast<std::size_t>(cell)];
    c.lo = c.hi = c.image_lo = c.image_hi = Mat<Rational>(d, n);
    Rational vol(1);
    long code = cell;
    for (int e = 0; e < d * n; ++e) {  // mixed radix, entry 0 fastest
      const auto& m = maps[static_cast<std::size_t>(e)];
      const Piece& p = m[static_cast<std::size_t>(code % static_cast<long>(m.size()))];
      code /= static_cast<long>(m.size());
      c.lo(e) = p.a, c.hi(e) = p.b;
      c.image_lo(e) = p.alpha * (p.alpha < 0 ? p.b : p.a) + p.beta;
      c.image_hi(e) = p.alpha * (p.alpha < 0 ? p.a : p.b) + p.beta;
      vol *= p.b - p.a;
      c.constant = c.constant && p.alpha == 0;
      c.regular = c.regular && p.alpha == 0 && as_reference(e, p);
    }
    c.measure = vol;
  }
  // Stage 2: g on every cell. Exactly where possible; else in MPFI, raising the precision until
  // the enclosures of the constant cells are tight (deep networks with steep ramps lose bits to
  // rounding at every layer), up to 64 times o.bits.
  auto image = [](const Cell& c) {  // an enclosure at the precision in force
    Mat<Mpfi> Q(c.image_lo.rows(), c.image_lo.cols());
    for (Eigen::Index e = 0; e < Q.size(); ++e)
      Q(e) = hull(lower(Scalar<Mpfi>::from(c.image_lo(e))), upper(Scalar<Mpfi>::from(c.image_hi(e))));
    return Q;
  };
  std::vector<long> pending;
  for (long cell = 0; cell < r.cells; ++cell)
    pending.push_back(cell);
  if (!pending.empty())
    certify_with_doubling(o.bits, 64 * o.bits, [&](unsigned bits) {
      const MpfrPrecision precision(bits);
      const AffineForward gi(back);
      std::vector<char> again(pending.size(), 0);
      auto one = [&](long k) {
        Cell& c = cs[static_cast<std::size_t>(pending[static_cast<std::size_t>(k)])];
        c.finite = true;
        try {
          if (c.constant && exact)
            c.Y =
                forward(back, c.image_lo).unaryExpr([](const Rational& x) { return Scalar<Mpfi>::from(x); });
          else
            c.Y = gi(image(c));
          for (Eigen::Index i = 0; i < c.Y.size(); ++i) {
            const Mpfr lo = lower(c.Y(i)), hi = upper(c.Y(i));
            c.finite = c.finite && mpfr_number_p(lo.backend().data()) && mpfr_number_p(hi.backend().data());
            if (c.finite && c.constant && hi - lo > 1e-12 * (1 + mp::abs(lo)))
              again[static_cast<std::size_t>(k)] = 1;
          }
        } catch (const Error&) {  // e.g. a hardmax argmax that an interval input leaves undecided
          c.finite = false;
        }
        if (!c.finite && c.constant) again[static_cast<std::size_t>(k)] = 1;
      };
      in_parallel_chunks(static_cast<long>(pending.size()), one, [&](long done) {
        report(o.progress,
               "certify the domain: the network on every cell at " + std::to_string(bits) + " bits", done,
               static_cast<long long>(pending.size()));
        return true;
      });
      std::vector<long> next;
      for (std::size_t k = 0; k < pending.size(); ++k)
        if (again[k]) next.push_back(pending[k]);
      pending = std::move(next);
      return pending.empty();  // at 64 × o.bits, what the last precision gave is kept
    });
  // Stage 3: f against g, cell by cell, within the budget of boxes.
  const MpfrPrecision precision(o.bits);
  // The budget goes to the regular cells; the others (ramps, whose enclosures are wide anyway)
  // get one box each.
  long regular_cells = 0;
  for (const Cell& c : cs)
    regular_cells += c.finite && c.regular;
  const long per_cell = std::max(1L, (o.max_boxes - (r.cells - regular_cells)) / std::max(1L, regular_cells));
  auto one = [&](long cell) {
    Cell& c = cs[static_cast<std::size_t>(cell)];
    c.distinct = c.constant && yun::distinct_columns(c.image_lo);
    if (!c.finite) {
      c.upper.assign(o.ps.size(), kInf);
      c.sup = kInf;
      c.boxes = 1;
    } else {
      const std::vector<Box> boxes =
          branch_and_bound(bound_box(c.lo, c.hi, c.Y, f, o.ps), c.Y, f, o.ps, c.regular ? per_cell : 1);
      std::vector<Mpfi> sum(o.ps.size(), Mpfi(0));
      for (const Box& b : boxes) {
        for (std::size_t k = 0; k < o.ps.size(); ++k)
          sum[k] += Mpfi(b.upper[k]);  // each rounded up already; the sum rounds outward
        c.sup = std::max(c.sup, b.sup);
      }
      for (const Mpfi& x : sum)
        c.upper.push_back(up(upper(x)));
      c.boxes = static_cast<long>(boxes.size());
    }
  };
  in_parallel_chunks(r.cells, one, [&](long done) {
    report(o.progress, "certify the domain: f against g on every cell", done, r.cells);
    return true;
  });
  // Sums of the cells' d_p^p bounds, rounded outward (an infinite cell makes its sum infinite):
  // over all cells, the regular ones, and the regular ones with distinct columns.
  struct Sum {
    std::vector<Mpfi> s;
    std::vector<bool> finite;
    void add(const std::vector<double>& u) {
      for (std::size_t k = 0; k < u.size(); ++k) {
        finite[k] = finite[k] && std::isfinite(u[k]);
        if (finite[k]) s[k] += Mpfi(u[k]);
      }
    }
    std::vector<double> roots(const std::vector<int>& ps) const {  // (Σ)^{1/p}, rounded up
      std::vector<double> out;
      for (std::size_t k = 0; k < ps.size(); ++k) {
        const Mpfr hi = upper(s[k]);
        out.push_back(finite[k] && mpfr_number_p(hi.backend().data())
                          ? up(upper(Mpfi(mp::pow(hull(hi, hi), Mpfi(1) / Mpfi(static_cast<long>(ps[k]))))))
                          : kInf);
      }
      return out;
    }
  };
  Sum all{std::vector<Mpfi>(o.ps.size(), Mpfi(0)), std::vector<bool>(o.ps.size(), true)}, flat = all,
                                                                                          distinct = all;
  Rational excluded(0);
  r.finite = true;
  for (const Cell& c : cs) {
    r.boxes += c.boxes;
    r.cells_regular += c.regular;
    r.sup = std::max(r.sup, c.sup);
    r.finite = r.finite && std::isfinite(c.sup);
    all.add(c.upper);
    if (c.regular) {
      r.sup_flat = std::max(r.sup_flat, c.sup);
      flat.add(c.upper);
    } else {
      r.sup_excluded = std::max(r.sup_excluded, c.sup);
      excluded += c.measure;
    }
    if (c.distinct && c.regular) {
      r.sup_distinct = std::max(r.sup_distinct, c.sup);
      distinct.add(c.upper);
    }
  }
  {
    const MpfrPrecision p(64);
    r.excluded_measure = excluded == 0 ? 0.0 : up(upper(Scalar<Mpfi>::from(excluded)));
  }
  r.dp = all.roots(o.ps);
  r.dp_flat = flat.roots(o.ps);
  r.dp_distinct = distinct.roots(o.ps);
  return r;
}

json DomainBound::report(const std::vector<int>& ps) const {
  auto num = [](double x) { return std::isfinite(x) ? json(x) : json("inf"); };
  json j = {{"front_layers_composed_exactly", front_layers},
            {"cells", cells},
            {"cells_regular", cells_regular},
            {"boxes", boxes},
            {"all_finite", finite},
            {"ess_sup_abs_error", num(sup)},
            {"ess_sup_abs_error_distinct_columns_regular", num(sup_distinct)},
            {"regular_cells",
             {{"ess_sup_abs_error", num(sup_flat)},
              {"excluded_measure", excluded_measure},
              {"excluded_ess_sup_abs_error", num(sup_excluded)}}}};
  for (std::size_t k = 0; k < ps.size(); ++k) {
    j["d_" + std::to_string(ps[k])] = num(dp[k]);
    j["regular_cells"]["d_" + std::to_string(ps[k])] = num(dp_flat[k]);
    j["distinct_columns_regular"]["d_" + std::to_string(ps[k])] = num(dp_distinct[k]);
  }
  return j;
}

}  // namespace uatlab
