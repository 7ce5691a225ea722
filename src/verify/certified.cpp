#include "uatlab/verify/certified.hpp"

#include <omp.h>

#include <algorithm>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <optional>

#include "../chunks.hpp"
#include "../model/arb.hpp"
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
    else if constexpr (is_arb_v<S>)
      w = std::max(w, 2 * mag_get_d(arb_radref(v.get())));  // an upper bound, doubled exactly
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
  if constexpr (is_ball_v<S> || is_arb_v<S>)
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

// A tier's enclosure y of one sequence: it replaces the one before when narrower.
template <class S>
bool record(CertifiedOutput& o, const std::string& tier, const Mat<S>& y, std::vector<double> widths,
            const CertifiedOptions& opt, const std::string& seconds) {
  Mat<Mpfi> enclosure = as_mpfi(y);
  double rel = 0;
  for (const Mpfi& v : enclosure.reshaped())
    rel = std::max(rel, relative_width(v));
  o.tried.push_back(tier + ": " + upper_text(rel, 3) + seconds);
  if (!(rel < o.relative_width) && !o.tier.empty()) return false;
  o.y = std::move(enclosure), o.tier = tier, o.relative_width = rel, o.reached = rel <= opt.max_width;
  o.layer_widths = opt.layer_widths ? std::move(widths) : std::vector<double>{};
  return o.reached;
}

// The bits a tier of `bits` whose widths grew as `widths` (the input, then after each sub-layer) up
// to where it stopped would need for the target: the growth per sub-layer so far, continued to the
// output (a guess for speed alone; it decides no enclosure). 0 where the widths tell nothing.
double bits_from_growth(const std::vector<double>& widths, std::size_t layers, double bits, double target) {
  std::size_t a = 0;
  while (a < widths.size() && !(widths[a] > 0))
    ++a;
  std::size_t b = widths.size();
  while (b > a + 1 && !(std::isfinite(widths[b - 1]) && widths[b - 1] > 0))
    --b;
  if (b < a + 2) return 0;
  const double last = widths[b - 1], rate = std::pow(last / widths[a], 1.0 / static_cast<double>(b - 1 - a)),
               end = std::log2(last) + std::log2(std::max(rate, 1.0)) * static_cast<double>(layers + 2 - b);
  return bits + std::max(end - std::log2(target), 0.0) + 8;
}

// A tier's error on one sequence, with the widths up to where it stopped; a sequence that no tier
// has enclosed yet gets the whole line.
void record_error(CertifiedOutput& o, const std::string& tier, const std::string& error,
                  const std::vector<double>& widths, const Architecture& arch, Eigen::Index tokens) {
  std::string text;
  for (double w : widths)
    text += (text.empty() ? "" : ", ") + upper_text(w, 3);
  o.tried.push_back(tier + ": " + error + (text.empty() ? "" : "; widest enclosures up to there: " + text));
  if (o.tier.empty() && o.y.size() == 0)
    o.y = Mat<Mpfi>::Constant(arch.out_dim(), arch.pool ? 1 : tokens, hull(Mpfr(-kInf), Mpfr(kInf)));
}

Eigen::Index tokens_of(const Dataset& ds, const Sequence& s) {
  return ds.token_input ? static_cast<Eigen::Index>(s.tokens.size()) : s.x.cols();
}

