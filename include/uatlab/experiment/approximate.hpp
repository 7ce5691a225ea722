// The Yun et al. pipeline as one call (Tracr's thin orchestrator): plan → build (Yun's modified
// network, or Kajitsuka's Proposition 1) → exact check → standardize → d_p measured by Monte
// Carlo; and the δ-sweep over several K = 1/δ (CSV + plots). `uatlab approximate` parses flags
// and calls these.
#pragma once

#include "uatlab/progress.hpp"

#include <functional>
#include <string>
#include <vector>

#include "uatlab/construct/yun.hpp"
#include "uatlab/experiment/experiment.hpp"

namespace uatlab::experiment {

struct ApproximateOptions {
  std::string construction = "yun";  // or "kajitsuka" (Proposition 1)
  int d = 1, n = 2;
  bool pe = false, check = true;
  long samples = 20000, samples_standard = 2000, check_limit = 200000, max_layers = 20000;
  std::string lambda, eta;  // exact; empty: the defaults (default_lambda, δ·2^-40)
  std::string value_map;    // kajitsuka: "bounded" (empty: the default) or "zhang"
  bool certify = false;     // certified bounds over the whole domain (experiment/domain.hpp)
  long certify_boxes = 200000, certify_cells = 1L << 20;
  std::vector<int> ps = {1, 2};  // exponents of d_p (one or two)
  std::uint64_t seed = 1;
  std::string out, standard_out;  // optional safetensors of the two networks
  OnProgress progress;            // the stage (construction, exact check, d_p of each network)
};

struct Approximation {
  // construction facts, exact check, standard network, d_p (value, ci95, samples), and with
  // certify "certified_domain": the bounds of both networks over [0,1]^{d×n}
  json report;
  std::vector<yun::Distance> modified, standard;  // one per exponent
  Network<Rational> modified_net, standard_net;   // the two networks, exact weights
};
// Refuses a target that is not permutation equivariant without pe (20 seeded random trials).
Approximation approximate(const yun::Target& f, int K, const ApproximateOptions& o);
// Throws Error (naming the violations) when the run's own exact check found that Lemma 6 does not
// hold: the CLI and the Python module refuse such a network alike (a sweep reports it instead).
void require_checks_passed(const Approximation& r);

// Proposition 1 at K with both value maps (bounded and Zhang's): F2 along the direction aᵀz of
// its first output row, over the fitted range and a quarter beyond each side, with the fitted
// contexts as points (PNG).
void plot_value_maps(const yun::Target& f, int K, const ApproximateOptions& o, const std::string& path);

// For each K: approximate, then out_dir/sweep.csv, error_vs_delta.png and size_vs_delta.png
// (Proposition 1: and value_map.png at the last K); returns the Markdown table. `progress` is
// told each K before it starts.
std::string sweep_delta(const yun::Target& f, const std::vector<int>& Ks, const ApproximateOptions& o,
                        const std::string& out_dir, const std::function<void(int K)>& progress = {});

}  // namespace uatlab::experiment
