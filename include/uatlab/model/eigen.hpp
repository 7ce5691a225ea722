// Eigen, as every uatlab file includes it (directly or through scalar.hpp).
//
// GCC 12 reports `__Y` in avx512fintrin.h (`__m512 __Y = __Y;`, the idiom of _mm512_undefined_ps
// and _pd) as used uninitialized wherever Eigen's AVX-512 packet functions (pexp, pmin, pmax) are
// inlined: GCC bug 105593, fixed in GCC 13 by a pragma in that header. The same pragma here, around
// the header's first inclusion and for GCC 12 only, silences exactly those lines; the warnings
// stay on for everything else, uatlab's own code included.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12 && defined(__AVX512F__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include <Eigen/Core>
