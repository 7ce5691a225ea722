// The safetensors format, exactly: 8-byte little-endian header size N, N bytes of JSON header
// (padded with spaces to a multiple of 8), then the tensors' bytes, contiguous, row-major,
// little-endian. The reader enforces every rule of the reference implementation.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace uatlab {

struct Tensor {
  std::string dtype;                // "F32" or "F64" (the only dtypes uatlab reads and writes)
  std::vector<std::int64_t> shape;  // PyTorch shape
  std::vector<std::uint8_t> bytes;  // little-endian, row-major

  static Tensor f64(std::vector<std::int64_t> shape, const std::vector<double>& values);
  static Tensor f32(std::vector<std::int64_t> shape, const std::vector<double>& values);  // rounds to nearest
  std::vector<double> values() const;  // every element, widened exactly to double
  std::int64_t numel() const;
};

struct Safetensors {
  std::map<std::string, std::string> metadata;  // the "__metadata__" string map
  std::map<std::string, Tensor> tensors;

  std::string serialize() const;
  // Throws Error naming the problem (and `what`, usually the path) for any malformed input.
  static Safetensors parse(const std::string& bytes, const std::string& what);
};

}  // namespace uatlab
