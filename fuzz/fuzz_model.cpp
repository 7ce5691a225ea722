// Model files: the safetensors reader (header, offsets, dtypes, shapes, metadata) and the
// lossless JSON reader, both through the architecture check, read in double and in rationals.
#include "fuzz_target.hpp"
#include "uatlab/io/model_file.hpp"

void fuzz_one(const std::string& bytes) {
  using namespace uatlab;
  const FileFormat format = !bytes.empty() && bytes[0] == '{' ? FileFormat::json : FileFormat::safetensors;
  const Network<double> net = parse_network<double>(bytes, format);
  if (net.parameter_count() < 4096) parse_network<Rational>(bytes, format);
}
