#include "uatlab/construct/optimal.hpp"

#include <mpfr.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "../chunks.hpp"
#include "uatlab/construct/blocks.hpp"
#include "uatlab/construct/deep_value_map.hpp"
#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/verify/bounds.hpp"

namespace uatlab::optimal {

using nlohmann::json;

namespace {

constexpr double kPi = 3.14159265358979323846;

// ---- prepare: the labelled points ----------------------------------------------------------------

struct Prepared {
  Dataset work;  // distinct sequences; y holds the labels, mask the tokens that count
  std::vector<std::vector<int>> counted;  // per sequence of work: its counted tokens
  std::vector<Vec<Rational>> vocab;       // distinct tokens
  Mat<Rational> embed;                    // token ids: their vectors (4×vocabulary), else empty
  int n = 0, d = 0;
  int lifted_from = 0;   // continuous tokens of fewer than 4 numbers: padded with zeros to 4 (an
                         // input projection [I; 0] in front of the network), else 0
  long label_count = 0;  // labels lie in [0, label_count)
};

std::vector<Rational> flat(const Mat<Rational>& x) {
  return std::vector<Rational>(x.data(), x.data() + x.size());
}

// Token ids: an embedding of width 4 (the deep map's registers), column t a seeded Gaussian vector
// rounded to doubles (dyadic), one column per id up to the largest one.
Mat<Rational> token_embedding(const Dataset& ds, std::uint64_t seed) {
  int vocab = 0;
  for (const Sequence& s : ds.sequences)
    for (int t : s.tokens)
      vocab = std::max(vocab, t + 1);
  limits::check_count(vocab, 1, 1 << 24, "token ids (the embedding's columns)");
  Rng rng(seed ^ 0xe3b0c442ULL);
  Mat<Rational> e(4, vocab);
  for (Eigen::Index i = 0; i < e.size(); ++i)
    e(i) = rational_of(rng.gauss());
  return e;
}

Prepared prepare(const Dataset& ds, Setting setting, long long max_points, std::uint64_t seed) {
  if (ds.sequences.empty()) throw Error("the dataset is empty");
  if (ds.label_dim == 0) throw Error("memorize needs labels (\"y\")");
  if (ds.label_dim != 1)
    throw Error("the deep value map takes one integer label per point; the labels have " +
                std::to_string(ds.label_dim) + " numbers");
  // The deep value map needs four entries of the residual stream as registers: token ids are
  // embedded in 4 numbers, and tokens of fewer numbers are lifted to 4 by zeros.
  Prepared p;
  if (ds.token_input) p.embed = token_embedding(ds, seed);
  if (!ds.token_input && ds.d < 4) p.lifted_from = ds.d;
  p.d = ds.token_input ? 4 : std::max(ds.d, 4);
  p.n = static_cast<int>(ds.sequences[0].n());
  const bool next = setting == Setting::next_token;
  const int most_n = next ? 2048 : 1024;  // the T5 table: one bucket per distance, at most 4096
  if (p.n > most_n)
    throw Error("the averaging attention keeps one score per distance: n must be at most " +
                std::to_string(most_n) + " for " + setting_names(setting) + ", got " + std::to_string(p.n));
  std::map<std::vector<Rational>, std::size_t> seen;  // a sequence → its index in work
  std::map<std::vector<Rational>, int> tokens;
  long long points = 0;
  for (std::size_t i = 0; i < ds.sequences.size(); ++i) {
    const Sequence& s = ds.sequences[i];
    Mat<Rational> x = ds.token_input ? Mat<Rational>(p.embed(Eigen::all, s.tokens)) : s.x;
    if (p.lifted_from > 0) {
      x.conservativeResize(p.d, Eigen::NoChange);
      x.bottomRows(p.d - p.lifted_from).setZero();
    }
    const std::string where = "sequence " + std::to_string(i + 1);
    if (static_cast<int>(s.n()) != p.n)
      throw Error(where + " has " + std::to_string(s.n()) + " tokens, sequence 1 has " + std::to_string(p.n));
    std::vector<int> counted;
    if (next) {
      if (!s.mask.empty() && !s.mask.back())
        throw Error(where + ": the last token's label is masked out; next-token memorization labels it");
      counted = {p.n - 1};
    } else {
      for (int k = 0; k < p.n; ++k)
        if (s.mask.empty() || s.mask[static_cast<std::size_t>(k)]) counted.push_back(k);
    }
    for (int k : counted) {
      const long label = class_label(s.y(0, k), 1L << 20);
      if (label < 0)
        throw Error(where + " token " + std::to_string(k + 1) +
                    ": the deep value map encodes labels as integers in [0, 2^20), got " +
                    limits::excerpt(s.y(0, k).str()));
      p.label_count = std::max(p.label_count, label + 1);
    }
    const auto [it, fresh] = seen.emplace(flat(x), p.work.sequences.size());
    if (!fresh) {  // the same sequence again: its labels must agree where both count
      const std::size_t j = it->second;
      const Sequence& t = p.work.sequences[j];
      std::vector<int>& other = p.counted[j];
      for (int k : counted) {
        const bool both = std::find(other.begin(), other.end(), k) != other.end();
        if (both && t.y(0, k) != s.y(0, k))
          throw Error(where + " repeats an earlier sequence with another label at token " +
                      std::to_string(k + 1) + " (" + limits::excerpt(s.y(0, k).str()) + " against " +
                      limits::excerpt(t.y(0, k).str()) + ")");
        if (!both) {
          other.push_back(k);
          p.work.sequences[j].y(0, k) = s.y(0, k);
          ++points;
        }
      }
      continue;
    }
    Sequence w;
    w.x = x;
    w.y = s.y.topRows(1);
    p.work.sequences.push_back(std::move(w));
    p.counted.push_back(counted);
    points += static_cast<long long>(counted.size());
    if (points > max_points)
      throw Error(
          "more than " + std::to_string(max_points) +
          " labelled points (the limit on context ids, docs/robustness.md): the value map would not finish");
    for (int k = 0; k < p.n; ++k)
      if (tokens.emplace(flat(x.col(k)), 0).second) p.vocab.push_back(x.col(k));
  }
  if (points < 2) throw Error("memorize needs at least two distinct labelled points");
  for (std::size_t j = 0; j < p.work.sequences.size(); ++j) {  // the masks of what counts
    Sequence& w = p.work.sequences[j];
    std::sort(p.counted[j].begin(), p.counted[j].end());
    w.mask.assign(static_cast<std::size_t>(p.n), 0);
    for (int k : p.counted[j])
      w.mask[static_cast<std::size_t>(k)] = 1;
  }
  p.work.d = p.d;
  p.work.label_dim = 1;
  return p;
}

// ---- draw: the tokens' line, the scores, the positions --------------------------------------------

LayerSpec averaging_attention(int n, bool causal) {
  LayerSpec a = blocks::rank1_attention(false);
  a.rpe = Rpe::t5;
  a.dp_free = true;
  a.causal = causal;
  a.t5_buckets = (causal ? 2 : 4) * n;  // distances 0 … n − 1 each get a bucket of their own
  a.t5_max_distance = a.t5_buckets / 2 + 1;
  return a;
}

struct Drawn {
  Vec<Rational> v;
  Network<Rational> attention;
};

Drawn draw(const Prepared& p, Setting setting, std::uint64_t seed) {
  Rng rng(seed);
  Drawn dr;
  dr.v = Vec<Rational>(p.d);
  for (int i = 0; i < p.d; ++i)
    dr.v(i) = rational_of(rng.gauss());
  const bool next = setting == Setting::next_token;
  const LayerSpec spec = averaging_attention(p.n, next);
  std::vector<Rational> scores(static_cast<std::size_t>(spec.t5_buckets));
  for (Rational& b : scores)  // uniform on [0, 1), on the grid 2^-20
    b = Rational(static_cast<long>(rng.uniform() * (1 << 20)), 1L << 20);
  blocks::Builder b(p.d, next ? 0 : p.n);
  b.add(spec, [&](Layer<Rational>& L) {
    L.wv = dr.v.transpose();
    L.wo = dr.v;
    for (std::size_t j = 0; j < scores.size(); ++j)
      L.rpe(0, static_cast<Eigen::Index>(j)) = scores[j];
  });
  if (!next) {  // seq-to-seq: a Gaussian positional table at the scale of the tokens
    double scale = 0;
    for (const Vec<Rational>& x : p.vocab)
      for (Eigen::Index i = 0; i < x.size(); ++i)
        scale = std::max(scale, std::abs(Scalar<Rational>::to_double(x(i))));
    if (scale == 0) scale = 1;
    b.positions([&rng, scale](Mat<Rational>& pe) {  // called by build(), after this block: scale by value
      for (Eigen::Index k = 0; k < pe.cols(); ++k)
        for (Eigen::Index i = 0; i < pe.rows(); ++i)
          pe(i, k) = rational_of(scale * rng.gauss());
    });
  }
  dr.attention = b.build();
  return dr;
}

// ---- ids: t = vᵀz at every counted token, certified apart ------------------------------------------

struct Located {
  Mpfi t;
  std::size_t seq = 0;
  int token = 0;
};

// The points' ids at the precision in force, sorted; false unless consecutive ids are certified apart.
bool ids_apart(const Prepared& p, const Drawn& dr, std::vector<Located>& ids) {
  const Network<Mpfi> net = network_cast<Mpfi>(dr.attention);
  const Vec<Mpfi> v = dr.v.unaryExpr([](const Rational& q) { return Scalar<Mpfi>::from(q); });
  std::vector<std::vector<Located>> per(p.work.sequences.size());
  parallel_for(
      static_cast<long>(per.size()),
      [&](long i) {
        const auto j = static_cast<std::size_t>(i);
        EvalOptions from;  // the counted queries' outputs alone (next-token: the last)
        from.first_query = p.counted[j].front();
        const Mat<Mpfi> z = forward(net, matrix_cast<Mpfi>(p.work.sequences[j].x), from);
        for (int k : p.counted[j])
          per[j].push_back({Mpfi(v.dot(z.col(k))), j, k});
      },
      16);
  ids.clear();
  for (auto& v_ : per)
    ids.insert(ids.end(), v_.begin(), v_.end());
  std::sort(ids.begin(), ids.end(),
            [](const Located& a, const Located& b) { return mp::median(a.t) < mp::median(b.t); });
  for (std::size_t i = 0; i + 1 < ids.size(); ++i)
    if (!(upper(ids[i].t) < lower(ids[i + 1].t))) return false;
  return true;
}

// γ: the smallest |vᵀx − vᵀx'| over distinct tokens, exact (0 when v does not tell two apart).
Rational token_gamma(const Prepared& p, const Vec<Rational>& v) {
  std::vector<Rational> a;
  for (const Vec<Rational>& x : p.vocab)
    a.push_back(v.dot(x));
  std::sort(a.begin(), a.end());
  Rational g = a.size() > 1 ? a[1] - a[0] : Rational(0);
  for (std::size_t i = 2; i < a.size(); ++i)
    g = std::min(g, a[i] - a[i - 1]);
  return g;
}

// ε: the smallest distance between distinct tokens, in double (a sweep along the first coordinate).
double token_epsilon(const Prepared& p) {
  std::vector<std::vector<double>> x;
  for (const Vec<Rational>& t : p.vocab) {
    std::vector<double> c;
    for (Eigen::Index i = 0; i < t.size(); ++i)
      c.push_back(Scalar<Rational>::to_double(t(i)));
    x.push_back(std::move(c));
  }
  std::sort(x.begin(), x.end());
  double best = kInf;
  for (std::size_t i = 0; i < x.size(); ++i)
    for (std::size_t j = i + 1; j < x.size() && x[j][0] - x[i][0] < best; ++j) {
      double sq = 0;
      for (std::size_t r = 0; r < x[i].size(); ++r)
        sq += (x[j][r] - x[i][r]) * (x[j][r] - x[i][r]);
      best = std::min(best, std::sqrt(sq));
    }
  return best;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

double information_bits(std::size_t q, long long L) {
  if (L <= 1) return 0;
  mpfr_t b;
  mpfr_init2(b, 64);
  mpfr_set_ui(b, static_cast<unsigned long>(L), MPFR_RNDD);  // exact: L < 2^64
  mpfr_log2(b, b, MPFR_RNDD);
  mpfr_mul_ui(b, b, static_cast<unsigned long>(q), MPFR_RNDD);
  const double bits = mpfr_get_d(b, MPFR_RNDD);
  mpfr_clear(b);
  return bits;
}

json Ids::report() const {
  auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  return {{"count", count},
          {"log10_delta_certified", num(log10_delta)},
          {"log10_delta_bound", num(log10_delta_bound)},
          {"delta_at_least_bound", bound_holds},
          {"log10_gamma", num(log10_gamma)},
          {"log10_gamma_bound_measured", num(log10_gamma_bound)},
          {"vocabulary", vocabulary},
          {"token_gap_measured", num(token_gap)},
          {"draw", draw},
          {"bits", bits}};
}

json Memorized::report() const {
  auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  const double N = static_cast<double>(distinct);
  return {{"setting", setting_names(setting)},
          {"sequences", sequences},
          {"distinct_sequences", distinct},
          {"n", n},
          {"d", d},
          {"ids", ids.report()},
          {"deep_plan", plan},
          {"max_error_certified", num(max_error)},
          {"bits_used", bits_used},
          {"min_bits", min_bits},
          {"float64_works", float64_works},
          {"float64_max_error", num(float64_max_error)},
          {"accounting",
           {{"parameters_stored", stored.parameters},
            {"parameters_nonzero", stored.nonzero},
            {"parameters_plan", plan_parameters},
            {"max_weight_bits", stored.max_bits},
            {"total_weight_bits", stored.total_bits},
            {"non_dyadic_weights", stored.non_dyadic},
            {"min_bits_x_parameters", static_cast<double>(min_bits) * static_cast<double>(stored.parameters)},
            {"label_count", label_count},
            // Vardi, Yehudai & Shamir's trade-off in its counting form: parameters × bits ≳ N.
            {"information_bits_lower", information_bits(ids.count, label_count)},
            {"parameters_over_sqrt_points",
             static_cast<double>(stored.parameters) / std::sqrt(static_cast<double>(ids.count))},
            {"parameters_over_sqrt_N", static_cast<double>(stored.parameters) / std::sqrt(N)}}},
          {"seconds",
           {{"build", seconds_build}, {"certify", seconds_certify}, {"min_bits_search", seconds_min_bits}}}};
}

Memorized memorize(const Dataset& ds, const Options& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const Rational tol_q = [&] {
    try {
      return parse_rational(opt.tolerance);
    } catch (const Error& e) {
      throw Error(std::string("tolerance: ") + e.what());
    }
  }();
  if (tol_q <= 0) throw Error("tolerance must be positive, got " + limits::excerpt(opt.tolerance));
  const Prepared p = prepare(ds, opt.setting, opt.max_points, opt.seed);
  Memorized m;
  m.setting = opt.setting;
  m.sequences = ds.sequences.size();
  m.distinct = p.work.sequences.size();
  m.n = p.n, m.d = p.d;
  m.label_count = p.label_count;
  const bool next = opt.setting == Setting::next_token;

  // Draws until the ids are certified apart (next-token: and at least the derived bound apart).
  std::vector<Located> ids;
  Drawn dr;
  bool found = false;
  m.ids.vocabulary = p.vocab.size();
  m.ids.token_gap = token_epsilon(p);
  for (int k = 0; k < opt.draws && !found; ++k) {
    dr = draw(p, opt.setting, opt.seed + static_cast<std::uint64_t>(k));
    const Rational gamma = token_gamma(p, dr.v);
    if (next && gamma == 0) continue;  // v sends two tokens to one point
    for (unsigned bits = 128; bits <= 1024 && !found; bits *= 2) {
      const MpfrPrecision precision(bits);
      report(opt.progress,
             "memorize: ids of draw " + std::to_string(k + 1) + " at " + std::to_string(bits) + " bits", 0,
             0);
      if (!ids_apart(p, dr, ids)) continue;
      Mpfr delta = lower(Mpfi(ids[1].t - ids[0].t));  // lower ends of interval differences: rounded down
      for (std::size_t i = 1; i + 1 < ids.size(); ++i) {
        const Mpfr gap = lower(Mpfi(ids[i + 1].t - ids[i].t));
        if (gap < delta) delta = gap;
      }
      m.ids.log10_delta = log10_down(delta);
      m.ids.log10_gamma = log10_down(lower(Scalar<Mpfi>::from(gamma)));
      m.ids.bits = bits;
      m.ids.draw = k + 1;
      m.ids.count = ids.size();
      if (next) {  // δ ≥ ‖v‖²·γ / (2e·n·N²), the bound of docs/theory/optimal-capacity.md
        const Mpfi N(static_cast<double>(p.work.sequences.size()));
        const Mpfi bound = Scalar<Mpfi>::from(Rational(dr.v.squaredNorm() * gamma)) /
                           (Mpfi(2) * mp::exp(Mpfi(1)) * Mpfi(p.n) * N * N);
        m.ids.log10_delta_bound = log10_up(upper(bound));
        m.ids.bound_holds = upper(bound) <= delta;
        const double m2 = static_cast<double>(p.vocab.size()) * static_cast<double>(p.vocab.size());
        m.ids.log10_gamma_bound = std::log10(std::sqrt(kPi / 2) * m.ids.token_gap / m2);
        if (!m.ids.bound_holds) break;  // another draw
      } else {
        m.ids.log10_delta_bound = m.ids.log10_gamma_bound = std::nan("");
      }
      found = true;
    }
  }
  if (!found)
    throw Error("no draw of " + std::to_string(opt.draws) + " separated the ids" +
                (next ? " by the derived bound" : "") + " within 1024 bits");

  // The deep value map over the ids (their enclosures at the bits they were found apart at).
  std::vector<deep::Point> pts;
  {
    const MpfrPrecision precision(m.ids.bits);
    for (const Located& l : ids)
      pts.push_back({Scalar<Mpfr>::to_rational(lower(l.t)), Scalar<Mpfr>::to_rational(upper(l.t)),
                     class_label(p.work.sequences[l.seq].y(0, l.token), 1L << 20)});
  }
  const deep::Plan plan = deep::plan(dr.attention, pts, opt.blocks);
  m.plan = plan.report();
  m.plan_parameters = plan.parameters;
  m.net = deep::build(dr.attention, dr.v, pts, plan);
  m.seconds_build = since(t0);
  // Token ids: the embedding in front; lifted tokens: the projection [I; 0] (the certificate runs on
  // the vectors they give, exactly, before them).
  const auto finish = [&] {
    if (p.embed.size() > 0) {
      m.net.arch.vocab = static_cast<int>(p.embed.cols());
      m.net.arch.validate();
      m.net.embed = p.embed;
      m.plan_parameters += p.embed.size();
    }
    if (p.lifted_from > 0) {
      if (m.net.arch.input > 0) throw Error("internal: the value map has an input projection already");
      m.net.arch.input = p.lifted_from;
      m.net.arch.validate();
      m.net.in_w = Mat<Rational>::Zero(p.d, p.lifted_from);
      m.net.in_w.topRows(p.lifted_from) = Mat<Rational>::Identity(p.lifted_from, p.lifted_from);
      m.net.in_b = Mat<Rational>::Zero(p.d, 1);
      m.plan_parameters += m.net.in_w.size() + m.net.in_b.size();
    }
    m.stored = count_stored_bits(m.net);
  };
  if (!opt.certify) {
    m.max_error = m.float64_max_error = std::nan("");
    finish();
    return m;
  }

  // The certificate: every counted output within the tolerance, from the payload's bits up.
  const auto t1 = std::chrono::steady_clock::now();
  double tol = 0;
  std::vector<double> spare;
  const unsigned first = static_cast<unsigned>(
      std::min<long long>(std::max<long long>(plan.payload_bits + 32, m.ids.bits), opt.max_bits));
  const Doubling done = certify_with_doubling(first, opt.max_bits, [&](unsigned asked) {
    const unsigned bits = mpfr_carried_bits(asked);
    {
      const MpfrPrecision precision(bits);
      tol = to_double_down(lower(Scalar<Mpfi>::from(tol_q)));
    }
    m.max_error = kajitsuka::certified_max_error(
        m.net, p.work, bits, kInf,
        [&](const std::string&, long long i, long long total) {
          report(opt.progress, "memorize: certify every point at " + std::to_string(bits) + " bits", i,
                 total);
        },
        true, {}, &spare, tol);
    m.bits_used = bits;
    return m.max_error <= tol;
  });
  if (!done.finished)
    throw Error("memorization not certified within " + std::to_string(mpfr_carried_bits(done.bits)) +
                " bits (--max-bits)");
  m.seconds_certify = since(t1);
  const auto t2 = std::chrono::steady_clock::now();
  m.min_bits = m.bits_used;
  if (opt.search_min_bits) {
    const std::vector<std::size_t> order = least_spare_first(spare);
    m.min_bits = min_certified_bits(
        m.bits_used,
        [&](unsigned b) {
          report(opt.progress,
                 "memorize: smallest certified precision, trying " + std::to_string(b) + " bits", 0, 0);
          return kajitsuka::certified_max_error(m.net, p.work, b, tol, {}, true, order) <= tol;
        },
        guess_fewest_bits(spare, m.bits_used));
  }
  m.seconds_min_bits = since(t2);

  // float64: the weights rounded to double, the counted outputs evaluated in double.
  try {
    const Network<double> nd = network_cast<double>(m.net);
    double worst = 0;
    for (std::size_t j = 0; j < p.work.sequences.size(); ++j) {
      const Sequence& s = p.work.sequences[j];
      const Mat<double> y = forward(nd, matrix_cast<double>(s.x));
      for (int k : p.counted[j]) {
        const double e = std::abs(y(0, k) - Scalar<Rational>::to_double(s.y(0, k)));
        worst = std::isfinite(e) ? std::max(worst, e) : kInf;
      }
    }
    m.float64_max_error = worst;
  } catch (const Error&) {  // a weight beyond double's range
    m.float64_max_error = kInf;
  }
  m.float64_works = m.float64_max_error <= Scalar<Rational>::to_double(tol_q);
  finish();
  return m;
}

}  // namespace uatlab::optimal
