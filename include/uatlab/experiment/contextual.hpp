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

}  // namespace uatlab::experiment
