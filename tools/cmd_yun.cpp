// uatlab approximate: Yun et al.'s universal-approximation construction for a target
// f: [0,1]^{d×n} → R^{d×n} (built in, or an expression), checked exactly and measured
// (the pipeline: experiment/approximate.hpp).
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "uatlab/experiment/approximate.hpp"
#include "uatlab/experiment/targets.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/verify/bounds.hpp"

namespace uatlab::cli {

namespace ex = uatlab::experiment;
using nlohmann::json;

namespace {

struct ApproximateOpts {
  ex::ApproximateOptions run;
  std::string target = "tokenwise-sin", ps = "1,2", report, sweep, out_dir = "results/yun";
  int K = 4;
  bool no_check = false, json_out = false;
};

// The report as lines, as the other commands print theirs (--json: the whole report instead).
std::string approximate_summary(const json& r) {
  std::ostringstream s;
  auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  s << "target       " << text(r["target"]) << " (d = " << r["d"] << ", n = " << r["n"] << "), K = " << r["K"]
    << " (delta = " << text(r["delta"]) << "), " << text(r["construction"]) << ", " << r["contexts"]
    << " contexts\n";
  const json& l = r["layers"];
  s << "network      " << l["total"] << " layers (quantization " << l["quantization"] << ", attention "
    << l["attention"] << ", value map " << l["value_map"] << "), " << r["parameters"] << " parameters";
  if (r.contains("standard")) s << "; the standard form " << r["standard"]["parameters"];
  s << "\n";
  if (r.contains("lemma6"))
    s << "lemma 6      " << (r["lemma6"]["ok"].get<bool>() ? "holds" : "DOES NOT HOLD")
      << ", checked exactly\n";
  if (r.contains("grid_max_error"))
    s << "grid         max error " << r["grid_max_error"] << " at the grid points\n";
  std::vector<std::string> ps;  // the exponents asked (--p), as the report names them
  for (int p = 1; p <= 16; ++p)
    if (r.contains("d_" + std::to_string(p))) ps.push_back("d_" + std::to_string(p));
  for (const std::string& p : ps) {
    s << p << std::string(p.size() < 13 ? 13 - p.size() : 1, ' ');
    for (const char* form : {"modified", "standard"}) {
      if (!r[p].contains(form)) continue;
      const json& e = r[p][form];
      char line[160];
      std::snprintf(line, sizeof line, "%s%s %.4g (95%% CI %.4g to %.4g, %s samples)",
                    form == std::string("standard") ? "; " : "", form, e["value"].get<double>(),
                    e["ci95"][0].get<double>(), e["ci95"][1].get<double>(), e["samples"].dump().c_str());
      s << line;
    }
    s << ", measured\n";
  }
  if (r.contains("certified_domain")) {  // upper bounds, printed rounded up (docs/yun.md)
    auto up = [](const json& v) { return v.is_number() ? upper_text(v.get<double>()) : std::string("inf"); };
    const char* head = "certified    ";
    for (const char* form : {"modified", "standard"}) {
      if (!r["certified_domain"].contains(form)) continue;
      const json& c = r["certified_domain"][form];
      s << head << form << ": ";
      for (const std::string& p : ps)
        if (c.contains(p)) s << p << " <= " << up(c[p]) << ", ";
      s << "ess sup |g - f| <= " << up(c["ess_sup_abs_error"]) << " over all of [0,1]^{" << r["d"] << " x "
        << r["n"] << "} (MPFI; " << c["cells"] << " cells, " << c["boxes"] << " boxes)\n";
      const json& flat = c["regular_cells"];
      if (c["cells_regular"] != c["cells"]) {
        s << "             " << form << ", its " << c["cells_regular"] << " regular cells: ";
        for (const std::string& p : ps)
          if (flat.contains(p)) s << p << " <= " << up(flat[p]) << ", ";
        s << "ess sup |g - f| <= " << up(flat["ess_sup_abs_error"])
          << "; the other cells measure <= " << up(flat["excluded_measure"])
          << ", ess sup |g - f| <= " << up(flat["excluded_ess_sup_abs_error"]) << " there\n";
      }
      head = "             ";
    }
  }
  return s.str();
}

int cmd_approximate(ApproximateOpts& o) {
  check_outputs({}, {{"--out", o.run.out}, {"--standard-out", o.run.standard_out}, {"--report", o.report}});
  o.run.ps = parse_int_list(o.ps, "--p", 1, 16);
  if (o.run.ps.size() > 2) throw Error("--p takes one or two exponents, e.g. 1,2");
  o.run.check = !o.no_check;
  o.run.progress = progress_reporter();
  const yun::Target f = ex::yun_target(o.target, o.run.d, o.run.n);
  if (o.sweep.empty()) {
    const ex::Approximation r = ex::approximate(f, o.K, o.run);
    ex::require_checks_passed(r);
    if (!o.report.empty()) write_output(o.report, r.report.dump(2) + "\n");
    std::cout << (o.json_out ? r.report.dump(2) + "\n" : approximate_summary(r.report));
    return 0;
  }
  const std::vector<int> Ks = parse_int_list(o.sweep, "--sweep-delta", 2, 1 << 20);
  const OnProgress progress = progress_reporter();
  std::cout << ex::sweep_delta(f, Ks, o.run, o.out_dir, [&](int K) {
    report(progress, "approximate: K = " + std::to_string(K), 0, 0);
  });
  return 0;
}

}  // namespace

void add_yun_commands(CLI::App& app, Commands& commands) {
  auto o = std::make_shared<ApproximateOpts>();
  auto* a = app.add_subcommand(
      "approximate",
      "Yun et al.: compile f: [0,1]^{d x n} -> R^{d x n} into a Transformer, check it exactly, measure d_p");
  a->add_option(
       "target", o->target,
       "Built-in (" + yun::target_names() + ") or an expression in x, i, j, d, n, mean, max, min, x<i>_<j>")
      ->capture_default_str();
  a->add_option("--construction", o->run.construction,
                "yun (Yun et al.'s proof) or kajitsuka (Proposition 1: FF, one rank-1 softmax head, FF)")
      ->capture_default_str()
      ->check(CLI::IsMember({"yun", "kajitsuka"}));
  a->add_option(
       "--value-map", o->run.value_map,
       "kajitsuka: bounded (default; knots at the data, flat outside) or zhang (Zhang et al.'s layer)")
      ->check(CLI::IsMember({"bounded", "zhang"}));
  a->add_option("--d", o->run.d, "Token dimension")->capture_default_str()->check(CLI::Range(1, 64));
  a->add_option("--n", o->run.n, "Sequence length")->capture_default_str()->check(CLI::Range(1, 64));
  a->add_option("--K", o->K, "Grid size: delta = 1/K")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  a->add_flag("--pe", o->run.pe,
              "Positional encoding (Theorem 3): targets need not be permutation equivariant");
  a->add_option("--p", o->ps, "Exponents of d_p (one or two)")->capture_default_str();
  a->add_option("--samples", o->run.samples, "Monte Carlo samples for d_p")
      ->capture_default_str()
      ->check(CLI::Range(2L, 1L << 30));
  a->add_option("--samples-standard", o->run.samples_standard,
                "Monte Carlo samples for the standard network (evaluated in MPFR)")
      ->capture_default_str()
      ->check(CLI::Range(2L, 1L << 30));
  a->add_option("--seed", o->run.seed, "Seed of the Monte Carlo samples and sampled checks")
      ->capture_default_str();
  a->add_option("--lambda", o->run.lambda,
                "Softmax scale of the standard network (default: from the grid's score gaps)");
  a->add_option("--eta", o->run.eta, "Ramp width of the four-ReLU replacement (default: delta * 2^-40)");
  a->add_option("--check-limit", o->run.check_limit,
                "Exact check: exhaustive up to this many inputs, else this many samples")
      ->capture_default_str()
      ->check(CLI::Range(1L, 1L << 40));
  a->add_flag("--no-check", o->no_check, "Skip the exact Lemma 6 / grid check");
  a->add_flag("--certify", o->run.certify,
              "Certified bounds on sup |g - f| and d_p over all of [0,1]^{d x n}, both networks (MPFI)");
  a->add_option("--certify-boxes", o->run.certify_boxes, "Branch-and-bound budget of boxes for --certify")
      ->capture_default_str()
      ->check(CLI::Range(1L, 1L << 30));
  a->add_option("--certify-cells", o->run.certify_cells, "Refuse --certify above this many cells")
      ->capture_default_str()
      ->check(CLI::Range(1L, 1L << 30));
  a->add_option("--max-layers", o->run.max_layers, "Refuse constructions with more layers")
      ->capture_default_str();
  a->add_option("--out,-o", o->run.out, "Write the modified network (hardmax, Phi) as safetensors");
  a->add_option("--standard-out", o->run.standard_out,
                "Write the standard network (softmax, ReLU) as safetensors");
  a->add_flag("--json", o->json_out, "Print the whole report as JSON instead of the summary");
  a->add_option("--report", o->report, "Write the JSON report here");
  a->add_option("--sweep-delta", o->sweep,
                "Comma-separated K values: CSV + PNG of error and size against delta");
  a->add_option("--out-dir", o->out_dir, "Folder of the sweep's CSV and plots")->capture_default_str();
  commands.push_back({a, [o] { return cmd_approximate(*o); }});
}

}  // namespace uatlab::cli
