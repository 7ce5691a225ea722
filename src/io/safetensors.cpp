#include "uatlab/io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "uatlab/io/json.hpp"
#include "uatlab/model/scalar.hpp"

namespace uatlab {

using nlohmann::json;

namespace {

static_assert(sizeof(double) == 8 && sizeof(float) == 4, "IEEE-754 binary64/binary32 expected");

// Every dtype of the format, with its element size; uatlab loads F32 and F64 only.
const std::map<std::string, int> kDtypeSize = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};

bool little_endian() {
  const std::uint16_t one = 1;
  return *reinterpret_cast<const std::uint8_t*>(&one) == 1;
}

template <class T>
void append_le(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  if (!little_endian()) std::reverse(b, b + sizeof(T));
  out.append(b, sizeof(T));
}

template <class T>
T read_le(const char* p) {
  std::uint8_t b[sizeof(T)];
  std::memcpy(b, p, sizeof(T));
  if (!little_endian()) std::reverse(b, b + sizeof(T));
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto s : shape)
    if (s < 0 || __builtin_mul_overflow(n, s, &n)) throw Error("shape " + json(shape).dump() + " overflows");
  return n;
}

Error unsupported_dtype(const std::string& dtype) {
  return Error("tensor dtype " + dtype + " is not supported by uatlab (F32 and F64 are)");
}

Tensor packed(const char* dtype, std::vector<std::int64_t> shape, const std::vector<double>& values) {
  std::string bytes;
  bytes.reserve(values.size() * static_cast<std::size_t>(kDtypeSize.at(dtype)));
  for (double v : values)
    append_value(bytes, dtype, v);
  const std::size_t size = bytes.size();
  return Tensor{dtype, std::move(shape), std::make_shared<const std::string>(std::move(bytes)), 0, size};
}

}  // namespace

void append_value(std::string& out, const std::string& dtype, double v) {
  if (dtype == "F64")
    append_le(out, v);
  else if (dtype == "F32")
    append_le(out, static_cast<float>(v));
  else
    throw unsupported_dtype(dtype);
}

Tensor Tensor::f64(std::vector<std::int64_t> shape, const std::vector<double>& values) {
  return packed("F64", std::move(shape), values);
}

Tensor Tensor::f32(std::vector<std::int64_t> shape, const std::vector<double>& values) {
  return packed("F32", std::move(shape), values);
}

std::int64_t Tensor::numel() const {
  return product(shape);
}

double Tensor::at(std::int64_t k) const {
  if (dtype == "F64") return read_le<double>(data() + 8 * k);
  if (dtype == "F32") return read_le<float>(data() + 4 * k);
  throw unsupported_dtype(dtype);
}

std::vector<double> Tensor::values() const {
  if (dtype != "F64" && dtype != "F32") throw unsupported_dtype(dtype);
  const auto n = static_cast<std::int64_t>(size / kDtypeSize.at(dtype));
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k)
    out.push_back(at(k));
  return out;
}

namespace {

struct Entry {  // what the header says of one tensor
  const std::string* name;
  const std::string* dtype;
  const std::vector<std::int64_t>* shape;
};

// The 8-byte size and the header, with the entries in the reference order (descending element
// size, then name; the order of `entries` breaks no tie it has not sorted already), which is also
// the order of the bytes that follow. Returns the order.
std::vector<std::size_t> header_of(const std::map<std::string, std::string>& metadata,
                                   const std::vector<Entry>& entries, std::string& out) {
  std::vector<std::size_t> order(entries.size());
  for (std::size_t k = 0; k < order.size(); ++k)
    order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return kDtypeSize.at(*entries[a].dtype) > kDtypeSize.at(*entries[b].dtype);
  });
  std::string header = "{";
  if (!metadata.empty()) header += "\"__metadata__\":" + json(metadata).dump();
  std::size_t offset = 0;
  for (std::size_t k : order) {
    const Entry& e = entries[k];
    const std::size_t size = static_cast<std::size_t>(product(*e.shape) * kDtypeSize.at(*e.dtype));
    if (header.size() > 1) header += ",";
    header += json(*e.name).dump() + ":{\"dtype\":\"" + *e.dtype + "\",\"shape\":" + json(*e.shape).dump() +
              ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + size) + "]}";
    offset += size;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  append_le<std::uint64_t>(out, header.size());
  out += header;
  return order;
}

}  // namespace

std::string Safetensors::serialize() const {
  std::vector<Entry> entries;
  std::vector<const Tensor*> ts;
  for (auto& [name, t] : tensors) {
    if (static_cast<std::int64_t>(t.size) != t.numel() * kDtypeSize.at(t.dtype))
      throw Error("tensor " + name + ": byte size does not match its shape");
    entries.push_back({&name, &t.dtype, &t.shape});
    ts.push_back(&t);
  }
  std::string s;
  for (std::size_t k : header_of(metadata, entries, s))
    s.append(ts[k]->data(), ts[k]->size);
  return s;
}

