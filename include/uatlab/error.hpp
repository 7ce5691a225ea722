// The one exception uatlab throws at a user: a message naming the problem (the file, line, flag or
// value). In a header of its own, so that code which only checks and throws reads no Eigen or Boost.
#pragma once

#include <stdexcept>

namespace uatlab {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace uatlab
