// `uatlab reproduce wang-e-rates`: Wang & E's approximation rates measured, not only orderings
// (docs/wang-e.md, "Rates").
//   heads    the fewest heads (bisection over a grid) whose trained single-layer, FFN-free, DP-free
//            model reaches MSE/Var ≤ 10^-4 (the cell's target) on a memory kernel of T lags, for lin- and
//            log-type RPE on power-law (heavy) and exponential (light) memories; per seed, log H fitted
//            against log T (polynomial growth) and against T (exponential growth)
//   width    Insight 2a's read-out sin(4π x_{t−1}) with one head: MSE/Var against the FFN width m
//   H        the power-law kernel of 32 lags with lin-type heads: MSE/Var against H
//   capacity the heads the model class itself needs, without training (kernel_capacity, MPFR): the
//            spike at lag T in a window of 2T and the trained cells' kernels, with the fits' gains
//   sparse   the spike at T = 64 … 1024, the fixed-memory theorem's regime: 16 trained heads of each
//            RPE type beside the class's least error at bounded gains (FISTA), log against lin per T
// Exponents per seed by least squares on log axes, then the mean with its 95% Student-t interval.
#include "uatlab/model/eigen.hpp"  // before Eigen's modules

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "registry.hpp"
#include "uatlab/experiment/table.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/model/scalar.hpp"
#include "uatlab/train/tasks.hpp"
#include "wang_e.hpp"

namespace uatlab::experiment::wang_e {

// ---- the model class's reach without training ---------------------------------------------------

std::vector<double> capacity_rates() {
  std::vector<double> p = {0};
  for (int k = -10; k <= -5; ++k)
    p.push_back(std::ldexp(1.0, k));
  for (int k = 1; k <= 256; ++k)
    p.push_back(k / 16.0);
  for (int k = 33; k <= 120; ++k)
    p.push_back(k / 2.0);
  return p;
}

std::vector<double> capacity_kernel(const std::string& memory, int T) {
  TaskOptions o;
  o.n = memory == "spike" ? 2 * T : T;
  o.lags = {T};
  o.beta = memory == "heavier" ? kHeavierBeta : 0.5;  // heavier: 4a's long memory
  const std::string task = memory == "spike"     ? "kernel-lags"
                           : memory == "heavier" ? "kernel-heavy"
                                                 : "kernel-" + memory;
  std::vector<double> rho = memory_kernel(task, o);
  rho.erase(rho.begin());  // ρ(0) = 0: the heads read the strict past
  return rho;
}

namespace {

// A DP-free head's weights over the lags s = 1 … W: φ(p, s)/Σ φ(p, ·), φ = e^{−p·s} (lin-type) or
// s^{−p} (log-type).
template <class S>
std::vector<S> head_weights(double p, std::size_t W, bool log_type) {
  if (!(p >= 0) || !std::isfinite(p)) throw Error("the heads' rates must be finite and >= 0");
  std::vector<S> w(W);
  S sum = 0;
  for (std::size_t s = 0; s < W; ++s) {
    const S lag = static_cast<S>(static_cast<long>(s + 1));
    using std::exp, std::log;
    w[s] = exp(-S(p) * (log_type ? log(lag) : lag));
    sum += w[s];
  }
  for (S& x : w)
    x /= sum;
  return w;
}

}  // namespace

HeadKernel head_kernel(const Network<float>& net) {
  const Layer<float>& L = net.layers.at(0);
  const bool log_type = L.spec.rpe == Rpe::log;
  if (net.layers.size() != 1 || L.spec.kind != LayerKind::attention || !L.spec.dp_free ||
      !L.spec.strict_past || L.spec.head_size != 1 || L.spec.window < 1 ||
      (!log_type && L.spec.rpe != Rpe::lin) || net.arch.readout != 1)
    throw Error(
        "head_kernel reads one windowed DP-free attention layer of heads of size 1 with lin- or log-type RPE "
        "and a readout of 1");
  const int W = L.spec.window;
  HeadKernel k;
  k.kernel.assign(W, 0.0);
  for (int h = 0; h < L.spec.heads; ++h) {
    const double gain =
        double(net.readout_w.row(0).cast<double>().dot(L.wo.col(h).cast<double>())) * L.wv(h, 0);
    const std::vector<double> w = head_weights<double>(L.rpe(h, 0), static_cast<std::size_t>(W), log_type);
    for (int s = 0; s < W; ++s)
      k.kernel[s] += gain * w[s];
    k.gains.push_back(gain);
  }
  return k;
}

namespace {

using Vec = std::vector<Mpfr>;

// a · b and v −= c·q with MPFR's fused multiply-add, rounding once per term, no temporaries.
Mpfr dot(const Vec& a, const Vec& b) {
  Mpfr acc = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    mpfr_fma(acc.backend().data(), a[i].backend().data(), b[i].backend().data(), acc.backend().data(),
             MPFR_RNDN);
  return acc;
}
void subtract(Vec& v, const Mpfr& c, const Vec& q) {
  const Mpfr m = -c;
  for (std::size_t i = 0; i < v.size(); ++i)
    mpfr_fma(v[i].backend().data(), m.backend().data(), q[i].backend().data(), v[i].backend().data(),
             MPFR_RNDN);
}

}  // namespace

Capacity kernel_capacity(const std::vector<double>& rho, bool log_type, const std::vector<double>& rates,
                         int max_heads, unsigned bits, double stop) {
  const MpfrPrecision precision(bits);
  const std::size_t W = rho.size();
  Vec r(W);  // the residual ρ − ρ̂, orthogonal to the chosen heads' span
  for (std::size_t s = 0; s < W; ++s)
    r[s] = Mpfr(rho[s]);
  const Mpfr total = dot(r, r);
  if (!(total > 0)) throw Error("kernel_capacity needs a kernel that is not zero");
  // Each candidate at unit norm, φ̂ = w/‖w‖ (w: the head's weights), then kept orthogonal to the
  // chosen heads (modified Gram–Schmidt): its squared norm is the part of it the chosen heads do
  // not yet span, and `proj` its components along them (R's column in A = QR).
  std::vector<Vec> v, proj(rates.size());
  Vec scale;  // 1/‖w‖: a head's gain is its coefficient along φ̂ times this
  for (double p : rates) {
    Vec f = head_weights<Mpfr>(p, W, log_type);
    const Mpfr norm = mp::sqrt(dot(f, f));
    for (Mpfr& x : f)
      x /= norm;
    scale.push_back(1 / norm);
    v.push_back(std::move(f));
  }
  // Below this fraction of its norm a candidate is taken as spanned: its remainder is rounding.
  const Mpfr independent = mp::ldexp(Mpfr(1), -static_cast<int>(bits / 2));
  std::vector<bool> used(v.size(), false);
  std::vector<long> chosen;
  Vec along;  // the kernel's components along the chosen directions: Qᵀρ
  Capacity out;
  // log10 Σ_h |c_h| of the chosen heads' least-squares gains: R·a = Qᵀρ by back substitution (a along
  // the unit-norm φ̂), c_h = a_h · scale_h.
  auto log10_gains = [&] {
    const std::size_t H = chosen.size();
    Vec a(H);
    Mpfr l1 = 0;
    for (std::size_t k = H; k-- > 0;) {
      Mpfr x = along[k];
      for (std::size_t i = k + 1; i < H; ++i)
        x -= proj[chosen[i]][k] * a[i];
      a[k] = x / proj[chosen[k]][k];
      l1 += mp::abs(a[k] * scale[chosen[k]]);
    }
    return static_cast<double>(mp::log10(l1));
  };
  while (static_cast<long>(chosen.size()) < std::min<long>(max_heads, static_cast<long>(W))) {
    long best = -1;  // the candidate that lowers the squared error most: by (v·r)²/(v·v)
    Mpfr best_drop = 0;
    for (std::size_t j = 0; j < v.size(); ++j) {
      if (used[j]) continue;
      const Mpfr n2 = dot(v[j], v[j]);
      if (n2 < independent) continue;
      const Mpfr c = dot(v[j], r), drop = c * c / n2;
      if (best < 0 || drop > best_drop) best = static_cast<long>(j), best_drop = drop;
    }
    if (best < 0) break;
    used[best] = true;
    Vec q = v[best];
    const Mpfr norm = mp::sqrt(dot(q, q));
    for (Mpfr& x : q)
      x /= norm;
    proj[best].push_back(norm);
    chosen.push_back(best);
    along.push_back(dot(q, r));
    subtract(r, along.back(), q);
    for (std::size_t j = 0; j < v.size(); ++j)
      if (!used[j]) {
        proj[j].push_back(dot(q, v[j]));
        subtract(v[j], proj[j].back(), q);
      }
    out.errors.push_back(static_cast<double>(dot(r, r) / total));
    out.log10_gains.push_back(log10_gains());
    if (out.errors.back() <= stop) break;
  }
  for (long j : chosen)
    out.rates.push_back(rates[j]);
  return out;
}

namespace {

// The Euclidean projection of v onto the ball Σ|x| ≤ radius (sort, then soft-threshold).
Eigen::VectorXd project_l1(const Eigen::VectorXd& v, double radius) {
  if (v.lpNorm<1>() <= radius) return v;
  std::vector<double> a(v.size());
  for (Eigen::Index i = 0; i < v.size(); ++i)
    a[i] = std::abs(v[i]);
  std::sort(a.begin(), a.end(), std::greater<>());
  double sum = 0, theta = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    sum += a[k];
    const double t = (sum - radius) / static_cast<double>(k + 1);
    if (k + 1 == a.size() || a[k + 1] <= t) {
      theta = t;
      break;
    }
  }
  return v.unaryExpr(
      [theta](double x) { return x > 0 ? std::max(x - theta, 0.0) : std::min(x + theta, 0.0); });
}

}  // namespace

