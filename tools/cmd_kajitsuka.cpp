// uatlab contextual | memorize | hardmax-counterexample | make-data: Kajitsuka & Sato's constructions.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "commands.hpp"
#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/construct/optimal.hpp"
#include "uatlab/experiment/contextual.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/verify/bounds.hpp"
#include "uatlab/verify/evaluate.hpp"

namespace uatlab::cli {

using nlohmann::json;
namespace ks = uatlab::kajitsuka;

namespace {

struct DemoSize {
  int N = 40, n = 4, d = 3, V = 10;
};

struct Opts {
  std::string data, out, report, mode = "tuned", tolerance = "1e-6", value_map, setting = "contextual";
  int blocks = 0;
  bool tied = false, force = false;
  std::uint64_t seed = 1;
  unsigned max_bits = ks::ContextualOptions{}.max_bits;
  int draws = 200, sweep_c = 0;
  std::string out_dir = "results/contextual", plot_dir;
  DemoSize demo;
};

Dataset load_data(const Opts& o) {
  const std::string& data = o.data;
  const DemoSize& demo = o.demo;
  const std::uint64_t seed = o.seed;
  if (data == "theorem1") {
    std::printf("data        Theorem 1's pair: tokens lambda*u, Lambda1 = {1,3,5,7}, Lambda2 = {1,2,6,7}\n");
    return ks::theorem1_pair();
  }
  if (data.empty() || data == "demo") {
    std::printf(
        "data        embedded demo: N = %d sequences of n = %d distinct tokens from |V| = %d in R^%d (seed "
        "%llu), 3 classes\n",
        demo.N, demo.n, demo.V, demo.d, static_cast<unsigned long long>(seed));
    return demo_dataset(demo.N, demo.n, demo.d, demo.V, seed);
  }
  return read_dataset(data);
}

std::string log10_text(double x) {
  if (!std::isfinite(x)) return "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

void print_contextual(const ks::Facts& f, const ks::Contextual& c) {
  std::printf("hypotheses  N = %zu sequences, n = %d, d = %d, |V| = %zu, vocabulary sets = %zu\n",
              f.tokens.size(), f.n, f.d, f.vocab.size(), f.sets.size());
  std::printf("            r_min = %.6g, r_max = %.6g, eps = %.6g (tokenwise separated, no duplicates)\n",
              f.r_min, f.r_max, f.eps);
  std::printf(
      "projection  Lemma 3 over V u {0}: achieved %.4g (measured) >= required %.4g (sqrt(8/(pi "
      "d))/(|V|+1)^2), "
      "%s, %d tr%s\n",
      c.projection.achieved, c.projection.required, c.projection.certified ? "certified" : "NOT certified",
      c.projection.tries, c.projection.tries == 1 ? "y" : "ies");
  std::printf(
      "attention   mode %s%s: c = %.6g (theorem's c = %.6g, gap condition c = %.6g), W_O = eps/(4 r_max) v\n",
      ks::mode_names(c.mode), c.tied ? ", tied Q=K=V" : "", Scalar<Rational>::to_double(c.c), c.c_theorem,
      c.c_gap);
  std::printf("contexts    %zu context ids; r <= %s (certified), %s the bound r_max + eps/4 = %.9g\n",
              c.contexts, upper_text(c.separation.r, 9).c_str(),
              c.separation.r_within_bound ? "within" : "NOT certified within", c.r_bound);
  std::printf(
      "separation  log10 delta over all pairs = %s (certified >= %s; same token: %s), theorem's bound log10 "
      "delta = %s\n",
      log10_text(c.separation.log10_delta).c_str(), lower_text(c.separation.log10_delta_lo, 4).c_str(),
      log10_text(c.separation.log10_delta_same_token).c_str(), log10_text(c.log10_delta_bound).c_str());
  std::printf("            contexts of different tokens >= %s apart (certified)\n",
              lower_text(c.separation.cross_lower, 4).c_str());
  std::printf(
      "precision   certified with MPFI at %u bits; also at %u bits (tested; the fewest found by a search "
      "that assumes more bits never hurt)\n",
      c.bits_used, c.min_bits);
}

ks::ContextualOptions contextual_options(const Opts& o) {
  ks::ContextualOptions opt;
  opt.mode = ks::mode_names.parse(o.mode);
  opt.tied = o.tied;
  opt.seed = o.seed;
  opt.max_bits = o.max_bits;
  opt.progress = progress_reporter();
  return opt;
}

int cmd_contextual(const Opts& o) {
  check_outputs({{"data", o.data == "demo" || o.data == "theorem1" ? "" : o.data}},
                {{"--out", o.out}, {"--report", o.report}});
  const Dataset ds = load_data(o);
  const ks::Facts f = ks::analyse(ds);
  const ks::ContextualOptions opt = contextual_options(o);
  if (o.sweep_c > 0) {
    const ks::ScaleSweep sw = ks::sweep_scale(f, opt, o.sweep_c);
    std::cout << experiment::write_scale_sweep(sw, o.data.empty() ? "demo" : o.data, o.out_dir);
    std::printf("hardmax     c = inf, same weights, exact rationals: %s\n",
                !sw.hardmax_pairs ? "no token occurs in two vocabulary sets"
                : std::isinf(sw.hardmax_log10_delta)
                    ? "two contexts of a token coincide (delta = 0)"
                    : ("log10 delta = " + log10_text(sw.hardmax_log10_delta)).c_str());
    std::printf("wrote       %s/sweep_c.csv and sweep_c.png\n", o.out_dir.c_str());
    return 0;
  }
  const ks::Contextual c = ks::build_contextual(f, opt);
  print_contextual(f, c);
  if (!o.plot_dir.empty()) {
    experiment::write_contextual_plots(c, f, o.plot_dir);
    std::printf("wrote       %s/context_values.png and attention.png\n", o.plot_dir.c_str());
  }
  if (!o.out.empty()) save_network(c.net, o.out, "F64", "rational");
  if (!o.report.empty()) {
    json r = c.report();
    r.update(f.report());
    write_output(o.report, r.dump(1) + "\n");
  }
  return 0;
}

// The F64 safetensors memorize writes beside the lossless OUT.json when float64 works.
std::string f64_beside(const std::string& out) {
  return std::filesystem::path(out).replace_extension(".safetensors").string();
}

// The F64 safetensors beside the model only when float64 works, checked on the file itself (worst:
// its largest |y − label| over what the labels count; the file is removed if it fails), then the
// lossless model.
void write_memorized(const Network<Rational>& net, const std::string& out, bool float64_works,
                     const std::string& tolerance,
                     const std::function<double(const Network<double>&)>& worst_of) {
  if (float64_works) {
    const std::string f64 = f64_beside(out);
    save_network(net, f64, "F64", "rational");
    const double worst = worst_of(load_network<double>(f64));
    if (!(worst <= Scalar<Rational>::to_double(parse_rational(tolerance)))) {
      std::filesystem::remove(f64);
      throw Error("the F64 file failed re-evaluation (max error " + std::to_string(worst) + "); not written");
    }
    std::printf("wrote       %s (F64, re-evaluated: max |y - label| = %.3g)\n", f64.c_str(), worst);
  } else if (std::filesystem::exists(f64_beside(out))) {  // --force: a previous run's F64 model would
    std::filesystem::remove(f64_beside(out));             // sit beside this one as if it were its own
    std::printf("removed     %s (a previous run's: float64 does not reproduce this model)\n",
                f64_beside(out).c_str());
  }
  save_network(net, out, "F64", "rational");
  std::printf("wrote       %s (lossless)\n", out.c_str());
}

// memorize --setting next-token | seq-to-seq: the averaging attention and the deep value map.
int cmd_memorize_optimal(const Opts& o, const Dataset& ds, std::chrono::steady_clock::time_point start) {
  if (!o.value_map.empty() && o.value_map != "deep")
    throw Error("--value-map " + o.value_map + ": --setting " + o.setting + " builds the deep value map");
  if (o.mode != "tuned" || o.tied)
    throw Error("--mode and --tied choose Kajitsuka & Sato's contextual mapping; --setting " + o.setting +
                " uses the averaging attention");
  optimal::Options opt;
  opt.setting = optimal::setting_names.parse(o.setting);
  opt.tolerance = o.tolerance;
  opt.seed = o.seed;
  opt.max_bits = o.max_bits;
  opt.blocks = o.blocks;
  opt.progress = progress_reporter();
  const optimal::Memorized m = optimal::memorize(ds, opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool next = opt.setting == optimal::Setting::next_token;
  const json& p = m.plan;
  std::printf(
      "data        N = %zu sequences (%zu distinct) of n = %d tokens in R^%d%s; labels in [0, %lld)\n",
      m.sequences, m.distinct, m.n, m.d, ds.token_input ? " (token ids, embedded)" : "", m.label_count);
  std::printf(
      "attention   averaging: scores from a table of one per distance (DP-free), W_V = v^T, W_O = v%s\n",
      next ? ", causal" : ", positions added");
  std::printf("ids         %zu %s, draw %d: delta >= 10^%s (certified at %u bits)\n", m.ids.count,
              next ? "sequence ids (last tokens)" : "token ids", m.ids.draw,
              lower_text(m.ids.log10_delta, 4).c_str(), m.ids.bits);
  if (next)
    std::printf(
        "            derived bound |v|^2 gamma / (2e n N^2) <= 10^%s, %s; gamma (tokens on v) >= 10^%s\n",
        upper_text(m.ids.log10_delta_bound, 4).c_str(),
        m.ids.bound_holds ? "delta >= it (certified)" : "delta NOT above it",
        lower_text(m.ids.log10_gamma, 4).c_str());
  std::printf(
      "feedforward deep: %zu ids in %d blocks of %d; thresholds of %d bits, labels of %d bits; payload %lld "
      "bits "
      "per block; %lld sub-layers\n",
      m.ids.count, p.at("blocks").get<int>(), p.at("block_size").get<int>(), p.at("beta").get<int>(),
      p.at("rho").get<int>(), p.at("payload_bits").get<long long>(), p.at("depth").get<long long>());
  std::printf("parameters  %zu stored (%zu non-zero; the plan's closed form %lld); %.4g per sqrt(%s)\n",
              m.stored.parameters, m.stored.nonzero, m.plan_parameters,
              static_cast<double>(m.stored.parameters) / std::sqrt(static_cast<double>(m.ids.count)),
              next ? "N" : "nN");
  std::printf(
      "bits        largest weight %lld bits, all weights %lld bits; fewest certified bits x parameters = "
      "%.4g; "
      "any memorizer of %zu points with %lld labels stores >= %s bits\n",
      m.stored.max_bits, m.stored.total_bits,
      static_cast<double>(m.min_bits) * static_cast<double>(m.stored.parameters), m.ids.count, m.label_count,
      lower_text(optimal::information_bits(m.ids.count, m.label_count), 4).c_str());
  std::printf(
      "certificate every %s of all %zu sequences within %s of its label: max |y - label| <= %s (MPFI, %u "
      "bits)\n",
      next ? "last-token output" : "labelled output", m.sequences, o.tolerance.c_str(),
      upper_text(m.max_error, 3).c_str(), m.bits_used);
  std::printf(
      "bits needed memorization certified at %u bits (tested; the fewest found by a search that assumes more "
      "bits "
      "never hurt)\n",
      m.min_bits);
  std::printf("float64     %s (max |y - label| = %.3g with weights rounded to double)\n",
              m.float64_works ? "works" : "fails", m.float64_max_error);
  std::printf("time        %.2f s: build %.2f s, certify %.2f s, min-bits search %.2f s\n", secs,
              m.seconds_build, m.seconds_certify, m.seconds_min_bits);
  write_memorized(m.net, o.out, m.float64_works, o.tolerance, [&](const Network<double>& back) {
    double worst = 0;
    for (const auto& s : ds.sequences) {
      const Mat<double> y =
          ds.token_input ? forward_tokens(back, s.tokens) : forward(back, matrix_cast<double>(s.x));
      for (Eigen::Index k = 0; k < y.cols(); ++k)
        if (next ? k + 1 == y.cols() : s.mask.empty() || s.mask[static_cast<std::size_t>(k)])
          worst = std::max(worst, std::abs(y(0, k) - Scalar<Rational>::to_double(s.y(0, k))));
    }
    return worst;
  });
  if (!o.report.empty()) {
    json r = m.report();
    r["seconds"]["total"] = secs;
    r["tolerance"] = o.tolerance;
    write_output(o.report, r.dump(1) + "\n");
  }
  return 0;
}

int cmd_memorize(const Opts& o) {
  const std::string &out = o.out, &tolerance = o.tolerance, &report = o.report;
  if (format_for_path(out) != FileFormat::json)
    throw Error("--out " + out + ": memorize writes the lossless model, a .json file (the F64 safetensors " +
                "goes beside it)");
  check_outputs({{"data", o.data == "demo" || o.data == "theorem1" ? "" : o.data}},
                {{"--out", out}, {"--report", report}, {"the F64 model beside --out", f64_beside(out)}});
  if (!o.force && std::filesystem::exists(f64_beside(out)))
    throw Error(f64_beside(out) + " exists: memorize writes the F64 model there (--force replaces it)");
  const auto start = std::chrono::steady_clock::now();
  const Dataset ds = load_data(o);
  if (o.setting != "contextual") return cmd_memorize_optimal(o, ds, start);
  ks::MemorizeOptions opt;
  opt.contextual = contextual_options(o);
  opt.tolerance = tolerance;
  opt.value_map = ks::value_map_names.parse(o.value_map.empty() ? "zhang" : o.value_map);
  opt.blocks = o.blocks;
  const ks::Memorized m = ks::memorize(ds, opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_contextual(ks::analyse(ds, true), m.contextual);
  if (m.value_map == ks::ValueMap::deep) {
    const json& p = m.deep_plan;
    std::printf(
        "feedforward deep: q = %zu context ids in %d blocks of %d; thresholds of %d bits, labels of %d bits; "
        "payload %lld bits per block; %lld sub-layers\n",
        m.hidden, p.at("blocks").get<int>(), p.at("block_size").get<int>(), p.at("beta").get<int>(),
        p.at("rho").get<int>(), p.at("payload_bits").get<long long>(), p.at("depth").get<long long>());
  } else if (m.value_map == ks::ValueMap::zhang)
    std::printf(
        "feedforward Zhang et al.: one direction, %zu biases between the data, triangular solve (width q = "
        "%zu)\n",
        m.hidden, m.hidden);
  else
    std::printf(
        "feedforward bounded: one direction, the piecewise-linear interpolant with knots at the data, flat "
        "outside (width q = %zu)\n",
        m.hidden);
  if (std::isnan(m.value_map_sup))
    ;
  else if (std::isfinite(m.value_map_sup))
    std::printf("            sup over all inputs of |value map| <= %s (certified); the targets reach %.4g\n",
                upper_text(m.value_map_sup, 17).c_str(), m.target_max);
  else
    std::printf(
        "            sup over all inputs of |value map| = inf (its last slope is not 0); the targets "
        "reach %.4g\n",
        m.target_max);
  std::printf(
      "parameters  attention %zu, feed-forward %zu, total %zu stored; Zhang form (4d or 2d tied, + d + q + "
      "dq): %zu + %zu = %zu\n",
      m.params_attention, m.params_ff, m.params_total, m.zhang_form_attention, m.zhang_form_ff,
      m.zhang_form_total);
  std::printf(
      "certificate every output of all %zu sequences within %s of its label: max |y - label| <= %s (MPFI, "
      "%u bits)\n",
      ds.sequences.size(), tolerance.c_str(), upper_text(m.max_error, 3).c_str(), m.bits_used);
  std::printf(
      "bits needed memorization certified at %u bits (tested; the fewest found by a search that assumes "
      "more bits never hurt)\n",
      m.min_bits);
  std::printf("float64     %s (max |y - label| = %.3g with weights rounded to double)\n",
              m.float64_works ? "works" : "fails", m.float64_max_error);
  std::printf(
      "time        %.2f s: attention + certificate %.2f s, construct + certify all %.2f s, min-bits search "
      "%.2f s\n",
      secs, m.seconds_contextual, m.seconds_construct_certify, m.seconds_min_bits);
  write_memorized(m.net, out, m.float64_works, tolerance, [&](const Network<double>& back) {
    double worst = 0;
    for (const auto& s : ds.sequences)
      worst = std::max(
          worst, (forward(back, matrix_cast<double>(s.x)) - matrix_cast<double>(s.y)).cwiseAbs().maxCoeff());
    return worst;
  });
  if (!report.empty()) {
    json r = m.report();
    r["N"] = ds.sequences.size();
    r["seconds"]["total"] = secs;  // beside the stages (it replaced them before)
    r["tolerance"] = tolerance;
    write_output(report, r.dump(1) + "\n");
  }
  return 0;
}

int cmd_hardmax(const Opts& o) {
  check_outputs({}, {{"--report", o.report}});
  const ks::HardmaxCounterexample h = ks::hardmax_counterexample(o.draws, o.seed);
  std::printf("Theorem 1: tokens lambda*u, u = (3/5, 4/5); Lambda1 = {1,3,5,7}, Lambda2 = {1,2,6,7}\n");
  std::printf("           same min (1), max (7) and mean (4), different vocabularies\n");
  std::printf(
      "hardmax    %d random one-layer attentions (1-4 heads, head size 1-2, with and without biases), exact "
      "rationals:\n",
      h.draws);
  std::printf("           output for token 1 identical in both sequences in %d of %d draws\n", h.identical,
              h.draws);
  std::printf("softmax    rank-1 construction (tuned): contexts %s, log10 delta = %s\n",
              h.softmax_separates ? "certified separated" : "NOT separated", h.log10_softmax_gap.c_str());
  if (!o.report.empty()) write_output(o.report, h.report().dump(1) + "\n");
  if (h.identical != h.draws || !h.softmax_separates)
    throw Error(std::string("Theorem 1 did not hold here: ") +
                (h.identical != h.draws ? "a hardmax layer separated the two sequences"
                                        : "softmax did not separate them"));
  return 0;
}

}  // namespace

void add_kajitsuka_commands(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<Opts>();
  auto demo_flags = [&](CLI::App* c) {
    c->add_option("--demo-N", o->demo.N, "Embedded demo: number of sequences")->capture_default_str();
    c->add_option("--demo-n", o->demo.n, "Embedded demo: tokens per sequence")->capture_default_str();
    c->add_option("--demo-d", o->demo.d, "Embedded demo: token dimension")->capture_default_str();
    c->add_option("--demo-V", o->demo.V, "Embedded demo: vocabulary size")->capture_default_str();
  };
  auto common = [&](CLI::App* c) {
    c->add_option("data", o->data,
                  "Dataset (JSONL with \"x\"), demo for the embedded one, or theorem1 for Theorem 1's pair")
        ->capture_default_str();
    c->add_option("--mode", o->mode,
                  "faithful (the paper's constants) or tuned (c from the measured separation)")
        ->capture_default_str();
    c->add_flag("--tied", o->tied, "Tied W_Q = W_K = W_V");
    c->add_option("--seed", o->seed, "Seed for the projection vector, directions and demo data")
        ->capture_default_str();
    c->add_option("--max-bits", o->max_bits, "Give up above this MPFR precision")->capture_default_str();
    c->add_option("--report", o->report, "Write the report as JSON");
    demo_flags(c);
  };

  auto* ctx = app.add_subcommand(
      "contextual", "Kajitsuka & Sato Thm 2: rank-1 attention as a contextual mapping, certified");
  common(ctx);
  ctx->add_option("--out,-o", o->out, "Write the attention layer (lossless .json or safetensors)");
  ctx->add_option(
         "--sweep-c", o->sweep_c,
         "Certify the separation at this many scales c, from mean pooling towards hardmax (CSV + PNG)")
      ->check(CLI::Range(2, 1000));
  ctx->add_option("--out-dir", o->out_dir, "Folder of --sweep-c's CSV and plot")->capture_default_str();
  ctx->add_option("--plot-dir", o->plot_dir,
                  "Draw the context values and the head's attention maps here (PNG)");
  commands.push_back({ctx, [o] { return cmd_contextual(*o); }});

  auto* mem = app.add_subcommand(
      "memorize", "Compile a labelled dataset into a one-layer, one-head, rank-1 Transformer, certified");
  common(mem);
  mem->add_option("--out,-o", o->out,
                  "Lossless model file (.json); F64 .safetensors beside it when float64 works")
      ->required();
  mem->add_option("--tolerance", o->tolerance, "Every output within this of its label")
      ->capture_default_str();
  mem->add_option("--setting", o->setting,
                  "contextual (Kajitsuka & Sato 2024: every token labelled, the rank-1 contextual mapping), "
                  "next-token (one label per sequence, its last token's: sqrt(N) parameters) or seq-to-seq "
                  "(every token, positions: sqrt(nN)); the last two use the averaging attention and the deep "
                  "value map")
      ->capture_default_str()
      ->check(CLI::IsMember({"contextual", "next-token", "seq-to-seq"}));
  mem->add_option(
         "--value-map", o->value_map,
         "zhang (Zhang et al.'s layer; the default of --setting contextual), bounded (knots at the "
         "data, flat outside them) or deep (bit extraction: parameters growing like sqrt(q) log; "
         "integer labels, d >= 4; the only map of next-token and seq-to-seq, which lift tokens of fewer "
         "numbers to 4 by an input projection)")
      ->check(CLI::IsMember({"zhang", "bounded", "deep"}));
  mem->add_option("--blocks", o->blocks, "deep: the number of blocks B (0: the fewest parameters)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  mem->add_flag("--force", o->force, "Replace an existing F64 .safetensors beside the output");
  commands.push_back({mem, [o] { return cmd_memorize(*o); }});

  auto* hm =
      app.add_subcommand("hardmax-counterexample",
                         "Kajitsuka & Sato Thm 1: one-layer hardmax attention cannot separate contexts");
  hm->add_option("--draws", o->draws, "Random hardmax layers to try")->capture_default_str();
  hm->add_option("--seed", o->seed, "Seed")->capture_default_str();
  hm->add_option("--report", o->report, "Write the report as JSON");
  commands.push_back({hm, [o] { return cmd_hardmax(*o); }});

  auto* mk =
      app.add_subcommand("make-data", "Write the memorization demo dataset family as JSONL (exact numbers)");
  demo_flags(mk);
  mk->add_option("--seed", o->seed, "Seed")->capture_default_str();
  mk->add_option("--out,-o", o->out, "Output JSONL")->required();
  commands.push_back({mk, [o] {
                        write_output(o->out, format_dataset(demo_dataset(o->demo.N, o->demo.n, o->demo.d,
                                                                         o->demo.V, o->seed)));
                        return 0;
                      }});
}

}  // namespace uatlab::cli
