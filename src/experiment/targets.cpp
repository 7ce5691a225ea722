#include "uatlab/experiment/targets.hpp"

#include <muParser.h>

#include <cmath>
#include <memory>

#include "uatlab/limits.hpp"

namespace uatlab::experiment {

namespace {

// Sets a muParser expression that computes one value from the variables defined: no assignment
// ("x=1" would change a variable) and no comma list of several results. Throws Error.
void compile(mu::Parser& p, const std::string& expr, const std::string& what) {
  if (static_cast<long long>(expr.size()) > limits::kExpressionLength)
    throw Error(what + " of " + std::to_string(expr.size()) + " characters: the limit is 100000");
  for (std::size_t k = 0; k < expr.size(); ++k)
    if (expr[k] == '=' && (k == 0 || std::string("=<>!").find(expr[k - 1]) == std::string::npos) &&
        (k + 1 == expr.size() || expr[k + 1] != '='))
      throw Error(what + " \"" + limits::excerpt(expr) + "\": an assignment (=) is not an expression");
  try {
    p.SetExpr(expr);
    p.Eval();
    if (p.GetNumResults() != 1)
      throw Error(what + " \"" + limits::excerpt(expr) + "\" computes several values (a comma list)");
  } catch (mu::Parser::exception_type& e) {
    throw Error(what + " \"" + limits::excerpt(expr) + "\": " + e.GetMsg());
  }
}

}  // namespace

std::function<double(const std::vector<double>&)> scalar_expression(const std::string& expr,
                                                                    const std::vector<std::string>& vars) {
  auto make = [expr, vars](std::vector<double>& xs) {
    auto p = std::make_unique<mu::Parser>();
    try {
      for (std::size_t i = 0; i < vars.size(); ++i)
        p->DefineVar(vars[i], &xs[i]);
    } catch (mu::Parser::exception_type& e) {
      throw Error("variable: " + e.GetMsg());
    }
    compile(*p, expr, "function");
    return p;
  };
  std::vector<double> probe(vars.size(), 0.0);
  make(probe);  // parse errors surface here, once
  return [expr, vars, make](const std::vector<double>& x) {
    std::vector<double> xs = x;
    xs.resize(vars.size());
    const double y = make(xs)->Eval();
    if (!std::isfinite(y)) throw Error("function \"" + limits::excerpt(expr) + "\" is not finite on the box");
    return y;
  };
}

namespace {

yun::Target expression_target(const std::string& expr, int d, int n) {
  auto eval = [expr, d, n](const Mat<double>& X) {
    mu::Parser p;
    double x = 0, i = 0, j = 0, dd = d, nn = n, mean = 0, mx = 0, mn = 0;
    Mat<double> copy = X;
    try {
      p.DefineVar("x", &x), p.DefineVar("i", &i), p.DefineVar("j", &j), p.DefineVar("d", &dd),
          p.DefineVar("n", &nn);
      p.DefineVar("mean", &mean), p.DefineVar("max", &mx), p.DefineVar("min", &mn);
      for (int r = 0; r < d; ++r)
        for (int c = 0; c < n; ++c)
          p.DefineVar("x" + std::to_string(r + 1) + "_" + std::to_string(c + 1), &copy(r, c));
      compile(p, expr, "target");
      Mat<double> Y(d, n);
      for (int r = 0; r < d; ++r) {
        mean = X.row(r).mean();
        mx = X.row(r).maxCoeff();
        mn = X.row(r).minCoeff();
        for (int c = 0; c < n; ++c) {
          x = X(r, c);
          i = r + 1;
          j = c + 1;
          Y(r, c) = p.Eval();
          if (!std::isfinite(Y(r, c)))
            throw Error("target \"" + limits::excerpt(expr) + "\" is not finite at a point of [0,1]^{d×n}");
        }
      }
      return Y;
    } catch (mu::Parser::exception_type& e) {
      throw Error("target \"" + limits::excerpt(expr) + "\": " + e.GetMsg());
    }
  };
  return {expr, eval, nullptr};  // no interval form: muParser evaluates in double
}

}  // namespace

yun::Target yun_target(const std::string& t, int d, int n) {
  for (const yun::TargetSpec& b : yun::target_table())
    if (t == b.name) return yun::builtin_target(t);
  return expression_target(t, d, n);
}

}  // namespace uatlab::experiment
