// uatlab info | eval | convert | init | demo: models and their evaluation in every arithmetic.
#include <gmp.h>
#include <mpfi.h>
#include <mpfr.h>
#include <omp.h>
#include "uatlab/model/eigen.hpp"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "uatlab/io/dataset.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/verify/analyse.hpp"
#include "uatlab/verify/certified.hpp"
#include "uatlab/verify/compare.hpp"
#include "uatlab/verify/evaluate.hpp"
#include "uatlab/version.hpp"

namespace uatlab::cli {

using nlohmann::json;

namespace {

// "attention:heads=2,head_size=3,score=hardmax" → {"type":"attention","heads":2,...}
json layer_from_flag(const std::string& spec) {
  static const std::map<std::string, std::string> alias = {
      {"attn", "attention"}, {"attention", "attention"},
      {"ff", "feedforward"}, {"feedforward", "feedforward"},
      {"ln", "layernorm"},   {"layernorm", "layernorm"},
      {"bproj", "bproj"},    {"sepconv", "sepconv"}};
  const std::string what = "--layer \"" + spec + "\"";
  const std::size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  if (!alias.count(kind))
    throw Error(what + ": kind must be attention, feedforward, layernorm, bproj or sepconv");
  json j = {{"type", alias.at(kind)}};
  if (colon == std::string::npos) return j;
  for (const std::string& kv : parse_list(spec.substr(colon + 1), what)) {
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos) throw Error(what + ": expected key=value, got \"" + kv + "\"");
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (j.contains(k)) throw Error(what + ": " + k + " is given twice");  // not the last one silently
    if (v == "true" || v == "false")
      j[k] = v == "true";
    else if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos)
      j[k] = parse_int_list(v, what + " " + k, 0, 1 << 30)[0];
    else
      j[k] = v;
  }
  return j;
}

std::string lines_text(const std::vector<json>& lines) {
  std::string out;
  for (auto& l : lines)
    out += l.dump() + "\n";
  return out;
}

int cmd_info(const std::string& model) {
  if (!model.empty()) {
    // Every tensor read and checked (GPT-2 124M: 1.7 GB, where exact rationals took more than 20).
    const auto [a, params] = with_exact_network(
        model, [](const auto& net) { return std::make_pair(net.arch, net.parameter_count()); });
    std::cout << "model       " << model << "\n"
              << "input       "
              << (a.vocab > 0   ? "token ids, vocab " + std::to_string(a.vocab)
                  : a.input > 0 ? "continuous, " + std::to_string(a.input) + " numbers per token, projected"
                                : "continuous")
              << ", d = " << a.d
              << (a.max_len > 0 ? ", positional table up to n = " + std::to_string(a.max_len) : "") << "\n";
    for (std::size_t i = 0; i < a.layers.size(); ++i)
      std::cout << "layer " << i << "     " << a.layers[i].describe() << "\n";
    std::cout << "output      " << a.out_dim() << " per token" << (a.readout > 0 ? " (linear readout)" : "")
              << "\n"
              << "parameters  " << params << "\n"
              << "exact       "
              << (a.needs_transcendental() ? "no (needs exp, log, sqrt, cos or sin: use MPFR or intervals)"
                                           : "yes (rationals evaluate it exactly)")
              << "\n";
    return 0;
  }
  std::cout << "uatlab " << UATLAB_VERSION << "\n"
            << "scalars     float, double, mpfr (MPFR " << mpfr_get_version() << "), interval (MPFI "
            << mpfi_get_version() << "), rational (GMP " << gmp_version << ")\n"
            << "precision   float | double | BITS (MPFR) | interval:BITS (MPFI) | rational | certified "
               "(balls, then MPFI)\n"
            << "linear alg. Eigen " << EIGEN_WORLD_VERSION << "." << EIGEN_MAJOR_VERSION << "."
            << EIGEN_MINOR_VERSION << ", Boost.Multiprecision " << BOOST_VERSION / 100000 << "."
            << BOOST_VERSION / 100 % 1000 << "\n"
            << "threads     " << omp_get_max_threads() << " (OpenMP)\n"
            << "formats     safetensors (F32, F64), uatlab lossless JSON (.json), JSONL datasets\n";
  return 0;
}

