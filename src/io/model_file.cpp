#include "uatlab/io/model_file.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>

#include "uatlab/io/json.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/io/safetensors.hpp"
#include "uatlab/limits.hpp"

namespace uatlab {

using nlohmann::json;

FileFormat format_for_path(const std::string& path) {
  const std::string ext = ".json";
  bool is_json = path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  return is_json ? FileFormat::json : FileFormat::safetensors;
}

namespace {

std::string shape_text(const std::vector<std::int64_t>& s) {
  return json(s).dump();
}

// One tensor of a file, read value by value in PyTorch's (row-major) order as the network is
// filled: a safetensors tensor (or a view of one: a transposed slice of a Conv1D weight) is
// converted from the file's bytes straight into the network, with no copy of the values between.
// JSON files hold their exact rationals, parsed once into `exact`.
template <class S>
struct Source {
  std::vector<std::int64_t> shape;
  std::int64_t count = 0;                  // values it holds
  std::function<double(std::int64_t)> at;  // value k, a double of the file
  std::vector<S> exact;                    // or the values themselves
  S value(std::int64_t k) const { return at ? scalar_cast<S>(at(k)) : exact[static_cast<std::size_t>(k)]; }
};
template <class S>
using Sources = std::map<std::string, Source<S>>;

// A source of the given shape whose value k is at(k).
template <class S>
Source<S> view(std::vector<std::int64_t> shape, std::function<double(std::int64_t)> at) {
  Source<S> src;
  src.count = std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
  src.shape = std::move(shape);
  src.at = std::move(at);
  return src;
}

// m's values from src, in PyTorch's order (shape and count checked by the caller).
template <class S>
void fill(Mat<S>& m, Layout l, const Source<S>& src) {
  std::int64_t k = 0;
  for_each_torch_element(m, l, [&](S& x) { x = src.value(k++); });
}

// A safetensors tensor as a source; `name` for its errors. `t` must outlive the source.
template <class S>
Source<S> file_source(const std::string& name, const Tensor& t) {
  if (t.dtype != "F32" && t.dtype != "F64")
    throw Error("tensor \"" + name + "\": dtype " + t.dtype +
                " is not supported by uatlab (F32 and F64 are)");
  return view<S>(t.shape, [&t, name](std::int64_t k) {
    const double v = t.at(k);
    if (!std::isfinite(v)) throw Error("tensor \"" + name + "\" contains NaN or infinity");
    return v;
  });
}

// The model's tensors of a safetensors file: a training checkpoint also holds networks under the
// prefixes its metadata lists (and `skip` names), which are not the model's.
template <class S>
Sources<S> model_tensors(const Safetensors& st, std::vector<std::string> skip = {}) {
  if (st.metadata.count(kCheckpointExtras))
    for (const std::string& p : parse_list(st.metadata.at(kCheckpointExtras), kCheckpointExtras))
      skip.push_back(p);
  Sources<S> sources;
  for (auto& [name, t] : st.tensors) {
    const std::string& tensor = name;  // (a structured binding cannot be captured in C++17)
    if (std::any_of(skip.begin(), skip.end(), [&](const std::string& p) { return tensor.rfind(p, 0) == 0; }))
      continue;
    sources[name] = file_source<S>(name, t);
  }
  return sources;
}

// The network of an architecture with every tensor from `stored`: each present, of its shape,
// and none left over. The architecture's size is checked against the values the file holds before
// anything of that size is allocated: a small file cannot make uatlab allocate a huge network.
template <class S>
Network<S> assemble(const json& arch_json, const Sources<S>& stored) {
  const Architecture arch = Architecture::from_json(arch_json);
  long long held = 0;
  for (auto& [name, entry] : stored)
    held = limits::saturating_add(held, entry.count);
  if (arch.parameter_count() > std::max(held, 1LL << 20))  // small ones get the tensor-by-tensor check
    throw Error("the architecture has " + std::to_string(arch.parameter_count()) +
                " weights, the file holds only " + std::to_string(held));
  Network<S> net(arch);
  std::size_t used = 0;
  net.for_each_tensor([&](const std::string& name, Mat<S>& m, Layout l) {
    auto it = stored.find(name);
    if (it == stored.end()) throw Error("missing tensor \"" + name + "\"");
    auto want = torch_shape(m, l);
    const Source<S>& src = it->second;
    if (src.shape != want)
      throw Error("tensor \"" + name + "\" has shape " + shape_text(src.shape) + ", the architecture needs " +
                  shape_text(want));
    if (src.count != static_cast<std::int64_t>(m.size()))
      throw Error("tensor \"" + name + "\" has " + std::to_string(src.count) + " values, its shape needs " +
                  std::to_string(m.size()));
    fill(m, l, src);
    ++used;
  });
  if (used != stored.size())
    for (const auto& entry : stored) {
      const std::string& name = entry.first;
      bool known = false;
      net.for_each_tensor([&](const std::string& n, const Mat<S>&, Layout) { known |= n == name; });
      if (!known) throw Error("unexpected tensor \"" + name + "\" (not part of the architecture)");
    }
  return net;
}

}  // namespace

namespace {

// Whether t is GPT-2's causal-mask buffer: shape (1, 1, Q, Q) with Q >= positions, 1 on and below
// the diagonal and 0 above (bool, 8-bit or float).
bool is_causal_mask(const Tensor& t, long long positions) {
  if (t.shape.size() != 4 || t.shape[0] != 1 || t.shape[1] != 1 || t.shape[2] != t.shape[3] ||
      t.shape[2] < positions)
    return false;
  const bool bytes = t.dtype == "BOOL" || t.dtype == "U8" || t.dtype == "I8";
  if (!bytes && t.dtype != "F32" && t.dtype != "F64") return false;
  if (t.size != static_cast<std::size_t>(t.numel()) * (bytes ? 1 : t.dtype == "F32" ? 4 : 8)) return false;
  const std::int64_t q = t.shape[2];
  for (std::int64_t i = 0; i < q; ++i)
    for (std::int64_t j = 0; j < q; ++j) {
      const std::int64_t k = i * q + j;
      const double v = bytes ? static_cast<double>(static_cast<unsigned char>(t.data()[k])) : t.at(k);
      if (v != (j <= i ? 1.0 : 0.0)) return false;
    }
  return true;
}

// ---- GPT-2 in its public layout (Hugging Face's): model.safetensors beside config.json ----------
// Blocks h.{i}: ln_1, attn.c_attn (q, k, v side by side) and attn.c_proj, ln_2, mlp.c_fc and
// mlp.c_proj, stored as Conv1D (in × out, the transpose of nn.Linear's out × in); wte, wpe, ln_f; the
// LM head tied to wte. uatlab's network: per block a pre-norm causal attention (biases, 1/√head
// size) and a pre-norm feed-forward with GELU's tanh form, then ln_f as a layernorm sub-layer and a
// readout equal to wte (bias 0). Buffers: attn.bias must be the causal mask (then skipped),
// attn.masked_bias (the masked scores' fill) is skipped; an optional "transformer." prefix is dropped.
template <class S>
std::pair<json, Sources<S>> gpt2(const Safetensors& st, const json& config) {
  if (!config.is_object()) throw Error("config.json must hold a JSON object");
  // A key's value of one type, or the fallback where it is absent or null; a wrong type names the key.
  auto typed = [&](const char* key, auto fallback) {
    using T = decltype(fallback);
    if (!config.contains(key) || config[key].is_null()) return fallback;
    const json& v = config[key];
    const bool ok = std::is_same_v<T, bool>     ? v.is_boolean()
                    : std::is_same_v<T, double> ? v.is_number()
                                                : v.is_string();
    if (!ok)
      throw Error(std::string("config.json: \"") + key + "\" must be " +
                  (std::is_same_v<T, bool>     ? "true or false"
                   : std::is_same_v<T, double> ? "a number"
                                               : "a string") +
                  ", got " + limits::excerpt(v.dump()));
    return v.get<T>();
  };
  const std::string type = typed("model_type", std::string("gpt2"));
  if (type != "gpt2")
    throw Error("config.json: model_type \"" + type + "\" (uatlab reads GPT-2's layout, \"gpt2\")");
  if (!typed("tie_word_embeddings", true))
    throw Error("config.json: tie_word_embeddings false: an untied LM head is not GPT-2's layout");
  auto count = [&](const char* key, const char* fallback = nullptr) -> long long {
    const char* k = config.contains(key) || !fallback ? key : fallback;
    if (!config.contains(k) || !config[k].is_number_unsigned() || config[k].get<long long>() < 1)
      throw Error(std::string("config.json: \"") + key + "\" must be a positive integer");
    return config[k].get<long long>();
  };
  const long long d = count("n_embd"), H = count("n_head"), L = count("n_layer"), V = count("vocab_size"),
                  P = count("n_positions", "n_ctx");
  const long long m = config.contains("n_inner") && !config["n_inner"].is_null() ? count("n_inner") : 4 * d;
  if (d % H) throw Error("config.json: n_embd " + std::to_string(d) + " is not a multiple of n_head");
  // Before the architecture is built (2 sub-layers a block): 12 tensors a block must be in the file.
  if (L > static_cast<long long>(st.tensors.size()) / 12)
    throw Error("config.json: n_layer " + std::to_string(L) + " needs 12 tensors a block, the file holds " +
                std::to_string(st.tensors.size()));
  const std::string act = typed("activation_function", std::string("gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu")
    throw Error("config.json: activation_function \"" + act +
                "\" (uatlab has gelu_new, i.e. GELU's tanh form, and gelu)");
  for (const char* flag : {"scale_attn_by_inverse_layer_idx", "add_cross_attention"})
    if (typed(flag, false)) throw Error(std::string("config.json: ") + flag + " is not supported");
  if (!typed("scale_attn_weights", true))
    throw Error("config.json: scale_attn_weights false is not supported");
  const double eps_value = typed("layer_norm_epsilon", 1e-5);
  const std::string eps = rational_of(eps_value).str();  // the double the checkpoint's code divides by
  json layers = json::array();
  for (long long i = 0; i < L; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    layers.push_back({{"type", "attention"},
                      {"heads", H},
                      {"head_size", d / H},
                      {"sqrt_scaling", true},
                      {"bias", true},
                      {"causal", true},
                      {"pre_norm", true},
                      {"eps", eps},
                      {"source", h + "attn"}});
    layers.push_back({{"type", "feedforward"},
                      {"width", m},
                      {"activation", act == "gelu" ? "gelu" : "gelu_tanh"},
                      {"pre_norm", true},
                      {"eps", eps},
                      {"source", h + "mlp"}});
  }
  layers.push_back({{"type", "layernorm"}, {"eps", eps}, {"source", "ln_f"}});
  const json arch = {{"d", d}, {"vocab", V}, {"max_len", P}, {"readout", V}, {"layers", layers}};
  // The file's tensors by GPT-2 name (prefix dropped; the buffers checked, then skipped).
  std::map<std::string, const Tensor*> file;
  std::map<std::string, std::string> spelled;  // GPT-2 name → the file's
  auto ends_with = [](const std::string& n, const std::string& end) {
    return n.size() >= end.size() && n.compare(n.size() - end.size(), end.size(), end) == 0;
  };
  for (const auto& [name, t] : st.tensors) {
    const std::string n = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    if (!spelled.emplace(n, name).second)
      throw Error("tensors \"" + spelled[n] + "\" and \"" + name + "\" are both GPT-2's \"" + n + "\"");
    if (ends_with(n, ".attn.bias")) {  // the causal mask: uatlab's attention is causal, so it must be
      if (!is_causal_mask(t, P))
        throw Error("tensor \"" + name + "\" is not GPT-2's causal mask (shape (1, 1, Q, Q), Q >= " +
                    std::to_string(P) + ", ones on and below the diagonal): uatlab's layout is causal");
      continue;
    }
    if (ends_with(n, ".attn.masked_bias")) continue;  // the masked scores' fill value (uatlab's is −∞)
    file[n] = &t;
  }
  // Each file tensor is used once, as one or more views (the values stay in the file's bytes).
  auto tensor = [&](const std::string& n, std::vector<std::int64_t> shape) -> Source<S> {
    auto it = file.find(n);
    if (it == file.end()) throw Error("missing tensor \"" + n + "\"");
    if (it->second->shape != shape)
      throw Error("tensor \"" + n + "\" has shape " + shape_text(it->second->shape) + ", config.json makes " +
                  shape_text(shape));
    Source<S> src = file_source<S>(n, *it->second);
    file.erase(it);
    return src;
  };
  Sources<S> out;
  auto put = [&](const std::string& name, Source<S> src) { out[name] = std::move(src); };
  // Values [c0, c0 + rows) of a vector.
  auto slice = [](const Source<S>& v, long long c0, long long rows) -> Source<S> {
    return view<S>({rows}, [at = v.at, c0](std::int64_t k) { return at(c0 + k); });
  };
  // Columns [c0, c0 + rows) of a Conv1D weight (in × out), as an nn.Linear weight (rows × in).
  auto linear = [](const Source<S>& w, long long c0, long long rows) -> Source<S> {
    const long long in = w.shape[0], cols = w.shape[1];
    return view<S>({rows, in},
                   [at = w.at, in, cols, c0](std::int64_t k) { return at(k % in * cols + c0 + k / in); });
  };
  const Source<S> wte = tensor("wte.weight", {V, d});
  put("embed.weight", wte);
  put("pe.weight", tensor("wpe.weight", {P, d}));
  for (long long i = 0; i < L; ++i) {
    const std::string h = "h." + std::to_string(i) + ".", a = "layers." + std::to_string(2 * i) + ".",
                      f = "layers." + std::to_string(2 * i + 1) + ".";
    put(a + "norm.weight", tensor(h + "ln_1.weight", {d}));
    put(a + "norm.bias", tensor(h + "ln_1.bias", {d}));
    const Source<S> qkv = tensor(h + "attn.c_attn.weight", {d, 3 * d}),
                    qkv_b = tensor(h + "attn.c_attn.bias", {3 * d});
    for (int j = 0; j < 3; ++j) {
      const std::string x(1, "qkv"[j]);
      put(a + x + ".weight", linear(qkv, j * d, d));
      put(a + x + ".bias", slice(qkv_b, j * d, d));
    }
    put(a + "o.weight", linear(tensor(h + "attn.c_proj.weight", {d, d}), 0, d));
    put(a + "o.bias", tensor(h + "attn.c_proj.bias", {d}));
    put(f + "norm.weight", tensor(h + "ln_2.weight", {d}));
    put(f + "norm.bias", tensor(h + "ln_2.bias", {d}));
    put(f + "fc1.weight", linear(tensor(h + "mlp.c_fc.weight", {d, m}), 0, m));
    put(f + "fc1.bias", tensor(h + "mlp.c_fc.bias", {m}));
    put(f + "fc2.weight", linear(tensor(h + "mlp.c_proj.weight", {m, d}), 0, d));
    put(f + "fc2.bias", tensor(h + "mlp.c_proj.bias", {d}));
  }
  const std::string last = "layers." + std::to_string(2 * L) + ".";
  put(last + "weight", tensor("ln_f.weight", {d}));
  put(last + "bias", tensor("ln_f.bias", {d}));
  if (file.count("lm_head.weight")) {
    const Source<S> head = tensor("lm_head.weight", {V, d});
    for (std::int64_t k = 0; k < head.count; ++k)
      if (head.at(k) != wte.at(k))
        throw Error("lm_head.weight differs from wte.weight: an untied head is not GPT-2's layout");
  }
  put("readout.weight", wte);
  put("readout.bias", view<S>({V}, [](std::int64_t) { return 0.0; }));
  if (!file.empty()) throw Error("unexpected tensor \"" + file.begin()->first + "\" for GPT-2's layout");
  return {arch, out};
}

// torch.save writes a zip archive (since PyTorch 1.6) or, before, a pickle (protocol 2 to 5).
// Asked only of a file that did not parse: a safetensors header length can begin with these bytes.
bool is_pytorch_checkpoint(const std::string& bytes) {
  return bytes.rfind("PK\x03\x04", 0) == 0 ||
         (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 && bytes[1] >= 2 &&
          bytes[1] <= 5);
}

// A model's architecture and its tensors' sources, the file parsed once. `st` holds the bytes
// the sources read.
template <class S>
struct Opened {
  std::shared_ptr<const Safetensors> st;
  json arch;
  Sources<S> sources;
};

// A uatlab model file's contents (safetensors with the architecture in its metadata, or JSON).
template <class S>
Opened<S> open_bytes(const std::shared_ptr<const std::string>& bytes, FileFormat format) try {
  Opened<S> o;
  if (format == FileFormat::json) {
    json j = parse_json(*bytes, "model file", true);
    if (!j.is_object() || string_field(j, "format") != "uatlab-model-1")
      throw Error("not a uatlab model file (expected \"format\": \"uatlab-model-1\")");
    if (!j.contains("architecture") || !j.contains("tensors") || !j["tensors"].is_object())
      throw Error("model file needs \"architecture\" and \"tensors\"");
    o.arch = j["architecture"];
    for (auto& [name, t] : j["tensors"].items()) {
      if (!t.is_object() || !t.contains("shape") || !t.contains("data") || !t["data"].is_array())
        throw Error("tensor \"" + name + "\" needs \"shape\" and \"data\"");
      auto& entry = o.sources[name];
      for (auto& s : t["shape"]) {
        if (!s.is_number_unsigned()) throw Error("tensor \"" + name + "\": bad shape " + t["shape"].dump());
        entry.shape.push_back(s.template get<std::int64_t>());
      }
      for (auto& v : t["data"]) {
        std::string text = v.is_string() ? v.template get<std::string>() : v.is_number() ? v.dump() : "";
        if (text.empty()) throw Error("tensor \"" + name + "\": value " + v.dump() + " is not a number");
        entry.exact.push_back(Scalar<S>::from(parse_rational(text)));
      }
      entry.count = static_cast<std::int64_t>(entry.exact.size());
    }
  } else {
    o.st = std::make_shared<const Safetensors>(Safetensors::parse(bytes, "safetensors"));
    if (!o.st->metadata.count("uatlab"))
      throw Error("safetensors file has no \"uatlab\" architecture in __metadata__");
    o.arch = parse_json(o.st->metadata.at("uatlab"), "architecture in __metadata__", true);
    o.sources = model_tensors<S>(*o.st);
  }
  return o;
} catch (const nlohmann::json::exception& e) {  // a JSON value of an unexpected type
  throw Error(std::string("model file") + ": malformed (" + e.what() + ")");
}

// What PATH holds: a uatlab model file, or GPT-2's public layout (a folder with model.safetensors
// and config.json, or such a file with config.json beside it and no uatlab architecture in its
// metadata). Errors name the file.
template <class S>
Opened<S> open_model(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;  // a path the system refuses (too long, ...) is read_file's error to name
  const bool folder = fs::is_directory(path, ec);
  const std::string file = folder ? (fs::path(path) / "model.safetensors").string() : path;
  const fs::path config = fs::path(file).parent_path() / "config.json";
  const auto bytes = std::make_shared<const std::string>(read_file(file));
  const FileFormat format = format_for_path(file);
  try {
    if (format == FileFormat::safetensors && (folder || fs::exists(config, ec))) {
      auto st = std::make_shared<const Safetensors>(Safetensors::parse(bytes, "safetensors"));
      if (folder || !st->metadata.count("uatlab")) try {
          auto [arch, sources] = gpt2<S>(*st, parse_json(read_file(config.string()), "config.json"));
          return {st, arch, std::move(sources)};
        } catch (const Error& e) {
          throw Error(file + " (GPT-2 layout, " + config.string() + "): " + e.what());
        } catch (const nlohmann::json::exception& e) {
          throw Error(config.string() + ": malformed (" + e.what() + ")");
        }
    }
    return open_bytes<S>(bytes, format);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind(file + " (GPT-2 layout", 0) == 0 || what.rfind(config.string(), 0) == 0) throw;
    if (is_pytorch_checkpoint(*bytes))
      throw Error(
          path +
          ": a PyTorch checkpoint (torch.save), which uatlab does not read (a pickle can run code). "
          "Convert it in Python: uatlab.from_torch(module).save(\"model.safetensors\") (docs/python.md)");
    throw Error(path + ": " + what);
  }
}

}  // namespace

template <class S>
Network<S> load_network(const std::string& path, const std::function<void(const Architecture&)>& before) {
  const Opened<S> o = open_model<S>(path);
  if (before) {
    Architecture arch;
    try {
      arch = Architecture::from_json(o.arch);
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
    before(arch);
  }
  try {
    return assemble(o.arch, o.sources);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

template <class S>
Network<S> parse_network(const std::string& bytes, FileFormat format) {
  const Opened<S> o = open_bytes<S>(std::make_shared<const std::string>(bytes), format);
  return assemble(o.arch, o.sources);
}

// One tensor of the network (referred to, not copied) for write_safetensors: each exact value
// rounded once, straight to the dtype; a value beyond its range is an Error naming the tensor.
template <class S>
TensorWriter tensor_writer(const std::string& name, const Mat<S>& m, Layout l, const std::string& dtype) {
  return {name, dtype, torch_shape(m, l), [name, dtype, mp = &m, l](std::string& out) {
            for_each_torch_element(*mp, l, [&](const S& x) {
              double v = kInf;
              try {
                v = dtype == "F64" ? Scalar<S>::to_double(x) : static_cast<double>(scalar_cast<float>(x));
              } catch (const Error&) {  // beyond the range of float: v stays inf
              }
              if (!std::isfinite(v))
                throw Error("tensor \"" + name + "\" has a value that does not fit " + dtype);
              append_value(out, dtype, v);
            });
          }};
}

template <class S>
void save_network(const Network<S>& net, const std::string& path, const std::string& dtype,
                  const std::string& source) {
  if (format_for_path(path) == FileFormat::json) {
    json tensors = json::object();
    net.for_each_tensor([&](const std::string& name, const Mat<S>& m, Layout l) {
      json data = json::array();
      for_each_torch_element(m, l, [&](const S& x) { data.push_back(Scalar<S>::to_rational(x).str()); });
      tensors[name] = {{"shape", torch_shape(m, l)}, {"data", data}};
    });
    json j = {{"format", "uatlab-model-1"},
              {"scalar", source},
              {"architecture", net.arch.to_json()},
              {"tensors", tensors}};
    write_file_atomic(path, j.dump(1) + "\n");
    return;
  }
  if (dtype != "F64" && dtype != "F32") throw Error("dtype must be F64 or F32, got " + dtype);
  // Streamed: one tensor's bytes at a time beside the network (a 124M-parameter model is not built
  // a second and third time in memory).
  std::vector<TensorWriter> tensors;
  net.for_each_tensor([&](const std::string& name, const Mat<S>& m, Layout l) {
    tensors.push_back(tensor_writer(name, m, l, dtype));
  });
  write_safetensors(
      path, {{"format", "pt"}, {"uatlab", net.arch.to_json().dump()}, {"uatlab_source", source}}, tensors);
}

template <class S>
void save_checkpoint(const std::string& path, const Network<S>& net, const NamedNetworks<S>& extras,
                     const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";
  meta["uatlab"] = net.arch.to_json().dump();
  std::vector<std::string> prefixes;
  for (auto& [prefix, n] : extras)
    prefixes.push_back(prefix);
  if (!prefixes.empty()) meta[kCheckpointExtras] = join_list(prefixes);
  std::vector<TensorWriter> tensors;
  auto put = [&](const std::string& prefix, const Network<S>& n) {
    n.for_each_tensor([&](const std::string& name, const Mat<S>& m, Layout l) {
      tensors.push_back(tensor_writer(prefix + name, m, l, "F64"));
    });
  };
  put("", net);
  for (auto& [prefix, n] : extras)
    put(prefix, *n);
  write_safetensors(path, meta, tensors);
}

template <class S>
std::map<std::string, std::string> load_checkpoint(const std::string& path, Network<S>& net,
                                                   const NamedNetworks<S>& extras) {
  try {
    const Safetensors st =
        Safetensors::parse(std::make_shared<const std::string>(read_file(path)), "checkpoint");
    if (!st.metadata.count("uatlab")) throw Error("no \"uatlab\" architecture in __metadata__");
    std::vector<std::string> prefixes;
    for (auto& [prefix, n] : extras)
      prefixes.push_back(prefix);
    net =
        assemble(parse_json(st.metadata.at("uatlab"), "architecture", true), model_tensors<S>(st, prefixes));
    auto get = [&](const std::string& prefix, Network<S>& n) {
      n.for_each_tensor([&](const std::string& name, Mat<S>& m, Layout l) {
        auto it = st.tensors.find(prefix + name);
        if (it == st.tensors.end()) throw Error("missing tensor \"" + prefix + name + "\"");
        if (it->second.shape != torch_shape(m, l))
          throw Error("tensor \"" + prefix + name + "\" has the wrong shape");
        fill(m, l, file_source<S>(prefix + name, it->second));
      });
    };
    for (auto& [prefix, n] : extras) {
      *n = Network<S>(net.arch);
      get(prefix, *n);
    }
    return st.metadata;
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

template void save_checkpoint<float>(const std::string&, const Network<float>&, const NamedNetworks<float>&,
                                     const std::map<std::string, std::string>&);
template void save_checkpoint<double>(const std::string&, const Network<double>&,
                                      const NamedNetworks<double>&,
                                      const std::map<std::string, std::string>&);
template std::map<std::string, std::string> load_checkpoint<float>(const std::string&, Network<float>&,
                                                                   const NamedNetworks<float>&);
template std::map<std::string, std::string> load_checkpoint<double>(const std::string&, Network<double>&,
                                                                    const NamedNetworks<double>&);

#define UATLAB_INSTANTIATE_IO(S)                                                                            \
  template Network<S> load_network<S>(const std::string&, const std::function<void(const Architecture&)>&); \
  template Network<S> parse_network<S>(const std::string&, FileFormat);                                     \
  template void save_network<S>(const Network<S>&, const std::string&, const std::string&,                  \
                                const std::string&);
UATLAB_INSTANTIATE_IO(float)
UATLAB_INSTANTIATE_IO(double)
UATLAB_INSTANTIATE_IO(Mpfr)
UATLAB_INSTANTIATE_IO(Mpfi)
UATLAB_INSTANTIATE_IO(Rational)
template Network<Ball53> load_network<Ball53>(const std::string&,
                                              const std::function<void(const Architecture&)>&);
template Network<Ball113> load_network<Ball113>(const std::string&,
                                                const std::function<void(const Architecture&)>&);

}  // namespace uatlab
