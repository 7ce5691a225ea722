// Sweep configs: the JSON and every key's type and range, up to the grid of cells.
#include "fuzz_target.hpp"
#include "uatlab/experiment/memorization.hpp"
#include "uatlab/io/json.hpp"

void fuzz_one(const std::string& bytes) {
  uatlab::experiment::sweep_cells(uatlab::parse_json(bytes, "fuzz"));
}
