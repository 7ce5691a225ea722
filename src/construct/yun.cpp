#include "uatlab/construct/yun.hpp"

#include "uatlab/construct/blocks.hpp"

#include "uatlab/limits.hpp"

#include <mpfi.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/io/dataset.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab::yun {

using nlohmann::json;

namespace {

// d, n and K of every construction on the grid: sizes the closed-form counts can take.
void check_sizes(int d, int n, int K) {
  limits::check_count(d, 1, 64, "Yun et al.'s construction: d");
  limits::check_count(n, 1, 64, "Yun et al.'s construction: n");
  limits::check_count(K, 2, 1 << 20, "Yun et al.'s construction: K = 1/delta");
}

// C(a, b), saturating at LLONG_MAX (r·(a−b+i)/i is exact at every step).
long long binomial(long long a, long long b) {
  if (b < 0 || b > a) return 0;
  long long r = 1;
  for (long long i = 1; i <= b; ++i) {
    const long long t = limits::saturating_mul(r, a - b + i);
    if (t == LLONG_MAX) return LLONG_MAX;
    r = t / i;
  }
  return r;
}

// K^d, saturating: the grid columns, computed before anything of that size is allocated.
long long grid_columns(int d, int K) {
  long long r = 1;
  for (int i = 0; i < d; ++i)
    r = limits::saturating_mul(r, K);
  return r;
}

std::string count_text(long long v) {
  return v == LLONG_MAX ? std::string("more than 9.2e18") : std::to_string(v);
}

void check_fills(long long Kd, int n) {
  if (Kd < n)
    throw Error("K^d = " + std::to_string(Kd) + " grid columns cannot fill n = " + std::to_string(n) +
                " distinct columns");
}

Rational power(long base, long e) {
  Rational r(1);
  for (long i = 0; i < e; ++i)
    r *= base;
  return r;
}

}  // namespace

Plan plan(int d, int n, int K, bool pe) {
  check_sizes(d, n, K);
  if (limits::saturating_mul(grid_columns(d, K), pe ? n : 1) > limits::kSize)
    throw Error("the grid has " + count_text(limits::saturating_mul(grid_columns(d, K), pe ? n : 1)) +
                " windows (K^d, times n with PE), over the limit of 2^30");
  Plan p;
  p.d = d;
  p.n = n;
  p.K = K;
  p.pe = pe;
  p.delta = Rational(1, K);
  p.u.resize(d);
  Rational su(0);  // Σ u_i
  for (int i = 0; i < d; ++i) {
    p.u(i) = power(K, i);
    su += p.u(i);
  }
  // IDs of grid columns lie in [0, R) with R = K^e: non-PE R = δ^{-d+1}; PE (column j adds j to
  // every entry) the smallest power of K above n·Σu. The selective shift multiplies by s = R/δ,
  // so a shifted column lands above every window and is never shifted twice (docs/theory/yun.md, positional
  // encoding); the non-PE constants written in s (s = δ^{-d} there) then hold for PE as well: J = s^n, c =
  // s^{n+1}, t_l = s^{2n}(s − 1)δ, t_r = s^{2n+2}δ + s^{n+1}δ.
  long e = d - 1;
  if (pe)
    while (power(K, e) < su * n)
      ++e;
  const Rational s = power(K, e + 1);
  p.shift = s;
  const long long Kd = grid_columns(d, K);
  for (int j = 0; j < (pe ? n : 1); ++j)  // PE: column j's IDs start at δ_j = (j−1)·Σu
    for (long k = 0; k < Kd; ++k)
      p.windows.push_back(su * j + Rational(k, K));
  Rational sn(1);
  for (int k = 0; k < n; ++k)
    sn *= s;
  p.J = sn;
  p.c = sn * s;
  p.t_l = sn * sn * (s - 1) * p.delta;
  p.t_r = p.c * p.c * p.delta + p.c * p.delta;
  // M bounds every entry of g_c on G_δ^+ (docs/theory/yun.md, value map): sentinel IDs ≥ −A0, each column is
  // shifted at most once by at most shift·(max − min), then the global shift multiplies by c.
  const Rational A0 = p.J * su, R0 = s * p.delta;
  Rational grow(1);
  for (int k = 0; k < n; ++k)
    grow *= 1 + p.shift;
  p.M = (p.c + 1) * grow * (R0 + A0) + 2 * A0 + p.J;
  return p;
}

