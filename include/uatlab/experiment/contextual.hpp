// `uatlab contextual --sweep-c`: the softmax → hardmax transition of Kajitsuka & Sato's
// construction written out as a table and a plot (the computation: kajitsuka::sweep_scale).
#pragma once

#include <string>

#include "uatlab/construct/kajitsuka.hpp"

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