struct EvalOpts {
  std::string model, data, precision = "double", out;
  double tolerance = 0;
  bool capture = false;
  CertifiedOptions certified;
};

int cmd_eval(const EvalOpts& o) {
  check_outputs({{"model", o.model}, {"data", o.data}}, {{"--out", o.out}});
  const Precision p = Precision::parse(o.precision);
  const Dataset ds = read_dataset(o.data);
  EvalOptions opt;
  opt.hardmax_tolerance = o.tolerance;
  if (p.kind == Precision::Kind::Certified) {
    if (o.capture) throw Error("--capture: not with --precision certified (its lines hold layer_widths)");
    if (o.tolerance != 0) throw Error("--hardmax-tol: not with --precision certified");
    std::vector<json> lines;
    long reached = 0;
    for (const CertifiedOutput& c :
         certified_eval(file_source(o.model), ds, o.certified, progress_reporter())) {
      lines.push_back(certified_json(c));
      reached += c.reached;
    }
    write_output(o.out, lines_text(lines));
    std::cerr << reached << " of " << ds.sequences.size() << " sequences enclosed within --max-width "
              << o.certified.max_width << "\n";
    return 0;
  }
  write_output(o.out, lines_text(evaluate_file(o.model, ds, p, opt, progress_reporter(), o.capture)));
  if (!o.out.empty() && o.out != "-")
    std::cerr << "evaluated " << ds.sequences.size() << " sequences in " << p.name() << " arithmetic → "
              << o.out << "\n";
  return 0;
}

struct ConvertOpts {
  std::string in, out, dtype = "F64", precision;  // precision empty: keep every value exact
};

// The first weight a safetensors file of this dtype would not hold exactly ("" when it holds them
// all): "TENSOR holds VALUE".
template <class S>
std::string first_inexact(const Network<S>& net, const std::string& dtype) {
  std::string found;
  if (std::is_same_v<S, float> || (std::is_same_v<S, double> && dtype == "F64")) return found;
  net.for_each_tensor([&](const std::string& name, const Mat<S>& m, Layout) {
    for (Eigen::Index i = 0; i < m.size() && found.empty(); ++i) {
      const S& x = m.data()[i];
      bool held = false;
      try {
        const double d = Scalar<S>::to_double(x);  // to nearest
        if constexpr (std::is_same_v<S, double>)
          held = true;
        else
          held = std::isfinite(d) && rational_of(d) == Scalar<S>::to_rational(x);
        held = held && (dtype == "F64" || static_cast<double>(static_cast<float>(d)) == d);
      } catch (const Error&) {  // beyond double's range
      }
      if (!held) found = name + " holds " + limits::excerpt(Scalar<S>::to_rational(x).str());
    }
  });
  return found;
}

int cmd_convert(const ConvertOpts& o) {
  check_outputs({{"input", o.in}}, {{"output", o.out}});
  const bool json_out = format_for_path(o.out) == FileFormat::json;
  std::string weights = "exact";
  // A safetensors file holds what it is given, or the conversion is refused: rounding is asked for.
  auto save = [&](const auto& net, const std::string& source) {
    const std::string inexact = json_out ? "" : first_inexact(net, o.dtype);
    if (!inexact.empty())
      throw Error("convert: " + inexact + ", which " + o.dtype + " does not hold exactly; round first with " +
                  (o.dtype == "F32" ? "--precision float" : "--precision double or float") +
                  ", or write lossless .json");
    save_network(net, o.out, o.dtype, source);
  };
  const auto params = with_exact_network(o.in, [&](const auto& net) {
    if (o.precision.empty() || o.precision == "rational") {
      save(net, "exact");
    } else {
      const Precision p = Precision::parse(o.precision);
      with_scalar(p, [&](auto zero) {
        using S = decltype(zero);
        if constexpr (std::is_same_v<S, Mpfi>)
          throw Error("convert: --precision must be float, double, BITS or rational");
        else {
          const auto scope = precision_scope(p);
          save(network_cast<S>(net), p.name());
        }
      });
      weights = "rounded to " + p.name() + " first";
    }
    return net.parameter_count();
  });
  std::cerr << "wrote " << o.out << ": "
            << (format_for_path(o.out) == FileFormat::json ? "lossless JSON" : "safetensors " + o.dtype)
            << ", " << params << " parameters, weights " << weights << "\n";
  return 0;
}

