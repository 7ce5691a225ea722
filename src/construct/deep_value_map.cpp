#include "uatlab/construct/deep_value_map.hpp"

#include <algorithm>
#include <cmath>

#include "uatlab/limits.hpp"

namespace uatlab::deep {

namespace {

using Int = mp::mpz_int;
enum Register { kTau = 0, kE = 1, kC = 2, kY = 3 };

Int floor_of(const Rational& q) {
  const Int n = mp::numerator(q), d = mp::denominator(q);
  Int r = n / d;  // truncates towards zero
  if (r * d != n && n < 0) r -= 1;
  return r;
}
Int ceil_of(const Rational& q) {
  return -floor_of(-q);
}
Rational pow2(long long e) {  // 2^e, e of either sign
  Int one(1);
  return e >= 0 ? Rational(Int(one << static_cast<unsigned>(e)))
                : Rational(one, Int(one << static_cast<unsigned>(-e)));
}
int bit_length(const Int& n) {
  return n <= 0 ? 0 : static_cast<int>(mp::msb(n)) + 1;
}

// The smallest e with 6·2^-e ≤ gap: ramps of width 2^-e keep a margin of two widths from the data.
int grid_exponent(const Rational& gap) {
  // log2(6/gap) from the bit lengths (the gap may lie far outside double's range), then exact.
  const long long guess = static_cast<long long>(mp::msb(Int(mp::denominator(gap)))) -
                          static_cast<long long>(mp::msb(Int(mp::numerator(gap)))) + 3;
  limits::check_count(guess < 0 ? -guess : guess, 0, limits::kCoefficientBits,
                      "deep value map: grid exponent");
  int e = static_cast<int>(guess);
  while (6 * pow2(-e) > gap)
    ++e;
  while (6 * pow2(-(e - 1)) <= gap)
    --e;
  return e;
}

// The value map's sub-layers after `attention`: load, select, then per threshold β + 1 + ρ + 1.
Architecture value_map_architecture(const Architecture& attention, int blocks, int block_size, int beta,
                                    int rho) {
  Architecture a = attention;
  a.readout = 1;
  auto ff = [&](int width) {
    LayerSpec s;
    s.kind = LayerKind::feedforward;
    s.width = width;
    a.layers.push_back(s);
  };
  ff(2 * a.d);
  ff(2 * (blocks - 1));
  for (int k = 1; k < block_size; ++k) {
    for (int i = 0; i < beta; ++i)
      ff(2);
    ff(3);
    for (int i = 0; i <= rho; ++i)
      ff(4);
  }
  return a;
}

// Everything the plan and the build share, from the sorted points.
struct Geometry {
  int e = 0, rho = 0;
  std::vector<Int> T;                      // T_i: threshold i (between points i−1 and i) is T_i·h
  std::vector<Int> base;                   // floor(lo_i / h): a block starting at i has base base_i·h
  std::vector<int> bits_first, bits_next;  // bit lengths of T_i − base_{i−1} and T_i − T_{i−1}
};

Geometry geometry(const std::vector<Point>& pts) {
  if (pts.size() < 2) throw Error("the deep value map needs at least two context ids");
  Geometry g;
  Rational gap = pts[1].lo - pts[0].hi;
  long max_label = 0;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    if (pts[i].label < 0 || pts[i].label >= (1L << 20))
      throw Error("the deep value map encodes labels as integers in [0, 2^20); a label is " +
                  std::to_string(pts[i].label));
    max_label = std::max(max_label, pts[i].label);
    if (i + 1 < pts.size()) {
      const Rational gi = pts[i + 1].lo - pts[i].hi;
      if (gi <= 0) throw Error("deep value map: the projections of two context ids are not apart");
      gap = std::min(gap, gi);
    }
  }
  g.rho = std::max(1, bit_length(Int(max_label)));
  g.e = grid_exponent(gap);
  const Rational scale = pow2(g.e);
  const std::size_t q = pts.size();
  g.T.assign(q, Int(0));
  g.base.resize(q);
  g.bits_first.assign(q, 0);
  g.bits_next.assign(q, 0);
  for (std::size_t i = 0; i < q; ++i)
    g.base[i] = floor_of(pts[i].lo * scale);
  for (std::size_t i = 1; i < q; ++i) {
    g.T[i] = ceil_of(pts[i - 1].hi * scale) + 2;  // hi + 2h ≤ θ ≤ hi + 3h ≤ lo − 3h
    g.bits_first[i] = bit_length(Int(g.T[i] - g.base[i - 1]));
    if (i > 1) g.bits_next[i] = bit_length(Int(g.T[i] - g.T[i - 1]));
  }
  return g;
}

int beta_for(const Geometry& g, int s) {
  int beta = 1;
  for (std::size_t i = 1; i < g.T.size(); ++i)
    if (i % static_cast<std::size_t>(s) != 0)
      beta = std::max(beta, (i - 1) % static_cast<std::size_t>(s) == 0 ? g.bits_first[i] : g.bits_next[i]);
  return beta;
}

// The block counts the planner tries for q ids: a geometric grid from 2 up to q, ratio 1.08.
std::vector<long long> block_grid(long long q) {
  std::vector<long long> grid;
  for (double b = 2; b <= static_cast<double>(q) * 1.0001; b *= 1.08)
    grid.push_back(std::llround(b));
  return grid;
}

Plan plan_for(const Architecture& attention, const Geometry& g, int q, int blocks) {
  Plan p;
  p.block_size = (q + blocks - 1) / blocks;
  p.blocks = (q + p.block_size - 1) / p.block_size;
  if (p.blocks < 2) p.block_size = (q + 1) / 2, p.blocks = 2;  // the select layer needs a step
  p.beta = beta_for(g, p.block_size);
  p.rho = g.rho;
  p.grid_exponent = g.e;
  p.payload_bits = static_cast<long long>(p.block_size - 1) * (p.beta + p.rho + 1);
  p.depth = 2 + static_cast<long long>(p.block_size - 1) * (p.beta + p.rho + 2);
  Architecture base = attention;
  base.readout = 0;
  p.parameters =
      base.parameter_count() + value_map_parameters(attention.d, p.blocks, p.block_size, p.beta, p.rho);
  return p;
}

}  // namespace