namespace {

using blocks::Builder;
using blocks::unit;

// Positions 0 … n−1 in every row (with PE the entries of column j lie in [j, j+1)).
void positions_0_to_n(Mat<Rational>& pe) {
  for (Eigen::Index j = 0; j < pe.cols(); ++j)
    pe.col(j).setConstant(Rational(static_cast<long>(j)));
}

LayerSpec phi_layer(const std::vector<Rational>& breaks,
                    const std::vector<std::pair<Rational, Rational>>& pieces) {
  return blocks::piecewise_unit(breaks, pieces);
}

// Out-of-range entries ↦ −J, then [kδ, (k+1)δ) ↦ kδ, one width-1 layer each.
void add_quantization(Builder& b, const Plan& p) {
  const int d = p.d, range = p.pe ? p.n : 1;
  const Rational J = p.J;
  for (int i = 0; i < d; ++i)
    b.add(phi_layer({0, range}, {{-1, -J}, {0, 0}, {-1, -J}}), [=](Layer<Rational>& L) {
      L.w1 = unit(d, i).transpose();
      L.w2 = unit(d, i);
    });
  for (int i = 0; i < d; ++i)
    for (int k = 0; k < range * p.K; ++k)
      b.add(phi_layer({0, p.delta}, {{0, 0}, {-1, 0}, {0, 0}}), [=](Layer<Rational>& L) {
        L.w1 = unit(d, i).transpose();
        L.w2 = unit(d, i);
        L.b1(0, 0) = -Rational(k, p.K);
      });
}

// Proposition 1's F1: one FF sub-layer of width dK (PE: dnK, the entries of column j lie in
// [j, j+1)). Unit (i, k) applies φ(t) = δ/2 − t on [0, δ) (0 elsewhere) to x_i − kδ; exactly one
// unit per coordinate is on, so x_i + Σ_k φ(x_i − kδ) = kδ + δ/2, the centre of x_i's cell (never 0).
void add_centre_quantization(Builder& b, const Plan& p) {
  const int d = p.d, cells = p.K * (p.pe ? p.n : 1);
  LayerSpec s = phi_layer({0, p.delta}, {{0, 0}, {-1, p.delta / 2}, {0, 0}});
  s.width = d * cells;
  b.add(s, [=](Layer<Rational>& L) {
    L.w1.setZero(), L.w2.setZero();
    for (int i = 0; i < d; ++i)
      for (int k = 0; k < cells; ++k) {
        L.w1(i * cells + k, i) = 1;
        L.w2(i, i * cells + k) = 1;
        L.b1(i * cells + k, 0) = -Rational(k, p.K);
      }
  });
}

void add_contextual(Builder& b, const Plan& p) {
  const int d = p.d;
  const Mat<Rational> ut = p.u.transpose();
  for (const Rational& w : p.windows)  // Z + δ^{-d}[Ψ(Z; w − δ/2) − Ψ(Z; w + δ/2)]
    b.add(blocks::hardmax_shift(2), [=](Layer<Rational>& L) {
      L.wq = L.wk = L.wv = Mat<Rational>(2, d);
      L.wq << ut, ut;
      L.wk = L.wv = L.wq;
      L.bq(0, 0) = -(w - p.delta / 2);
      L.bq(1, 0) = -(w + p.delta / 2);
      L.wo = Mat<Rational>::Zero(d, 2);
      L.wo(0, 0) = p.shift;
      L.wo(0, 1) = -p.shift;
    });
  b.add(blocks::hardmax_shift(1), [=](Layer<Rational>& L) {  // global shift: Z + c·Ψ(Z; 0)
    L.wq = L.wk = L.wv = ut;
    L.wo = Mat<Rational>::Zero(d, 1);
    L.wo(0, 0) = p.c;
  });
}

// Every grid input the value map must know: non-PE one per multiset of distinct columns, PE all.
std::vector<Mat<Rational>> grid_inputs(const Plan& p) {
  const int d = p.d, n = p.n, K = p.K;
  long cols = 1;
  for (int i = 0; i < d; ++i)
    cols *= K;
  auto column = [&](long code) {
    Vec<Rational> c(d);
    for (int i = 0; i < d; ++i) {
      c(i) = Rational(code % K, K);
      code /= K;
    }
    return c;
  };
  std::vector<Mat<Rational>> out;
  std::vector<long> idx(n, 0);
  if (!p.pe) {
    if (cols < n) return out;
    for (int j = 0; j < n; ++j)
      idx[j] = j;
    for (;;) {  // combinations idx[0] < … < idx[n−1]
      Mat<Rational> L(d, n);
      for (int j = 0; j < n; ++j)
        L.col(j) = column(idx[j]);
      out.push_back(L);
      int j = n - 1;
      while (j >= 0 && idx[j] == cols - n + j)
        --j;
      if (j < 0) break;
      ++idx[j];
      for (int k = j + 1; k < n; ++k)
        idx[k] = idx[k - 1] + 1;
    }
  } else {
    for (;;) {
      Mat<Rational> L(d, n);
      for (int j = 0; j < n; ++j)
        L.col(j) = column(idx[j]);
      out.push_back(L);
      int j = n - 1;
      while (j >= 0 && idx[j] == cols - 1)
        idx[j--] = 0;
      if (j < 0) break;
      ++idx[j];
    }
  }
  return out;
}

Mat<double> to_double(const Mat<Rational>& m) {
  return matrix_cast<double>(m);
}
Mat<Rational> to_rational(const Mat<double>& m) {
  return m.unaryExpr([](double x) { return rational_of(x); });
}

}  // namespace