struct InitOpts {
  ArchitectureFlags arch;
  std::uint64_t seed = 1;
  double gain = 1;
  std::string out, dtype = "F64";
};

int cmd_init(const InitOpts& o) {
  check_outputs({}, {{"--out", o.out}});
  Network<double> net(architecture_from_flags(o.arch));
  init_random(net, o.seed, o.gain);
  save_network(net, o.out, o.dtype, "double");
  std::cerr << "wrote " << o.out << ": " << net.parameter_count() << " parameters, seed " << o.seed << "\n";
  return 0;
}

// One seeded softmax network evaluated in every arithmetic against a 1000-bit MPFR reference
// (compare_arithmetics), and its hardmax twin evaluated exactly.
int cmd_demo(std::uint64_t seed) {
  json aj = {{"d", 3},
             {"layers",
              {{{"type", "attention"}, {"heads", 2}, {"head_size", 1}, {"score", "softmax"}, {"scale", "4"}},
               {{"type", "feedforward"}, {"width", 8}},
               {{"type", "attention"}, {"heads", 1}, {"head_size", 2}, {"score", "softmax"}, {"scale", "4"}},
               {{"type", "feedforward"}, {"width", 8}}}}};
  Network<double> base(Architecture::from_json(aj));
  init_random(base, seed);
  const Network<Rational> exact = network_cast<Rational>(base);
  Rng rng(seed + 1);
  Mat<Rational> x(3, 4);
  for (Eigen::Index i = 0; i < x.size(); ++i)
    x(i) = Rational(static_cast<long>(rng.uniform() * 16), 16);
  std::printf("uatlab demo: a seeded 4-sub-layer softmax network (d = 3, n = 4, seed %llu)\n",
              (unsigned long long)seed);
  std::printf("             evaluated in each arithmetic against a 1000-bit MPFR reference\n\n");
  std::printf("  %-14s %-24s %s\n", "arithmetic", "max |y - y_ref|", "note");
  bool encloses = true;
  for (const ArithmeticCheck& c : compare_arithmetics(exact, x, 1000, {64, 128, 256}, 128)) {
    if (c.arithmetic == "float" || c.arithmetic == "double")
      std::printf("  %-14s %-24.3e %s\n", c.arithmetic.c_str(), c.max_error,
                  c.arithmetic == "float" ? "binary32" : "binary64");
    else if (c.arithmetic.rfind("interval", 0) == 0)
      std::printf("  %-14s %-24s max width %.3e, MPFR carries %u bits\n", c.arithmetic.c_str(),
                  c.encloses ? "encloses y_ref" : "DOES NOT ENCLOSE y_ref", c.max_width, c.carried_bits);
    else
      std::printf("  %-14s %-24.3e MPFR carries %u bits\n", c.arithmetic.c_str(), c.max_error,
                  c.carried_bits);
    encloses = encloses && c.encloses;
  }
  for (auto& l : aj["layers"])
    if (l["type"] == "attention") l["score"] = "hardmax";
  Network<double> hard_base(Architecture::from_json(aj));
  init_random(hard_base, seed);  // same seed, same tensors: the same weights as above
  const Network<Rational> hard = network_cast<Rational>(hard_base);
  const Mat<Rational> yq = forward(hard, x);
  const Mat<double> yd = forward(network_cast<double>(hard), matrix_cast<double>(x));
  double diff = 0;
  for (Eigen::Index i = 0; i < yq.size(); ++i)
    diff = std::max(diff, std::abs(Scalar<Rational>::to_double(yq(i)) - yd(i)));
  const Rational& y00 = yq(0, 0);
  std::printf(
      "\n  hardmax twin in exact rationals: y[0,0] = p/q with %zu-digit p and %zu-digit q (= %.17g)\n",
      boost::multiprecision::numerator(y00).str().size(),
      boost::multiprecision::denominator(y00).str().size(), Scalar<Rational>::to_double(y00));
  std::printf("  double vs exact on the hardmax twin: max |diff| = %.3e\n", diff);
  return encloses ? 0 : 1;
}

}  // namespace

