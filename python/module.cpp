// uatlab._core: the library for Python (pybind11). Thin on purpose: every call is one library
// call; python/uatlab/__init__.py turns numpy arrays, lists, strings and Fractions into the exact
// JSONL text the library's own reader checks (one parser for every input), and JSON reports into
// dicts. Long calls release the GIL; progress callbacks and Python targets take it back, and a
// Python exception raised inside them is re-raised when the call returns.
#include <mpfr.h>
#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <variant>

#include "uatlab/construct/fang.hpp"
#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/construct/optimal.hpp"
#include "uatlab/experiment/approximate.hpp"
#include "uatlab/experiment/targets.hpp"
#include "uatlab/io/dataset.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/simd.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/train/trainer.hpp"
#include "uatlab/verify/analyse.hpp"
#include "uatlab/verify/bounds.hpp"
#include "uatlab/verify/certified.hpp"
#include "uatlab/verify/evaluate.hpp"
#include "uatlab/verify/precision.hpp"
#include "uatlab/version.hpp"

namespace py = pybind11;
using namespace uatlab;
using nlohmann::json;

namespace {

// Set on the thread that runs a Python target or progress callback of a uatlab call. That call
// holds the process's MPFR precision (one default for all threads, Boost 1.74), so a nested call
// that needs it would wait for ever on a worker thread, or change the outer call's precision under
// its workers on the calling one: such nested calls raise instead (refuse_nested).
thread_local bool in_callback = false;

void refuse_nested(const std::string& what) {
  if (in_callback)
    throw Error(what +
                " cannot run inside a target or progress callback of another uatlab call (that call "
                "holds the process's MPFR precision): evaluate in double or float there, or call it "
                "after the outer call");
}

// A Python callable used from C++ threads: held by shared_ptr (copies never touch Python's
// reference counts), called under the GIL; the first Python error is kept and raised later.
struct Callback {
  py::object fn;
  std::mutex m;
  std::unique_ptr<py::error_already_set> error;
  template <class... A>
  py::object call(A&&... a) {
    py::gil_scoped_acquire gil;
    {
      std::lock_guard<std::mutex> lock(m);
      if (error) return py::none();
    }
    struct Inside {  // in_callback for the duration of the call, however it ends
      bool outer = in_callback;
      Inside() { in_callback = true; }
      ~Inside() { in_callback = outer; }
    } inside;
    try {
      return fn(std::forward<A>(a)...);
    } catch (py::error_already_set& e) {
      std::lock_guard<std::mutex> lock(m);
      if (!error) error = std::make_unique<py::error_already_set>(std::move(e));
      return py::none();
    }
  }
  bool failed() {
    std::lock_guard<std::mutex> lock(m);
    return error != nullptr;
  }
  void rethrow() {
    if (error) {
      py::error_already_set e = std::move(*error);
      error.reset();
      throw e;
    }
  }
};
using CallbackPtr = std::shared_ptr<Callback>;

CallbackPtr callback(const py::object& fn) {
  if (fn.is_none()) return nullptr;
  auto c = std::make_shared<Callback>();
  c->fn = fn;
  return c;
}

// Ctrl-C stops a long call with this, which is no std::exception: the library's handlers that turn
// an std::exception into an Error (naming a sequence, a sweep cell) let it through unchanged, and
// released() raises the KeyboardInterrupt it holds.
struct Interrupted {
  py::error_already_set error;
};

// Ctrl-C, or an exception in the progress callback, stops a long call at its next report: Python's
// SIGINT handler only sets a flag, checked here under the GIL. Called from the calling thread only,
// outside any parallel region, so the exception leaves the library cleanly; released() then raises
// the Python error (KeyboardInterrupt, or the callback's own).
void stop_if_interrupted(const CallbackPtr& cb) {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw Interrupted{py::error_already_set()};
  if (cb && cb->failed()) throw Error("stopped: the progress callback raised");
}

// The reporter of a long call, with or without a Python callback: each report calls the callback,
// then, when made on the calling thread outside every parallel region (an exception may not leave
// one, active or not), stops the call on Ctrl-C.
OnProgress progress_of(const CallbackPtr& c) {
  const std::thread::id caller = std::this_thread::get_id();
  return [c, caller](const std::string& stage, long long done, long long total) {
    if (c) c->call(stage, done, total);
    if (std::this_thread::get_id() == caller && omp_get_level() == 0) stop_if_interrupted(c);
  };
}

// Runs f without the GIL; then raises what a callback raised, if anything.
template <class F>
auto released(const std::vector<CallbackPtr>& callbacks, F&& f) {
  auto finish = [&] {
    for (const CallbackPtr& c : callbacks)
      if (c) c->rethrow();
  };
  decltype(f()) r;
  try {
    py::gil_scoped_release release;
    r = f();
  } catch (Interrupted& stop) {
    finish();
    throw stop.error;
  } catch (...) {
    finish();  // a Python error first: it usually caused the library's
    throw;
  }
  finish();
  return r;
}

// A network for Python, every weight exact, whatever file or construction it came from: as
// rationals, or as doubles when every weight is one (a safetensors file, a GPT-2 checkpoint, a
// random initialisation): GPT-2 124M takes 1.3 GB so, 15 GB as rationals.
struct PyNetwork {
  std::variant<Network<Rational>, Network<double>> net;
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), net);
  }
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), net);
  }
  const Architecture& arch() const {
    return visit([](const auto& n) -> const Architecture& { return n.arch; });
  }
  // f(the network in scalar S): the held one itself when it is in S, else a copy cast to S.
  template <class S, class F>
  decltype(auto) as(F&& f) const {
    if constexpr (std::is_same_v<S, Rational> || std::is_same_v<S, double>)
      if (const auto* held = std::get_if<Network<S>>(&net)) return f(*held);
    return visit([&](const auto& n) { return f(network_cast<S>(n)); });
  }
};