Modified build_modified(const Target& f, int d, int n, int K, bool pe, long max_layers) {
  using limits::saturating_add, limits::saturating_mul;
  check_sizes(d, n, K);
  Modified m;
  // The proof's layer counts in closed form (saturating), refused before anything is allocated.
  const long long Kd = grid_columns(d, K), copies = pe ? n : 1;
  long long cubes = 1;
  for (int j = 0; j < n; ++j)
    cubes = saturating_mul(cubes, Kd);
  m.counts.formula_quantization = saturating_add(saturating_mul(static_cast<long long>(d) * K, copies), d);
  m.counts.formula_attention = saturating_add(saturating_mul(copies, Kd), 1);
  m.counts.formula_value_map =
      saturating_add(1 + d, pe ? saturating_mul(n, cubes) : saturating_mul(n, binomial(Kd, n)));
  const long long total = saturating_add(
      saturating_add(m.counts.formula_quantization, m.counts.formula_attention), m.counts.formula_value_map);
  if (total > max_layers)
    throw Error("the construction for d = " + std::to_string(d) + ", n = " + std::to_string(n) +
                ", K = " + std::to_string(K) + " needs " + count_text(total) + " layers, over the limit of " +
                std::to_string(max_layers) + " (--max-layers)");
  if (!pe) check_fills(Kd, n);
  m.plan = plan(d, n, K, pe);
  const Plan& p = m.plan;

  // Stages: quantization, the contextual map (selective shifts), then the value map (below).
  Builder b(d, pe ? n : 0);
  if (pe) b.positions(positions_0_to_n);
  add_quantization(b, p);
  add_contextual(b, p);
  const std::size_t before_value = b.size();
  const Network<Rational> front = b.build();

  // The contextual values of every grid input, and what each must become.
  std::map<Rational, std::pair<Vec<Rational>, Vec<Rational>>> value_of;  // ID -> (g_c column, target column)
  for (const Mat<Rational>& L0 : grid_inputs(p)) {
    const Mat<Rational> Z = forward(front, L0);
    const Mat<double> centre = (to_double(L0).array() + 0.5 / K).matrix();
    const Mat<Rational> A = to_rational(f.f(centre));
    for (int j = 0; j < n; ++j) {
      const Rational v = (p.u.transpose() * Z.col(j))(0, 0);
      auto [it, fresh] =
          value_of.emplace(v, std::make_pair(Vec<Rational>(Z.col(j)), Vec<Rational>(A.col(j))));
      if (!fresh &&
          (to_double(it->second.second) - to_double(Mat<Rational>(A.col(j)))).cwiseAbs().maxCoeff() >
              1e-12 * (1 + to_double(Mat<Rational>(A.col(j))).cwiseAbs().maxCoeff()))
        throw Error("contextual value " + v.str() +
                    " is shared by two grid inputs with different targets: the contextual map failed" +
                    (pe ? "" : " (or the target is not permutation equivariant: use --pe)"));
    }
  }
  const Mat<Rational> ut = p.u.transpose();
  const Rational M1 = p.M + 1, half = p.delta / 2, tr = p.t_r + half;
  b.add(phi_layer({p.t_l, tr}, {{0, 1}, {0, 0}, {0, 1}}),
        [=](Layer<Rational>& L) {  // outside [t_l, t_r]: −(M+1)
          L.w1 = ut;
          L.w2 = Mat<Rational>::Constant(d, 1, -M1);
        });
  for (int i = 0; i < d; ++i)  // negative entries ↦ 0
    b.add(phi_layer({0}, {{-1, 0}, {0, 0}}),
          [=](Layer<Rational>& L) { L.w1 = unit(d, i).transpose(), L.w2 = unit(d, i); });
  for (const auto& [value, cols] : value_of) {
    const Mat<Rational> w2 = cols.second - cols.first;
    const Rational v = value;  // (a structured binding cannot be captured in C++17)
    b.add(phi_layer({-half, half}, {{0, 0}, {0, 1}, {0, 0}}), [=](Layer<Rational>& L) {
      L.w1 = ut;
      L.b1(0, 0) = -v;
      L.w2 = w2;
    });
  }
  m.net = b.build();
  m.contexts = value_of.size();
  m.counts.quantization = static_cast<int>(p.d + p.d * p.K * (pe ? n : 1));
  m.counts.attention = static_cast<int>(p.windows.size() + 1);
  m.counts.value_map = static_cast<int>(m.net.layers.size() - before_value);
  m.counts.parameters = m.net.parameter_count();
  return m;
}