bool& quiet() {
  static bool q = false;
  return q;
}

OnProgress progress_reporter() {
  if (quiet()) return {};
  struct State {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), shown;
    std::string stage;
  };
  auto st = std::make_shared<State>();
  return [st](const std::string& stage, long long done, long long total) {
    const auto now = std::chrono::steady_clock::now();
    const bool last = total > 0 && done == total;
    // Nothing in the first second (a short job prints nothing); then each new stage, the end of
    // one, and a line a second in between.
    if (now - st->start < std::chrono::seconds(1)) return;
    if (stage == st->stage && !last && now - st->shown < std::chrono::seconds(1)) return;
    st->stage = stage;
    st->shown = now;
    const double secs = std::chrono::duration<double>(now - st->start).count();
    if (total > 0)
      std::fprintf(stderr, "[%7.1f s] %s: %lld/%lld\n", secs, stage.c_str(), done, total);
    else
      std::fprintf(stderr, "[%7.1f s] %s\n", secs, stage.c_str());
  };
}

void write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-")
    std::cout << text << std::flush;
  else
    write_file_atomic(path, text);
}

void add_architecture_flags(CLI::App* app, ArchitectureFlags& a) {
  auto* arch =
      app->add_option("--arch", a.arch, "Architecture as JSON text or a JSON file (docs/formats.md)");
  // The flags below describe an architecture too: with --arch they would be ignored, so they are refused.
  app->add_option("--d", a.d, "Token dimension")->check(CLI::Range(1, 1 << 30))->excludes(arch);
  app->add_option("--vocab", a.vocab, "Token-id input with this vocabulary (0: continuous input)")
      ->check(CLI::Range(0, 1 << 30))
      ->excludes(arch);
  app->add_option("--input", a.input, "Continuous tokens of this many numbers, projected to d (0: none)")
      ->check(CLI::Range(0, 1 << 30))
      ->excludes(arch);
  app->add_option("--max-len", a.max_len, "Positional table for sequences up to this length (0: none)")
      ->check(CLI::Range(0, 1 << 30))
      ->excludes(arch);
  app->add_option("--readout", a.readout, "Linear readout to this many outputs (0: none)")
      ->check(CLI::Range(0, 1 << 30))
      ->excludes(arch);
  app->add_option(
         "--layer", a.layers,
         "Sub-layer, e.g. attention:heads=2,head_size=4,score=hardmax or feedforward:width=16 (repeat)")
      ->excludes(arch);
}

Architecture architecture_from_flags(const ArchitectureFlags& a) {
  json aj;
  if (!a.arch.empty()) {
    aj = parse_json(a.arch.front() == '{' ? a.arch : read_file(a.arch), "--arch", true);
  } else {
    if (a.d < 1) throw Error("give --arch or --d with --layer flags");
    aj = {{"d", a.d},
          {"vocab", a.vocab},
          {"input", a.input},
          {"max_len", a.max_len},
          {"readout", a.readout},
          {"layers", json::array()}};
    for (auto& l : a.layers)
      aj["layers"].push_back(layer_from_flag(l));
  }
  try {
    return Architecture::from_json(aj);
  } catch (const Error& e) {
    throw Error(std::string(a.arch.empty() ? "--d/--layer" : "--arch") + ": " + e.what());
  }
}

struct AnalyseOpts {
  std::string model, data, report, plot, region_method = "intervals";
  bool check = false;
  AnalyseOptions opt;
};

