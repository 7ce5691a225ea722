// The floating-point rounding mode of this thread, for a scope. Bounds computed in double with
// directed rounding live in files compiled with -frounding-math (CMakeLists.txt), so that the
// compiler does not assume round-to-nearest there.
#pragma once

#include <cfenv>

namespace uatlab {

struct Rounding {
  int saved;
  explicit Rounding(int mode) : saved(std::fegetround()) { std::fesetround(mode); }
  ~Rounding() { std::fesetround(saved); }
  Rounding(const Rounding&) = delete;
  Rounding& operator=(const Rounding&) = delete;
};

}  // namespace uatlab
