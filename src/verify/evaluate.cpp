#include "uatlab/verify/evaluate.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>

#include "../chunks.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/verify/bounds.hpp"

namespace uatlab {

using nlohmann::json;

template <class S>
std::vector<Mat<S>> forward_dataset(const Network<S>& net, const Dataset& ds, const EvalOptions& opt,
                                    const OnProgress& progress, std::vector<Activations<S>>* captures) {
  check_evaluable<S>(net.arch);
  limits::check_real(opt.hardmax_tolerance, 0.0, 1e300, "the hardmax tie tolerance");
  net.arch.check_token_kind(ds.token_input);
  const long n = static_cast<long>(ds.sequences.size());
  std::vector<Mat<S>> out(n);
  if (captures) captures->assign(static_cast<std::size_t>(n), {});
  std::exception_ptr first;
  long first_at = n;
  auto one = [&](long i) {
    try {
      const Sequence& s = ds.sequences[i];
      Activations<S>* capture = captures ? &(*captures)[static_cast<std::size_t>(i)] : nullptr;
      out[i] = ds.token_input ? forward_tokens(net, s.tokens, opt, capture)
                              : forward(net, matrix_cast<S>(s.x), opt, capture);
      if constexpr (std::is_floating_point_v<S>)
        if (!out[i].allFinite())
          throw Error(std::string("the output overflows ") + Scalar<S>::name +
                      " (inf or NaN): use MPFR, interval or rational precision");
    } catch (...) {
#pragma omp critical
      if (i < first_at) {
        first_at = i;
        first = std::current_exception();
      }
    }
  };
  // Reported after each chunk, where Python's Ctrl-C may stop the call; the first failing chunk ends
  // the work, its lowest failing sequence the one named.
  in_parallel_chunks(n, one, [&](long done) {
    if (!first) report(progress, "eval", done, n);
    return !first;
  });
  if (first) {
    try {
      std::rethrow_exception(first);
    } catch (const std::exception& e) {
      throw Error("sequence " + std::to_string(first_at + 1) + ": " + e.what());  // counted from 1
    }
  }
  return out;
}

// A matrix (rows × tokens) as one line's fields: {"y": tokens × rows}, with "lo", "hi" and
// "width" for intervals; numbers as evaluate_file describes.
template <class S>
json matrix_json(const Mat<S>& y) {
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
        const double wd = to_double_up(mp::width(v));
        w.push_back(std::isfinite(wd) ? json(wd) : json("inf"));
      } else
        t.push_back(Scalar<S>::to_string(v));
    }
    tok.push_back(t), lo.push_back(l), hi.push_back(h), width.push_back(w);
  }
  json line = {{"y", tok}};
  if constexpr (Scalar<S>::interval) line["lo"] = lo, line["hi"] = hi, line["width"] = width;
  return line;
}
template json matrix_json(const Mat<Mpfi>&);

namespace {
long long most_heads(const Architecture& arch) {
  long long heads = 0;
  for (const LayerSpec& l : arch.layers)
    heads = std::max<long long>(heads, l.heads);
  return heads;
}
}  // namespace

long long captured_numbers(const Architecture& arch, const Dataset& ds) {
  const long long heads = most_heads(arch), stages = static_cast<long long>(arch.layers.size()) + 1;
  long long kept = 0;
  for (const Sequence& s : ds.sequences) {
    const long long n = static_cast<long long>(s.n());
    kept = limits::saturating_add(
        kept, limits::saturating_mul(
                  stages, limits::saturating_add(arch.d * n, limits::saturating_mul(heads * n, n))));
  }
  return kept;
}

