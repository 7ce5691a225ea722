#include "uatlab/verify/analyse.hpp"

#include <mpfi.h>
#include <mpfr.h>
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <map>
#include <optional>
#include <queue>
#include <sstream>

#include "uatlab/io/report.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/verify/affine.hpp"
#include "uatlab/verify/evaluate.hpp"
#include "uatlab/verify/precision.hpp"

namespace uatlab {

using nlohmann::json;

namespace {

// An MPFR value as a double rounded up (down): a bound that stays a bound.
double up(const Mpfr& x) {
  return mpfr_get_d(x.backend().data(), MPFR_RNDU);
}
double down(const Mpfr& x) {
  return mpfr_get_d(x.backend().data(), MPFR_RNDD);
}

// The dataset fits the network: input kind and width, labels on every sequence, their shape.
void check_fit(const Network<Rational>& net, const Dataset& ds, LabelKind kind) {
  const Architecture& a = net.arch;
  if (a.pool) throw Error("analyse: pooled networks (one output per sequence) are not supported");
  if (ds.token_input != (a.vocab > 0))
    throw Error(std::string("analyse: the network takes ") +
                (a.vocab > 0 ? "token ids" : "continuous tokens") + ", the dataset has " +
                (ds.token_input ? "token ids" : "continuous tokens"));
  if (!ds.token_input && ds.d != a.d)
    throw Error("analyse: the dataset's tokens have " + std::to_string(ds.d) +
                " numbers, the network's d is " + std::to_string(a.d));
  for (std::size_t i = 0; i < ds.sequences.size(); ++i)
    if (ds.sequences[i].y.size() == 0)
      throw Error("analyse: sequence " + std::to_string(i + 1) + " has no labels (\"y\")");
  const int want = kind == LabelKind::classes ? 1 : a.out_dim();
  if (ds.label_dim != want)
    throw Error("analyse: labels have " + std::to_string(ds.label_dim) + " numbers per token, " +
                (kind == LabelKind::classes ? std::string("classes need 1")
                                            : "the network outputs " + std::to_string(want)));
  if (kind == LabelKind::classes)
    for (std::size_t i = 0; i < ds.sequences.size(); ++i)
      for (Eigen::Index k = 0; k < ds.sequences[i].y.cols(); ++k) {
        const Rational& y = ds.sequences[i].y(0, k);
        if (class_label(y, a.out_dim()) < 0)
          throw Error("analyse: sequence " + std::to_string(i + 1) + ": class label " + y.str() +
                      " is not an integer in [0, " + std::to_string(a.out_dim()) + ")");
      }
}

std::string midpoints(const Mat<Mpfi>& y, Eigen::Index k) {
  std::ostringstream s;
  s << "[";
  for (Eigen::Index r = 0; r < y.rows(); ++r)
    s << (r ? ", " : "") << Scalar<Mpfi>::to_double(y(r, k));
  s << "]";
  return s.str();
}

Rational pow2(long e) {
  Rational q(1);
  if (e >= 0)
    mpq_mul_2exp(q.backend().data(), q.backend().data(), static_cast<mp_bitcnt_t>(e));
  else
    mpq_div_2exp(q.backend().data(), q.backend().data(), static_cast<mp_bitcnt_t>(-e));
  return q;
}

}  // namespace

LabelKind label_kind(const std::string& labels, const Dataset& ds, int outputs) {
  if (labels != "auto") return label_kind_names.parse(labels);  // else decided by the data
  if (ds.label_dim != 1 || outputs < 2) return LabelKind::values;
  for (const Sequence& s : ds.sequences)
    for (Eigen::Index k = 0; k < s.y.size(); ++k)
      if (class_label(s.y(k), outputs) < 0) return LabelKind::values;
  return LabelKind::classes;
}

Predictions certify_predictions(const Network<Rational>& net, const Dataset& ds, LabelKind kind,
                                const Rational& tolerance, unsigned bits, const OnProgress& progress,
                                bool stop_at_failure, bool affine) {
  check_fit(net, ds, kind);
  Predictions p;
  p.kind = kind;
  p.bits = bits;
  const MpfrPrecision precision(bits);
  std::optional<AffineForward> af;
  if (affine && !ds.token_input) af.emplace(net);
  const Network<Mpfi> ni = af ? Network<Mpfi>() : network_cast<Mpfi>(net);  // one of the two
  const Mpfi tol = Scalar<Mpfi>::from(tolerance);
  const long N = static_cast<long>(ds.sequences.size());
  std::vector<std::vector<PredictionFailure>> fails(static_cast<std::size_t>(N));
  std::vector<long long> counted(static_cast<std::size_t>(N), 0), ok(static_cast<std::size_t>(N), 0);
  long long done = 0;
  bool failed = false;
#pragma omp parallel for schedule(dynamic)
  for (long i = 0; i < N; ++i) {
    bool skip;
#pragma omp atomic read
    skip = failed;
    if (skip && stop_at_failure) continue;
    const Sequence& s = ds.sequences[static_cast<std::size_t>(i)];
    Mat<Mpfi> y;
    bool evaluated = true;
    try {
      y = ds.token_input ? forward_tokens(ni, s.tokens)
          : af           ? (*af)(matrix_cast<Mpfi>(s.x))
                         : forward(ni, matrix_cast<Mpfi>(s.x));
    } catch (const Error&) {  // shapes were checked: an undecided hardmax or an unbounded enclosure
      evaluated = false;
    }
    for (Eigen::Index k = 0; k < static_cast<Eigen::Index>(s.n()); ++k) {
      if (!s.mask.empty() && !s.mask[static_cast<std::size_t>(k)]) continue;
      ++counted[static_cast<std::size_t>(i)];
      PredictionFailure f{static_cast<std::size_t>(i), static_cast<std::size_t>(k), FailureKind::undecided,
                          "", "?"};
      bool certified = false, wrong = false;
      if (kind == LabelKind::classes) {
        const long c = numerator(s.y(0, k)).convert_to<long>();
        f.label = std::to_string(c);
        if (evaluated) {
          certified = true;
          Eigen::Index best = 0;
          for (Eigen::Index r = 0; r < y.rows(); ++r) {
            if (Scalar<Mpfi>::to_double(y(r, k)) > Scalar<Mpfi>::to_double(y(best, k))) best = r;
            if (r == c) continue;
            if (!(lower(y(c, k)) > upper(y(r, k)))) certified = false;
            if (lower(y(r, k)) > upper(y(c, k))) wrong = true;
          }
          f.predicted = std::to_string(best);
        }
      } else {
        std::ostringstream label;
        label << "[";
        for (Eigen::Index r = 0; r < s.y.rows(); ++r)
          label << (r ? ", " : "") << Scalar<Rational>::to_double(s.y(r, k));
        f.label = label.str() + "]";
        if (evaluated) {
          certified = true;
          for (Eigen::Index r = 0; r < y.rows(); ++r) {
            const Mpfi e = mp::abs(y(r, k) - Scalar<Mpfi>::from(s.y(r, k)));
            if (!(upper(e) <= lower(tol))) certified = false;
            if (lower(e) > upper(tol)) wrong = true;
          }
          f.predicted = midpoints(y, k);
        }
      }
      if (certified) {
        ++ok[static_cast<std::size_t>(i)];
      } else {
        f.kind = wrong ? FailureKind::wrong : FailureKind::undecided;
        fails[static_cast<std::size_t>(i)].push_back(f);
#pragma omp atomic write
        failed = true;
      }
    }
#pragma omp critical(uatlab_analyse_progress)
    report(progress, "analyse: certify predictions at " + std::to_string(bits) + " bits", ++done, N);
  }
  for (long i = 0; i < N; ++i) {
    p.tokens += counted[static_cast<std::size_t>(i)];
    p.certified += ok[static_cast<std::size_t>(i)];
    for (auto& f : fails[static_cast<std::size_t>(i)])
      p.failures.push_back(f);
  }
  return p;
}

Rational round_to_format(const Rational& x, int p, int emin, int emax, bool& overflow) {
  overflow = false;
  if (x == 0) return x;
  const Rational a = abs(x);
  // e = floor(log2 a) from the sizes of numerator and denominator, corrected by one compare.
  long e = static_cast<long>(mpz_sizeinbase(numerator(a).backend().data(), 2)) -
           static_cast<long>(mpz_sizeinbase(denominator(a).backend().data(), 2));
  if (a < pow2(e)) --e;
  if (a >= pow2(e + 1)) ++e;
  const Rational quantum = pow2(std::max<long>(e, emin) - p + 1), m = a / quantum;
  mp::mpz_int r = numerator(m) / denominator(m);  // floor (m > 0)
  const Rational frac = m - Rational(r);
  if (frac > Rational(1, 2) || (frac == Rational(1, 2) && (r & 1) != 0)) ++r;
  const Rational rounded = Rational(r) * quantum, largest = (2 - pow2(1 - p)) * pow2(emax);
  if (rounded > largest) {
    overflow = true;
    return x;
  }
  return x < 0 ? Rational(-rounded) : rounded;
}

namespace {

struct Occurrence {
  std::vector<double> mid, err;  // the output's midpoint (double) and a bound on |value − mid|
  double err_norm = 0;           // ‖err‖₂, rounded up
  int token = 0, context = 0;
  std::size_t sequence = 0, position = 0;
};

// The floating-point rounding mode of this thread, for a scope: the bounds below are computed in
// double with directed rounding (this file is compiled with -frounding-math).
struct Rounding {
  int saved;
  explicit Rounding(int mode) : saved(std::fegetround()) { std::fesetround(mode); }
  ~Rounding() { std::fesetround(saved); }
  Rounding(const Rounding&) = delete;
  Rounding& operator=(const Rounding&) = delete;
};

// A lower bound on ‖a − b‖₂ for the values the occurrences enclose: ‖m_a − m_b‖ rounded down,
// less ‖e_a‖ + ‖e_b‖ rounded up (the triangle inequality).
double distance_lower(const Occurrence& a, const Occurrence& b) {
  double sq = 0;
  {
    const Rounding down(FE_DOWNWARD);
    for (std::size_t r = 0; r < a.mid.size(); ++r) {
      const double diff = a.mid[r] >= b.mid[r] ? a.mid[r] - b.mid[r] : b.mid[r] - a.mid[r];
      sq += diff * diff;
    }
    sq = std::sqrt(sq);
  }
  double err;
  {
    const Rounding up(FE_UPWARD);
    err = a.err_norm + b.err_norm;
  }
  const Rounding down(FE_DOWNWARD);
  return sq - err;
}

// The exact lower end of ‖a − b‖₂ in MPFI.
double distance_mpfi(const Mat<Mpfi>& A, Eigen::Index ka, const Mat<Mpfi>& B, Eigen::Index kb) {
  Mpfi sq(0), t;
  for (Eigen::Index r = 0; r < A.rows(); ++r) {
    const Mpfi diff = A(r, ka) - B(r, kb);
    mpfi_sqr(t.backend().data(), diff.backend().data());
    sq += t;
  }
  return down(lower(mp::sqrt(sq)));
}

// A certified lower bound on the least distance over a set of pairs: every pair's directed-
// rounding bound, and for the kExact pairs with the smallest such bound, the exact MPFI one.
struct MinDistance {
  static constexpr std::size_t kExact = 32;
  std::priority_queue<std::tuple<double, std::size_t, std::size_t>> smallest;  // max-heap of kExact + 1
  long long pairs = 0;
  void add(double bound, std::size_t a, std::size_t b) {
    ++pairs;
    if (smallest.size() <= kExact || bound < std::get<0>(smallest.top())) {
      smallest.emplace(bound, a, b);
      if (smallest.size() > kExact + 1) smallest.pop();
    }
  }
  // NaN without pairs; closest: the pair with the smallest bound.
  double certify(const std::vector<Occurrence>& occ, const std::vector<Mat<Mpfi>>& outputs,
                 std::size_t& closest_a, std::size_t& closest_b) const {
    if (pairs == 0) return std::nan("");
    auto heap = smallest;
    // Every pair left out has a bound at least the (kExact+1)-th smallest.
    double best = std::numeric_limits<double>::infinity();
    if (heap.size() > kExact) {
      best = std::max(0.0, std::get<0>(heap.top()));
      heap.pop();
    }
    double least = std::numeric_limits<double>::infinity();
    for (; !heap.empty(); heap.pop()) {
      const auto [bound, a, b] = heap.top();
      const Occurrence &A = occ[a], &B = occ[b];
      const double exact = distance_mpfi(outputs[A.sequence], static_cast<Eigen::Index>(A.position),
                                         outputs[B.sequence], static_cast<Eigen::Index>(B.position));
      best = std::min(best, std::max({0.0, bound, exact}));
      if (bound < least) least = bound, closest_a = a, closest_b = b;
    }
    return best;
  }
};

double log10_of(double x) {
  return std::isnan(x) ? x : x <= 0 ? -std::numeric_limits<double>::infinity() : std::log10(x);
}

// The sub-layers 0..last of net (no readout, no pooling), in intervals.
Network<Mpfi> prefix(const Network<Rational>& net, std::size_t last) {
  Network<Rational> p = net;
  p.arch.layers.resize(last + 1);
  p.layers.resize(last + 1);
  p.arch.readout = 0, p.arch.pool = false;
  p.readout_w.resize(0, 0), p.readout_b.resize(0, 0);
  return network_cast<Mpfi>(p);
}

// Token identity (id, or the exact input column) and context (the set of a sequence's tokens).
void identify(const Dataset& ds, std::vector<std::vector<int>>& token, std::vector<int>& context) {
  std::map<std::string, int> ids;
  std::map<std::vector<int>, int> sets;
  for (const Sequence& s : ds.sequences) {
    std::vector<int> t;
    for (std::size_t k = 0; k < s.n(); ++k) {
      std::string key;
      if (ds.token_input)
        key = std::to_string(s.tokens[k]);
      else
        for (Eigen::Index r = 0; r < s.x.rows(); ++r)
          key += s.x(r, static_cast<Eigen::Index>(k)).str() + ",";
      t.push_back(ids.emplace(key, static_cast<int>(ids.size())).first->second);
    }
    std::vector<int> set = t;
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    context.push_back(sets.emplace(set, static_cast<int>(sets.size())).first->second);
    token.push_back(std::move(t));
  }
}

LayerSeparation separation(const Network<Rational>& net, const Dataset& ds, std::size_t layer, unsigned bits,
                           const std::vector<std::vector<int>>& token, const std::vector<int>& context,
                           std::uint64_t seed) {
  LayerSeparation L;
  L.layer = layer;
  const MpfrPrecision precision(bits);
  const Network<Mpfi> pre = prefix(net, layer);
  const std::vector<Mat<Mpfi>> out = forward_dataset(pre, ds);  // an undecided enclosure throws, named
  std::vector<Occurrence> occ;
  for (std::size_t i = 0; i < out.size(); ++i)
    for (Eigen::Index k = 0; k < out[i].cols(); ++k) {
      Occurrence o;
      o.sequence = i, o.position = static_cast<std::size_t>(k);
      o.token = token[i][static_cast<std::size_t>(k)], o.context = context[i];
      for (Eigen::Index r = 0; r < out[i].rows(); ++r) {
        const Mpfi& y = out[i](r, k);
        const double m = Scalar<Mpfi>::to_double(y);
        Mpfr above = upper(y), below(m);
        mpfr_sub(above.backend().data(), above.backend().data(), Mpfr(m).backend().data(), MPFR_RNDU);
        mpfr_sub(below.backend().data(), below.backend().data(), lower(y).backend().data(), MPFR_RNDU);
        o.mid.push_back(m), o.err.push_back(std::max(up(above), up(below)));
      }
      {
        const Rounding up_(FE_UPWARD);
        double sq = 0;
        for (double e : o.err)
          sq += e * e;
        o.err_norm = std::sqrt(sq);
      }
      occ.push_back(std::move(o));
    }
  MinDistance same, cross;
  for (std::size_t a = 0; a < occ.size(); ++a)
    for (std::size_t b = a + 1; b < occ.size(); ++b) {
      const bool same_token = occ[a].token == occ[b].token;
      if (same_token && occ[a].context == occ[b].context) continue;
      (same_token ? same : cross).add(distance_lower(occ[a], occ[b]), a, b);
    }
  std::size_t ca = 0, cb = 0, xa = 0, xb = 0;
  L.same_token_pairs = same.pairs;
  L.delta = same.certify(occ, out, ca, cb);
  L.cross = cross.certify(occ, out, xa, xb);
  L.log10_delta = log10_of(L.delta), L.log10_cross = log10_of(L.cross);
  if (same.pairs == 0) return L;
  // The direction: the closest same-token pair's difference, or one of 32 seeded random ones,
  // whichever keeps the contexts of every token furthest apart along it.
  const std::size_t d = occ[0].mid.size();
  std::vector<std::vector<double>> candidates;
  std::vector<double> v0(d);
  for (std::size_t r = 0; r < d; ++r)
    v0[r] = occ[ca].mid[r] - occ[cb].mid[r];
  candidates.push_back(v0);
  Rng rng(seed);
  for (int c = 0; c < 32; ++c) {
    std::vector<double> v(d);
    for (double& x : v)
      x = rng.gauss();
    candidates.push_back(v);
  }
  L.projection_gap = -std::numeric_limits<double>::infinity();
  for (std::vector<double>& v : candidates) {
    double norm = 0;
    for (double x : v)
      norm += x * x;
    if (!(norm > 0)) continue;
    for (double& x : v)
      x /= std::sqrt(norm);
    // Per occurrence: vᵀ(value) lies in [lo, lo + width] (directed rounding); with one width W
    // for all, the closest pair of different contexts is adjacent in the order of lo.
    std::vector<std::tuple<int, double, int>> proj;  // (token, lo, context)
    double width = 0;
    for (const Occurrence& o : occ) {
      double lo = 0, hi = 0, e = 0;
      {
        const Rounding down(FE_DOWNWARD);
        for (std::size_t r = 0; r < d; ++r)
          lo += v[r] * o.mid[r];
      }
      {
        const Rounding up_(FE_UPWARD);
        for (std::size_t r = 0; r < d; ++r)
          hi += v[r] * o.mid[r], e += std::abs(v[r]) * o.err[r];
        hi += e;
      }
      {
        const Rounding down(FE_DOWNWARD);
        lo -= e;
      }
      const Rounding up_(FE_UPWARD);
      width = std::max(width, hi - lo);
      proj.emplace_back(o.token, lo, o.context);
    }
    std::sort(proj.begin(), proj.end());
    double gap = std::numeric_limits<double>::infinity();
    {
      const Rounding down(FE_DOWNWARD);
      for (std::size_t i = 1; i < proj.size(); ++i)
        if (std::get<0>(proj[i]) == std::get<0>(proj[i - 1]) &&
            std::get<2>(proj[i]) != std::get<2>(proj[i - 1]))
          gap = std::min(gap, (std::get<1>(proj[i]) - std::get<1>(proj[i - 1])) - width);
    }
    if (gap > L.projection_gap) L.projection_gap = gap, L.v = v;
  }
  L.projection_gap = std::max(0.0, L.projection_gap);
  return L;
}

}  // namespace

Analysis analyse(const Network<Rational>& net, const Dataset& ds, const AnalyseOptions& o) {
  limits::check_count(o.bits, 2, 1 << 20, "bits");
  limits::check_count(o.max_bits, o.bits, 1 << 20, "max bits");
  if (ds.sequences.empty()) throw Error("analyse: the dataset has no sequences");
  const Rational tol = parse_rational(o.tolerance);
  if (tol < 0) throw Error("analyse: the tolerance must be >= 0");
  const LabelKind kind = label_kind(o.labels, ds, net.arch.out_dim());
  Analysis a;
  // Predictions, doubling the bits while some are undecided. A first pass stops at the first
  // failure (a run with no failure is complete); the full list is computed where the doubling ends.
  auto undecided = [](const Predictions& p) {
    return std::any_of(p.failures.begin(), p.failures.end(),
                       [](const PredictionFailure& f) { return f.kind == FailureKind::undecided; });
  };
  certify_with_doubling(o.bits, o.max_bits, [&](unsigned bits) {
    a.predictions = certify_predictions(net, ds, kind, tol, bits, o.progress, true, o.affine);
    if (a.predictions.all()) return true;
    if (a.predictions.failures.front().kind == FailureKind::undecided && bits < o.max_bits) return false;
    a.predictions = certify_predictions(net, ds, kind, tol, bits, o.progress, false, o.affine);
    return !undecided(a.predictions);
  });
  const unsigned bits = a.predictions.bits;
  if (o.min_bits && a.predictions.all())
    a.min_bits = min_certified_bits(bits, [&](unsigned b) {
      report(o.progress, "analyse: fewest bits, trying " + std::to_string(b), 0, 0);
      return certify_predictions(net, ds, kind, tol, b, {}, true, o.affine).all();
    });
  if (o.rounding) {
    struct Format {
      const char* name;
      int p, emin, emax;
    };
    for (const Format& f : {Format{"float32", 24, -126, 127}, Format{"bfloat16", 8, -126, 127},
                            Format{"float16", 11, -14, 15}}) {
      Network<Rational> r = net;
      long long overflow = 0;
      r.for_each_tensor([&](const std::string&, Mat<Rational>& m, Layout) {
        for (Eigen::Index i = 0; i < m.size(); ++i) {
          bool over = false;
          m(i) = round_to_format(m(i), f.p, f.emin, f.emax, over);
          overflow += over;
        }
      });
      a.overflow.emplace_back(f.name, overflow);
      report(o.progress, std::string("analyse: weights rounded to ") + f.name, 0, 0);
      if (overflow == 0)
        a.rounded.emplace_back(f.name,
                               certify_predictions(r, ds, kind, tol, bits, {}, o.stop_early, o.affine));
    }
  }
  if (o.separation) {
    long long tokens = 0;
    for (const Sequence& s : ds.sequences)
      tokens += static_cast<long long>(s.n());
    if (tokens > o.max_separation_tokens) {
      a.separation_note = std::to_string(tokens) + " tokens, over the limit of " +
                          std::to_string(o.max_separation_tokens) + " for the pairwise distances";
    } else {
      std::vector<std::vector<int>> token;
      std::vector<int> context;
      identify(ds, token, context);
      try {
        for (std::size_t i = 0; i < net.arch.layers.size(); ++i)
          if (mixes_tokens(net.arch.layers[i].kind)) {
            report(o.progress, "analyse: separation after layer " + std::to_string(i), 0, 0);
            a.layers.push_back(separation(net, ds, i, bits, token, context, o.seed));
          }
      } catch (const Error& e) {  // e.g. a hardmax whose argmax the enclosures cannot decide
        a.layers.clear();
        a.separation_note = std::string("evaluation failed: ") + e.what();
      }
      if (a.layers.empty() && a.separation_note.empty())
        a.separation_note = "the network has no token-mixing sub-layer (attention, bproj, sepconv)";
    }
  }
  return a;
}

namespace {
json predictions_json(const Predictions& p) {
  json f = json::array();
  for (const PredictionFailure& x : p.failures)
    f.push_back({{"sequence", x.sequence},
                 {"token", x.token},
                 {"kind", failure_kind_names(x.kind)},
                 {"label", x.label},
                 {"predicted", x.predicted}});
  return {{"labels", label_kind_names(p.kind)}, {"tokens", p.tokens}, {"certified", p.certified},
          {"all_certified", p.all()},           {"bits", p.bits},     {"failures", f}};
}
json number(double x) {
  return std::isfinite(x) ? json(x) : std::isnan(x) ? json(nullptr) : json(x > 0 ? "inf" : "-inf");
}
}  // namespace

json Analysis::report() const {
  json r = {{"memorization", predictions_json(predictions)}};
  if (min_bits > 0) r["min_bits"] = min_bits;
  json rounding = json::object();
  for (const auto& [name, over] : overflow) {
    rounding[name] = {{"overflowing_weights", over}};
    for (const auto& [n2, p] : rounded)
      if (n2 == name) {
        rounding[name]["all_certified"] = p.all();
        if (!p.all()) {  // the search stops at a failure: one is shown, not a count
          const PredictionFailure& f = p.failures.front();
          rounding[name]["a_failure"] = {
              {"sequence", f.sequence}, {"token", f.token}, {"kind", failure_kind_names(f.kind)}};
        }
      }
  }
  if (!overflow.empty()) r["rounded_weights"] = rounding;
  json ls = json::array();
  for (const LayerSeparation& l : layers)
    ls.push_back({{"layer", l.layer},
                  {"same_token_pairs", l.same_token_pairs},
                  {"delta_certified", number(l.delta)},
                  {"log10_delta_certified", number(l.log10_delta)},
                  {"cross_token_certified", number(l.cross)},
                  {"log10_cross_token_certified", number(l.log10_cross)},
                  {"projection", l.v},
                  {"projection_gap_certified", number(l.projection_gap)}});
  r["separation"] = ls;
  if (!separation_note.empty()) r["separation_note"] = separation_note;
  return r;
}

std::string Analysis::summary() const {
  std::ostringstream s;
  const Predictions& p = predictions;
  s << "memorization  " << p.certified << " of " << p.tokens << " predictions certified ("
    << (p.kind == LabelKind::classes ? "argmax" : "|y - label| within the tolerance") << ", MPFI at "
    << p.bits << " bits)\n";
  std::size_t shown = 0;
  for (const PredictionFailure& f : p.failures) {
    if (shown++ == 10) {
      s << "              ... " << p.failures.size() - 10 << " more in the report\n";
      break;
    }
    // Counted from 1, as every message of uatlab counts them (the report's fields are 0-based).
    s << "              sequence " << f.sequence + 1 << " token " << f.token + 1 << ": "
      << failure_kind_names(f.kind) << " (label " << f.label << ", predicted " << f.predicted << ")\n";
  }
  if (min_bits > 0) s << "bits          every prediction still certified down to " << min_bits << " bits\n";
  for (const auto& [name, over] : overflow) {
    s << "rounded       " << name << ": ";
    if (over > 0) {
      s << over << " weights overflow\n";
      continue;
    }
    for (const auto& [n2, q] : rounded)
      if (n2 == name)
        s << (q.all()
                  ? "every prediction kept (certified)"
                  : "not every prediction kept: sequence " + std::to_string(q.failures.front().sequence + 1) +
                        " token " + std::to_string(q.failures.front().token + 1) + " " +
                        failure_kind_names(q.failures.front().kind))
          << "\n";
  }
  for (const LayerSeparation& l : layers) {
    auto bound = [](double log10) {
      char b[64];
      if (std::isnan(log10)) return std::string("(no pair)");
      if (std::isinf(log10)) return std::string("0 (not separated)");
      std::snprintf(b, sizeof b, ">= 10^%.3g", log10);
      return std::string(b);
    };
    char gap[64];
    std::snprintf(gap, sizeof gap, ">= %.3g", l.projection_gap);
    s << "separation    layer " << l.layer << ": same token, different contexts " << bound(l.log10_delta)
      << " (" << l.same_token_pairs << " pairs); different tokens " << bound(l.log10_cross) << "; along v "
      << (l.same_token_pairs > 0 ? gap : "(no pair)") << "\n";
  }
  if (!separation_note.empty()) s << "separation    not computed: " << separation_note << "\n";
  return s.str();
}

void plot_separation(const Analysis& a, const std::string& path) {
  LinePlot plot("certified separation per token-mixing layer", "sub-layer", "log10 (certified lower bound)");
  Series same{"same token, different contexts (delta)", {}, {}, {}}, cross{"different tokens", {}, {}, {}},
      along{"along the projection v", {}, {}, {}};
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const LayerSeparation& l = a.layers[i];
    plot.xtics.push_back(std::to_string(l.layer));
    auto add = [&](Series& s, double v) {
      if (std::isfinite(v)) s.x.push_back(static_cast<double>(i)), s.y.push_back(v);
    };
    add(same, l.log10_delta);
    add(cross, l.log10_cross);
    add(along, log10_of(l.projection_gap));
  }
  plot.series = {same, cross, along};
  for (Series& s : plot.series)
    s.style = Series::Style::points;
  plot_png(path, plot);
}

}  // namespace uatlab
