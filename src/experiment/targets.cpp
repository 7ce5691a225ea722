// The targets of Yun et al.'s construction: the built-in library (written once for double and for
// MPFI intervals) and user expressions (muParser), the one home of both.
#include "uatlab/experiment/targets.hpp"

#include <muParser.h>

#include <cmath>
#include <memory>

#include "uatlab/io/lists.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab::yun {

namespace {

// The built-in targets, each written once for double and for MPFI intervals (an enclosure of f over
// a box, for the domain certificate).
// Each is written once for double and for MPFI intervals (an enclosure of f over a box, for the
// domain certificate).

template <class S>
S two_pi() {
  if constexpr (std::is_same_v<S, double>) {
    return 2 * M_PI;
  } else {
    S pi;
    mpfi_const_pi(pi.backend().data());
    return 2 * pi;
  }
}
template <class S>
S larger(const S& a, const S& b) {  // intervals: the enclosure of max(a, b)
  if constexpr (std::is_same_v<S, double>)
    return std::max(a, b);
  else
    return hull(std::max(lower(a), lower(b)), std::max(upper(a), upper(b)));
}

template <class S>
Mat<S> tokenwise_sin(const Mat<S>& X) {
  const S w = two_pi<S>();
  return X.unaryExpr([&](const S& x) {
    using std::sin;
    return S(sin(S(x * w)));
  });
}
template <class S>
Mat<S> center(const Mat<S>& X) {
  Mat<S> Y = X;
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    const S m = S(X.row(i).sum()) / S(static_cast<double>(X.cols()));
    for (Eigen::Index j = 0; j < X.cols(); ++j)
      Y(i, j) -= m;
  }
  return Y;
}
template <class S>
Mat<S> attention(const Mat<S>& X) {  // X · softmax(XᵀX), column-wise
  Mat<S> A = X.transpose() * X, W(A.rows(), A.cols());
  for (Eigen::Index j = 0; j < A.cols(); ++j)
    for (Eigen::Index l = 0; l < A.rows(); ++l) {
      if constexpr (std::is_same_v<S, double>) {  // subtract the column's max
        W(l, j) = std::exp(A(l, j) - A.col(j).maxCoeff());
      } else {  // w_l = 1 / Σ_m exp(a_m − a_l): no shared interval subtracted twice
        S den(0);
        for (Eigen::Index m = 0; m < A.rows(); ++m)
          den += Scalar<S>::exp(S(A(m, j) - A(l, j)));
        W(l, j) = S(1) / den;
      }
    }
  if constexpr (std::is_same_v<S, double>)
    for (Eigen::Index j = 0; j < W.cols(); ++j)
      W.col(j) /= W.col(j).sum();
  return X * W;
}
template <class S>
Mat<S> max_pool(const Mat<S>& X) {
  Mat<S> Y = X;
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    S m = X(i, 0);
    for (Eigen::Index j = 1; j < X.cols(); ++j)
      m = larger(m, S(X(i, j)));
    for (Eigen::Index j = 0; j < X.cols(); ++j)
      Y(i, j) *= m;
  }
  return Y;
}
template <class S>
Mat<S> prefix_mean(const Mat<S>& X) {
  Mat<S> Y = X;
  for (Eigen::Index j = 1; j < X.cols(); ++j)
    Y.col(j) = (Y.col(j - 1) * S(static_cast<double>(j)) + X.col(j)) / S(static_cast<double>(j + 1));
  return Y;
}
template <class S>
Mat<S> reverse(const Mat<S>& X) {
  return X.rowwise().reverse();
}

}  // namespace

const std::vector<TargetSpec>& target_table() {
#define UATLAB_TARGET(name, eq, f) \
  { name, eq, f<double>, f<Mpfi> }
  static const std::vector<TargetSpec> table = {
      UATLAB_TARGET("tokenwise-sin", true, tokenwise_sin), UATLAB_TARGET("center", true, center),
      UATLAB_TARGET("attention", true, attention),         UATLAB_TARGET("max-pool", true, max_pool),
      UATLAB_TARGET("prefix-mean", false, prefix_mean),    UATLAB_TARGET("reverse", false, reverse),
  };
#undef UATLAB_TARGET
  return table;
}

std::string target_names() {
  std::vector<std::string> names;
  for (const TargetSpec& t : target_table())
    names.push_back(t.name);
  return join_list(names);
}

Target builtin_target(const std::string& name) {
  for (const TargetSpec& t : target_table())
    if (name == t.name) return {name, t.f, t.fi};
  throw Error("unknown target \"" + name + "\" (built-in: " + target_names() + "; or give an expression)");
}

bool looks_equivariant(const Target& t, int d, int n, int trials, std::uint64_t seed) {
  limits::check_count(d, 1, 64, "d");
  limits::check_count(n, 1, 64, "n");
  Rng rng(seed);
  for (int k = 0; k < trials; ++k) {
    Mat<double> X(d, n);
    for (Eigen::Index i = 0; i < X.size(); ++i)
      X(i) = rng.uniform();
    std::vector<int> perm(n);
    for (int j = 0; j < n; ++j)
      perm[j] = j;
    for (int j = n - 1; j > 0; --j)
      std::swap(perm[j], perm[static_cast<int>(rng.uniform() * (j + 1)) % (j + 1)]);
    Mat<double> XP(d, n), FX = t.f(X);
    for (int j = 0; j < n; ++j)
      XP.col(j) = X.col(perm[j]);
    const Mat<double> FXP = t.f(XP);
    for (int j = 0; j < n; ++j)
      if ((FXP.col(j) - FX.col(perm[j])).cwiseAbs().maxCoeff() > 1e-9) return false;
  }
  return true;
}

}  // namespace uatlab::yun

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