Modified build_kajitsuka(const Target& f, int d, int n, int K, bool pe, kajitsuka::ValueMap value_map,
                         long max_sequences) {
  if (value_map == kajitsuka::ValueMap::deep)
    throw Error("value map deep: Proposition 1's targets are not integer labels (zhang or bounded)");
  Modified m;
  m.construction = "kajitsuka";
  check_sizes(d, n, K);
  const long long Kd = grid_columns(d, K);
  long long sequences = 1;  // PE: every grid input (K^{dn}); without: every set of n distinct columns
  if (pe)
    for (int j = 0; j < n; ++j)
      sequences = limits::saturating_mul(sequences, Kd);
  else {
    check_fills(Kd, n);
    sequences = binomial(Kd, n);
  }
  if (sequences > max_sequences)
    throw Error("Proposition 1 on this grid memorizes " + count_text(sequences) +
                " sequences, over the limit of " + std::to_string(max_sequences) + " (--max-layers)");
  m.plan = plan(d, n, K, pe);
  const Plan& p = m.plan;
  // The memorized data: cell centres (plus the positional encoding j, which makes the tokens of a
  // sequence distinct), labelled with f at the centres.
  Dataset ds;
  ds.d = d;
  ds.label_dim = d;
  for (const Mat<Rational>& L0 : grid_inputs(p)) {
    Sequence s;
    const Mat<Rational> centre = L0.unaryExpr([&](const Rational& x) { return Rational(x + p.delta / 2); });
    s.x = centre;
    if (pe)
      for (int j = 0; j < n; ++j)
        s.x.col(j).array() += Rational(j);
    s.y = to_rational(f.f(to_double(centre)));
    ds.sequences.push_back(std::move(s));
  }
  kajitsuka::MemorizeOptions mo;
  mo.contextual.search_min_bits = false;
  mo.value_map = value_map;
  const kajitsuka::Memorized mem = kajitsuka::memorize(ds, mo);
  // Stages: Proposition 1's centre quantization (F1), then Kajitsuka & Sato's memorizing network.
  Builder b(d, pe ? n : 0);
  if (pe) b.positions(positions_0_to_n);
  add_centre_quantization(b, p);
  const std::size_t quantization = b.size();
  b.append(mem.net);
  if (mem.net.arch.readout > 0)
    b.readout(mem.net.arch.readout, [&](Mat<Rational>& w, Mat<Rational>& c) {
      w = mem.net.readout_w;
      c = mem.net.readout_b;
    });
  m.net = b.build();
  m.contexts = mem.hidden;
  m.counts.quantization = static_cast<int>(quantization);
  m.counts.attention = 1;
  m.counts.value_map = static_cast<int>(mem.net.layers.size()) - 1;
  m.counts.formula_quantization = 1;
  m.counts.formula_attention = 1;
  m.counts.formula_value_map = 1;
  m.counts.parameters = m.net.parameter_count();
  m.float64_ok = mem.float64_works;
  m.bits = mem.bits_used;
  m.extra = mem.report();
  m.profile = mem.profile;
  m.value_map = m.net.layers[quantization + 1];
  return m;
}

