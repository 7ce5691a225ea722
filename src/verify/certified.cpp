#include "uatlab/verify/certified.hpp"

#include <omp.h>

#include <algorithm>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>

#include "../chunks.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/verify/bounds.hpp"
#include "uatlab/verify/evaluate.hpp"

namespace uatlab {

double relative_width(const Mpfi& x) {
  Mpfr w, scale;
  mpfr_sub(w.backend().data(), upper(x).backend().data(), lower(x).backend().data(), MPFR_RNDU);
  mpfr_abs(scale.backend().data(), mp::median(x).backend().data(), MPFR_RNDD);
  if (scale < 1) scale = 1;
  if (mpfr_nan_p(w.backend().data())) return kInf;
  mpfr_div(w.backend().data(), w.backend().data(), scale.backend().data(), MPFR_RNDU);
  return to_double_up(w);
}

namespace {

// The widest entry of a matrix of enclosures, rounded up.
template <class S>
double widest(const Mat<S>& m) {
  double w = 0;
  for (const S& v : m.reshaped()) {
    if constexpr (is_ball_v<S>)
      w = std::max(w, 2 * v.r);
    else
      w = std::max(w, to_double_up(mp::width(v)));
  }
  return w;
}

// The widest entry of a matrix of balls relative to max(1, |midpoint|), about (for a guess).
template <class S>
double widest_relative(const Mat<S>& m) {
  double w = 0;
  if constexpr (is_ball_v<S>)
    for (const S& v : m.reshaped())
      w = std::max(w, 2 * v.r / std::max(1.0, std::abs(static_cast<double>(v.m))));
  return w;
}

template <class S>
Mat<Mpfi> as_mpfi(const Mat<S>& y) {
  if constexpr (is_ball_v<S>)
    return y.unaryExpr([](const S& v) { return to_mpfi(v); });
  else
    return y;
}

// A figure for people (seconds, GiB, estimates), three digits to nearest; a bound goes through
// upper_text (bounds.hpp) instead.
std::string number_text(double w) {
  char t[40];
  std::snprintf(t, sizeof t, "%.3g", w);
  return t;
}

// One tier over the pending sequences: each one's result replaces the one before when it is
// narrower; the sequences that reach the width leave `pending`.
template <class S>
void run_tier(const Loader<S>& load, const std::string& what, const Dataset& ds, const std::string& tier,
              const CertifiedOptions& opt, const OnProgress& progress, std::vector<long>& pending,
              std::vector<CertifiedOutput>& out) {
  // Balls: the numbers, and a product's copies (its midpoints, radii and slices: about 15 numbers
  // of each entry of a block of at most 4,096 rows of the widest matrix).
  const Network<S> net = load([&](const Architecture& arch) {
    double copies = 0;
    for (const LayerSpec& l : arch.layers)
      copies = std::max(copies, 4096.0 * std::max({arch.d, l.width, 3 * l.heads * l.head_size}));
    const double bytes =
        is_ball_v<S>
            ? static_cast<double>(evaluation_numbers(arch, ds, false)) * sizeof(S) + 15 * 16 * copies
            : static_cast<double>(evaluation_numbers(arch, ds, false)) * limits::mpfr_bytes(mpfr_bits()) * 2;
    if (bytes > static_cast<double>(limits::memory_budget()))
      throw Error("certified evaluation of " + what + " in " + tier + " needs about " +
                  number_text(bytes / (1LL << 30)) + " GiB, over the budget (UATLAB_MEMORY_GIB)");
  });
  const long n = static_cast<long>(pending.size());
  std::vector<char> done(static_cast<std::size_t>(n), 0);
  auto one = [&](long j) {
    const long i = pending[static_cast<std::size_t>(j)];
    CertifiedOutput& o = out[static_cast<std::size_t>(i)];
    const Sequence& s = ds.sequences[static_cast<std::size_t>(i)];
    const auto start = std::chrono::steady_clock::now();
    auto seconds = [&] {
      return " (" +
             number_text(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) +
             " s)";
    };
    Activations<S> capture;  // kept past an error: the widths up to the sub-layer that failed
    Activations<S>* cap = opt.layer_widths || std::is_same_v<S, Ball53> ? &capture : nullptr;
    try {
      EvalOptions eval;
      const std::size_t layers = net.layers.size();
      double first = 0;  // the first non-zero relative width, and the sub-layer after which it was seen
      std::size_t first_at = 0;
      eval.after_layer = [&](std::size_t layer) {
        if (n == 1)  // one sequence: its progress is the sub-layers'
          report(progress, "certified " + tier + ", sub-layer", static_cast<long long>(layer) + 1,
                 static_cast<long long>(layers));
        if constexpr (std::is_same_v<S, Ball53>) {
          // ball:53 gives up where its widths, grown at their rate so far, would end far past the
          // target: ball:113 follows (a guess for speed alone; it decides no enclosure).
          const double w = widest_relative(capture.residual.back());
          if (first == 0 && w > 0) first = w, first_at = layer;
          if (first == 0 || layer == first_at) return;
          const double rate = std::pow(w / first, 1.0 / static_cast<double>(layer - first_at)),
                       end = w * std::pow(std::max(rate, 1.0), static_cast<double>(layers - 1 - layer));
          if (end > 1e6 * opt.max_width)
            throw Error("given up after sub-layer " + std::to_string(layer) + ": widths about " +
                        number_text(w) + ", growing about " + number_text(rate) +
                        " times a sub-layer, would reach about " + number_text(end));
        }
      };
      const Mat<S> y = ds.token_input ? forward_tokens(net, s.tokens, eval, cap)
                                      : forward(net, matrix_cast<S>(s.x), eval, cap);
      Mat<Mpfi> enclosure = as_mpfi(y);
      double rel = 0;
      for (const Mpfi& v : enclosure.reshaped())
        rel = std::max(rel, relative_width(v));
      o.tried.push_back(tier + ": " + upper_text(rel, 3) + seconds());
      if (!(rel < o.relative_width) && !o.tier.empty()) return;
      o.y = std::move(enclosure), o.tier = tier, o.relative_width = rel, o.reached = rel <= opt.max_width;
      o.layer_widths.clear();
      for (const Mat<S>& r : capture.residual)
        o.layer_widths.push_back(widest(r));
      if (cap) o.layer_widths.push_back(widest(y));
      done[static_cast<std::size_t>(j)] = o.reached;
    } catch (const std::exception& e) {
      std::string widths;
      for (const Mat<S>& r : capture.residual)
        widths += (widths.empty() ? "" : ", ") + upper_text(widest(r), 3);
      o.tried.push_back(tier + ": " + e.what() + seconds() +
                        (widths.empty() ? "" : "; widest enclosures up to there: " + widths));
      if (o.tier.empty() && o.y.size() == 0) {  // no enclosure yet: the whole line, until a tier gives one
        const Eigen::Index tokens = ds.token_input ? static_cast<Eigen::Index>(s.tokens.size()) : s.x.cols();
        o.y = Mat<Mpfi>::Constant(net.arch.out_dim(), net.arch.pool ? 1 : tokens,
                                  hull(Mpfr(-kInf), Mpfr(kInf)));
      }
    }
  };
  if (n == 1) {  // one sequence: Eigen's products may use every thread
    one(0);
  } else {
    in_parallel_chunks(n, one, [&](long k) {
      report(progress, "certified " + tier, k, n);
      return true;
    });
  }
  std::vector<long> rest;
  for (long j = 0; j < n; ++j)
    if (!done[static_cast<std::size_t>(j)]) rest.push_back(pending[static_cast<std::size_t>(j)]);
  pending = std::move(rest);
}

// The bits an MPFI evaluation needs for the widths, from the narrowest enclosure a ball tier gave:
// the widths scale about as 2^-bits (docs/certified.md); 128 where no ball tier gave one.
unsigned bits_for(const std::vector<long>& pending, const std::vector<CertifiedOutput>& out, double target) {
  double need = 128;
  for (long i : pending) {
    const CertifiedOutput& o = out[static_cast<std::size_t>(i)];
    if (o.tier.empty() || !std::isfinite(o.relative_width)) continue;
    const double from = o.tier == "ball:113" ? 113 : 53;
    need = std::max(need, from + std::log2(std::max(o.relative_width / target, 1.0)) + 8);
  }
  return static_cast<unsigned>(std::min(need, 1e7));
}

}  // namespace

NetworkSource file_source(const std::string& path) {
  NetworkSource s;
  s.name = path;
  s.ball53 = [path](const auto& check) { return load_network<Ball53>(path, check); };
  s.ball113 = [path](const auto& check) { return load_network<Ball113>(path, check); };
  s.mpfi = [path](const auto& check) { return load_network<Mpfi>(path, check); };
  return s;
}

template <class S>
NetworkSource held_source(const Network<S>& net) {
  NetworkSource s;
  s.name = "the network";
  const Network<S>* p = &net;
  s.ball53 = [p](const auto& check) { return check(p->arch), network_cast<Ball53>(*p); };
  s.ball113 = [p](const auto& check) { return check(p->arch), network_cast<Ball113>(*p); };
  s.mpfi = [p](const auto& check) { return check(p->arch), network_cast<Mpfi>(*p); };
  return s;
}
template NetworkSource held_source(const Network<Rational>&);
template NetworkSource held_source(const Network<double>&);

std::vector<CertifiedOutput> certified_eval(const NetworkSource& src, const Dataset& ds,
                                            const CertifiedOptions& opt, const OnProgress& progress) {
  limits::check_real(opt.max_width, 0x1p-1000, 1e300, "the certified width (max_width)");
  if (opt.max_bits > (1u << 26))
    throw Error("the certified engine's max_bits " + std::to_string(opt.max_bits) +
                " is over the limit of 2^26");
  if (std::fegetround() != FE_TONEAREST)
    throw Error("certified evaluation needs the round-to-nearest mode (its error bounds assume it)");
  std::vector<CertifiedOutput> out(ds.sequences.size());
  std::vector<long> pending(ds.sequences.size());
  for (std::size_t i = 0; i < pending.size(); ++i)
    pending[i] = static_cast<long>(i);
  {
    MpfrPrecision scope(64);  // the transcendental enclosures of ball:53
    run_tier<Ball53>(src.ball53, src.name, ds, "ball:53", opt, progress, pending, out);
  }
  if (!pending.empty()) {
    MpfrPrecision scope(128);
    run_tier<Ball113>(src.ball113, src.name, ds, "ball:113", opt, progress, pending, out);
  }
  const unsigned first_bits = bits_for(pending, out, opt.max_width);
  for (unsigned bits = first_bits; !pending.empty() && bits <= opt.max_bits; bits *= 2) {
    MpfrPrecision scope(bits);
    run_tier<Mpfi>(src.mpfi, src.name, ds, "interval:" + std::to_string(bits), opt, progress, pending, out);
  }
  if (opt.max_bits > 0 && first_bits > opt.max_bits)  // said, so that a user knows what to ask for
    for (long i : pending)
      out[static_cast<std::size_t>(i)].tried.push_back("interval: about " + std::to_string(first_bits) +
                                                       " bits needed, over max_bits " +
                                                       std::to_string(opt.max_bits));
  for (CertifiedOutput& o : out)
    if (o.tier.empty()) o.tier = "none";  // every tier failed: the whole line, its errors in tried
  return out;
}

nlohmann::json certified_json(const CertifiedOutput& o) {
  auto number = [](double w) { return std::isfinite(w) ? nlohmann::json(w) : nlohmann::json("inf"); };
  nlohmann::json line = matrix_json(o.y), layers = nlohmann::json::array();
  for (double w : o.layer_widths)
    layers.push_back(number(w));
  line["tier"] = o.tier, line["reached"] = o.reached, line["relative_width"] = number(o.relative_width);
  line["layer_widths"] = layers, line["tried"] = o.tried;
  return line;
}

}  // namespace uatlab
