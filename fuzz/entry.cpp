#include "fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    fuzz_one(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const uatlab::Error&) {  // a clear refusal is the expected answer to a bad input
  }
  return 0;
}
