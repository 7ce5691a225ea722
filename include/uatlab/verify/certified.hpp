// The certified engine: every output of a network enclosed to a requested width, at the cost of a
// few float products where that suffices (docs/certified.md).
//
// Tiers, tried per sequence in order until the widths are reached: ball:53 (double midpoints),
// ball:113 (binary128 midpoints), both with double radii and dense products (model/ball.hpp), then
// Arb's balls (model/arb.hpp, one sub-layer's weights at a time) at the bits the best ball width asks
// for, doubled up to max_bits; MPFI (the reference path) instead of Arb where a weight is no double
// (an exact rational of a construction). A sequence that no tier brings to the width keeps its
// narrowest enclosure, marked not reached.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "uatlab/io/dataset.hpp"
#include "uatlab/model/network.hpp"
#include "uatlab/progress.hpp"

namespace uatlab {

struct CertifiedOptions {
  double max_width = 1e-9;   // every output's width ≤ max_width · max(1, |y|)
  unsigned max_bits = 256;   // the Arb and MPFI tiers' limit (0: neither)
  bool layer_widths = true;  // record the widest enclosure after each sub-layer
  bool ball53 = true;        // false: start at ball:113 (where ball:53 is known not to suffice)
};

struct CertifiedOutput {
  Mat<Mpfi> y;                       // the enclosure of the outputs (out_dim × n)
  std::string tier;                  // the tier that gave it: "ball:53", "ball:113", "arb:BITS",
                                     // "interval:BITS";
                                     // "none": every tier failed (y the whole line, tried says why)
  bool reached = false;              // every width ≤ max_width · max(1, |y|)
  double relative_width = kInf;      // max of width / max(1, |y|), rounded up
  std::vector<double> layer_widths;  // the widest entry of the residual stream: the input, after
                                     // each sub-layer, then the output (absolute, rounded up)
  std::vector<std::string> tried;    // each tier tried: "ball:53: 3.1e-2" or "ball:53: ERROR"
};

// width(x) / max(1, |mid(x)|), rounded up: the measure max_width bounds.
double relative_width(const Mpfi& x);

// The network in each tier's scalar, made when that tier starts (so that only one copy of the
// weights is held at a time): check(arch) runs before the weights are allocated and throws when
// they would not fit. Networks of a file (load_network) or held in memory (network_cast).
template <class S>
using Loader = std::function<Network<S>(const std::function<void(const Architecture&)>& check)>;
struct NetworkSource {
  std::string name;  // for messages: the file, or "the network"
  Loader<Ball53> ball53;
  Loader<Ball113> ball113;
  Loader<Mpfi> mpfi;  // at the MPFR precision in force
};
NetworkSource file_source(const std::string& path);
template <class S>
NetworkSource held_source(const Network<S>& net);  // S: Rational or double; net must outlive it

// Every sequence of ds through the network, escalating per sequence; progress per tier.
std::vector<CertifiedOutput> certified_eval(const NetworkSource& net, const Dataset& ds,
                                            const CertifiedOptions& opt = {},
                                            const OnProgress& progress = {});

// One JSON object per sequence, as evaluate_file's intervals ("y", "lo", "hi", "width") with
// "tier", "reached", "relative_width" (rounded up), "layer_widths" and "tried".
nlohmann::json certified_json(const CertifiedOutput& o);

}  // namespace uatlab
