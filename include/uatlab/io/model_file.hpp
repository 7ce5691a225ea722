// Model files: safetensors (F32/F64, for PyTorch) and uatlab's lossless JSON (exact rationals,
// for MPFR and rational weights). Both carry the architecture; docs/formats.md describes them.
#pragma once
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include <string>

#include "uatlab/model/network.hpp"

namespace uatlab {

enum class FileFormat { safetensors, json };
FileFormat format_for_path(const std::string& path);  // ".json" → json, anything else safetensors

// Load either format into scalar S: each stored value is exact (a double, a float or a rational)
// and is rounded once to S (enclosed, for intervals). Throws Error naming the file and problem.
// Safetensors values go from the file's bytes (read once, one copy) straight into the network.
// `before` (when given) sees the architecture once the file is parsed and before anything of the
// model's size is allocated: a memory estimate may refuse there.
template <class S>
Network<S> load_network(const std::string& path, const std::function<void(const Architecture&)>& before = {});
// f(the network of a model file, every value exact) in the narrowest scalar that holds them:
// doubles for safetensors files and GPT-2 checkpoints (their values are doubles: GPT-2 124M takes
// 1.3 GB so, 15 GB as rationals), rationals for the JSON format.
template <class F>
decltype(auto) with_exact_network(const std::string& path, F&& f) {
  if (format_for_path(path) == FileFormat::json) return f(load_network<Rational>(path));
  return f(load_network<double>(path));
}

// The same from the bytes of a file in memory (errors do not name a file).
template <class S>
Network<S> parse_network(const std::string& bytes, FileFormat format);

// Write atomically. Safetensors rounds every value to the dtype ("F64" or "F32") and records the
// source scalar in __metadata__; JSON is lossless. `source` describes the scalar (e.g. "mpfr:256").
template <class S>
void save_network(const Network<S>& net, const std::string& path, const std::string& dtype = "F64",
                  const std::string& source = Scalar<S>::name);

// Training checkpoints (safetensors, F64, exact for float and double): the model's tensors, plus
// networks of the same shape stored under a prefix (AdamW's moments as "adam_m.<name>", ...), plus
// string metadata (the step, the training configuration). The metadata key kCheckpointExtras lists
// the prefixes, so that load_network reads a checkpoint as the model it holds.
inline constexpr const char* kCheckpointExtras = "uatlab_extras";
template <class S>
using NamedNetworks = std::vector<std::pair<std::string, Network<S>*>>;
template <class S>
void save_checkpoint(const std::string& path, const Network<S>& net, const NamedNetworks<S>& extras,
                     const std::map<std::string, std::string>& metadata);
// Fills net (shaped by the file's architecture) and every extra (reshaped like net); returns the metadata.
template <class S>
std::map<std::string, std::string> load_checkpoint(const std::string& path, Network<S>& net,
                                                   const NamedNetworks<S>& extras);

}  // namespace uatlab
