// uatlab: the command line. Every command reports bad input as "uatlab: error: ..." on stderr,
// exits non-zero and leaves no partial output file (outputs are written atomically).
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <cstdio>
#include <filesystem>
#include <gmp.h>
#include <iostream>
#include <mpfi.h>
#include <mpfr.h>
#include <omp.h>
#include <sstream>

#include "commands.hpp"
#include "uatlab/version.hpp"
#include "uatlab/io/dataset.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/verify/evaluate.hpp"

using namespace uatlab;
using nlohmann::json;

// "attention:heads=2,head_size=3,score=hardmax" → {"type":"attention","heads":2,...}
static json layer_from_flag(const std::string& spec) {
  static const std::map<std::string, std::string> alias = {
      {"attn", "attention"}, {"attention", "attention"}, {"ff", "feedforward"}, {"feedforward", "feedforward"},
      {"ln", "layernorm"}, {"layernorm", "layernorm"}};
  const std::string kind = spec.substr(0, spec.find(':'));
  if (!alias.count(kind)) throw Error("--layer \"" + spec + "\": kind must be attention, feedforward or layernorm");
  json j = {{"type", alias.at(kind)}};
  if (spec.find(':') == std::string::npos) return j;
  std::stringstream ss(spec.substr(spec.find(':') + 1));
  for (std::string kv; std::getline(ss, kv, ',');) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) throw Error("--layer \"" + spec + "\": expected key=value, got \"" + kv + "\"");
    std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (v == "true" || v == "false") j[k] = v == "true";
    else if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos) j[k] = std::stoll(v);
    else j[k] = v;
  }
  return j;
}


void uatlab::cli::make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create the folder " + dir + ": " + ec.message());
}

uatlab::Architecture uatlab::cli::architecture_from_flags(const std::string& arch_text, int d, int vocab, int max_len, int readout,
                                                          const std::vector<std::string>& layers) {
  json aj;
  if (!arch_text.empty()) {
    std::string text = arch_text.front() == '{' ? arch_text : read_file(arch_text);
    aj = parse_json(text, "--arch", true);
  } else {
    if (d < 1) throw Error("give --arch or --d with --layer flags");
    aj = {{"d", d}, {"vocab", vocab}, {"max_len", max_len}, {"readout", readout}, {"layers", json::array()}};
    for (auto& l : layers) aj["layers"].push_back(layer_from_flag(l));
  }
  return Architecture::from_json(aj);
}

void uatlab::cli::write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") std::cout << text << std::flush;
  else write_file_atomic(path, text);
}
using uatlab::cli::write_output;