BoundedFit bounded_gain_fit(const std::vector<double>& rho, bool log_type, const std::vector<double>& rates,
                            double budget, int iterations) {
  if (!(budget > 0) || !std::isfinite(budget)) throw Error("bounded_gain_fit needs a finite budget > 0");
  const Eigen::Index W = static_cast<Eigen::Index>(rho.size()), J = static_cast<Eigen::Index>(rates.size());
  Eigen::MatrixXd D(W, J);  // column j: the weights of a head with rate j
  for (Eigen::Index j = 0; j < J; ++j)
    D.col(j) =
        Eigen::Map<const Eigen::VectorXd>(head_weights<double>(rates[j], rho.size(), log_type).data(), W);
  const Eigen::VectorXd y = Eigen::Map<const Eigen::VectorXd>(rho.data(), W);
  const double total = y.squaredNorm();
  if (!(total > 0)) throw Error("bounded_gain_fit needs a kernel that is not zero");
  // f(c) = ‖Dc − ρ‖² / ‖ρ‖², its gradient 2Dᵀ(Dc − ρ)/‖ρ‖², Lipschitz with 2λ_max(DDᵀ)/‖ρ‖² (DᵀD has
  // the same largest eigenvalue: the smaller of the two, W×W or J×J, is decomposed).
  const Eigen::MatrixXd gram =
      W <= J ? Eigen::MatrixXd(D * D.transpose()) : Eigen::MatrixXd(D.transpose() * D);
  const double L = 2 * Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(gram).eigenvalues().maxCoeff() / total;
  auto f = [&](const Eigen::VectorXd& c) { return (D * c - y).squaredNorm() / total; };
  auto grad = [&](const Eigen::VectorXd& c) -> Eigen::VectorXd {
    return 2 * D.transpose() * (D * c - y) / total;
  };
  // The Frank–Wolfe gap ∇f(c)·c + budget·‖∇f(c)‖_∞ bounds f(c) − min f from above (f is convex).
  auto gap = [&](const Eigen::VectorXd& c) {
    const Eigen::VectorXd g = grad(c);
    return g.dot(c) + budget * g.lpNorm<Eigen::Infinity>();
  };
  Eigen::VectorXd x = Eigen::VectorXd::Zero(J), z = x;
  double t = 1;
  for (int k = 0; k < iterations; ++k) {  // FISTA
    const Eigen::VectorXd next = project_l1(z - grad(z) / L, budget);
    const double t_next = (1 + std::sqrt(1 + 4 * t * t)) / 2;
    z = next + (t - 1) / t_next * (next - x);
    x = next, t = t_next;
    if (k % 256 == 255 && gap(x) <= 1e-4 * f(x)) break;
  }
  BoundedFit out;
  out.error = f(x);
  out.lower = std::max(0.0, out.error - gap(x));
  return out;
}

