// Targets: the built-in library of Yun et al.'s targets and user-given functions as muParser
// expressions (the one home of expression parsing), in src/experiment/targets.cpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "uatlab/construct/yun.hpp"

namespace uatlab::yun {

// The built-in targets, one row each (name, whether f(XP) = f(X)P, f in double and in intervals).
struct TargetSpec {
  const char* name;
  bool equivariant;
  Mat<double> (*f)(const Mat<double>&);
  Mat<Mpfi> (*fi)(const Mat<Mpfi>&);
};
const std::vector<TargetSpec>& target_table();
std::string target_names();                      // "tokenwise-sin, center, ..."
Target builtin_target(const std::string& name);  // throws Error listing the names
// Whether f(XP) = f(X)P on `trials` seeded random inputs and permutations (to 1e-9).
bool looks_equivariant(const Target& t, int d, int n, int trials, std::uint64_t seed);

}  // namespace uatlab::yun

namespace uatlab::experiment {

// f: R^k -> R in the named variables ("exp(x1)*sin(3*x2)" over x1, x2). Checked once on
// parsing; the callable throws Error where f is not finite. Each call has its own parser state,
// so the callable may run on several threads.
std::function<double(const std::vector<double>&)> scalar_expression(const std::string& expr,
                                                                    const std::vector<std::string>& vars);

// A Yun target: a built-in name (yun::target_table) or an expression for entry (i, j) of f(X) in
// x (that entry), i, j (1-based), d, n, mean / max / min (of row i over the tokens) and every
// entry as x<i>_<j>.
yun::Target yun_target(const std::string& name_or_expression, int d, int n);

}  // namespace uatlab::experiment