py::array_t<double> to_numpy(const Mat<double>& m) {  // (tokens, values): m transposed
  py::array_t<double> a({m.cols(), m.rows()});
  auto v = a.mutable_unchecked<2>();
  for (Eigen::Index k = 0; k < m.cols(); ++k)
    for (Eigen::Index r = 0; r < m.rows(); ++r)
      v(k, r) = m(r, k);
  return a;
}

// One matrix (rows × tokens) for Python: a numpy array (tokens, rows) for float and double, a pair
// of them rounded outward (lo, hi) for intervals, and rows of exact "p/q" texts otherwise (Fractions
// on the Python side).
template <class S>
py::object to_python(const Mat<S>& y) {
  if constexpr (std::is_floating_point_v<S>) {
    return to_numpy(y.template cast<double>());
  } else if constexpr (Scalar<S>::interval) {
    Mat<double> lo(y.rows(), y.cols()), hi(y.rows(), y.cols());
    for (Eigen::Index i = 0; i < y.size(); ++i) {
      lo(i) = to_double_down(lower(y(i)));
      hi(i) = to_double_up(upper(y(i)));
    }
    return py::make_tuple(to_numpy(lo), to_numpy(hi));
  } else {
    py::list rows;
    for (Eigen::Index k = 0; k < y.cols(); ++k) {
      py::list row;
      for (Eigen::Index r = 0; r < y.rows(); ++r)
        row.append(Scalar<S>::to_rational(y(r, k)).str());
      rows.append(row);
    }
    return std::move(rows);
  }
}

// Every sequence's output, and with capture its activations: {"y", "resid": [before the first
// sub-layer, after each], "pattern": {sub-layer: [per head, queries × keys]}}.
template <class S>
py::list evaluate_as(const PyNetwork& n, const Dataset& ds, const Precision& p, bool capture) {
  std::vector<Mat<S>> ys;
  std::vector<Activations<S>> acts;
  const OnProgress stop_on_ctrl_c = progress_of(nullptr);
  try {
    py::gil_scoped_release release;
    const auto scope = precision_scope(p);  // opened without the GIL: it may wait for another scope
    ys = n.as<S>([&](const Network<S>& net) {
      return forward_dataset(net, ds, {}, stop_on_ctrl_c, capture ? &acts : nullptr);
    });
  } catch (Interrupted& stop) {
    throw stop.error;
  }
  py::list out;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    if (!capture) {
      out.append(to_python(ys[i]));
      continue;
    }
    py::dict d;
    d["y"] = to_python(ys[i]);
    py::list resid;
    for (const Mat<S>& r : acts[i].residual)
      resid.append(to_python(r));
    d["resid"] = resid;
    py::dict pattern;
    for (std::size_t l = 0; l < acts[i].pattern.size(); ++l) {
      if (acts[i].pattern[l].empty()) continue;
      py::list heads;
      for (const Mat<S>& a : acts[i].pattern[l])
        heads.append(to_python(Mat<S>(a.transpose())));  // to_python transposes back: rows are queries
      pattern[py::int_(l)] = heads;
    }
    d["pattern"] = pattern;
    out.append(d);
  }
  return out;
}