namespace {

std::vector<int> head_grid(const Context& c) {
  return c.pick({1, 2, 4}, {1, 2, 3, 4, 6, 8, 12, 16}, {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64});
}

constexpr int kHeadsT = 32;  // the memory of the error-against-H cells

// The cells' error measure: MSE/Var over the whole memory (val_nmse, the default) or over its far
// half (tail_nmse, train_kernel).
std::string measure(const json& cell) {
  return cell.value("measure", std::string("val_nmse"));
}

// The fewest heads of the grid whose model reaches the cell's target: one head first (the in-class
// pairs need no more, and training with more heads need not find that solution, so the error is not
// monotone in H), then a bisection over the rest, which assumes it is.
json run_heads(const json& cell, const Context& c) {
  const std::vector<int> grid = head_grid(c);
  json probes = json::array();
  auto reaches = [&](long i) {
    const json r = train_kernel(cell.at("tail"), cell.at("rpe"), grid[i], cell.at("T"), cell.at("seed"), c);
    const bool reached = r.at(measure(cell)).get<double>() <= cell.at("target").get<double>();
    probes.push_back({{"H", grid[i]},
                      {"val_nmse", r.at("val_nmse")},
                      {"tail_nmse", r.at("tail_nmse")},
                      {"reached", reached}});
    return reached;
  };
  long best = reaches(0) ? 0 : -1;
  for (long lo = 1, hi = best == 0 ? 1 : static_cast<long>(grid.size()); lo < hi;) {
    const long mid = (lo + hi) / 2;
    if (reaches(mid))
      best = mid, hi = mid;
    else
      lo = mid + 1;
  }
  json out = {{"reached", best >= 0}, {"probes", probes}};
  if (best >= 0) out["heads"] = grid[best];
  return out;
}

// How the heads needed H grow with the memory T: log H against log T (H ∝ T^a, polynomial) and
// against T (H ∝ e^{bT}, exponential); the better line is the one with the smaller squared residual.
enum class Shape { none, flat, polynomial, exponential };
struct Growth {
  LineFit poly, exp;
  Shape shape() const {
    if (!std::isfinite(poly.slope)) return Shape::none;
    if (poly.slope == 0 && exp.slope == 0) return Shape::flat;
    return poly.residual < exp.residual ? Shape::polynomial : Shape::exponential;
  }
};
Growth growth(const std::vector<double>& T, const std::vector<double>& heads) {
  std::vector<double> logT, logH;
  for (std::size_t i = 0; i < T.size(); ++i)
    logT.push_back(std::log(T[i])), logH.push_back(std::log(heads[i]));
  return {fit_line(logT, logH), fit_line(T, logH)};
}

// "v [lo, hi]", or "v" without an interval.
std::string with_interval(double v, double lo, double hi) {
  return std::isnan(lo) ? fixed(v, 3) : fixed(v, 3) + " [" + fixed(lo, 3) + ", " + fixed(hi, 3) + "]";
}
std::string with_interval(const Interval& e) {
  return e.runs == 0 ? "" : with_interval(e.mean, e.lo, e.hi);
}
std::string with_interval(const LineFit& l) {
  return with_interval(l.slope, l.lo, l.hi);
}

// How `exponent` treats the floor, as each fit's report says it.
const std::string kFloorRule =
    " (per seed, the points past the first within 3× of the seed's least error left out as its floor)";

// Per seed, the slope of log(value) on log(x): the mean exponent and its interval.
Interval exponent(const std::vector<json>& lines, const std::string& key, const std::string& value) {
  std::map<long long, std::pair<std::vector<double>, std::vector<double>>> by_seed;
  for (const json& l : lines) {
    auto& xy = by_seed[l.at("cell").at("seed").get<long long>()];
    xy.first.push_back(std::log(l.at("cell").at(key).get<double>()));
    xy.second.push_back(std::log(l.at("result").at(value).get<double>()));
  }
  // The floor (training's, not the class's) flattens a fit: per seed, the points after the first
  // one within a factor of 3 of the seed's smallest error are left out.
  std::vector<double> slopes;
  for (auto& [seed, xy] : by_seed) {
    std::vector<std::pair<double, double>> p;
    for (std::size_t i = 0; i < xy.first.size(); ++i)
      p.push_back({xy.first[i], xy.second[i]});
    std::sort(p.begin(), p.end());
    double least = std::numeric_limits<double>::infinity();
    for (const auto& q : p)
      least = std::min(least, q.second);
    std::vector<double> x, y;
    for (const auto& [xi, yi] : p) {
      x.push_back(xi), y.push_back(yi);
      if (yi <= least + std::log(3.0)) break;
    }
    if (const double s = slope(x, y); std::isfinite(s)) slopes.push_back(s);
  }
  return mean_interval(slopes);
}

// The heads-needed table, the growth fits and the plot of the cells of one measure.
std::string heads_section(const std::vector<json>& heads, const std::string& what, const Outputs& out) {
  auto memory = [](const json& c) { return tail_label(c.at("tail")) + ", " + label(c.at("rpe")) + "-type"; };
  std::vector<json> reached;
  for (const json& l : heads)
    if (l.at("result").at("reached").get<bool>()) reached.push_back(l);
  const Grouped g = group(
      reached, memory, [](const json& c) { return "T=" + label(c.at("T")); },
      [](const json& r) { return r.at("heads").get<double>(); });
  const std::string target =
      heads.empty() ? "?" : fixed(heads.front().at("cell").at("target").get<double>(), 3);
  std::string md = "Heads needed to reach " + what + " ≤ " + target +
                   " (mean ± sd over the seeds that reached it within the grid):\n\n" +
                   write_grouped(g, "memory, RPE", out, 3);
  // Growth with T per seed: log H against log T (polynomial) and against T (exponential).
  std::map<std::string, std::map<long long, std::pair<std::vector<double>, std::vector<double>>>> pts;
  std::map<std::string, int> missing;
  for (const json& l : heads) {
    const json& c = l.at("cell");
    if (!l.at("result").at("reached").get<bool>()) {
      ++missing[memory(c)];
      continue;
    }
    auto& xy = pts[memory(c)][c.at("seed").get<long long>()];
    xy.first.push_back(c.at("T").get<double>());
    xy.second.push_back(l.at("result").at("heads").get<double>());
  }
  std::vector<Row> rows;
  std::vector<std::string> names;  // every memory and RPE, also those that never reached the target
  for (const json& l : heads)
    if (std::find(names.begin(), names.end(), memory(l.at("cell"))) == names.end())
      names.push_back(memory(l.at("cell")));
  for (const std::string& name : names) {
    const auto& seeds = pts[name];
    std::vector<double> poly, rate;
    int poly_better = 0, exp_better = 0, flat = 0;
    for (const auto& [seed, xy] : seeds) {
      const Growth f = growth(xy.first, xy.second);
      if (!std::isfinite(f.poly.slope)) continue;
      poly.push_back(f.poly.slope), rate.push_back(f.exp.slope);
      const Shape sh = f.shape();
      (sh == Shape::flat ? flat : sh == Shape::polynomial ? poly_better : exp_better)++;
    }
    const int n = static_cast<int>(poly.size());
    std::string verdict = n == 0                     ? "never reached within the grid of heads"
                          : flat == n                ? "constant: the fewest heads at every T"
                          : poly_better > exp_better ? "polynomial fits better"
                          : exp_better > poly_better ? "exponential fits better"
                                                     : "undecided";
    if (n > 0 && flat < n)
      verdict +=
          " (" + std::to_string(std::max(poly_better, exp_better)) + " of " + std::to_string(n) + " seeds)";
    rows.push_back({name, with_interval(mean_interval(poly)), with_interval(mean_interval(rate)), verdict,
                    std::to_string(missing[name])});
  }
  md +=
      "\nGrowth of the heads needed with T (" + what +
      "), per seed over the T reached: the exponent a of H ∝ T^a and the "
      "rate b of "
      "H ∝ e^{bT} (mean and 95% interval over seeds), and which of the two lines fits log H better (smaller "
      "squared residual):\n\n" +
      markdown_table({"memory, RPE", "polynomial exponent a", "exponential rate b", "better fit",
                      "(T, seed) not reached"},
                     rows);
  LinePlot p{"Wang & E: heads needed for " + what + " <= " + target + " against the memory length T",
             "T (lags)", "heads needed"};
  p.logx = p.logy = true;
  p.series = row_series(g, 2);
  plot_png(out.path(".png"), p);
  return md;
}

// ---- the class's reach without training: the `capacity` cells ------------------------------

const std::vector<double> kCapacityTargets = {1e-1, 1e-4};
const std::vector<double> kGainBudgets = {1, 10, 100, 1000};  // Σ_h |c_h|; the kernels sum to 1
const int kFistaSteps = 100000;                               // per bounded-gain fit
// Smoke mode checks the plumbing: its cells carry a smaller cap ("fista_steps"; the fits were 95% of
// its time). The lower bounds stay sound at any cap (the fit's error less its Frank–Wolfe gap).
const int kSmokeFistaSteps = 2000;

int fista_steps(const json& cell) {
  return cell.value("fista_steps", kFistaSteps);
}

// The least error at each budget of kGainBudgets: [{budget, error, lower}, ...].
json bounded_fits(const std::vector<double>& rho, bool log_type, int iterations) {
  json bounded = json::array();
  for (double budget : kGainBudgets) {
    const BoundedFit f = bounded_gain_fit(rho, log_type, capacity_rates(), budget, iterations);
    bounded.push_back({{"budget", budget}, {"error", f.error}, {"lower", f.lower}});
  }
  return bounded;
}

// The greedy search at a precision that grows with the window, and again at twice it: the heads
// needed must not depend on the precision. The spike's fits need gains that grow with the window
// (10^321 at 64 lags); the smooth tails' precision stops growing at 128 lags (4,608 bits).
json run_capacity(const json& cell) {
  const std::vector<double> rho = capacity_kernel(cell.at("memory"), cell.at("T"));
  const bool log_type = cell.at("rpe") == "log";
  const int W = static_cast<int>(rho.size());
  const unsigned bits = 512 + 32 * static_cast<unsigned>(cell.at("memory") == "spike" ? W : std::min(W, 128));
  const double stop = kCapacityTargets.back() / 100;
  const Capacity a = kernel_capacity(rho, log_type, capacity_rates(), W, bits, stop),
                 b = kernel_capacity(rho, log_type, capacity_rates(), W, 2 * bits, stop);
  return {{"errors", a.errors},    {"log10_gains", a.log10_gains},
          {"rates", a.rates},      {"bits", bits},
          {"errors_2x", b.errors}, {"bounded", bounded_fits(rho, log_type, fista_steps(cell))}};
}

// The fewest heads whose error is at most `target` (0: never within the search).
int heads_needed(const std::vector<double>& errors, double target) {
  for (std::size_t h = 0; h < errors.size(); ++h)
    if (errors[h] <= target) return static_cast<int>(h + 1);
  return 0;
}

// 10^x as text, also past double's range: "3.5e+26", "1e+400".
std::string gain_text(double log10) {
  if (log10 < 300) return fixed(std::pow(10.0, log10), 2);
  const double e = std::floor(log10);
  return fixed(std::pow(10.0, log10 - e), 2) + "e+" + fixed(e, 6);
}

// The bounded-gain fits of the lines that have them, one row per (memory, T), as a Markdown table;
// their CSV rows (memory, T, budget, error, lower bound) are appended to `csv`.
std::string bounded_markdown(const std::vector<std::pair<std::string, const json*>>& lines,
                             std::vector<Row>& csv) {
  std::vector<Row> rows;
  int cap = 0;
  for (const auto& [name, line] : lines) {
    if (!line->at("result").contains("bounded")) continue;
    cap = std::max(cap, fista_steps(line->at("cell")));
    const std::string T = label(line->at("cell").at("T"));
    Row row = {name, T};
    for (const json& b : line->at("result").at("bounded")) {
      const double error = b.at("error"), lower = b.at("lower");
      row.push_back(fixed(error, 3) + " (≥ " + fixed(lower, 3) + ")");
      csv.push_back({name, T, label(b.at("budget")), fixed(error, 9), fixed(lower, 9)});
    }
    rows.push_back(row);
  }
  if (rows.empty()) return "";
  Row header = {"memory, RPE", "T"};
  for (double b : kGainBudgets)
    header.push_back("Σ|c_h| ≤ " + fixed(b, 6));
  return "\nThe least error of any number of heads (rates on the grid) whose gains keep Σ_h |c_h| within a "
         "budget: the fit found (FISTA, double, at most " +
         std::to_string(cap) +
         " steps) and, in brackets, a lower bound on the least error (the fit's error less its Frank–Wolfe "
         "gap):\n\n" +
         markdown_table(header, rows);
}

std::string capacity_section(const std::vector<json>& lines, const Outputs& out) {
  auto memory = [](const json& c) {
    const std::string m = c.at("memory");
    return (m == "spike" ? std::string("spike at lag T, window 2T") : tail_label(m) + ", window T") + ", " +
           label(c.at("rpe")) + "-type";
  };
  std::vector<std::string> names, Ts;
  std::map<std::pair<std::string, std::string>, const json*> line_of;  // (memory, "T=..") → its line
  for (const json& l : lines) {
    const json& c = l.at("cell");
    if (std::find(names.begin(), names.end(), memory(c)) == names.end()) names.push_back(memory(c));
    const std::string T = "T=" + label(c.at("T"));
    if (std::find(Ts.begin(), Ts.end(), T) == Ts.end()) Ts.push_back(T);
    line_of[{memory(c), T}] = &l;
  }
  std::sort(Ts.begin(), Ts.end(), [](const std::string& a, const std::string& b) {
    return std::stoi(a.substr(2)) < std::stoi(b.substr(2));
  });
  std::string md;
  std::vector<std::string> differ;  // cells whose heads needed change at twice the precision
  std::vector<Row> fits, csv;
  LinePlot plot{
      "Wang & E: heads the class needs for error <= " + fixed(kCapacityTargets.back(), 3) + " (no training)",
      "T (lags)", "heads needed"};
  plot.logx = plot.logy = true;
  for (double target : kCapacityTargets) {
    std::vector<Row> rows;
    for (const std::string& name : names) {
      Row row = {name};
      std::vector<double> T, H;
      for (const std::string& col : Ts) {
        std::string text;
        if (const auto it = line_of.find({name, col}); it != line_of.end()) {
          const json& l = *it->second;
          const json& r = l.at("result");
          const std::vector<double> e = r.at("errors"), g = r.at("log10_gains"), e2 = r.at("errors_2x");
          const int h = heads_needed(e, target);
          if (h != heads_needed(e2, target)) differ.push_back(name + ", " + col);
          csv.push_back({name, col.substr(2), fixed(target, 3), std::to_string(h),
                         h ? fixed(g[h - 1], 6) : "", std::to_string(heads_needed(e2, target))});
          text =
              h == 0 ? "> " + std::to_string(e.size()) : std::to_string(h) + " (" + gain_text(g[h - 1]) + ")";
          if (h > 0) T.push_back(l.at("cell").at("T").get<double>()), H.push_back(h);
        }
        row.push_back(text);
      }
      rows.push_back(row);
      const Growth f = growth(T, H);
      const Shape sh = f.shape();
      fits.push_back({name, fixed(target, 3), sh == Shape::none ? "" : with_interval(f.poly),
                      sh == Shape::none ? "" : with_interval(f.exp),
                      sh == Shape::none         ? "never reached"
                      : sh == Shape::flat       ? "constant"
                      : sh == Shape::polynomial ? "polynomial fits better"
                                                : "exponential fits better"});
      if (target == kCapacityTargets.back() && !H.empty()) {
        Series se{name, T, H, {}, Series::Style::lines};
        plot.series.push_back(std::move(se));
      }
    }
    Row header = {"memory, RPE"};
    header.insert(header.end(), Ts.begin(), Ts.end());
    md +=
        "\nHeads the class needs for error ≤ " + fixed(target, 3) +
        " (greedy over the rate grid, MPFR), with the size of that fit's gains, Σ_h |c_h|, in brackets:\n\n" +
        markdown_table(header, rows);
  }
  md +=
      "\nGrowth of the heads needed with T: the exponent a of H ∝ T^a and the rate b of H ∝ e^{bT} "
      "(least-squares slope with its 95% interval over the T reached), and the better line:\n\n" +
      markdown_table({"memory, RPE", "error ≤", "polynomial exponent a", "exponential rate b", "better fit"},
                     fits);
  // The least error at bounded gains, any number of heads.
  std::vector<std::pair<std::string, const json*>> bounded;
  for (const std::string& name : names)
    for (const std::string& col : Ts)
      if (const auto it = line_of.find({name, col}); it != line_of.end())
        bounded.push_back({name, it->second});
  std::vector<Row> bounded_csv;
  md += bounded_markdown(bounded, bounded_csv);
  md += differ.empty() ? "\nThe heads needed are the same at twice the precision in every cell.\n"
                       : "\nThe heads needed change at twice the precision in: " + join_list(differ) + ".\n";
  write_file_atomic(out.path(".csv"), csv_text({"memory", "T", "error", "heads (0: not reached)",
                                                "log10 of the gains", "heads at 2x bits"},
                                               csv));
  write_file_atomic(out.path("-bounded.csv"),
                    csv_text({"memory", "T", "gain budget", "error", "lower bound"}, bounded_csv));
  plot_png(out.path(".png"), plot);
  return md;
}

// ---- sparse memories in the theorem's regime: the `sparse` cells --------------------------------

// The spike x_{t−T} in a window of 2T lags, T = 64 … 1024: the fixed-memory theorem's own setting,
// where its head cost parts lin-type (exponential in T) from log-type (polynomial). Trained: 16
// heads of each type, 32 scored positions a sequence. Control: the power law at T = 64 with one head,
// which log-type holds exactly and lin-type does not: the set-up must see that difference.
constexpr int kSparseHeads = 16, kSparseScored = 32, kSparseControlT = 64;

// Without a seed: the class's least error on the spike at each gain budget. With one: a trained
// model, and for the spike the class's least error at the trained model's own gains Σ_h |c_h|.
json run_sparse(const json& cell, const Context& c) {
  const int T = cell.at("T");
  const std::string memory = cell.at("memory"), rpe = cell.at("rpe");
  if (!cell.contains("seed"))
    return {{"bounded", bounded_fits(capacity_kernel(memory, T), rpe == "log", fista_steps(cell))}};
  const bool spike = memory == "spike";
  json r = train_kernel(memory, rpe, cell.at("H"), T, cell.at("seed"), c, spike ? kSparseScored : 0);
  if (spike && r.at("gains_l1").get<double>() > 0) {
    const BoundedFit f = bounded_gain_fit(capacity_kernel(memory, T), rpe == "log", capacity_rates(),
                                          r.at("gains_l1"), fista_steps(cell));
    r["own_budget"] = {{"error", f.error}, {"lower", f.lower}};
  }
  return r;
}

std::string sparse_section(const std::vector<json>& lines, const Outputs& out) {
  auto type = [](const json& c) { return label(c.at("rpe")) + "-type"; };
  auto at_T = [](const json& c) { return "T=" + label(c.at("T")); };
  std::vector<json> trained, control;
  std::vector<std::pair<std::string, const json*>> floors;
  for (const json& l : lines) {
    const json& c = l.at("cell");
    if (!c.contains("seed"))
      floors.push_back({"spike at lag T, window 2T, " + type(c), &l});
    else
      (c.at("memory") == "spike" ? trained : control).push_back(l);
  }
  auto metric = [](const char* key) { return [key](const json& r) { return r.at(key).get<double>(); }; };
  const Grouped err = group(trained, type, at_T, metric("val_nmse")),
                win = group(trained, type, at_T, metric("window_nmse")),
                read = group(trained, type, at_T, metric("read")),
                gains = group(trained, type, at_T, metric("gains_l1"));
  std::vector<json> floored;  // the trained spikes with their own gains' floor
  for (const json& l : trained)
    if (l.at("result").contains("own_budget")) floored.push_back(l);
  const Grouped own =
      group(floored, type, at_T, [](const json& r) { return r.at("own_budget").at("lower").get<double>(); });
  std::string md =
      "The sparse memory x_{t−T} through a window of 2T lags, " + std::to_string(kSparseHeads) +
      " trained DP-free heads of one type. Validation MSE/Var:\n\n" + write_grouped(err, "RPE", out, 3) +
      "\nThe learned kernel's error over the window, Σ_s (ρ̂(s) − ρ(s))² (from the heads' rates and "
      "gains):\n\n" +
      grouped_markdown(win, "RPE", 3) + "\nThe part of x_{t−T} the model reads, ρ̂(T) (1: all of it):\n\n" +
      grouped_markdown(read, "RPE", 3) + "\nThe trained gains, Σ_h |c_h|:\n\n" +
      grouped_markdown(gains, "RPE", 3) +
      "\nThe class's least error at the trained model's own gains (any number of heads, rates on the grid; a "
      "lower bound, FISTA less its Frank–Wolfe gap):\n\n" +
      grouped_markdown(own, "RPE", 3);
  std::vector<Row> bounded_csv;
  md += bounded_markdown(floors, bounded_csv);
  write_file_atomic(out.path("-bounded.csv"),
                    csv_text({"memory", "T", "gain budget", "error", "lower bound"}, bounded_csv));
  // Per T: log-type against lin-type on the same seeds, by the learned kernel's error over the window
  // (the model's own MSE/Var on unit Gaussian inputs, without the validation sample's noise, which at
  // 8,192 scored positions is about 1.5%, more than the two types differ); the control on the power
  // law, one head, by its validation MSE/Var.
  std::vector<Comparison> v;
  for (const std::string& col : win.cols)
    v.push_back({"log-type RPE reads a sparse memory better than lin-type", "log vs lin, " + col,
                 ClaimKind::lower, sample(win, "log-type", col), sample(win, "lin-type", col)});
  const Grouped ctl = group(control, type, at_T, metric("val_nmse"));
  for (const std::string& col : ctl.cols) {
    v.push_back({"log-type RPE reads a power law better than lin-type (one head)",
                 "log vs lin, " + col + " (power law, one head)", ClaimKind::lower,
                 sample(ctl, "log-type", col), sample(ctl, "lin-type", col)});
    v.back().control = true;
  }
  md += verdict_markdown(v);
  // The share of the spike's variance read, 1 − error: the trained models (mean over seeds) beside
  // the most the class reads with gains ≤ 10 and ≤ 1000 (one minus the lower bound on its error).
  LinePlot p{"Wang & E: the share of a sparse memory x_{t-T} read (1 - MSE/Var over the window)", "T (lags)",
             "1 - error (higher reads more)"};
  p.logx = p.logy = true;
  p.series = row_series(win, 2);
  for (Series& se : p.series) {
    se.label += ", " + std::to_string(kSparseHeads) + " trained heads";
    for (double& y : se.y)
      y = 1 - y;
    se.err.clear();  // the sd over seeds is far below the plot's resolution; the tables give it
  }
  for (double budget : {10.0, 1000.0})
    for (const std::string rpe : {"lin", "log"}) {
      Series se{"the class at most, " + rpe + "-type, gains <= " + fixed(budget, 6),
                {},
                {},
                {},
                Series::Style::lines};
      for (const auto& [name, line] : floors)
        if (line->at("cell").at("rpe") == rpe)
          for (const json& b : line->at("result").at("bounded"))
            if (b.at("budget").get<double>() == budget)
              se.x.push_back(line->at("cell").at("T").get<double>()),
                  se.y.push_back(1 - b.at("lower").get<double>());
      if (!se.x.empty()) p.series.push_back(std::move(se));
    }
  plot_png(out.path(".png"), p);
  return md;
}

// Error against m (the `width` cells).
std::string width_section(const std::vector<json>& width, const Outputs& out) {
  const Interval em = exponent(width, "m", "val_nmse");
  const Grouped gm = group(
      width, [](const json&) { return std::string("MSE/Var, 2a's read-out, H = 1"); },
      [](const json& c) { return "m=" + label(c.at("m")); },
      [](const json& r) { return r.at("val_nmse").get<double>(); });
  LinePlot pm{"Wang & E: error against FFN width (2a's read-out, H = 1)", "FFN width m",
              "validation MSE / Var(y)"};
  pm.logx = pm.logy = true;
  pm.series = row_series(gm, 2);
  plot_png(out.dir + "/" + out.name + "-width.png", pm);
  return "\nError against the FFN width m (Insight 2a's read-out sin(4π x_{t−1}), one head):\n\n" +
         grouped_markdown(gm, "m", 4) + "\nFitted exponent of MSE/Var against m" + kFloorRule + ": " +
         with_interval(em) + "\n";
}

// Error against H for a fixed memory (the `H` cells): the whole memory, its far half, and the
// learned kernel along the lags (seed 1).
std::string count_section(const std::vector<json>& H, const Outputs& out) {
  const Interval eh = exponent(H, "H", "val_nmse"), et = exponent(H, "H", "tail_nmse");
  auto by_H = [&](const std::string& row, const char* key) {
    return group(
        H, [&](const json&) { return row; }, [](const json& c) { return "H=" + label(c.at("H")); },
        [key](const json& r) { return r.at(key).get<double>(); });
  };
  const std::string memory = "heavy tail, lin-type, T = " + std::to_string(kHeadsT);
  const Grouped gh = by_H("MSE/Var, " + memory, "val_nmse"),
                gt = by_H("far-half MSE/Var, " + memory, "tail_nmse");
  LinePlot ph{
      "Wang & E: error against heads (power-law kernel, lin-type, T = " + std::to_string(kHeadsT) + ")",
      "heads H", "validation MSE / Var(y)"};
  ph.logx = ph.logy = true;
  ph.series = row_series(gh, 2);
  plot_png(out.dir + "/" + out.name + "-heads.png", ph);
  LinePlot pk{"Wang & E: learned kernel / target along the lags (power law, lin-type, seed 1)", "lag s",
              "learned rho(s) / rho(s)"};
  pk.logx = true;
  for (const json& l : H)
    if (l.at("cell").at("seed") == 1) {
      Series se{"H=" + label(l.at("cell").at("H")), {}, {}, {}, Series::Style::lines};
      const std::vector<double> k = l.at("result").at("kernel"), rho = l.at("result").at("target_kernel");
      for (std::size_t s = 0; s < k.size(); ++s)
        se.x.push_back(double(s + 1)), se.y.push_back(k[s] / rho[s]);
      pk.series.push_back(std::move(se));
    }
  plot_png(out.dir + "/" + out.name + "-kernel.png", pk);
  return "\nError against the number of heads H (power-law kernel, lin-type, T = " + std::to_string(kHeadsT) +
         "):\n\n" + grouped_markdown(gh, "H", 4) + "\nFitted exponent of MSE/Var against H" + kFloorRule +
         ": " + with_interval(eh) + "\n\nThe far half of the memory (lags " +
         std::to_string(kHeadsT / 2 + 1) + " to " + std::to_string(kHeadsT) +
         ") against H, its error relative to its own size:\n\n" + grouped_markdown(gt, "H", 4) +
         "\nFitted exponent of the far-half MSE/Var against H" + kFloorRule + ": " + with_interval(et) + "\n";
}

// Each part of the grid present in `lines` gets its section (`--only` may run a few of them).
std::string report(const std::vector<json>& lines, const Outputs& out, const Context&) {
  std::vector<json> heads, tail, width, H, capacity, sparse;
  for (const json& l : lines) {
    const json& c = l.at("cell");
    (c.at("part") == "heads"      ? (measure(c) == "tail_nmse" ? tail : heads)
     : c.at("part") == "width"    ? width
     : c.at("part") == "capacity" ? capacity
     : c.at("part") == "sparse"   ? sparse
                                  : H)
        .push_back(l);
  }
  std::string md;
  if (!heads.empty()) md += heads_section(heads, "MSE/Var", out);
  if (!tail.empty()) md += "\n" + heads_section(tail, "far-half MSE/Var", {out.dir, out.name + "-tail"});
  if (!width.empty()) md += width_section(width, out);
  if (!H.empty()) md += count_section(H, out);
  if (!capacity.empty())
    md += "\nThe class's own reach, without training:\n" +
          capacity_section(capacity, {out.dir, out.name + "-capacity"});
  if (!sparse.empty())
    md += "\nSparse memories at long lags, trained beside the class's reach:\n\n" +
          sparse_section(sparse, {out.dir, out.name + "-sparse"});
  write_file_atomic(out.path(".md"), md);
  return md;
}

}  // namespace