long long evaluation_numbers(const Architecture& arch, const Dataset& ds, bool capture) {
  long long widest = arch.d, live = 0;
  const long long heads = most_heads(arch);
  for (const LayerSpec& l : arch.layers)
    widest = std::max<long long>(widest, std::max(l.width, 3 * l.heads * l.head_size));
  for (const Sequence& s : ds.sequences) {
    const long long n = static_cast<long long>(s.n());
    live = std::max(live, limits::saturating_add(limits::saturating_mul(4 * n, widest),
                                                 limits::saturating_mul(heads * n, n)));
  }
  const long long kept = capture ? captured_numbers(arch, ds) : 0;
  const long long threads =
      std::min<long long>(omp_get_max_threads(), std::max<std::size_t>(ds.sequences.size(), 1));
  return limits::saturating_add(arch.parameter_count(),
                                limits::saturating_add(limits::saturating_mul(threads, live), kept));
}

namespace {

// A captured number held as a JSON value (16 bytes, in arrays that grow by doubling) and printed
// as text (up to 25 characters).
constexpr double kCapturedBytes = 64;

template <class S>
std::vector<json> run(const std::string& path, const Dataset& ds, const EvalOptions& opt,
                      const OnProgress& progress, bool capture) {
  // MPFR and intervals: the memory estimated from the architecture, once the file is parsed and
  // before the network is allocated.
  const Network<S> net = load_network<S>(path, [&](const Architecture& arch) {
    if constexpr (std::is_same_v<S, Mpfr> || std::is_same_v<S, Mpfi>)
      limits::check_memory(evaluation_numbers(arch, ds, capture), mpfr_bits(), Scalar<S>::interval ? 2 : 1,
                           "evaluating " + path);
    else if constexpr (std::is_floating_point_v<S>)  // the numbers; a captured one also as JSON and text
      limits::check_bytes(
          static_cast<double>(evaluation_numbers(arch, ds, capture)) * sizeof(S) +
              (capture ? static_cast<double>(captured_numbers(arch, ds)) * kCapturedBytes : 0.0),
          "evaluating " + path);
  });
  std::vector<Activations<S>> captures;
  std::vector<Mat<S>> ys = forward_dataset(net, ds, opt, progress, capture ? &captures : nullptr);
  std::vector<json> lines;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    json line = matrix_json(ys[i]);
    if (capture) {
      json resid = json::array(), pattern = json::object();
      for (const Mat<S>& r : captures[i].residual)
        resid.push_back(matrix_json(r));
      for (std::size_t l = 0; l < captures[i].pattern.size(); ++l) {
        if (captures[i].pattern[l].empty()) continue;
        json heads_json = json::array();
        for (const Mat<S>& a : captures[i].pattern[l])  // rows are queries: as matrix_json's tokens
          heads_json.push_back(matrix_json(Mat<S>(a.transpose())));
        pattern[std::to_string(l)] = heads_json;
      }
      line["resid"] = resid, line["pattern"] = pattern;
    }
    lines.push_back(line);
  }
  return lines;
}

}  // namespace

std::vector<json> evaluate_file(const std::string& model_path, const Dataset& ds, const Precision& p,
                                const EvalOptions& opt, const OnProgress& progress, bool capture) {
  return with_scalar(p, [&](auto zero) {
    const auto scope = precision_scope(p);
    return run<decltype(zero)>(model_path, ds, opt, progress, capture);
  });
}

template std::vector<Mat<float>> forward_dataset(const Network<float>&, const Dataset&, const EvalOptions&,
                                                 const OnProgress&, std::vector<Activations<float>>*);
template std::vector<Mat<double>> forward_dataset(const Network<double>&, const Dataset&, const EvalOptions&,
                                                  const OnProgress&, std::vector<Activations<double>>*);
template std::vector<Mat<Mpfr>> forward_dataset(const Network<Mpfr>&, const Dataset&, const EvalOptions&,
                                                const OnProgress&, std::vector<Activations<Mpfr>>*);
template std::vector<Mat<Mpfi>> forward_dataset(const Network<Mpfi>&, const Dataset&, const EvalOptions&,
                                                const OnProgress&, std::vector<Activations<Mpfi>>*);
template std::vector<Mat<Rational>> forward_dataset(const Network<Rational>&, const Dataset&,
                                                    const EvalOptions&, const OnProgress&,
                                                    std::vector<Activations<Rational>>*);

}  // namespace uatlab