py::list evaluate(const PyNetwork& n, const Dataset& ds, const std::string& precision, bool capture) {
  const Precision p = Precision::parse(precision);
  if (p.kind == Precision::Kind::Mpfr || p.kind == Precision::Kind::Interval)
    refuse_nested("eval at precision \"" + precision + "\"");
  return with_scalar(p, [&](auto zero) { return evaluate_as<decltype(zero)>(n, ds, p, capture); });
}

// The certified engine (verify/certified.hpp) on every sequence: per sequence a dict with "y" as
// (lo, hi) rounded outward, "tier", "reached", "relative_width", "layer_widths" and "tried".
py::list evaluate_certified(const PyNetwork& n, const Dataset& ds, double max_width, unsigned max_bits) {
  refuse_nested("eval at precision \"certified\"");
  CertifiedOptions opt;
  opt.max_width = max_width, opt.max_bits = max_bits;
  std::vector<CertifiedOutput> out;
  try {
    py::gil_scoped_release release;
    out = n.visit(
        [&](const auto& net) { return certified_eval(held_source(net), ds, opt, progress_of(nullptr)); });
  } catch (Interrupted& stop) {
    throw stop.error;
  }
  py::list result;
  for (const CertifiedOutput& o : out) {
    py::dict d;
    d["y"] = to_python(o.y);
    d["tier"] = o.tier, d["reached"] = o.reached, d["relative_width"] = o.relative_width;
    d["layer_widths"] = o.layer_widths, d["tried"] = o.tried;
    result.append(d);
  }
  return result;
}