// One tier over the pending sequences: each one's result replaces the one before when it is
// narrower; the sequences that reach the width leave `pending`.
template <class S>
void run_tier(const Loader<S>& load, const std::string& what, const Dataset& ds, const std::string& tier,
              const CertifiedOptions& opt, const OnProgress& progress, std::vector<long>& pending,
              std::vector<CertifiedOutput>& out, std::vector<double>& need) {
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
  const double tier_bits = std::stod(tier.substr(tier.find(':') + 1));  // ball:53, ball:113, interval:B
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
    // Kept past an error: the widths up to the sub-layer that failed, which also guess the bits a
    // later tier needs.
    Activations<S> capture;
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
      const Mat<S> y = ds.token_input ? forward_tokens(net, s.tokens, eval, &capture)
                                      : forward(net, matrix_cast<S>(s.x), eval, &capture);
      std::vector<double> widths;
      for (const Mat<S>& r : capture.residual)
        widths.push_back(widest(r));
      widths.push_back(widest(y));
      need[static_cast<std::size_t>(i)] =
          bits_from_growth(widths, net.arch.layers.size(), tier_bits, opt.max_width);
      done[static_cast<std::size_t>(j)] = record(o, tier, y, std::move(widths), opt, seconds());
    } catch (const std::exception& e) {
      std::vector<double> widths;
      for (const Mat<S>& r : capture.residual)
        widths.push_back(widest(r));
      record_error(o, tier, e.what() + seconds(), widths, net.arch, tokens_of(ds, s));
      need[static_cast<std::size_t>(i)] =
          bits_from_growth(widths, net.arch.layers.size(), tier_bits, opt.max_width);
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

// Ball53 → Arb exactly: the midpoint, and the radius rounded up (mag_set_d).
Arb arb_of(const Ball53& x) {
  Arb y(x.m);
  mag_set_d(arb_radref(y.get()), x.r);
  return y;
}

// The sub-layers [first, last) of an architecture, with the input's projection and the positions
// where first is 0 and the pooling and readout where last is the end: run in turn, the pieces
// are the whole forward pass (each sub-layer maps the residual stream).
Architecture piece_of(const Architecture& src, std::size_t first, std::size_t last) {
  Architecture a;
  a.d = src.d;
  if (first == 0) a.input = src.input, a.max_len = src.max_len;
  if (last == src.layers.size()) a.readout = src.readout, a.pool = src.pool;
  a.layers.assign(src.layers.begin() + static_cast<long>(first),
                  src.layers.begin() + static_cast<long>(last));
  return a;
}

// That piece of a network in Arb: the Arb tier holds one piece's weights in Arb at a time (a
// GPT-2's would take 7 GiB) beside the Ball53 network it reads them from.
Network<Arb> arb_piece(const Network<Ball53>& net, std::size_t first, std::size_t last) {
  std::map<std::string, const Mat<Ball53>*> from;
  net.for_each_tensor([&](const std::string& name, const Mat<Ball53>& m, Layout) { from[name] = &m; });
  Network<Arb> piece(piece_of(net.arch, first, last));
  piece.for_each_tensor([&](const std::string& name, Mat<Arb>& m, Layout) {
    std::string key = name;  // the piece's layers.j.* is the network's layers.(first + j).*
    if (name.rfind("layers.", 0) == 0) {
      const std::size_t dot = name.find('.', 7);
      key = "layers." + std::to_string(first + std::stoul(name.substr(7, dot - 7))) + name.substr(dot);
    }
    m = from.at(key)->unaryExpr([](const Ball53& x) { return arb_of(x); });
  });
  return piece;
}

// Throws where the Arb tier at the MPFR precision in force would not fit the memory budget: the
// Ball53 network, one piece in Arb, the passes' balls (with their midpoints' limbs) and a product's
// copies (Arb's matrices of the right factor and of 512 rows of the left per thread).
void check_arb_memory(const Architecture& arch, const Dataset& ds, const std::string& what,
                      const std::string& tier) {
  long long piece = 0;  // the largest piece's numbers
  for (std::size_t i = 0; i < std::max<std::size_t>(arch.layers.size(), 1); ++i)
    piece = std::max(piece, piece_of(arch, i, std::min(i + 1, arch.layers.size())).parameter_count());
  const double params = static_cast<double>(arch.parameter_count()),
               numbers = static_cast<double>(evaluation_numbers(arch, ds, false)) - params,
               ball = static_cast<double>(sizeof(Arb)) + static_cast<double>(mpfr_bits()) / 8,
               bytes = params * sizeof(Ball53) + static_cast<double>(piece) * sizeof(Arb) +
                       numbers * ball * 3 +
                       omp_get_max_threads() * 512.0 * static_cast<double>(arch.d) * 4 * ball;
  if (bytes > static_cast<double>(limits::memory_budget()))
    throw Error("certified evaluation of " + what + " in " + tier + " needs about " +
                number_text(bytes / (1LL << 30)) + " GiB, over the budget (UATLAB_MEMORY_GIB)");
}

// Whether every weight is a double (a ball of radius 0): the Arb tier runs only then (the exact
// rationals of a construction, which ball:53 holds with their rounding as radius, are MPFI's).
bool doubles_only(const Network<Ball53>& net) {
  bool exact = true;
  net.for_each_tensor([&](const Mat<Ball53>& m) {
    for (const Ball53& w : m.reshaped())
      exact = exact && w.r == 0;
  });
  return exact;
}

// The Arb tier at the MPFR precision in force: the pending sequences through the network one
// sub-layer at a time, each sub-layer's weights made Arb balls once for all the sequences.
void run_arb_tier(const Network<Ball53>& net, const Dataset& ds, const std::string& tier,
                  const CertifiedOptions& opt, const OnProgress& progress, std::vector<long>& pending,
                  std::vector<CertifiedOutput>& out, std::vector<double>& need) {
  const auto start = std::chrono::steady_clock::now();
  const std::size_t layers = net.arch.layers.size(), pieces = std::max<std::size_t>(layers, 1);
  const long n = static_cast<long>(pending.size());
  std::vector<Mat<Arb>> z(static_cast<std::size_t>(n));
  std::vector<std::vector<double>> widths(z.size());
  std::vector<std::string> error(z.size());
  for (std::size_t j = 0; j < z.size(); ++j) {  // the inputs, exactly
    const Sequence& s = ds.sequences[static_cast<std::size_t>(pending[j])];
    if (ds.token_input)
      z[j] = embed_tokens(net, s.tokens).unaryExpr([](const Ball53& x) { return arb_of(x); });
    else
      z[j] = matrix_cast<Arb>(s.x);
  }
  for (std::size_t p = 0; p < pieces; ++p) {
    const Network<Arb> piece = arb_piece(net, p, std::min(p + 1, layers));
    auto one = [&](long j) {
      const std::size_t k = static_cast<std::size_t>(j);
      if (!error[k].empty()) return;
      try {
        Activations<Arb> cap;
        z[k] = forward(piece, z[k], {}, &cap);
        if (p == 0) widths[k].push_back(widest(cap.residual.front()));
        if (layers > 0) widths[k].push_back(widest(cap.residual.back()));
      } catch (const std::exception& e) {
        std::string m = e.what();  // the piece's sub-layer 0 is the network's p
        if (m.rfind("sub-layer 0 ", 0) == 0) m = "sub-layer " + std::to_string(p) + m.substr(11);
        error[k] = m;
      }
    };
    if (n == 1)  // one sequence: Arb's products may use every thread
      one(0);
    else
      in_parallel_chunks(n, one, [](long) { return true; });
    report(progress, "certified " + tier + ", sub-layer", static_cast<long long>(p) + 1,
           static_cast<long long>(pieces));
  }
  const std::string seconds =
      " (" + number_text(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()) +
      " s)";
  std::vector<long> rest;
  for (std::size_t j = 0; j < z.size(); ++j) {
    CertifiedOutput& o = out[static_cast<std::size_t>(pending[j])];
    const Sequence& s = ds.sequences[static_cast<std::size_t>(pending[j])];
    const bool enclosed = error[j].empty();
    if (enclosed) widths[j].push_back(widest(z[j]));
    need[static_cast<std::size_t>(pending[j])] =
        bits_from_growth(widths[j], layers, mpfr_bits(), opt.max_width);
    bool reached = false;
    if (enclosed)
      reached = record(o, tier, z[j], std::move(widths[j]), opt, seconds);
    else
      record_error(o, tier, error[j] + seconds, widths[j], net.arch, tokens_of(ds, s));
    if (!reached) rest.push_back(pending[j]);
  }
  pending = std::move(rest);
}

// The bits an Arb or MPFI evaluation needs for the widths, from the narrowest enclosure a ball tier
// gave (the widths scale about as 2^-bits, docs/certified.md) or, where none gave one, from the
// growth of the widths before a tier failed; 128 where neither tells.
unsigned bits_for(const std::vector<long>& pending, const std::vector<CertifiedOutput>& out,
                  const std::vector<double>& guess, double target) {
  double need = 128;
  for (long i : pending) {
    const CertifiedOutput& o = out[static_cast<std::size_t>(i)];
    need = std::max(need, guess[static_cast<std::size_t>(i)]);
    if (o.tier.empty() || !std::isfinite(o.relative_width)) continue;
    const double from = std::stod(o.tier.substr(o.tier.find(':') + 1));  // ball:53, ball:113, arb:B
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
  std::vector<double> need(ds.sequences.size(), 0);  // bits guessed from a failed tier's widths
  if (opt.ball53) {
    MpfrPrecision scope(64);  // the transcendental enclosures of ball:53
    run_tier<Ball53>(src.ball53, src.name, ds, "ball:53", opt, progress, pending, out, need);
  }
  if (!pending.empty()) {
    MpfrPrecision scope(128);
    run_tier<Ball113>(src.ball113, src.name, ds, "ball:113", opt, progress, pending, out, need);
  }
  const unsigned first_bits = bits_for(pending, out, need, opt.max_width);
  bool arb = true;                      // Arb where the weights are doubles, else MPFI
  std::optional<Network<Ball53>> held;  // Arb's source, read once for all its doublings
  for (unsigned bits = first_bits; !pending.empty() && bits <= opt.max_bits; bits *= 2) {
    MpfrPrecision scope(bits);
    const std::string b = std::to_string(bits);
    if (arb) {
      auto check = [&](const Architecture& arch) { check_arb_memory(arch, ds, src.name, "arb:" + b); };
      if (held) {
        check(held->arch);
      } else {
        held = src.ball53(check);
        arb = doubles_only(*held);  // once: the weights are the same at every doubling
        if (!arb) held.reset();
      }
      if (arb) run_arb_tier(*held, ds, "arb:" + b, opt, progress, pending, out, need);
    }
    if (!arb) run_tier<Mpfi>(src.mpfi, src.name, ds, "interval:" + b, opt, progress, pending, out, need);
  }
  if (opt.max_bits > 0 && first_bits > opt.max_bits)  // said, so that a user knows what to ask for
    for (long i : pending)
      out[static_cast<std::size_t>(i)].tried.push_back(
          std::string(arb ? "arb" : "interval") + ": about " + std::to_string(first_bits) +
          " bits needed, over max_bits " + std::to_string(opt.max_bits));
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
