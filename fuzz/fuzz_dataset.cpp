// JSONL datasets: every line's JSON, numbers kept exact, shapes, labels and masks.
#include "fuzz_target.hpp"
#include "uatlab/io/dataset.hpp"

void fuzz_one(const std::string& bytes) {
  const uatlab::Dataset ds = uatlab::parse_dataset(bytes, "fuzz");
  uatlab::parse_dataset(uatlab::format_dataset(ds), "fuzz round trip");  // what we write, we read
}
