// `uatlab contextual --sweep-c`: the softmax → hardmax transition of Kajitsuka & Sato's
// construction, computed (kajitsuka::sweep_scale, scale_sweep.cpp) and written out as a table and a plot.
#pragma once

#include <string>

#include "uatlab/construct/kajitsuka.hpp"

namespace uatlab::kajitsuka {

// The softmax → hardmax transition: the same projection and W_O with the score scale c swept on a
// log grid, from a hundredth of the scale where one query's scores span 1 nat (softmax nearly
// uniform: mean pooling) up to the largest c whose certificate fits in max_bits / 4 (at most
// 100 times the theorem's c), the separation certified at each; and hardmax (c = ∞) exactly.
struct ScalePoint {
  double c = 0;
  Separation separation;  // .certified false: not certified within max_bits
  unsigned bits = 0;
};
struct ScaleSweep {
  Projection projection;
  double c_construction = 0, c_gap = 0, c_theorem = 0;  // the construction's c (opt.mode) and the references
  std::vector<ScalePoint> points;
  bool hardmax_pairs = false;      // some token occurs in two vocabulary sets
  double hardmax_log10_delta = 0;  // exact: -inf when two contexts of a token coincide under hardmax
};
ScaleSweep sweep_scale(const Facts& f, const ContextualOptions& opt, int points);

}  // namespace uatlab::kajitsuka

namespace uatlab::experiment {

// out_dir/sweep_c.csv (c, log10 δ over all pairs, its certified lower bound, same-token log10 δ,
// certified, bits) and out_dir/sweep_c.png (log10 δ against c, the construction's, the gap
// condition's and the theorem's c marked, hardmax's exact δ in the title); returns the Markdown
// table.
std::string write_scale_sweep(const kajitsuka::ScaleSweep& sweep, const std::string& data_name,
                              const std::string& out_dir);

// Pictures of a built contextual map, in out_dir: context_values.png (one point per context: the
// token's projection vᵀx against the head's softmax-weighted mean of vᵀx over its sequence, the
// number the layer adds along v, one colour per vocabulary set for up to 7 sets) and
// attention.png (the attention weights of the head on one sequence of each of the first 6
// vocabulary sets; rows: set and query, columns: key), computed in double.
void write_contextual_plots(const kajitsuka::Contextual& c, const kajitsuka::Facts& f,
                            const std::string& out_dir);

}  // namespace uatlab::experiment
