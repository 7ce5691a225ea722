#include "uatlab/io/model_file.hpp"

#include <algorithm>
#include <cmath>

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
  const std::string bytes = read_file(path);
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
