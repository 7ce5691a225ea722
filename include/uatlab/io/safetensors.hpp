// The safetensors format, exactly: 8-byte little-endian header size N, N bytes of JSON header
// (padded with spaces to a multiple of 8), then the tensors' bytes, contiguous, row-major,
// little-endian. The reader enforces every rule of the reference implementation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace uatlab {

struct Tensor {
  std::string dtype;                // "F32" or "F64" (the only dtypes uatlab reads and writes)
  std::vector<std::int64_t> shape;  // PyTorch shape
  // The bytes (little-endian, row-major): [offset, offset + size) of a buffer that a parsed file's
  // tensors share, so that parsing copies nothing (a 500 MB checkpoint stays one copy).
  std::shared_ptr<const std::string> buffer;
  std::size_t offset = 0, size = 0;

  static Tensor f64(std::vector<std::int64_t> shape, const std::vector<double>& values);
  static Tensor f32(std::vector<std::int64_t> shape, const std::vector<double>& values);  // rounds to nearest
  const char* data() const { return buffer ? buffer->data() + offset : nullptr; }
  std::vector<double> values() const;  // every element, widened exactly to double
  double at(std::int64_t k) const;     // element k (row-major), widened exactly to double
  std::int64_t numel() const;
};

struct Safetensors {
  std::map<std::string, std::string> metadata;  // the "__metadata__" string map
  std::map<std::string, Tensor> tensors;

  std::string serialize() const;
  // Throws Error naming the problem (and `what`, usually the path) for any malformed input. The
  // tensors refer to `bytes` (kept alive by them); the first form shares a copy.
  static Safetensors parse(std::shared_ptr<const std::string> bytes, const std::string& what);
  static Safetensors parse(const std::string& bytes, const std::string& what) {
    return parse(std::make_shared<const std::string>(bytes), what);
  }
};

// Appends v as one element of dtype: F64 (exact), or F32 (rounded to nearest); little-endian.
void append_value(std::string& out, const std::string& dtype, double v);

// One tensor of a file written piece by piece: its name, dtype and shape up front, and `bytes`,
// which appends its bytes (little-endian, row-major) to a buffer when its turn comes.
struct TensorWriter {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::function<void(std::string&)> bytes;
};
// The file Safetensors{metadata, tensors}.serialize() would hold, written atomically while holding
// one tensor's bytes at a time (a model of gigabytes is not built a second time in memory).
void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<TensorWriter>& tensors);

}  // namespace uatlab