json Modified::report() const {
  const Plan& p = plan;
  auto num = [](const Rational& q) { return Scalar<Rational>::to_double(q); };
  const bool kaj = construction == "kajitsuka";
  json r = {{"construction", kaj ? "kajitsuka (Proposition 1)" : "yun"},
            {"d", p.d},
            {"n", p.n},
            {"K", p.K},
            {"delta", p.delta.str()},
            {"layers",
             {{"quantization", counts.quantization},
              {"attention", counts.attention},
              {"value_map", counts.value_map},
              {"total", counts.quantization + counts.attention + counts.value_map}}},
            {"layers_formula",
             {{"quantization", counts.formula_quantization},
              {"attention", kaj ? 1L : counts.formula_attention},
              {"value_map", kaj ? 1L : counts.formula_value_map}}},
            {"parameters", counts.parameters},
            {"contexts", contexts}};
  r["positional_encoding"] = p.pe;
  if (kaj) {
    r["memorize"] = extra;
    return r;
  }
  r["constants"] = {{"J", num(p.J)},     {"c", num(p.c)},
                    {"t_l", num(p.t_l)}, {"t_r", num(p.t_r)},
                    {"M", num(p.M)},     {"log2_t_r_over_delta", std::log2(num(p.t_r) * p.K)}};
  return r;
}

Network<Rational> standardize(const Network<Rational>& g, const Rational& lambda, const Rational& eta) {
  if (lambda <= 0 || eta <= 0) throw Error("lambda and eta must be positive");
  Architecture arch = g.arch;
  struct Relu {  // ψ = κ + Σ_k Δ_k ReLU(±(s − t_k))
    Rational kappa;
    std::vector<std::pair<Rational, Rational>> units;  // (t_k, Δ_k)
    std::vector<int> sign;                             // +1: ReLU(s − t), −1: ReLU(t − s)
  };
  std::vector<Relu> relus(g.layers.size());
  for (std::size_t li = 0; li < g.layers.size(); ++li) {
    LayerSpec& s = arch.layers[li];
    if (s.kind == LayerKind::attention) {
      if (s.score == Score::hardmax) {  // softmax layers stay as built
        s.score = Score::softmax;
        s.scale = lambda.str();
      }
      continue;
    }
    if (s.kind != LayerKind::feedforward || !s.piecewise) continue;
    if (!s.activation.in_yun_class())
      throw Error("standardize: layer " + std::to_string(li) + " has an activation outside Φ");
    const auto& L = g.layers[li];
    const std::vector<Rational>& c = L.breakpoints;
    auto value = [&](std::size_t piece, const Rational& x) {
      return L.pieces[piece].first * x + L.pieces[piece].second;
    };
    for (std::size_t i = 1; i < c.size(); ++i)
      if (c[i] - c[i - 1] <= eta)
        throw Error("standardize: ramp width eta must be below the gap between breakpoints");
    // ψ: breakpoints t (c_i − η, c_i for each i) and its slope on each of the 2k+1 intervals.
    std::vector<Rational> t, slope;
    slope.push_back(L.pieces[0].first);
    for (std::size_t i = 0; i < c.size(); ++i) {
      const Rational a = c[i] - eta;
      t.push_back(a), t.push_back(c[i]);
      slope.push_back((value(i + 1, c[i]) - value(i, a)) / eta);  // the ramp
      slope.push_back(L.pieces[i + 1].first);
    }
    std::size_t flat = 0;  // the constant piece: every ReLU is off on it
    while (L.pieces[flat].first != 0)
      ++flat;
    Relu r;
    r.kappa = L.pieces[flat].second;
    for (std::size_t k = 0; k < t.size(); ++k) {
      const Rational delta = slope[k + 1] - slope[k];
      if (delta == 0) continue;
      r.units.push_back({t[k], delta});
      // t_k right of the constant piece (which spans [t_{2flat−1}, t_{2flat}))
      r.sign.push_back(k >= 2 * flat ? 1 : -1);
    }
    // Every hidden unit shares the activation, so each becomes the same set of ReLUs.
    s.piecewise = false;
    s.activation = {};
    s.width = s.width * static_cast<int>(std::max<std::size_t>(1, r.units.size()));
    relus[li] = r;
  }
  Network<Rational> out(arch);
  out.embed = g.embed;
  out.pe = g.pe;
  out.readout_w = g.readout_w;
  out.readout_b = g.readout_b;
  for (std::size_t li = 0; li < g.layers.size(); ++li) {
    const Layer<Rational>& a = g.layers[li];
    Layer<Rational>& b = out.layers[li];
    if (arch.layers[li].kind == LayerKind::attention) {
      b.wq = a.wq;
      b.wk = a.wk;
      b.wv = a.wv;
      b.wo = a.wo;
      b.bq = a.bq;
      b.bk = a.bk;
      b.bv = a.bv;
      b.bo = a.bo;
      b.rpe = a.rpe;
      continue;
    }
    if (!g.arch.layers[li].piecewise) {
      b = a;
      b.spec = arch.layers[li];
      continue;
    }
    const Relu& r = relus[li];
    b.w1.setZero(), b.b1.setZero(), b.w2.setZero(), b.b2 = a.b2;
    const Eigen::Index per = static_cast<Eigen::Index>(std::max<std::size_t>(1, r.units.size()));
    for (Eigen::Index j = 0; j < a.w1.rows(); ++j) {
      for (std::size_t k = 0; k < r.units.size(); ++k) {
        const int sg = r.sign[k];
        const Eigen::Index row = j * per + static_cast<Eigen::Index>(k);
        b.w1.row(row) = a.w1.row(j) * Rational(sg);
        b.b1(row, 0) = Rational(sg) * (a.b1(j, 0) - r.units[k].first);
        b.w2.col(row) = a.w2.col(j) * r.units[k].second;
      }
      b.b2 += a.w2.col(j) * r.kappa;
    }
  }
  return out;
}