void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<TensorWriter>& tensors) {
  std::vector<const TensorWriter*> sorted;  // by name, as a Safetensors map holds them
  for (const TensorWriter& t : tensors)
    sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::vector<Entry> entries;
  for (std::size_t k = 0; k < sorted.size(); ++k) {
    if (k > 0 && sorted[k]->name == sorted[k - 1]->name) throw Error("tensor " + sorted[k]->name + " twice");
    if (sorted[k]->dtype != "F64" && sorted[k]->dtype != "F32") throw unsupported_dtype(sorted[k]->dtype);
    entries.push_back({&sorted[k]->name, &sorted[k]->dtype, &sorted[k]->shape});
  }
  write_file_atomic(path, [&](std::ostream& out) {
    std::string buffer;
    const std::vector<std::size_t> order = header_of(metadata, entries, buffer);
    out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    for (std::size_t k : order) {
      const TensorWriter& t = *sorted[k];
      const std::int64_t size = product(t.shape) * kDtypeSize.at(t.dtype);
      buffer.clear();
      buffer.reserve(static_cast<std::size_t>(size));
      t.bytes(buffer);
      if (static_cast<std::int64_t>(buffer.size()) != size)
        throw Error("tensor " + t.name + ": byte size does not match its shape");
      out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    }
  });
}

Safetensors Safetensors::parse(std::shared_ptr<const std::string> buffer, const std::string& what) try {
  const std::string& bytes = *buffer;
  auto fail = [&](const std::string& why) { return Error(what + ": invalid safetensors file: " + why); };
  if (bytes.size() < 8) throw fail("shorter than the 8-byte header size");
  const std::uint64_t n = read_le<std::uint64_t>(bytes.data());
  if (n > 100000000) throw fail("header size " + std::to_string(n) + " exceeds 100000000");
  if (8 + n > bytes.size()) throw fail("header size " + std::to_string(n) + " runs past the end of the file");
  json h;
  try {
    h = parse_json(bytes.substr(8, n), "header");
  } catch (const Error& e) {
    throw fail(e.what());
  }
  if (!h.is_object()) throw fail("header is not a JSON object");

  Safetensors st;
  struct Span {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) throw fail("__metadata__ is not an object");
      for (auto& [k, v] : e.items()) {
        if (!v.is_string()) throw fail("__metadata__ value of \"" + k + "\" is not a string");
        st.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor \"" + name + "\": ";
    if (!e.is_object() || e.size() != 3 || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets"))
      throw fail(t + "entry must have exactly dtype, shape and data_offsets");
    if (!e["dtype"].is_string() || !kDtypeSize.count(e["dtype"].get<std::string>()))
      throw fail(t + "unknown dtype " + e["dtype"].dump());
    Tensor tensor;
    tensor.dtype = e["dtype"];
    if (!e["shape"].is_array()) throw fail(t + "shape is not an array");
    for (auto& s : e["shape"]) {
      if (!s.is_number_unsigned())
        throw fail(t + "shape entry " + s.dump() + " is not a non-negative integer");
      tensor.shape.push_back(s.get<std::int64_t>());
    }
    auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw fail(t + "data_offsets must be two non-negative integers");
    std::uint64_t b = off[0], en = off[1];
    if (b > en) throw fail(t + "data_offsets begin > end");
    if (en > bytes.size() - 8 - n)
      throw fail(t + "data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                 "] out of range of the " + std::to_string(bytes.size() - 8 - n) + "-byte buffer");
    std::int64_t want = 0;
    try {
      want = product({tensor.numel(), kDtypeSize.at(tensor.dtype)});
    } catch (const Error& e) {
      throw fail(t + e.what());
    }
    if (static_cast<std::int64_t>(en - b) != want)
      throw fail(t + "size " + std::to_string(en - b) + " bytes does not match shape and dtype (" +
                 std::to_string(want) + " bytes)");
    tensor.buffer = buffer;
    tensor.offset = 8 + n + b;
    tensor.size = en - b;
    spans.push_back({b, en, name});
    st.tensors.emplace(name, std::move(tensor));
  }
  std::sort(spans.begin(), spans.end(),
            [](auto& a, auto& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  std::uint64_t end = 0;
  for (auto& s : spans) {
    if (s.begin < end) throw fail("tensor \"" + s.name + "\" overlaps the previous tensor");
    if (s.begin > end)
      throw fail("gap before tensor \"" + s.name + "\" (bytes " + std::to_string(end) + ".." +
                 std::to_string(s.begin) + " unused)");
    end = s.end;
  }
  if (8 + n + end != bytes.size())
    throw fail(std::to_string(bytes.size() - 8 - n - end) + " trailing bytes after the last tensor");
  return st;
} catch (const nlohmann::json::exception& e) {  // a JSON value of an unexpected type
  throw Error(std::string(what) + ": malformed (" + e.what() + ")");
}

}  // namespace uatlab