std::string json_text(const json& j) {
  return j.dump();
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "uatlab's C++ library (the Python API is the package uatlab)";
  py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
  m.attr("version") = UATLAB_VERSION;
  simd::select_path();  // a wrong UATLAB_SIMD fails the import, before any work
  m.def("simd_path", &simd::path,
        "The vector instruction set training's kernels run on (the best this CPU has, or the one "
        "UATLAB_SIMD names), e.g. 'AVX2 (16 vector registers, blocks of 6 tokens)'");

  py::class_<Dataset>(m, "Dataset")
      .def_static(
          "parse", [](const std::string& text) { return parse_dataset(text, "data"); }, py::arg("jsonl"))
      .def_static("read", &read_dataset, py::arg("path"))
      .def_static(
          "task",
          [](const std::string& name, const std::string& options) {
            return make_task(name, TaskOptions::from_json(parse_json(options, "task options")));
          },
          py::arg("name"), py::arg("options") = "{}")
      .def("__len__", [](const Dataset& d) { return d.sequences.size(); })
      .def("jsonl", &format_dataset)
      .def_property_readonly("token_input", [](const Dataset& d) { return d.token_input; });

  py::class_<PyNetwork>(m, "Network")
      .def_static(
          "load",
          [](const std::string& path) {
            return with_exact_network(path, [](auto net) { return PyNetwork{std::move(net)}; });
          },
          py::arg("path"))
      .def_static(
          "zeros",
          [](const std::string& arch) {
            return PyNetwork{Network<Rational>(Architecture::from_json(parse_json(arch, "architecture")))};
          },
          py::arg("architecture"))
      .def(
          "save",
          [](const PyNetwork& n, const std::string& path, const std::string& dtype) {
            n.visit([&](const auto& net) { save_network(net, path, dtype, "exact"); });
          },
          py::arg("path"), py::arg("dtype") = "F64")
      .def_property_readonly("architecture_json",
                             [](const PyNetwork& n) { return n.arch().to_json().dump(); })
      .def_property_readonly("parameter_count", [](const PyNetwork& n) { return n.arch().parameter_count(); })
      .def("tensor_names",
           [](const PyNetwork& n) {
             std::vector<std::string> names;
             n.visit([&](const auto& net) {
               net.for_each_tensor(
                   [&](const std::string& name, const auto&, Layout) { names.push_back(name); });
             });
             return names;
           })
      .def(
          "tensor",
          [](const PyNetwork& n, const std::string& want, bool exact) -> py::object {
            py::object out = py::none();
            n.visit([&](const auto& net) {
              net.for_each_tensor([&](const std::string& name, const auto& m, Layout l) {
                using T = typename std::decay_t<decltype(m)>::Scalar;
                if (name != want) return;
                const std::vector<std::int64_t> shape = torch_shape(m, l);
                if (exact) {
                  py::list flat;
                  for_each_torch_element(m, l,
                                         [&](const T& x) { flat.append(Scalar<T>::to_rational(x).str()); });
                  out = py::make_tuple(flat, shape);
                  return;
                }
                py::array_t<double> a(shape);
                double* p = a.mutable_data();
                for_each_torch_element(m, l, [&](const T& x) { *p++ = Scalar<T>::to_double(x); });
                out = a;
              });
            });
            if (out.is_none()) throw Error("no tensor named \"" + want + "\"");
            return out;
          },
          py::arg("name"), py::arg("exact") = false)
      .def(
          "set_tensor",
          [](PyNetwork& n, const std::string& want,
             py::array_t<double, py::array::c_style | py::array::forcecast> a) {
            bool found = false;
            n.visit([&](auto& net) {
              net.for_each_tensor([&](const std::string& name, auto& m, Layout l) {
                using T = typename std::decay_t<decltype(m)>::Scalar;
                if (name != want) return;
                found = true;
                const std::vector<std::int64_t> shape = torch_shape(m, l);
                if (a.ndim() != static_cast<py::ssize_t>(shape.size()) || a.size() != m.size())
                  throw Error("tensor \"" + name + "\": expected " + std::to_string(m.size()) +
                              " values in " + std::to_string(shape.size()) + " dimensions");
                for (std::size_t k = 0; k < shape.size(); ++k)
                  if (a.shape(static_cast<py::ssize_t>(k)) != shape[k])
                    throw Error("tensor \"" + name + "\": shape differs from the architecture's");
                const double* p = a.data();
                for_each_torch_element(m, l, [&](T& x) {
                  if (!std::isfinite(*p)) throw Error("tensor \"" + name + "\": a value is not finite");
                  x = scalar_cast<T>(*p++);  // exact: T holds every double
                });
              });
            });
            if (!found) throw Error("no tensor named \"" + want + "\"");
          },
          py::arg("name"), py::arg("values"))
      .def("eval", &evaluate, py::arg("data"), py::arg("precision") = "double", py::arg("capture") = false)
      .def("eval_certified", &evaluate_certified, py::arg("data"), py::arg("max_width") = 1e-9,
           py::arg("max_bits") = 256);

  m.def(
      "contextual",
      [](const Dataset& ds, const std::string& mode, bool tied, std::uint64_t seed, unsigned max_bits,
         const py::object& progress) {
        refuse_nested("contextual");
        const CallbackPtr cb = callback(progress);
        kajitsuka::ContextualOptions o;
        o.mode = kajitsuka::mode_names.parse(mode), o.tied = tied, o.seed = seed, o.max_bits = max_bits;
        o.progress = progress_of(cb);
        return released({cb}, [&] {
          const kajitsuka::Facts f = kajitsuka::analyse(ds);
          const kajitsuka::Contextual c = kajitsuka::build_contextual(f, o);
          json r = c.report();
          r.update(f.report());
          return std::make_pair(PyNetwork{c.net}, json_text(r));
        });
      },
      py::arg("data"), py::arg("mode") = "tuned", py::arg("tied") = false, py::arg("seed") = 1,
      py::arg("max_bits") = 1u << 16, py::arg("progress") = py::none());

  m.def(
      "memorize",
      [](const Dataset& ds, const std::string& mode, bool tied, const std::string& value_map,
         const std::string& tolerance, std::uint64_t seed, unsigned max_bits, int blocks,
         const py::object& progress) {
        refuse_nested("memorize");
        const CallbackPtr cb = callback(progress);
        limits::check_count(blocks, 0, 1 << 20, "blocks");
        kajitsuka::MemorizeOptions o;
        o.blocks = blocks;
        o.contextual.mode = kajitsuka::mode_names.parse(mode), o.contextual.tied = tied,
        o.contextual.seed = seed;
        o.contextual.max_bits = max_bits, o.contextual.progress = progress_of(cb);
        o.value_map = kajitsuka::value_map_names.parse(value_map), o.tolerance = tolerance;
        return released({cb}, [&] {
          const kajitsuka::Memorized mz = kajitsuka::memorize(ds, o);
          json r = mz.report();
          r["N"] = ds.sequences.size(), r["tolerance"] = tolerance;
          return std::make_pair(PyNetwork{mz.net}, json_text(r));
        });
      },
      py::arg("data"), py::arg("mode") = "tuned", py::arg("tied") = false, py::arg("value_map") = "zhang",
      py::arg("tolerance") = "1e-6", py::arg("seed") = 1, py::arg("max_bits") = 1u << 16,
      py::arg("blocks") = 0, py::arg("progress") = py::none());

  m.def(
      "memorize_optimal",
      [](const Dataset& ds, const std::string& setting, const std::string& tolerance, std::uint64_t seed,
         unsigned max_bits, int blocks, const py::object& progress) {
        refuse_nested("memorize");
        const CallbackPtr cb = callback(progress);
        limits::check_count(blocks, 0, 1 << 20, "blocks");
        optimal::Options o;
        o.setting = optimal::setting_names.parse(setting);
        o.tolerance = tolerance, o.seed = seed, o.max_bits = max_bits, o.blocks = blocks;
        o.progress = progress_of(cb);
        return released({cb}, [&] {
          const optimal::Memorized mz = optimal::memorize(ds, o);
          json r = mz.report();
          r["tolerance"] = tolerance;
          return std::make_pair(PyNetwork{mz.net}, json_text(r));
        });
      },
      py::arg("data"), py::arg("setting"), py::arg("tolerance") = "1e-6", py::arg("seed") = 1,
      py::arg("max_bits") = 1u << 16, py::arg("blocks") = 0, py::arg("progress") = py::none());

  m.def(
      "polynomial",
      [](const std::string& expr, const std::vector<std::string>& vars, const std::string& box,
         const std::string& variant, int degree, std::uint64_t seed) {
        refuse_nested("polynomial");
        return released({}, [&] {
          const fang::Compiled c = fang::compile(expr, vars, parse_rational(box), variant, degree, seed);
          return std::make_pair(PyNetwork{c.net}, json_text(c.report()));
        });
      },
      py::arg("expr"), py::arg("vars"), py::arg("box") = "1", py::arg("variant") = "single-head",
      py::arg("degree") = 0, py::arg("seed") = 1);

  m.def(
      "approximate",
      [](const py::object& target, int d, int n, int K, const std::string& construction, bool pe,
         const std::string& value_map, bool certify, long samples, long samples_standard, std::uint64_t seed,
         const py::object& progress) {
        refuse_nested("approximate");
        const CallbackPtr cb = callback(progress),
                          fn = py::isinstance<py::str>(target) ? nullptr : callback(target);
        yun::Target f;
        if (fn) {  // (n, d) array in, (n, d) array out: tokens as rows, as everywhere in Python
          f.name = py::hasattr(target, "__name__") ? py::str(target.attr("__name__")) : py::str("python");
          f.f = [fn, d, n](const Mat<double>& X) {
            Mat<double> Y = Mat<double>::Constant(X.rows(), X.cols(), std::nan(""));
            py::gil_scoped_acquire gil;
            py::object r = fn->call(to_numpy(X));
            if (r.is_none()) return Y;
            try {
              auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(r);
              if (!a || a.ndim() != 2 || a.shape(0) != X.cols() || a.shape(1) != X.rows())
                throw py::value_error("the target must return an array of shape (n, d) = (" +
                                      std::to_string(n) + ", " + std::to_string(d) + ")");
              for (Eigen::Index k = 0; k < X.cols(); ++k)
                for (Eigen::Index i = 0; i < X.rows(); ++i)
                  Y(i, k) = a.at(k, i);
            } catch (py::error_already_set& e) {
              std::lock_guard<std::mutex> lock(fn->m);
              if (!fn->error) fn->error = std::make_unique<py::error_already_set>(std::move(e));
            } catch (py::builtin_exception& e) {
              e.set_error();
              std::lock_guard<std::mutex> lock(fn->m);
              if (!fn->error) fn->error = std::make_unique<py::error_already_set>();
            }
            return Y;
          };
        } else {
          f = experiment::yun_target(target.cast<std::string>(), d, n);
        }
        experiment::ApproximateOptions o;
        o.construction = construction, o.d = d, o.n = n, o.pe = pe, o.value_map = value_map;
        o.certify = certify, o.samples = samples, o.samples_standard = samples_standard, o.seed = seed;
        o.progress = progress_of(cb);
        return released({cb, fn}, [&] {
          const experiment::Approximation a = experiment::approximate(f, K, o);
          experiment::require_checks_passed(a);  // as the CLI refuses it
          return std::make_tuple(PyNetwork{a.modified_net}, PyNetwork{a.standard_net}, json_text(a.report));
        });
      },
      py::arg("target"), py::arg("d"), py::arg("n"), py::arg("K"), py::arg("construction") = "yun",
      py::arg("pe") = false, py::arg("value_map") = "", py::arg("certify") = false,
      py::arg("samples") = 20000, py::arg("samples_standard") = 2000, py::arg("seed") = 1,
      py::arg("progress") = py::none());

  m.def(
      "train",
      [](const PyNetwork& init, const Dataset& data, const Dataset* validation, const std::string& config,
         const std::string& dtype, const py::object& progress) {
        const CallbackPtr cb = callback(progress);
        const TrainConfig c = TrainConfig::from_json(parse_json(config, "train options"));
        if (dtype != "float" && dtype != "double") throw Error("dtype must be float or double");
        return released({cb}, [&] {
          auto run = [&](auto zero) {
            using S = decltype(zero);
            Network<S> net = init.visit([](const auto& n) { return network_cast<S>(n); });
            const TrainReport r = train(net, data, validation, c, "", [&](const Progress& p) {
              if (cb) cb->call("train", p.step, p.steps);
              stop_if_interrupted(cb);
            });
            return std::make_pair(PyNetwork{network_cast<Rational>(net)},
                                  json_text(training_summary(net, data, validation, c.loss, r)));
          };
          return dtype == "float" ? run(0.0f) : run(0.0);
        });
      },
      py::arg("init"), py::arg("data"), py::arg("validation"), py::arg("config"), py::arg("dtype") = "double",
      py::arg("progress") = py::none());

  m.def(
      "init_random",
      [](const std::string& arch, std::uint64_t seed, double gain) {
        Network<double> net(Architecture::from_json(parse_json(arch, "architecture")));
        init_random(net, seed, gain);
        return PyNetwork{std::move(net)};
      },
      py::arg("architecture"), py::arg("seed") = 1, py::arg("gain") = 1.0);

  m.def(
      "analyse",
      [](const PyNetwork& n, const Dataset& ds, const std::string& labels, const std::string& tolerance,
         unsigned bits, unsigned max_bits, bool min_bits, bool rounding, bool separation, std::uint64_t seed,
         const std::string& plot, bool affine, bool direct_rounding, const std::string& epsilon,
         int epsilon_steps, const std::string& region_method, bool engine, const py::object& progress) {
        refuse_nested("analyse");
        const CallbackPtr cb = callback(progress);
        AnalyseOptions o;
        o.affine = affine, o.direct_rounding = direct_rounding, o.epsilon = epsilon,
        o.epsilon_steps = epsilon_steps, o.region_method = region_method_names.parse(region_method);
        o.labels = labels, o.tolerance = tolerance, o.bits = bits, o.max_bits = max_bits;
        o.min_bits = min_bits, o.rounding = rounding, o.separation = separation, o.seed = seed;
        o.engine = engine, o.progress = progress_of(cb);
        return released({cb}, [&] {
          const Analysis a =
              n.as<Rational>([&](const Network<Rational>& net) { return uatlab::analyse(net, ds, o); });
          if (!plot.empty() && !a.layers.empty()) plot_separation(a, plot);
          return std::make_pair(json_text(a.report()), a.summary());
        });
      },
      py::arg("net"), py::arg("data"), py::arg("labels") = "auto", py::arg("tolerance") = "1e-6",
      py::arg("bits") = 64, py::arg("max_bits") = 4096, py::arg("min_bits") = true,
      py::arg("rounding") = true, py::arg("separation") = true, py::arg("seed") = 1, py::arg("plot") = "",
      py::arg("affine") = false, py::arg("direct_rounding") = false, py::arg("epsilon") = "",
      py::arg("epsilon_steps") = 16, py::arg("region_method") = "intervals", py::arg("engine") = true,
      py::arg("progress") = py::none());
}