Rational default_lambda(const Plan& p) {
  // Score gaps on grid inputs are ≥ δ²/2; the leak (n−1)e^{−λδ²/2} is amplified by values up to
  // t_r and by the shift multipliers; aim it at 1e-12 of δ.
  const double td = Scalar<Rational>::to_double(p.t_r), sh = Scalar<Rational>::to_double(p.shift),
               dl = 1.0 / p.K;
  const double need = std::log(p.n * td * sh * static_cast<double>(p.windows.size() + 1) / dl * 1e12);
  return Rational(static_cast<long>(std::ceil(2 * need / (dl * dl))));
}

bool Lemma6::ok() const {
  return violations[0] == 0 && violations[1] == 0 && violations[2] == 0 && violations[3] == 0 &&
         cubes_equal == cubes;
}

json Lemma6::report() const {
  return {{"inputs", inputs},
          {"exhaustive", exhaustive},
          {"with_sentinel", with_sentinel},
          {"repeated_columns", repeated},
          {"distinct_columns", distinct},
          {"violations",
           {{"1_distinct_entries", violations[0]},
            {"2_disjoint_contexts", violations[1]},
            {"3_inside_thresholds", violations[2]},
            {"4_outside_for_sentinel_or_repeated_columns", violations[3]}}},
          {"max_abs_gc", max_abs_gc},
          {"cubes_distinct_columns", cubes},
          {"cubes_equal_fbar", cubes_equal},
          {"cubes_repeated_columns", repeated_cubes},
          {"cubes_repeated_mapped_to_zero", repeated_zero},
          {"ok", ok()}};
}

unsigned standard_bits(const Plan& p, const Rational& eta) {
  const double mag = std::log2(Scalar<Rational>::to_double(p.M) + 1),
               steep = -std::log2(Scalar<Rational>::to_double(eta));
  return static_cast<unsigned>(std::ceil(mag + std::max(0.0, steep) + 64));
}

}  // namespace uatlab::yun