long long value_map_parameters(int d, long long B, long long s, long long beta, int rho) {
  const long long D = d, layer = 2 * D + 1;  // per unit: a row of W1, a bias, a column of W2
  return (2 * D * layer + D) + (2 * (B - 1) * layer + D) +
         (s - 1) * (beta * (2 * layer + D) + (3 * layer + D) + (rho + 1) * (4 * layer + D)) + D + 1;
}

PlanCount plan_count(int d, long long q, long long beta, int rho) {
  PlanCount best;
  auto consider = [&](long long blocks) {
    const long long s = (q + blocks - 1) / blocks, B = (q + s - 1) / s;
    const long long n = value_map_parameters(d, B, s, beta, rho);
    if (best.blocks == 0 || n < best.parameters) best = {B, s, n};
  };
  for (long long b : block_grid(q))
    consider(b);
  consider(q);
  return best;
}

nlohmann::json Plan::report() const {
  return {{"blocks", blocks},
          {"block_size", block_size},
          {"beta", beta},
          {"rho", rho},
          {"grid", "2^-" + std::to_string(grid_exponent)},
          {"payload_bits", payload_bits},
          {"depth", depth},
          {"parameters", parameters}};
}

Plan plan(const Network<Rational>& attention, const std::vector<Point>& points, int blocks) {
  if (attention.arch.d < 4)
    throw Error("the deep value map needs d >= 4 (four entries of the residual stream as registers); d = " +
                std::to_string(attention.arch.d));
  const Geometry g = geometry(points);
  const int q = static_cast<int>(points.size());
  // A plan within the limits: at most 2^20 sub-layers and a payload of at most kCoefficientBits.
  auto check = [](const Plan& p) {
    limits::check_count(p.depth, 1, 1 << 20, "deep value map: sub-layers");
    limits::check_count(p.payload_bits, 0, limits::kCoefficientBits, "deep value map: payload bits");
    return p;
  };
  auto fits = [](const Plan& p) {
    return p.depth <= (1 << 20) && p.payload_bits <= limits::kCoefficientBits;
  };
  if (blocks > 0) return check(plan_for(attention.arch, g, q, std::min(blocks, q)));
  Plan best, shortest;                 // shortest: the last of the grid, the most blocks
  for (long long b : block_grid(q)) {  // few blocks are long ones: past the limits, skipped
    const Plan p = plan_for(attention.arch, g, q, static_cast<int>(b));
    shortest = p;
    if (fits(p) && (best.blocks == 0 || p.parameters < best.parameters)) best = p;
  }
  return check(best.blocks == 0 ? shortest : best);
}

