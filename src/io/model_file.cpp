#include "uatlab/io/model_file.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "uatlab/io/json.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/io/safetensors.hpp"

namespace uatlab {

using nlohmann::json;

FileFormat format_for_path(const std::string& path) {
  const std::string ext = ".json";
  bool is_json = path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  return is_json ? FileFormat::json : FileFormat::safetensors;
}

namespace {

template <class S>
void assign_torch_order(Mat<S>& m, Layout l, const std::vector<S>& v) {
  std::size_t k = 0;
  for_each_torch_element(m, l, [&](S& x) { x = v[k++]; });
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  return json(s).dump();
}

// A file's tensors: name -> (torch shape, exact values as S).
template <class S>
using Stored = std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<S>>>;

// The model's tensors of a safetensors file: a training checkpoint also holds networks under the
// prefixes its metadata lists (and `skip` names), which are not the model's.
template <class S>
Stored<S> model_tensors(const Safetensors& st, std::vector<std::string> skip = {}) {
  if (st.metadata.count(kCheckpointExtras))
    for (const std::string& p : parse_list(st.metadata.at(kCheckpointExtras), kCheckpointExtras))
      skip.push_back(p);
  Stored<S> stored;
  for (auto& [name, t] : st.tensors) {
    const std::string& tensor = name;  // (a structured binding cannot be captured in C++17)
    if (std::any_of(skip.begin(), skip.end(), [&](const std::string& p) { return tensor.rfind(p, 0) == 0; }))
      continue;
    auto& entry = stored[name];
    entry.first = t.shape;
    for (double v : t.values()) {
      if (!std::isfinite(v)) throw Error("tensor \"" + name + "\" contains NaN or infinity");
      entry.second.push_back(scalar_cast<S>(v));
    }
  }
  return stored;
}

// The network of an architecture with every tensor from `stored`: each present, of its shape,
// and none left over. The architecture's size is checked against the values the file holds before
// anything of that size is allocated: a small file cannot make uatlab allocate a huge network.
template <class S>
Network<S> assemble(const json& arch_json, const Stored<S>& stored) {
  const Architecture arch = Architecture::from_json(arch_json);
  long long held = 0;
  for (auto& [name, entry] : stored)
    held += static_cast<long long>(entry.second.size());
  if (arch.parameter_count() > std::max(held, 1LL << 20))  // small ones get the tensor-by-tensor check
    throw Error("the architecture has " + std::to_string(arch.parameter_count()) +
                " weights, the file holds only " + std::to_string(held));
  Network<S> net(arch);
  std::size_t used = 0;
  net.for_each_tensor([&](const std::string& name, Mat<S>& m, Layout l) {
    auto it = stored.find(name);
    if (it == stored.end()) throw Error("missing tensor \"" + name + "\"");
    auto want = torch_shape(m, l);
    if (it->second.first != want)
      throw Error("tensor \"" + name + "\" has shape " + shape_text(it->second.first) +
                  ", the architecture needs " + shape_text(want));
    if (static_cast<Eigen::Index>(it->second.second.size()) != m.size())
      throw Error("tensor \"" + name + "\" has " + std::to_string(it->second.second.size()) +
                  " values, its shape needs " + std::to_string(m.size()));
    assign_torch_order(m, l, it->second.second);
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

// ---- GPT-2 in its public layout (Hugging Face's): model.safetensors beside config.json ----------
// Blocks h.{i}: ln_1, attn.c_attn (q, k, v side by side) and attn.c_proj, ln_2, mlp.c_fc and
// mlp.c_proj, stored as Conv1D (in × out, the transpose of nn.Linear's out × in); wte, wpe, ln_f; the
// LM head tied to wte. uatlab's network: per block a pre-norm causal attention (biases, 1/√head
// size) and a pre-norm feed-forward with GELU's tanh form, then ln_f as a layernorm sub-layer and a
// readout equal to wte (bias 0). Buffers (attn.bias, attn.masked_bias: the causal mask) are skipped;
// an optional "transformer." prefix is dropped.
template <class S>
std::pair<json, Stored<S>> gpt2(const Safetensors& st, const json& config) {
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
  const std::string act = config.value("activation_function", std::string("gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu")
    throw Error("config.json: activation_function \"" + act +
                "\" (uatlab has gelu_new, i.e. GELU's tanh form, and gelu)");
  for (const char* flag : {"scale_attn_by_inverse_layer_idx", "add_cross_attention"})
    if (config.value(flag, false)) throw Error(std::string("config.json: ") + flag + " is not supported");
  if (config.contains("scale_attn_weights") && !config["scale_attn_weights"].get<bool>())
    throw Error("config.json: scale_attn_weights false is not supported");
  const double eps_value = config.value("layer_norm_epsilon", 1e-5);
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
  // The file's tensors by GPT-2 name (prefix dropped, buffers skipped).
  std::map<std::string, const Tensor*> file;
  for (const auto& [name, t] : st.tensors) {
    std::string n = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    const std::string buffer = ".attn.bias";
    if ((n.size() >= buffer.size() && n.compare(n.size() - buffer.size(), buffer.size(), buffer) == 0) ||
        n.find(".attn.masked_bias") != std::string::npos)
      continue;
    file[n] = &t;
  }
  auto tensor = [&](const std::string& n, std::vector<std::int64_t> shape) -> std::vector<double> {
    auto it = file.find(n);
    if (it == file.end()) throw Error("missing tensor \"" + n + "\"");
    if (it->second->shape != shape)
      throw Error("tensor \"" + n + "\" has shape " + shape_text(it->second->shape) + ", config.json makes " +
                  shape_text(shape));
    std::vector<double> v = it->second->values();
    for (double x : v)
      if (!std::isfinite(x)) throw Error("tensor \"" + n + "\" contains NaN or infinity");
    file.erase(it);
    return v;
  };
  Stored<S> out;
  auto put = [&](const std::string& name, std::vector<std::int64_t> shape, const std::vector<double>& v) {
    auto& e = out[name];
    e.first = std::move(shape);
    e.second.reserve(v.size());
    for (double x : v)
      e.second.push_back(scalar_cast<S>(x));
  };
  // Columns [c0, c0 + rows) of a Conv1D weight (in × out), as an nn.Linear weight (rows × in).
  auto linear = [&](const std::vector<double>& w, long long in, long long out_cols, long long c0,
                    long long rows) {
    std::vector<double> t(static_cast<std::size_t>(rows * in));
    for (long long o = 0; o < rows; ++o)
      for (long long i = 0; i < in; ++i)
        t[static_cast<std::size_t>(o * in + i)] = w[static_cast<std::size_t>(i * out_cols + c0 + o)];
    return t;
  };
  const std::vector<double> wte = tensor("wte.weight", {V, d});
  put("embed.weight", {V, d}, wte);
  put("pe.weight", {P, d}, tensor("wpe.weight", {P, d}));
  for (long long i = 0; i < L; ++i) {
    const std::string h = "h." + std::to_string(i) + ".", a = "layers." + std::to_string(2 * i) + ".",
                      f = "layers." + std::to_string(2 * i + 1) + ".";
    put(a + "norm.weight", {d}, tensor(h + "ln_1.weight", {d}));
    put(a + "norm.bias", {d}, tensor(h + "ln_1.bias", {d}));
    const std::vector<double> qkv = tensor(h + "attn.c_attn.weight", {d, 3 * d}),
                              qkv_b = tensor(h + "attn.c_attn.bias", {3 * d});
    for (int j = 0; j < 3; ++j) {
      const std::string x(1, "qkv"[j]);
      put(a + x + ".weight", {d, d}, linear(qkv, d, 3 * d, j * d, d));
      put(a + x + ".bias", {d}, std::vector<double>(qkv_b.begin() + j * d, qkv_b.begin() + (j + 1) * d));
    }
    put(a + "o.weight", {d, d}, linear(tensor(h + "attn.c_proj.weight", {d, d}), d, d, 0, d));
    put(a + "o.bias", {d}, tensor(h + "attn.c_proj.bias", {d}));
    put(f + "norm.weight", {d}, tensor(h + "ln_2.weight", {d}));
    put(f + "norm.bias", {d}, tensor(h + "ln_2.bias", {d}));
    put(f + "fc1.weight", {m, d}, linear(tensor(h + "mlp.c_fc.weight", {d, m}), d, m, 0, m));
    put(f + "fc1.bias", {m}, tensor(h + "mlp.c_fc.bias", {m}));
    put(f + "fc2.weight", {d, m}, linear(tensor(h + "mlp.c_proj.weight", {m, d}), m, d, 0, d));
    put(f + "fc2.bias", {d}, tensor(h + "mlp.c_proj.bias", {d}));
  }
  const std::string last = "layers." + std::to_string(2 * L) + ".";
  put(last + "weight", {d}, tensor("ln_f.weight", {d}));
  put(last + "bias", {d}, tensor("ln_f.bias", {d}));
  if (file.count("lm_head.weight") && tensor("lm_head.weight", {V, d}) != wte)
    throw Error("lm_head.weight differs from wte.weight: an untied head is not GPT-2's layout");
  put("readout.weight", {V, d}, wte);
  put("readout.bias", {V}, std::vector<double>(static_cast<std::size_t>(V), 0.0));
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
}  // namespace

template <class S>
Network<S> load_network(const std::string& path) {
  // GPT-2's public layout: a folder with model.safetensors and config.json, or such a file with
  // config.json beside it and no uatlab architecture in its metadata.
  namespace fs = std::filesystem;
  const bool folder = fs::is_directory(path);
  const std::string file = folder ? (fs::path(path) / "model.safetensors").string() : path;
  const fs::path config = fs::path(file).parent_path() / "config.json";
  const std::string bytes = read_file(file);
  if (format_for_path(file) == FileFormat::safetensors && (folder || fs::exists(config))) try {
      const Safetensors st = Safetensors::parse(bytes, "safetensors");
      if (folder || !st.metadata.count("uatlab")) {
        const auto [arch, stored] = gpt2<S>(st, parse_json(read_file(config.string()), "config.json"));
        return assemble(arch, stored);
      }
    } catch (const Error& e) {
      throw Error(file + " (GPT-2 layout, " + config.string() + "): " + e.what());
    } catch (const nlohmann::json::exception& e) {
      throw Error(config.string() + ": malformed (" + e.what() + ")");
    }
  try {
    return parse_network<S>(bytes, format_for_path(path));
  } catch (const Error& e) {
    if (is_pytorch_checkpoint(bytes))
      throw Error(
          path +
          ": a PyTorch checkpoint (torch.save), which uatlab does not read (a pickle can run code). "
          "Convert it in Python: uatlab.from_torch(module).save(\"model.safetensors\") (docs/python.md)");
    throw Error(path + ": " + e.what());
  }
}

template <class S>
Network<S> parse_network(const std::string& bytes, FileFormat format) try {
  json arch_json;
  Stored<S> stored;
  if (format == FileFormat::json) {
    json j = parse_json(bytes, "model file", true);
    if (!j.is_object() || string_field(j, "format") != "uatlab-model-1")
      throw Error("not a uatlab model file (expected \"format\": \"uatlab-model-1\")");
    if (!j.contains("architecture") || !j.contains("tensors") || !j["tensors"].is_object())
      throw Error("model file needs \"architecture\" and \"tensors\"");
    arch_json = j["architecture"];
    for (auto& [name, t] : j["tensors"].items()) {
      if (!t.is_object() || !t.contains("shape") || !t.contains("data") || !t["data"].is_array())
        throw Error("tensor \"" + name + "\" needs \"shape\" and \"data\"");
      auto& entry = stored[name];
      for (auto& s : t["shape"]) {
        if (!s.is_number_unsigned()) throw Error("tensor \"" + name + "\": bad shape " + t["shape"].dump());
        entry.first.push_back(s.template get<std::int64_t>());
      }
      for (auto& v : t["data"]) {
        std::string text = v.is_string() ? v.template get<std::string>() : v.is_number() ? v.dump() : "";
        if (text.empty()) throw Error("tensor \"" + name + "\": value " + v.dump() + " is not a number");
        entry.second.push_back(Scalar<S>::from(parse_rational(text)));
      }
    }
  } else {
    Safetensors st = Safetensors::parse(bytes, "safetensors");
    if (!st.metadata.count("uatlab"))
      throw Error("safetensors file has no \"uatlab\" architecture in __metadata__");
    arch_json = parse_json(st.metadata.at("uatlab"), "architecture in __metadata__", true);
    stored = model_tensors<S>(st);
  }
  return assemble(arch_json, stored);
} catch (const nlohmann::json::exception& e) {  // a JSON value of an unexpected type
  throw Error(std::string("model file") + ": malformed (" + e.what() + ")");
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
  Safetensors st;
  st.metadata = {{"format", "pt"}, {"uatlab", net.arch.to_json().dump()}, {"uatlab_source", source}};
  net.for_each_tensor([&](const std::string& name, const Mat<S>& m, Layout l) {
    // Each exact value is rounded once, straight to the dtype.
    std::vector<double> v;
    for_each_torch_element(m, l, [&](const S& x) {
      try {
        v.push_back(dtype == "F64" ? Scalar<S>::to_double(x) : static_cast<double>(scalar_cast<float>(x)));
      } catch (const Error&) {  // beyond the range of float
        throw Error("tensor \"" + name + "\" has a value that does not fit " + dtype);
      }
    });
    for (double x : v)
      if (!std::isfinite(x)) throw Error("tensor \"" + name + "\" has a value that does not fit " + dtype);
    st.tensors[name] = dtype == "F64" ? Tensor::f64(torch_shape(m, l), v) : Tensor::f32(torch_shape(m, l), v);
  });
  write_file_atomic(path, st.serialize());
}

template <class S>
void save_checkpoint(const std::string& path, const Network<S>& net, const NamedNetworks<S>& extras,
                     const std::map<std::string, std::string>& metadata) {
  Safetensors st;
  st.metadata = metadata;
  st.metadata["format"] = "pt";
  st.metadata["uatlab"] = net.arch.to_json().dump();
  std::vector<std::string> prefixes;
  for (auto& [prefix, n] : extras)
    prefixes.push_back(prefix);
  if (!prefixes.empty()) st.metadata[kCheckpointExtras] = join_list(prefixes);
  auto put = [&](const std::string& prefix, const Network<S>& n) {
    n.for_each_tensor([&](const std::string& name, const Mat<S>& m, Layout l) {
      std::vector<double> v;
      for_each_torch_element(m, l, [&](const S& x) { v.push_back(static_cast<double>(x)); });
      st.tensors[prefix + name] = Tensor::f64(torch_shape(m, l), v);
    });
  };
  put("", net);
  for (auto& [prefix, n] : extras)
    put(prefix, *n);
  write_file_atomic(path, st.serialize());
}

template <class S>
std::map<std::string, std::string> load_checkpoint(const std::string& path, Network<S>& net,
                                                   const NamedNetworks<S>& extras) {
  try {
    Safetensors st = Safetensors::parse(read_file(path), "checkpoint");
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
        std::vector<S> v;
        for (double x : it->second.values()) {
          if (!std::isfinite(x)) throw Error("tensor \"" + prefix + name + "\" contains NaN or infinity");
          v.push_back(static_cast<S>(x));
        }
        assign_torch_order(m, l, v);
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

#define UATLAB_INSTANTIATE_IO(S)                                                           \
  template Network<S> load_network<S>(const std::string&);                                 \
  template Network<S> parse_network<S>(const std::string&, FileFormat);                    \
  template void save_network<S>(const Network<S>&, const std::string&, const std::string&, \
                                const std::string&);
UATLAB_INSTANTIATE_IO(float)
UATLAB_INSTANTIATE_IO(double)
UATLAB_INSTANTIATE_IO(Mpfr)
UATLAB_INSTANTIATE_IO(Mpfi)
UATLAB_INSTANTIATE_IO(Rational)

}  // namespace uatlab
