// Evaluate a model on a dataset in a chosen arithmetic.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "uatlab/io/dataset.hpp"
#include "uatlab/model/network.hpp"
#include "uatlab/progress.hpp"
#include "uatlab/verify/precision.hpp"

namespace uatlab {

// Forward every sequence (OpenMP over sequences). The first error thrown by any sequence is
// rethrown, prefixed with its number (from 1); a float or double output that overflows to inf or
// NaN is an error. `progress` hears each finished chunk of a few sequences per thread, outside the
// parallel loop (a reporter may throw to stop the call). captures (when given) receives each
// sequence's activations (network.hpp).
template <class S>
std::vector<Mat<S>> forward_dataset(const Network<S>& net, const Dataset& ds, const EvalOptions& opt = {},
                                    const OnProgress& progress = {},
                                    std::vector<Activations<S>>* captures = nullptr);

// The numbers an evaluation of ds holds at once, estimated before it starts: the weights, each
// thread's activations and attention for the longest sequence, and with capture every sequence's
// residual streams and patterns (saturating). limits::check_memory turns it into bytes.
long long evaluation_numbers(const Architecture& arch, const Dataset& ds, bool capture);
// The numbers a capture of ds keeps (every sequence's residual streams and attention patterns).
long long captured_numbers(const Architecture& arch, const Dataset& ds);

// One JSON object per sequence: {"y": n tokens × out_dim values}; doubles and floats as JSON
// numbers, MPFR values and rationals as exact strings, intervals as "y" (midpoint), "lo", "hi"
// (strings) and "width" (numbers). capture: also "resid" (the residual stream before the first
// sub-layer and after each, every one as an object like the line itself: {"y", and "lo", "hi",
// "width" for intervals}, tokens × d) and "pattern" ({"sub-layer index": per head an object of
// queries × keys}).
// MPFR and intervals run at p.bits (an MpfrPrecision scope for the call). Precision "certified"
// is verify/certified.hpp's (certified_lines).
std::vector<nlohmann::json> evaluate_file(const std::string& model_path, const Dataset& ds,
                                          const Precision& p, const EvalOptions& opt = {},
                                          const OnProgress& progress = {}, bool capture = false);

// One matrix of outputs (rows × tokens) as a line's fields, as evaluate_file writes them.
template <class S>
nlohmann::json matrix_json(const Mat<S>& y);

}  // namespace uatlab
