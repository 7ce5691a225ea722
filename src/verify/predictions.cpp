// The predictions of a network on labelled data, certified in MPFI, and the exact rounding of
// weights to float32 / bfloat16 / float16 (analyse.hpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include "../chunks.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/train/backward.hpp"
#include "uatlab/verify/affine.hpp"
#include "uatlab/verify/analyse.hpp"
#include "uatlab/verify/bounds.hpp"
#include "uatlab/verify/certified.hpp"
#include "uatlab/verify/evaluate.hpp"
#include "uatlab/verify/precision.hpp"
#include "uatlab/verify/zonotope.hpp"

namespace uatlab {

namespace {

// The dataset fits the network: input kind and width, labels on every sequence, their shape.
void check_fit(const Network<Rational>& net, const Dataset& ds, LabelKind kind) {
  const Architecture& a = net.arch;
  if (a.pool) throw Error("analyse: pooled networks (one output per sequence) are not supported");
  a.check_token_kind(ds.token_input);
  if (!ds.token_input) a.check_width(ds.d);
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

// Linear functionals of the outputs over the box B = x0 ± e by the mean-value form: f(x) ∈ f(x0) +
// ∇f(B)·(x − x0), ∇f(B) enclosing f's gradient at every point of B (the training forward over B
// once, then one backward pass per functional, in intervals; backward_from). `cont` takes the
// input x0 is in (embedded tokens for a token-id network: its embedding removed).
class MeanValue {
 public:
  MeanValue(const Network<Mpfi>& cont, const Mat<Mpfi>& x0, const Mat<Mpfi>& box, const Mpfi& e)
      : cont_(cont), y0_(forward(cont, x0)), step_(hull(-upper(e), upper(e))), grad_(input_only_like(cont)) {
    const Eigen::Index n = x0.cols();
    batch_.x = box, batch_.start = {0, n}, batch_.target = Mat<Mpfi>::Zero(cont.arch.out_dim(), n);
    batch_.mask.assign(static_cast<std::size_t>(n), 1);
    forward_train(cont, batch_, Loss::mse, trace_);
  }
  const Mat<Mpfi>& at_x0() const { return y0_; }
  // Output a of token k, less output b when b >= 0 (a class margin: its own gradient, tighter than
  // the difference of two enclosures).
  Mpfi operator()(Eigen::Index k, Eigen::Index a, Eigen::Index b = -1) {
    Mat<Mpfi> dy = Mat<Mpfi>::Zero(y0_.rows(), y0_.cols());
    dy(a, k) = 1;
    Mpfi acc = y0_(a, k);
    if (b >= 0) dy(b, k) = -1, acc -= y0_(b, k);
    backward_from(cont_, batch_, trace_, std::move(dy), grad_, &dx_);  // the input's gradient only
    for (Eigen::Index j = 0; j < dx_.size(); ++j)
      acc += dx_(j) * step_;
    return acc;
  }

 private:
  const Network<Mpfi>& cont_;
  const Mat<Mpfi> y0_;
  const Mpfi step_;  // x − x0 for every x in B
  Network<Mpfi> grad_;
  Batch<Mpfi> batch_;
  Trace<Mpfi> trace_;
  Mat<Mpfi> dx_;
};

// The verdict on one sequence's predictions from the enclosure y of its outputs (classes: each
// margin y_c − y_r, or mv_margin's where a region method gave its own); evaluated = false: every
// prediction undecided.
struct Verdict {
  long long counted = 0, certified = 0;
  std::vector<PredictionFailure> failures;
  double spare = std::nan("");  // the least spare bits over its predictions (NaN: not judged)
  std::vector<double> margin;   // per counted token, rounded down
};
Verdict judge(std::size_t i, const Sequence& s, LabelKind kind, const Mpfi& tol, bool evaluated,
              const Mat<Mpfi>& y, const std::optional<Mat<Mpfi>>& mv_margin) {
  Verdict v;
  v.spare = kInf;
  for (Eigen::Index k = 0; k < static_cast<Eigen::Index>(s.n()); ++k) {
    if (!s.mask.empty() && !s.mask[static_cast<std::size_t>(k)]) continue;
    ++v.counted;
    PredictionFailure f{i, static_cast<std::size_t>(k), FailureKind::undecided, "", "?"};
    bool certified = false, wrong = false;
    Mpfr margin;            // a lower bound, rounded down
    bool margined = false;  // set once a margin is computed
    // One check "above > below" (or ≥): its spare bits (an estimate, over enclosures of total
    // width `width`) and its margin above − below, rounded down; the prediction keeps the least.
    auto check = [&](const Mpfr& above, const Mpfr& below, double width) {
      v.spare = std::min(v.spare, spare_bits(above - below, width));
      Mpfr m = above;
      mpfr_sub(m.backend().data(), m.backend().data(), below.backend().data(), MPFR_RNDD);
      if (!margined || m < margin) margin = m, margined = true;
    };
    if (kind == LabelKind::classes) {
      const long c = numerator(s.y(0, k)).convert_to<long>();
      f.label = std::to_string(c);
      if (evaluated) {
        certified = true;
        Eigen::Index best = 0;
        for (Eigen::Index r = 0; r < y.rows(); ++r) {
          if (Scalar<Mpfi>::to_double(y(r, k)) > Scalar<Mpfi>::to_double(y(best, k))) best = r;
          if (r == c) continue;
          if (mv_margin) {
            const Mpfi& m = (*mv_margin)(r, k);
            if (!(lower(m) > 0)) certified = false;
            if (upper(m) < 0) wrong = true;
            check(lower(m), Mpfr(0), enclosure_width(m));
            continue;
          }
          if (!(lower(y(c, k)) > upper(y(r, k)))) certified = false;
          if (lower(y(r, k)) > upper(y(c, k))) wrong = true;
          check(lower(y(c, k)), upper(y(r, k)), enclosure_width(y(c, k)) + enclosure_width(y(r, k)));
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
          check(lower(tol), upper(e), enclosure_width(y(r, k)));
        }
        f.predicted = midpoints(y, k);
      }
    }
    v.margin.push_back(!evaluated ? -kInf : margined ? to_double_down(margin) : kInf);
    if (certified) {
      ++v.certified;
    } else {
      v.spare = -kInf;
      f.kind = wrong ? FailureKind::wrong : FailureKind::undecided;
      v.failures.push_back(f);
    }
  }
  return v;
}

// The verdicts of every sequence (in order) as one Predictions at `bits`.
Predictions collect(LabelKind kind, unsigned bits, std::vector<Verdict>&& verdicts) {
  Predictions p;
  p.kind = kind, p.bits = bits;
  for (Verdict& v : verdicts) {
    p.tokens += v.counted, p.certified += v.certified;
    for (PredictionFailure& f : v.failures)
      p.failures.push_back(std::move(f));
    p.margin.push_back(std::move(v.margin)), p.spare_bits.push_back(v.spare);
  }
  return p;
}

// engine_region_predictions in B: Ball53 or Ball113.
template <class B>
Predictions region_in_balls(const Network<B>& net, const Dataset& ds, LabelKind kind,
                            const Rational& tolerance, const std::vector<Rational>& epsilon) {
  if (epsilon.size() != ds.sequences.size())
    throw Error("engine_region_predictions: " + std::to_string(epsilon.size()) + " radii for " +
                std::to_string(ds.sequences.size()) + " sequences");
  const MpfrPrecision precision(std::is_same_v<B, Ball53> ? 64 : 128);  // as the engine's
  const Mpfi tol = Scalar<Mpfi>::from(tolerance);
  const long N = static_cast<long>(ds.sequences.size());
  std::vector<Verdict> verdicts(static_cast<std::size_t>(N));
  in_parallel_chunks(
      N,
      [&](long i) {
        const Sequence& s = ds.sequences[static_cast<std::size_t>(i)];
        Mat<Mpfi> y;
        bool evaluated = true;
        try {
          Mat<B> x = ds.token_input ? embed_tokens(net, s.tokens) : matrix_cast<B>(s.x);
          const B box(0.0, to_double_up(upper(Scalar<Mpfi>::from(epsilon[static_cast<std::size_t>(i)]))));
          for (Eigen::Index j = 0; j < x.size(); ++j)
            x(j) += box;  // every coordinate ± ε, the radii added rounded up
          y = forward(net, x).unaryExpr([](const B& v) { return to_mpfi(v); });
        } catch (const Error&) {  // a NaN or an undecided hardmax: nothing decided
          evaluated = false;
        }
        verdicts[static_cast<std::size_t>(i)] =
            judge(static_cast<std::size_t>(i), s, kind, tol, evaluated, y, std::nullopt);
      },
      [](long) { return true; });
  Predictions p = collect(kind, 0, std::move(verdicts));
  p.tier = Scalar<B>::name;
  return p;
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
                                bool stop_at_failure, bool affine, const std::vector<std::size_t>& order,
                                const std::vector<Rational>& epsilon, RegionMethod method) {
  check_fit(net, ds, kind);
  if (!epsilon.empty() && epsilon.size() != ds.sequences.size())
    throw Error("certify_predictions: " + std::to_string(epsilon.size()) + " radii for " +
                std::to_string(ds.sequences.size()) + " sequences");
  for (const Rational& e : epsilon)
    if (e < 0) throw Error("analyse: the radius epsilon must be >= 0, got " + e.str());
  if (!epsilon.empty() && affine)
    throw Error(
        "analyse: --epsilon and --affine together are not supported (affine pieces need point inputs)");
  check_order(order, ds.sequences.size(), "certify_predictions");
  if (!epsilon.empty() && method == RegionMethod::balls)
    throw Error("certify_predictions: the balls region method runs in analyse (engine_region_predictions)");
  // The memory estimated first: the network in MPFI and the passes' numbers (evaluation_numbers),
  // and for the mean-value form a copy of the weights and, per thread, their gradients and the
  // training trace (about the activations of every sub-layer).
  {
    long long numbers = evaluation_numbers(net.arch, ds, false);
    if (!epsilon.empty() && method == RegionMethod::mean_value) {
      const long long threads = omp_get_max_threads(), params = net.parameter_count();
      numbers = limits::saturating_add(
          numbers, limits::saturating_add(
                       params, limits::saturating_mul(threads, limits::saturating_mul(2, numbers))));
    }
    limits::check_memory(numbers, bits, 2, "analyse at " + std::to_string(bits) + " bits");
  }
  const MpfrPrecision precision(bits);
  std::optional<AffineForward> af;  // at points: one-direction sub-layers always, patterns with affine
  if (!ds.token_input && epsilon.empty()) af.emplace(net, affine);
  const Network<Mpfi> ni = af ? Network<Mpfi>() : network_cast<Mpfi>(net);  // one of the two
  const bool mean_value = !epsilon.empty() && method == RegionMethod::mean_value;
  const bool zonotope = !epsilon.empty() && method == RegionMethod::zonotope;
  if (zonotope) {  // refused for the whole run, named (inside a pass it would read as undecided)
    check_zonotope_supported(net.arch);
    std::size_t longest = 0;
    for (const Sequence& s : ds.sequences)
      longest = std::max(longest, s.n());
    check_zonotope_memory(net.arch, static_cast<Eigen::Index>(longest),
                          ds.token_input ? net.arch.d : net.arch.in_dim(),
                          std::min<int>(omp_get_max_threads(),
                                        static_cast<int>(std::max<std::size_t>(ds.sequences.size(), 1))));
  }
  if (mean_value) try {
      check_differentiable(net.arch);
    } catch (const Error& e) {
      throw Error(std::string("analyse: the mean-value region method needs the network's gradient: ") +
                  e.what());
    }
  Network<Mpfi> cont;  // the mean-value form's network: continuous inputs (embedded tokens)
  if (mean_value) {
    cont = ni;
    cont.arch.vocab = 0, cont.embed = Mat<Mpfi>();
  }
  const Mpfi tol = Scalar<Mpfi>::from(tolerance);
  const long N = static_cast<long>(ds.sequences.size());
  std::vector<Verdict> verdicts(static_cast<std::size_t>(N));  // skipped after a failure: left empty
  bool failed = false;
  auto one = [&](long started) {
    const auto i = static_cast<long>(started_item(order, static_cast<std::size_t>(started)));
    bool skip;
#pragma omp atomic read
    skip = failed;
    if (skip && stop_at_failure) return;
    const Sequence& s = ds.sequences[static_cast<std::size_t>(i)];
    Mat<Mpfi> y;
    std::optional<Mat<Mpfi>> mv_margin;  // the region method's class margins (row r: y_c − y_r)
    bool evaluated = true;
    try {
      if (!epsilon.empty()) {  // every input in the box: each coordinate of each token's vector ± ε
        const Mat<Mpfi> x0 = ds.token_input ? embed_tokens(ni, s.tokens) : matrix_cast<Mpfi>(s.x);
        const Mpfi e = Scalar<Mpfi>::from(epsilon[static_cast<std::size_t>(i)]);
        Mat<Mpfi> x = x0;
        for (Eigen::Index j = 0; j < x.size(); ++j)
          x(j) = hull(lower(Mpfi(x(j) - e)), upper(Mpfi(x(j) + e)));
        if (mean_value || zonotope) {
          // The outputs' linear functionals over the box: output a of token k, less output b when
          // b >= 0 (a class margin), by the method asked for.
          std::optional<MeanValue> mv;
          std::optional<Zonotope> z;
          if (mean_value)
            mv.emplace(cont, x0, x, e);
          else
            z = zonotope_forward(ni, x0, epsilon[static_cast<std::size_t>(i)]);
          auto functional = [&](Eigen::Index k, Eigen::Index a, Eigen::Index b = -1) {
            return mv ? (*mv)(k, a, b) : z->enclose(a, k, b);
          };
          std::optional<Mat<Mpfi>> plain;
          try {
            plain = forward(ni, x);
          } catch (const Error&) {  // an unbounded enclosure: the method's alone
          }
          // Classes: each margin y_c − y_r of a counted token; values: each output. Intersected with
          // what the intervals give (both enclose the same values).
          if (plain) {
            y = *plain;
          } else if (mv) {
            y = mv->at_x0();  // classes: the predicted label's text only
          } else {
            y = Mat<Mpfi>(z->rows(), z->cols());
            for (Eigen::Index k = 0; k < y.cols(); ++k)
              for (Eigen::Index r = 0; r < y.rows(); ++r)
                y(r, k) = z->enclose(r, k);
          }
          if (kind == LabelKind::classes) mv_margin = Mat<Mpfi>(y.rows(), y.cols());
          for (Eigen::Index k = 0; k < y.cols(); ++k) {
            if (!s.mask.empty() && !s.mask[static_cast<std::size_t>(k)]) continue;
            const long c = kind == LabelKind::classes ? numerator(s.y(0, k)).convert_to<long>() : -1;
            for (Eigen::Index r = 0; r < y.rows(); ++r) {
              if (c < 0) {
                y(r, k) = plain ? intersect(functional(k, r), (*plain)(r, k)) : functional(k, r);
              } else if (r != c) {
                const Mpfi m = functional(k, c, r);
                (*mv_margin)(r, k) = plain ? intersect(m, Mpfi((*plain)(c, k) - (*plain)(r, k))) : m;
              }
            }
          }
        } else {
          y = forward(ni, x);
        }
      } else {
        y = ds.token_input ? forward_tokens(ni, s.tokens)
            : af           ? (*af)(matrix_cast<Mpfi>(s.x))
                           : forward(ni, matrix_cast<Mpfi>(s.x));
      }
    } catch (const Error&) {  // shapes were checked: an undecided hardmax or an unbounded enclosure
      evaluated = false;
    } catch (const mp::interval_error&) {  // a branch on an enclosure that spans both sides: undecided
      evaluated = false;
    }
    Verdict& v = verdicts[static_cast<std::size_t>(i)];
    v = judge(static_cast<std::size_t>(i), s, kind, tol, evaluated, y, mv_margin);
    if (!v.failures.empty()) {
#pragma omp atomic write
      failed = true;
    }
  };
  in_parallel_chunks(N, one, [&](long done) {
    report(progress, "analyse: certify predictions at " + std::to_string(bits) + " bits", done, N);
    return !(failed && stop_at_failure);
  });
  return collect(kind, bits, std::move(verdicts));
}

Predictions engine_predictions(const Network<Rational>& net, const Dataset& ds, LabelKind kind,
                               const Rational& tolerance, const OnProgress& progress) {
  check_fit(net, ds, kind);
  CertifiedOptions opt;
  opt.max_bits = 0, opt.layer_widths = false;  // the ball tiers: past them, MPFI's own search
  const NetworkSource src = held_source(net);
  std::vector<CertifiedOutput> out = certified_eval(src, ds, opt, progress);
  std::vector<Verdict> verdicts(out.size());
  auto judged = [&](std::size_t i) {     // true: some prediction left undecided
    const MpfrPrecision precision(128);  // the enclosures' ends are doubles or binary128 numbers
    const Mpfi tol = Scalar<Mpfi>::from(tolerance);
    verdicts[i] = judge(i, ds.sequences[i], kind, tol, out[i].tier != "none", out[i].y, std::nullopt);
    return std::any_of(verdicts[i].failures.begin(), verdicts[i].failures.end(),
                       [](const PredictionFailure& f) { return f.kind == FailureKind::undecided; });
  };
  // A sequence ball:53 left undecided (its widths reached the engine's default goal) again, from
  // ball:113 on, asked for the narrowest width it can reach.
  Dataset again = ds;
  again.sequences.clear();
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (judged(i) && out[i].tier == "ball:53") again.sequences.push_back(ds.sequences[i]), which.push_back(i);
  if (!which.empty()) {
    opt.max_width = 0x1p-1000, opt.ball53 = false;
    std::vector<CertifiedOutput> more = certified_eval(src, again, opt, progress);
    for (std::size_t j = 0; j < which.size(); ++j)
      out[which[j]] = std::move(more[j]), judged(which[j]);
  }
  std::map<std::string, long> decided;  // sequences per tier
  for (const CertifiedOutput& o : out)
    if (o.tier != "none") ++decided[o.tier];
  Predictions p = collect(kind, 0, std::move(verdicts));
  for (const auto& [tier, n] : decided)
    p.tier += (p.tier.empty() ? "" : ", ") + tier +
              (decided.size() > 1 ? " (" + std::to_string(n) + ")" : std::string());
  if (p.tier.empty()) p.tier = "none";
  return p;
}

bool labels_at_rounded_bits(const Network<Rational>& net, const Dataset& ds, LabelKind kind,
                            const Rational& tolerance, unsigned bits) {
  check_fit(net, ds, kind);
  const MpfrPrecision precision(bits);
  const Network<Mpfr> rounded = network_cast<Mpfr>(net);  // each weight rounded to nearest at `bits`
  const Mpfi tol = Scalar<Mpfi>::from(tolerance);
  std::vector<char> reproduced(ds.sequences.size(), 1);
  parallel_for(static_cast<long>(ds.sequences.size()), [&](long i) {
    const Sequence& s = ds.sequences[static_cast<std::size_t>(i)];
    bool evaluated = true;
    Mat<Mpfi> y;
    try {
      const Mat<Mpfr> point =
          ds.token_input ? forward_tokens(rounded, s.tokens) : forward(rounded, matrix_cast<Mpfr>(s.x));
      y = point.unaryExpr([](const Mpfr& v) { return hull(v, v); });  // the point itself: judged exactly
    } catch (const Error&) {  // a NaN or an undecided hardmax at these bits: not reproduced
      evaluated = false;
    }
    reproduced[static_cast<std::size_t>(i)] =
        judge(static_cast<std::size_t>(i), s, kind, tol, evaluated, y, std::nullopt).failures.empty();
  });
  return std::all_of(reproduced.begin(), reproduced.end(), [](char r) { return r != 0; });
}

Predictions engine_region_predictions(const Network<Ball53>& net, const Dataset& ds, LabelKind kind,
                                      const Rational& tolerance, const std::vector<Rational>& epsilon) {
  return region_in_balls(net, ds, kind, tolerance, epsilon);
}
Predictions engine_region_predictions(const Network<Ball113>& net, const Dataset& ds, LabelKind kind,
                                      const Rational& tolerance, const std::vector<Rational>& epsilon) {
  return region_in_balls(net, ds, kind, tolerance, epsilon);
}

std::vector<std::size_t> Predictions::hardest_first() const {
  return least_spare_first(spare_bits);
}

unsigned Predictions::guess_min_bits() const {
  return guess_fewest_bits(spare_bits, bits);
}

Rational round_weight(const Rational& x, const std::string& format, bool direct, bool& overflow) {
  const WeightFormat& f32 = kWeightFormats[0];
  for (const WeightFormat& f : kWeightFormats) {
    if (format != f.name) continue;
    const Rational y = direct || &f == &f32 ? x : round_to_format(x, f32.p, f32.emin, f32.emax, overflow);
    return overflow ? x : round_to_format(y, f.p, f.emin, f.emax, overflow);
  }
  throw Error("unknown format \"" + format + "\" (float32, bfloat16, float16)");
}

std::string rounding_path(const std::string& format, bool direct) {
  return format == "float32" || direct ? "to " + format : "to float32 then " + format;
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

}  // namespace uatlab