Experiment rates() {
  Experiment e;
  e.name = "wang-e-rates";
  e.serial = true;  // MPFR precision scopes (experiment.hpp)
  e.summary =
      "Wang & E's rates: heads needed against memory length for lin/log RPE on power-law and exponential "
      "memories, trained and by the class's own reach (MPFR); error against FFN width and against heads, "
      "with fitted exponents; a sparse memory at lags 64-1024, trained beside the class at bounded gains";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    // 1 / 3 / 5 seeds: the rates are fits with intervals over seeds, not paired verdicts.
    for (int seed = 1; seed <= c.seed_count(1, 3, 5); ++seed) {
      // Two measures: MSE/Var ≤ 10^-4 over the whole memory, and ≤ 10^-2 over its far half.
      for (const char* tail : {"heavy", "light"})
        for (const char* rpe : {"lin", "log"})
          for (bool far_half : {false, true})
            for (int T : c.pick({4, 8}, {8, 16, 32}, {8, 16, 32, 64, 128})) {
              json cell = {{"part", "heads"},
                           {"tail", tail},
                           {"rpe", rpe},
                           {"T", T},
                           {"seed", seed},
                           {"steps", steps(c)},
                           {"target", c.pick(2.0, 1e-4, 1e-4)}};  // smoke: a plumbing check
              if (far_half) cell["measure"] = "tail_nmse", cell["target"] = c.pick(2.0, 1e-2, 1e-2);
              cells.push_back(cell);
            }
      for (int m : c.pick({4, 16}, {4, 8, 16, 32, 64, 128, 256}, {4, 8, 16, 32, 64, 128, 256, 512}))
        cells.push_back({{"part", "width"}, {"m", m}, {"seed", seed}, {"steps", steps(c)}});
      for (int H : c.pick({1, 2}, {1, 2, 4, 8}, {1, 2, 4, 8, 16, 32}))
        cells.push_back({{"part", "H"}, {"H", H}, {"seed", seed}, {"steps", steps(c)}});
    }
    // The class's reach without training: deterministic, one cell per memory, RPE and T.
    // The heavier tail (s^-1.125) at the long windows of 4a's long memory.
    for (const std::string memory : {"spike", "heavy", "light", "heavier"})
      for (const char* rpe : {"lin", "log"})
        for (int T : memory == "spike"     ? c.pick({2, 4}, {2, 4, 8, 16, 32}, {2, 4, 8, 16, 32, 64})
                     : memory == "heavier" ? c.pick({8}, {64, 256, 1024}, {64, 128, 256, 512, 1024})
                                           : c.pick({4, 8}, {8, 16, 32}, {8, 16, 32, 64, 128}))
          cells.push_back({{"part", "capacity"}, {"memory", memory}, {"rpe", rpe}, {"T", T}});
    // Sparse memories at long lags (run_sparse): the trained models with the seeds a paired verdict
    // needs, then the class's floors (cheap, FISTA in double: they reach T = 1,024 in quick mode too).
    for (int seed = 1; seed <= c.verdict_seeds(); ++seed)
      for (const char* rpe : {"lin", "log"}) {
        for (int T : c.pick({16}, {64, 128, 256}, {64, 128, 256, 512, 1024}))
          cells.push_back({{"part", "sparse"},
                           {"memory", "spike"},
                           {"rpe", rpe},
                           {"T", T},
                           {"H", kSparseHeads},
                           {"seed", seed},
                           {"steps", steps(c)}});
        cells.push_back({{"part", "sparse"},
                         {"memory", "heavy"},
                         {"rpe", rpe},
                         {"T", kSparseControlT},
                         {"H", 1},
                         {"seed", seed},
                         {"steps", steps(c)}});
      }
    for (int T : c.pick({16}, {64, 128, 256, 512, 1024}, {64, 128, 256, 512, 1024}))
      for (const char* rpe : {"lin", "log"})
        cells.push_back({{"part", "sparse"}, {"memory", "spike"}, {"rpe", rpe}, {"T", T}});
    if (c.mode == Mode::smoke)
      for (json& cell : cells)
        if (cell.at("part") == "capacity" || cell.at("part") == "sparse")
          cell["fista_steps"] = kSmokeFistaSteps;
    return cells;
  };
  e.run = [](const json& cell, const Context& c) -> json {
    if (cell.at("part") == "capacity") return run_capacity(cell);
    if (cell.at("part") == "sparse") return run_sparse(cell, c);
    if (cell.at("part") == "heads") return run_heads(cell, c);
    if (cell.at("part") == "width")
      return train_single_layer("complex-readout", {1}, 4, 1, cell.at("m"), false, cell.at("seed"), c);
    return train_kernel("heavy", "lin", cell.at("H"), kHeadsT, cell.at("seed"), c);
  };
  e.report = report;
  return e;
}

}  // namespace uatlab::experiment::wang_e