int cmd_analyse(AnalyseOpts& o) {
  check_outputs({{"model", o.model}, {"data", o.data}}, {{"--report", o.report}, {"--plot", o.plot}});
  o.opt.region_method = region_method_names.parse(o.region_method);
  const Network<Rational> net = load_network<Rational>(o.model);
  const Dataset ds = read_dataset(o.data);
  o.opt.progress = progress_reporter();
  const Analysis a = analyse(net, ds, o.opt);
  std::cout << a.summary();
  if (o.check && !a.predictions.all())  // refused: nothing written
    throw Error(std::to_string(a.predictions.tokens - a.predictions.certified) + " of " +
                std::to_string(a.predictions.tokens) + " predictions not certified (--check)");
  if (!o.plot.empty()) {
    if (a.layers.empty())
      throw Error("--plot " + o.plot + ": no separation to plot (" + a.separation_note + ")");
    plot_separation(a, o.plot);
  }
  if (!o.report.empty()) write_output(o.report, a.report().dump(1) + "\n");
  return 0;
}

void add_model_commands(CLI::App& app, Commands& commands) {
  auto info = std::make_shared<std::string>();
  auto* i = app.add_subcommand("info", "Version, arithmetics and formats; with MODEL, its architecture");
  i->add_option("model", *info, "A model file (.safetensors or .json)");
  commands.push_back({i, [info] { return cmd_info(*info); }});

  auto ev = std::make_shared<EvalOpts>();
  auto* e = app.add_subcommand(
      "eval", "Evaluate MODEL on every sequence of DATA (JSONL); one JSON line per sequence");
  e->add_option("model", ev->model, "Model file")->required();
  e->add_option("data", ev->data, "Dataset (JSONL)")->required();
  e->add_option("--precision,-p", ev->precision,
                "float | double | BITS | interval:BITS | rational | certified")
      ->capture_default_str();
  e->add_option("--max-width", ev->certified.max_width,
                "certified: the width every output is enclosed to, relative to max(1, |y|)")
      ->capture_default_str();
  e->add_option("--max-bits", ev->certified.max_bits,
                "certified: the most bits of its last tier, Arb (MPFI where a weight is no double; 0: ball "
                "arithmetic only)")
      ->capture_default_str();
  e->add_option("--out,-o", ev->out, "Output file (default: standard output)");
  e->add_option("--hardmax-tol", ev->tolerance,
                "Hardmax: keys within this of the maximum share the weight, in every arithmetic (intervals "
                "certify it)")
      ->capture_default_str();
  e->add_flag("--capture", ev->capture,
              "Also the residual stream before the first sub-layer and after each (\"resid\") and every "
              "attention head's pattern, queries x keys (\"pattern\"), in the same precision");
  commands.push_back({e, [ev] { return cmd_eval(*ev); }});

  auto an = std::make_shared<AnalyseOpts>();
  auto* a = app.add_subcommand("analyse",
                               "Certify what MODEL does on the labelled DATA: memorization, separation per "
                               "attention layer, bits needed, rounded weights");
  a->add_option("model", an->model, "Model file (.safetensors or .json)")->required();
  a->add_option("data", an->data, "Labelled dataset (JSONL)")->required();
  a->add_option("--labels", an->opt.labels, "classes | values | auto")->capture_default_str();
  a->add_option("--tolerance", an->opt.tolerance, "values: |y - label| allowed (exact)")
      ->capture_default_str();
  a->add_option("--bits", an->opt.bits, "MPFI precision to start from")->capture_default_str();
  a->add_option("--max-bits", an->opt.max_bits, "Cap of the doubling while predictions are undecided")
      ->capture_default_str();
  a->add_option("--max-separation-tokens", an->opt.max_separation_tokens,
                "Skip the separation above this many tokens (pairwise distances)")
      ->capture_default_str()
      ->check(CLI::Range(0L, 1L << 20));
  a->add_option("--seed", an->opt.seed, "Seed of the random directions tried for the projection")
      ->capture_default_str();
  a->add_flag_callback(
      "--no-min-bits", [an] { an->opt.min_bits = false; },
      "Skip the search for the fewest bits (the certified engine's balls then decide the predictions "
      "where they can, MPFI otherwise, unless a region method other than balls needs MPFI's bits)");
  a->add_flag_callback(
      "--no-engine", [an] { an->opt.engine = false; },
      "MPFI for the predictions even where the engine could");
  a->add_flag_callback(
      "--no-rounding", [an] { an->opt.rounding = false; }, "Skip float32 / bfloat16 / float16 weights");
  a->add_flag("--direct-rounding", an->opt.direct_rounding,
              "bfloat16/float16: round each weight straight to the format, not through float32 as "
              "PyTorch's module.to(dtype) does");
  a->add_flag("--affine", an->opt.affine,
              "Feed-forward sub-layers as exact affine maps on the enclosures (steep staircases such as "
              "memorize --value-map deep need it)");
  a->add_option("--epsilon", an->opt.epsilon,
                "Also certify every prediction for every input in the linf box of this radius (exact) around "
                "each token's input vector (its embedding for token ids), with certified margins, and search "
                "each sequence's largest certified radius")
      ->check(CLI::Validator(
          [](const std::string& s) {
            return s.empty() ? std::string("an empty radius: give a number >= 0") : "";
          },
          "RADIUS"));
  a->add_option("--epsilon-steps", an->opt.epsilon_steps, "Bisection steps of that search")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  a->add_option(
       "--region-method", an->region_method,
       "With --epsilon, how the box goes through the network: intervals (default), mean-value (y(x0) + "
       "J(box)(x - x0), the Jacobian enclosed by the training passes in intervals: radii 1.6-1.8x larger on "
       "trained models, 19-29x slower) or zonotope (affine forms over the box's coordinates, rounding-safe: "
       "radii 730-3,100x larger than the intervals', a median 6.8-7.5x below an attack's, 7-21x slower; no "
       "hardmax or mixers) or balls (the box through the certified engine's ball tier: 7x faster than "
       "intervals on a trained 1.6M-weight model, radii 1.0-110x smaller on two such models); "
       "docs/analyse.md")
      ->check(CLI::IsMember({"intervals", "mean-value", "zonotope", "balls"}));
  a->add_flag("--check", an->check, "Fail (exit 1) unless every prediction is certified");
  a->add_option("--report", an->report, "Write the report as JSON");
  a->add_option("--plot", an->plot, "Draw the separation per attention layer (PNG)");
  commands.push_back({a, [an] { return cmd_analyse(*an); }});

  auto cv = std::make_shared<ConvertOpts>();
  auto* c = app.add_subcommand(
      "convert", "Convert a model between formats (.json lossless, else safetensors) and precisions");
  c->add_option("in", cv->in, "Input model")->required();
  c->add_option("out", cv->out, "Output model")->required();
  c->add_option("--dtype", cv->dtype, "Safetensors dtype: F64 or F32")->capture_default_str();
  c->add_option("--precision,-p", cv->precision,
                "Round the weights to float | double | BITS first (default: keep exact)");
  commands.push_back({c, [cv] { return cmd_convert(*cv); }});

  auto in = std::make_shared<InitOpts>();
  auto* n = app.add_subcommand("init", "Write a seeded random network of a given architecture");
  add_architecture_flags(n, in->arch);
  n->add_option("--seed", in->seed, "Random seed")->capture_default_str();
  n->add_option("--gain", in->gain, "Linear weights ~ U(±gain/sqrt(fan_in))")->capture_default_str();
  n->add_option("--out,-o", in->out, "Output model")->required();
  n->add_option("--dtype", in->dtype, "Safetensors dtype: F64 or F32")->capture_default_str();
  commands.push_back({n, [in] { return cmd_init(*in); }});

  auto seed = std::make_shared<std::uint64_t>(1);
  auto* d = app.add_subcommand(
      "demo", "Evaluate an embedded network in every arithmetic against a 1000-bit reference");
  d->add_option("--seed", *seed, "Random seed")->capture_default_str();
  commands.push_back({d, [seed] { return cmd_demo(*seed); }});
}

}  // namespace uatlab::cli