namespace {

std::string lines_text(const std::vector<json>& lines) {
  std::string out;
  for (auto& l : lines) out += l.dump() + "\n";
  return out;
}

int cmd_info(const std::string& model) {
  if (!model.empty()) {
    Network<Rational> net = load_network<Rational>(model);
    const Architecture& a = net.arch;
    std::cout << "model       " << model << "\n"
              << "input       " << (a.vocab > 0 ? "token ids, vocab " + std::to_string(a.vocab) : "continuous") << ", d = " << a.d
              << (a.max_len > 0 ? ", positional table up to n = " + std::to_string(a.max_len) : "") << "\n";
    for (std::size_t i = 0; i < a.layers.size(); ++i) std::cout << "layer " << i << "     " << a.layers[i].describe() << "\n";
    std::cout << "output      " << a.out_dim() << " per token" << (a.readout > 0 ? " (linear readout)" : "") << "\n"
              << "parameters  " << net.parameter_count() << "\n"
              << "exact       " << (a.needs_transcendental() ? "no (needs exp/log/sqrt: use MPFR or intervals)" : "yes (rationals evaluate it exactly)") << "\n";
    return 0;
  }
  std::cout << "uatlab " << UATLAB_VERSION << "\n"
            << "scalars     float, double, mpfr (MPFR " << mpfr_get_version() << "), interval (MPFI " << mpfi_get_version()
            << "), rational (GMP " << gmp_version << ")\n"
            << "precision   float | double | BITS (MPFR) | interval:BITS (MPFI) | rational\n"
            << "linear alg. Eigen " << EIGEN_WORLD_VERSION << "." << EIGEN_MAJOR_VERSION << "." << EIGEN_MINOR_VERSION
            << ", Boost.Multiprecision " << BOOST_VERSION / 100000 << "." << BOOST_VERSION / 100 % 1000 << "\n"
            << "threads     " << omp_get_max_threads() << " (OpenMP)\n"
            << "formats     safetensors (F32, F64), uatlab lossless JSON (.json), JSONL datasets\n";
  return 0;
}

int cmd_eval(const std::string& model, const std::string& data, const std::string& precision, const std::string& out,
             double tol) {
  Precision p = Precision::parse(precision);
  Dataset ds = read_dataset(data);
  EvalOptions opt;
  opt.hardmax_tolerance = tol;
  write_output(out, lines_text(evaluate_file(model, ds, p, opt)));
  if (!out.empty() && out != "-")
    std::cerr << "evaluated " << ds.sequences.size() << " sequences in " << p.name() << " arithmetic → " << out << "\n";
  return 0;
}

int cmd_convert(const std::string& in, const std::string& out, const std::string& dtype, const std::string& precision) {
  Network<Rational> net = load_network<Rational>(in);  // every stored value is exact
  if (precision.empty() || precision == "rational") {
    save_network(net, out, dtype, "rational");
    return 0;
  }
  Precision p = Precision::parse(precision);
  switch (p.kind) {
    case Precision::Kind::Float: save_network(network_cast<float>(net), out, dtype, p.name()); break;
    case Precision::Kind::Double: save_network(network_cast<double>(net), out, dtype, p.name()); break;
    case Precision::Kind::Mpfr: {
      const MpfrPrecision scope(p.bits);
      save_network(network_cast<Mpfr>(net), out, dtype, p.name());
      break;
    }
    default: throw Error("convert: --precision must be float, double, BITS or rational");
  }
  return 0;
}

int cmd_init(const std::string& arch_text, int d, int vocab, int max_len, int readout, const std::vector<std::string>& layers,
             std::uint64_t seed, double gain, const std::string& out, const std::string& dtype) {
  Network<double> net(cli::architecture_from_flags(arch_text, d, vocab, max_len, readout, layers));
  init_random(net, seed, gain);
  save_network(net, out, dtype, "double");
  std::cerr << "wrote " << out << ": " << net.parameter_count() << " parameters, seed " << seed << "\n";
  return 0;
}

// The main job until the memorization compiler lands: one seeded network, evaluated in every
// arithmetic, each compared with a 1000-bit MPFR reference; and a hardmax twin evaluated exactly.
int cmd_demo(std::uint64_t seed) {
  json aj = {{"d", 3},
             {"layers", {{{"type", "attention"}, {"heads", 2}, {"head_size", 1}, {"score", "softmax"}, {"scale", "4"}},
                         {{"type", "feedforward"}, {"width", 8}},
                         {{"type", "attention"}, {"heads", 1}, {"head_size", 2}, {"score", "softmax"}, {"scale", "4"}},
                         {{"type", "feedforward"}, {"width", 8}}}}};
  Network<double> base(Architecture::from_json(aj));
  init_random(base, seed);
  Network<Rational> exact = network_cast<Rational>(base);
  Rng rng(seed + 1);
  Mat<Rational> x(3, 4);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = Rational(static_cast<long>(rng.uniform() * 16), 16);

  // The reference and every comparison live at 1000 bits; each arithmetic under test computes
  // in its own scope, and its result is converted exactly (through rationals) for the comparison.
  const MpfrPrecision reference_bits(1000);
  const Mat<Mpfr> ref = forward(network_cast<Mpfr>(exact), matrix_cast<Mpfr>(x));
  auto err = [&](auto y) {
    double e = 0;
    for (Eigen::Index i = 0; i < y.size(); ++i)
      e = std::max(e, std::abs(Scalar<Mpfr>::to_double(scalar_cast<Mpfr>(y.data()[i]) - ref.data()[i])));
    return e;
  };
  std::printf("uatlab demo: a seeded 4-sub-layer softmax network (d = 3, n = 4, seed %llu)\n", (unsigned long long)seed);
  std::printf("             evaluated in each arithmetic against a 1000-bit MPFR reference\n\n");
  std::printf("  %-14s %-24s %s\n", "arithmetic", "max |y - y_ref|", "note");
  std::printf("  %-14s %-24.3e %s\n", "float", err(forward(network_cast<float>(exact), matrix_cast<float>(x))), "binary32");
  std::printf("  %-14s %-24.3e %s\n", "double", err(forward(network_cast<double>(exact), matrix_cast<double>(x))), "binary64");
  auto at_bits = [&](auto scalar, unsigned bits) {
    using S = decltype(scalar);
    std::vector<Rational> y;
    const MpfrPrecision scope(bits);
    const Mat<S> out = forward(network_cast<S>(exact), matrix_cast<S>(x));
    for (Eigen::Index i = 0; i < out.size(); ++i) {
      if constexpr (Scalar<S>::interval) y.push_back(Scalar<Mpfr>::to_rational(lower(out.data()[i]))), y.push_back(Scalar<Mpfr>::to_rational(upper(out.data()[i])));
      else y.push_back(Scalar<S>::to_rational(out.data()[i]));
    }
    return y;
  };
  for (unsigned bits : {64u, 128u, 256u}) {
    const std::vector<Rational> y = at_bits(Mpfr(), bits);
    double e = 0;
    for (std::size_t i = 0; i < y.size(); ++i) e = std::max(e, std::abs(Scalar<Mpfr>::to_double(Scalar<Mpfr>::from(y[i]) - ref.data()[i])));
    std::printf("  %-14s %-24.3e MPFR carries %u bits\n", ("mpfr:" + std::to_string(bits)).c_str(), e, mpfr_carried_bits(bits));
  }
  const std::vector<Rational> yi = at_bits(Mpfi(), 128);
  bool contains = true;
  double width = 0;
  for (std::size_t i = 0; i < yi.size() / 2; ++i) {
    const Mpfr lo = Scalar<Mpfr>::from(yi[2 * i]), hi = Scalar<Mpfr>::from(yi[2 * i + 1]);
    contains &= lo <= ref.data()[i] && ref.data()[i] <= hi;
    width = std::max(width, Scalar<Mpfr>::to_double(hi - lo));
  }
  std::printf("  %-14s %-24s max width %.3e, MPFR carries %u bits\n", "interval:128", contains ? "encloses y_ref" : "DOES NOT ENCLOSE y_ref",
              width, mpfr_carried_bits(128));

  for (auto& l : aj["layers"])
    if (l["type"] == "attention") l["score"] = "hardmax";
  Network<double> hard_base(Architecture::from_json(aj));
  init_random(hard_base, seed);  // same seed, same tensors: the same weights as above
  Network<Rational> hard = network_cast<Rational>(hard_base);
  Mat<Rational> yq = forward(hard, x);
  Mat<double> yd = forward(network_cast<double>(hard), matrix_cast<double>(x));
  double diff = 0;
  for (Eigen::Index i = 0; i < yq.size(); ++i) diff = std::max(diff, std::abs(Scalar<Rational>::to_double(yq.data()[i]) - yd.data()[i]));
  const Rational& y00 = yq(0, 0);
  std::printf("\n  hardmax twin in exact rationals: y[0,0] = p/q with %zu-digit p and %zu-digit q (= %.17g)\n",
              boost::multiprecision::numerator(y00).str().size(), boost::multiprecision::denominator(y00).str().size(),
              Scalar<Rational>::to_double(y00));
  std::printf("  double vs exact on the hardmax twin: max |diff| = %.3e\n", diff);
  return contains ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uatlab: construct, verify and train the Transformers of expressivity theory"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(UATLAB_VERSION));

  std::string model, data, out, precision = "double", dtype = "F64", arch, in;
  double tol = 0, gain = 1;
  int d = 0, vocab = 0, max_len = 0, readout = 0;
  std::vector<std::string> layers;
  std::uint64_t seed = 1;

  auto* info = app.add_subcommand("info", "Version, arithmetics and formats; with MODEL, its architecture");
  info->add_option("model", model, "A model file (.safetensors or .json)");

  auto* eval = app.add_subcommand("eval", "Evaluate MODEL on every sequence of DATA (JSONL); one JSON line per sequence");
  eval->add_option("model", model, "Model file")->required();
  eval->add_option("data", data, "Dataset (JSONL)")->required();
  eval->add_option("--precision,-p", precision, "float | double | BITS | interval:BITS | rational")->capture_default_str();
  eval->add_option("--out,-o", out, "Output file (default: standard output)");
  eval->add_option("--hardmax-tol", tol, "Hardmax tie tolerance in floating point")->capture_default_str();

  auto* convert = app.add_subcommand("convert", "Convert a model between formats (.json lossless, else safetensors) and precisions");
  convert->add_option("in", in, "Input model")->required();
  convert->add_option("out", out, "Output model")->required();
  convert->add_option("--dtype", dtype, "Safetensors dtype: F64 or F32")->capture_default_str();
  convert->add_option("--precision,-p", precision, "Round the weights to float | double | BITS first (default: keep exact)");

  auto* init = app.add_subcommand("init", "Write a seeded random network of a given architecture");
  init->add_option("--arch", arch, "Architecture as JSON text or a JSON file (docs/formats.md)");
  init->add_option("--d", d, "Token dimension");
  init->add_option("--vocab", vocab, "Token-id input with this vocabulary (0: continuous input)");
  init->add_option("--max-len", max_len, "Positional table for sequences up to this length (0: none)");
  init->add_option("--readout", readout, "Linear readout to this many outputs (0: none)");
  init->add_option("--layer", layers, "Sub-layer, e.g. attention:heads=2,head_size=4,score=hardmax or feedforward:width=16 (repeat)");
  init->add_option("--seed", seed, "Random seed")->capture_default_str();
  init->add_option("--gain", gain, "Linear weights ~ U(±gain/sqrt(fan_in))")->capture_default_str();
  init->add_option("--out,-o", out, "Output model")->required();
  init->add_option("--dtype", dtype, "Safetensors dtype: F64 or F32")->capture_default_str();

  auto* demo = app.add_subcommand("demo", "Evaluate an embedded network in every arithmetic (the default main job)");
  demo->add_option("--seed", seed, "Random seed")->capture_default_str();

  cli::Commands commands;
  cli::add_kajitsuka_commands(app, commands);
  cli::add_train_commands(app, commands);
  cli::add_fang_commands(app, commands);
  cli::add_reproduce_commands(app, commands);
  cli::add_sweep_commands(app, commands);
  cli::add_yun_commands(app, commands);

  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
    if (info->parsed()) return cmd_info(model);
    if (eval->parsed()) return cmd_eval(model, data, precision, out, tol);
    if (convert->parsed()) return cmd_convert(in, out, dtype, convert->count("--precision") ? precision : "");
    if (init->parsed()) return cmd_init(arch, d, vocab, max_len, readout, layers, seed, gain, out, dtype);
    if (demo->parsed()) return cmd_demo(seed);
  } catch (const std::exception& e) {
    std::cerr << "uatlab: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
