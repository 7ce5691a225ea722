#include "uatlab/verify/evaluate.hpp"

#include <cmath>

#include <exception>

#include "uatlab/io/model_file.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/verify/bounds.hpp"

namespace uatlab {

using nlohmann::json;

template <class S>
std::vector<Mat<S>> forward_dataset(const Network<S>& net, const Dataset& ds, const EvalOptions& opt,
                                    const OnProgress& progress) {
  check_evaluable<S>(net.arch);
  limits::check_real(opt.hardmax_tolerance, 0.0, 1e300, "the hardmax tie tolerance");
  if (ds.token_input != (net.arch.vocab > 0))
    throw Error(ds.token_input ? "the dataset has token ids but the network takes continuous inputs"
                               : "the dataset has continuous inputs but the network takes token ids");
  const long n = static_cast<long>(ds.sequences.size());
  std::vector<Mat<S>> out(n);
  std::exception_ptr first;
  long first_at = n;
  long long done = 0;
#pragma omp parallel for schedule(dynamic)
  for (long i = 0; i < n; ++i) {
    try {
      const Sequence& s = ds.sequences[i];
      out[i] = ds.token_input ? forward_tokens(net, s.tokens, opt) : forward(net, matrix_cast<S>(s.x), opt);
      if constexpr (std::is_floating_point_v<S>)
        if (!out[i].allFinite())
          throw Error(std::string("the output overflows ") + Scalar<S>::name +
                      " (inf or NaN): use MPFR, interval or rational precision");
#pragma omp critical(uatlab_eval_progress)
      report(progress, "eval", ++done, n);
    } catch (...) {
#pragma omp critical
      if (i < first_at) {
        first_at = i;
        first = std::current_exception();
      }
    }
  }
  if (first) {
    try {
      std::rethrow_exception(first);
    } catch (const std::exception& e) {
      throw Error("sequence " + std::to_string(first_at + 1) + ": " + e.what());  // counted from 1
    }
  }
  return out;
}

namespace {

template <class S>
std::vector<json> run(const std::string& path, const Dataset& ds, const EvalOptions& opt,
                      const OnProgress& progress) {
  Network<S> net;
  if constexpr (std::is_same_v<S, Mpfr> || std::is_same_v<S, Mpfi>) {
    // The memory estimated first: weights, plus per sequence its activations and attention.
    const Network<Rational> exact = load_network<Rational>(path);
    long long widest = exact.arch.d, heads = 0, live = 0;
    for (const LayerSpec& l : exact.arch.layers) {
      widest = std::max<long long>(widest, std::max(l.width, 3 * l.heads * l.head_size));
      heads = std::max<long long>(heads, l.heads);
    }
    for (const Sequence& s : ds.sequences) {
      const long long n = static_cast<long long>(s.n());
      live = std::max(live, 4 * n * widest + heads * n * n);
    }
    limits::check_memory(static_cast<long long>(exact.parameter_count()) + live, mpfr_bits(),
                         Scalar<S>::interval ? 2 : 1, "evaluating " + path);
    net = network_cast<S>(exact);
  } else {
    net = load_network<S>(path);
  }
  std::vector<Mat<S>> ys = forward_dataset(net, ds, opt, progress);
  std::vector<json> lines;
  for (const Mat<S>& y : ys) {
    json tok = json::array(), lo = json::array(), hi = json::array(), width = json::array();
    for (Eigen::Index k = 0; k < y.cols(); ++k) {
      json t = json::array(), l = json::array(), h = json::array(), w = json::array();
      for (Eigen::Index i = 0; i < y.rows(); ++i) {
        const S& v = y(i, k);
        if constexpr (std::is_floating_point_v<S>)
          t.push_back(v);
        else if constexpr (Scalar<S>::interval) {
          t.push_back(Scalar<Mpfr>::to_string(mp::median(v)));
          l.push_back(decimal_text(lower(v), MPFR_RNDD));  // the printed ends still enclose the value
          h.push_back(decimal_text(upper(v), MPFR_RNDU));
          // An upper bound on the width, and "inf" where it is past double's range (JSON has no inf).
          const double width = to_double_up(mp::width(v));
          w.push_back(std::isfinite(width) ? json(width) : json("inf"));
        } else
          t.push_back(Scalar<S>::to_string(v));
      }
      tok.push_back(t), lo.push_back(l), hi.push_back(h), width.push_back(w);
    }
    json line = {{"y", tok}};
    if constexpr (Scalar<S>::interval) line["lo"] = lo, line["hi"] = hi, line["width"] = width;
    lines.push_back(line);
  }
  return lines;
}

}  // namespace

std::vector<json> evaluate_file(const std::string& model_path, const Dataset& ds, const Precision& p,
                                const EvalOptions& opt, const OnProgress& progress) {
  return with_scalar(p, [&](auto zero) {
    const auto scope = precision_scope(p);
    return run<decltype(zero)>(model_path, ds, opt, progress);
  });
}

template std::vector<Mat<float>> forward_dataset(const Network<float>&, const Dataset&, const EvalOptions&,
                                                 const OnProgress&);
template std::vector<Mat<double>> forward_dataset(const Network<double>&, const Dataset&, const EvalOptions&,
                                                  const OnProgress&);
template std::vector<Mat<Mpfr>> forward_dataset(const Network<Mpfr>&, const Dataset&, const EvalOptions&,
                                                const OnProgress&);
template std::vector<Mat<Mpfi>> forward_dataset(const Network<Mpfi>&, const Dataset&, const EvalOptions&,
                                                const OnProgress&);
template std::vector<Mat<Rational>> forward_dataset(const Network<Rational>&, const Dataset&,
                                                    const EvalOptions&, const OnProgress&);

}  // namespace uatlab