Network<Rational> build(const Network<Rational>& attention, const Vec<Rational>& a,
                        const std::vector<Point>& pts, const Plan& p) {
  const Geometry g = geometry(pts);
  const int d = attention.arch.d, q = static_cast<int>(pts.size()), s = p.block_size, B = p.blocks;
  const int beta = p.beta, rho = p.rho;
  const long long P = p.payload_bits;
  Network<Rational> net(value_map_architecture(attention.arch, B, s, beta, rho));
  for (std::size_t i = 0; i < attention.layers.size(); ++i)
    net.layers[i] = attention.layers[i];
  net.embed = attention.embed, net.pe = attention.pe;
  std::size_t at = attention.layers.size();
  const Rational h = pow2(-g.e);

  // load: τ ← aᵀz, every other entry ← 0, through ReLU(z_i) − ReLU(−z_i) = z_i.
  {
    Layer<Rational>& L = net.layers[at++];
    for (int i = 0; i < d; ++i) {
      L.w1(2 * i, i) = 1, L.w1(2 * i + 1, i) = -1;
      const Rational to_tau = a(i) - (i == kTau ? 1 : 0);
      L.w2(kTau, 2 * i) = to_tau, L.w2(kTau, 2 * i + 1) = -to_tau;
      if (i != kTau) L.w2(i, 2 * i) = -1, L.w2(i, 2 * i + 1) = 1;
    }
  }
  // Each block's thresholds (offsets on the grid h) and label changes, and its payload E_j.
  std::vector<Rational> base(B), payload(B);
  std::vector<long> first_label(B);
  for (int j = 0; j < B; ++j) {
    const int f = j * s, end = std::min(q, f + s);
    base[j] = Rational(g.base[f]) * h;
    first_label[j] = pts[f].label;
    Int bits(0);  // the payload as a P-bit integer, most significant first
    for (int k = 1; k < s; ++k) {
      const int i = f + k;
      Int n(0);
      long change = 0;
      if (i < end) {
        n = g.T[i] - (k == 1 ? g.base[f] : g.T[i - 1]);
        change = pts[i].label - pts[i - 1].label;
      }
      bits = (bits << beta) | n;
      bits = (bits << (rho + 1)) | Int(change + (1L << rho) - 1);
    }
    payload[j] = Rational(bits) * pow2(-P);
  }
  // select: the staircase on τ; step j sits in the gap before block j's first point.
  {
    Layer<Rational>& L = net.layers[at++];
    L.b2(kTau, 0) = -base[0], L.b2(kE, 0) = payload[0], L.b2(kY, 0) = first_label[0];
    for (int j = 1; j < B; ++j) {
      const Point &lo = pts[j * s - 1], &hi = pts[j * s];
      const int e = grid_exponent(hi.lo - lo.hi);
      const Rational K = pow2(e), gamma = Rational(ceil_of(lo.hi * K) + 2) / K;
      const int u = 2 * (j - 1);
      L.w1(u, kTau) = K, L.b1(u, 0) = 1 - K * gamma;
      L.w1(u + 1, kTau) = K, L.b1(u + 1, 0) = -K * gamma;
      const Rational dt = -(base[j] - base[j - 1]), dE = payload[j] - payload[j - 1],
                     dy = Rational(first_label[j] - first_label[j - 1]);
      L.w2(kTau, u) = dt, L.w2(kTau, u + 1) = -dt;
      L.w2(kE, u) = dE, L.w2(kE, u + 1) = -dE;
      L.w2(kY, u) = dy, L.w2(kY, u + 1) = -dy;
    }
  }
  // extract: bit p of the payload is [E ≥ 2^-(p+1)], E holding bits p.. only; K = 2^(P+2) puts the
  // data at least 2 away from the test's kink.
  const Rational K = pow2(P + 2);
  long long bit = 0;
  auto bit_test = [&](Layer<Rational>& L, int u) {
    const Rational theta = pow2(-(bit + 1)) - pow2(-P - 1);
    L.w1(u, kE) = K, L.b1(u, 0) = 1 - K * theta;
    L.w1(u + 1, kE) = K, L.b1(u + 1, 0) = -K * theta;
    L.w2(kE, u) = -pow2(-(bit + 1)), L.w2(kE, u + 1) = pow2(-(bit + 1));
  };
  for (int k = 1; k < s; ++k) {
    for (int i = 0; i < beta; ++i, ++bit) {  // the offset's bits, subtracted from τ at their weight
      Layer<Rational>& L = net.layers[at++];
      bit_test(L, 0);
      const Rational w = h * pow2(beta - 1 - i);
      L.w2(kTau, 0) = -w, L.w2(kTau, 1) = w;
    }
    {  // C ← [τ ≥ 0]; y −= C·(2^ρ − 1), the offset of the label change's encoding
      Layer<Rational>& L = net.layers[at++];
      L.w1(0, kC) = 1;
      L.w1(1, kTau) = 1 / h, L.b1(1, 0) = 1;
      L.w1(2, kTau) = 1 / h;
      L.w2(kC, 0) = -1, L.w2(kC, 1) = 1, L.w2(kC, 2) = -1;
      const Rational off = pow2(rho) - 1;
      L.w2(kY, 1) = -off, L.w2(kY, 2) = off;
    }
    for (int i = 0; i <= rho; ++i, ++bit) {  // y += C·bit at its weight: the test shifted by 2^(P+2−p)(C − 1)
      Layer<Rational>& L = net.layers[at++];
      bit_test(L, 0);
      const Rational K2 = pow2(P + 2 - bit);
      L.w1(2, kE) = K, L.w1(2, kC) = K2, L.b1(2, 0) = L.b1(0, 0) - K2;
      L.w1(3, kE) = K, L.w1(3, kC) = K2, L.b1(3, 0) = L.b1(1, 0) - K2;
      const Rational w = pow2(rho - i);
      L.w2(kY, 2) = w, L.w2(kY, 3) = -w;
    }
  }
  net.readout_w = Mat<Rational>::Zero(1, d);
  net.readout_w(0, kY) = 1;
  net.readout_b = Mat<Rational>::Zero(1, 1);
  return net;
}

}  // namespace uatlab::deep
