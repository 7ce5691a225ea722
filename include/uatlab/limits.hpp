// The limits every input is checked against before anything is allocated: one table, quoted by
// the error messages and by docs/robustness.md. Each is far above what any construction or
// experiment of uatlab writes or needs, and low enough that an input at the limit is refused (or
// handled) within seconds and bounded memory.
#pragma once

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "uatlab/error.hpp"

namespace uatlab::limits {

// Any size: model dimension, vocabulary, width, heads, head size, sequence length, grid points,
// and the product of two of them (one weight matrix). 2^30 doubles are 8 GiB.
constexpr long long kSize = 1LL << 30;

// Memory of one MPFR or MPFI computation, estimated before it starts (numbers × their bytes): past
// it the work is refused with the estimate, where GMP would abort the process when an allocation
// fails. 8 GiB, as 2^30 doubles; the environment variable UATLAB_MEMORY_GIB (an integer, 1 to
// 2^20) sets another budget on a machine with more memory.
constexpr long long kMemoryBytes = 8LL << 30;
inline long long memory_budget() {
  const char* v = std::getenv("UATLAB_MEMORY_GIB");
  if (!v || !*v) return kMemoryBytes;
  char* end = nullptr;
  const long long gib = std::strtoll(v, &end, 10);
  if (*end || gib < 1 || gib > (1LL << 20))
    throw Error(std::string("UATLAB_MEMORY_GIB=") + v + ": expected an integer number of GiB, 1 to 1048576");
  return gib << 30;
}
// The bytes one MPFR number of `bits` bits takes: its 32-byte struct and its limbs, which MPFR
// allocates with a one-limb header, in a glibc malloc chunk (8 bytes of overhead, 16-byte steps,
// at least 32). Measured: 64 bytes up to 128 bits, 80 at 256, 176 at 1024 (an interval twice that).
inline double mpfr_bytes(long long bits) {
  const long long limbs = (bits + 63) / 64, chunk = ((limbs + 1) * 8 + 8 + 15) / 16 * 16;
  return 32.0 + static_cast<double>(chunk < 32 ? 32 : chunk);
}
// Throws where `bytes` are over the memory budget: "WHAT needs about X GiB[ at B bits], ...".
inline void check_bytes(double bytes, const std::string& what, long long bits = 0) {
  const long long budget = memory_budget();
  if (bytes > static_cast<double>(budget)) {
    char text[200];
    std::snprintf(text, sizeof text, " needs about %.3g GiB%s, over the budget of %lld GiB",
                  bytes / (1LL << 30), bits > 0 ? (" at " + std::to_string(bits) + " bits").c_str() : "",
                  budget >> 30);
    throw Error(what + text + (bits > 0 ? " (fewer bits, " : " (") +
                "a smaller model or data, or a larger UATLAB_MEMORY_GIB)");
  }
}
// Throws Error("WHAT needs about N GiB ...") when `numbers` MPFR numbers of `bits` bits (each
// `per_number` of them: 2 for an interval) would pass the budget.
inline void check_memory(long long numbers, long long bits, int per_number, const std::string& what) {
  check_bytes(static_cast<double>(numbers) * per_number * mpfr_bytes(bits), what, bits);
}

// Context ids a memorization builds its value map over (memorize --setting next-token |
// seq-to-seq: sequences or labelled tokens), checked before the ids are computed: 2^22 ids take
// minutes per precision and the deep map's depth stays far below its 2^20 sub-layers.
constexpr long long kContexts = 1LL << 22;

// Nesting of arrays and objects in any JSON input (model, dataset line, safetensors header,
// sweep config). A model file nests 4 deep, a dataset line 3.
constexpr int kJsonDepth = 64;

// |e| of an exact number m·10^e ("1.5e-300"; the digits after a decimal point count into e).
// 10^(10^6) has 3.3 million bits; the faithful Kajitsuka constructions stay below 10^(±2·10^5).
constexpr long long kDecimalExponent = 1000000;

// MPFR precision of a certificate, in bits: one number at the limit takes 512 KiB. The faithful
// Kajitsuka construction at |V| = 7 needs about 500,000.
constexpr long long kPrecisionBits = 1LL << 22;

// Digits of an exact number (its mantissa, or p and q of "p/q").
constexpr long long kNumberDigits = 1000000;

// Parentheses and signs nested in a polynomial expression, its total degree and its terms.
constexpr int kExpressionDepth = 256;
constexpr int kPolynomialDegree = 64;
constexpr long long kPolynomialTerms = 1000000;
// Bits of one exact coefficient of a polynomial, and of all of them (products are refused before
// they are computed): 2^23 bits is 2.5 million digits.
constexpr long long kCoefficientBits = 1LL << 23;
constexpr long long kPolynomialBits = 1LL << 30;

// Characters of an expression (polynomial, muParser function or target).
constexpr long long kExpressionLength = 100000;

// An input quoted in an error message: at most 80 characters.
inline std::string excerpt(const std::string& text) {
  return text.size() <= 80 ? text : text.substr(0, 77) + "...";
}

// Throws Error("WHAT must be from LO to HI, got V"); for check_real, NaN is never in range.
inline void check_count(long long v, long long lo, long long hi, const std::string& what) {
  if (v < lo || v > hi)
    throw Error(what + " must be from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " +
                std::to_string(v));
}
inline void check_real(double v, double lo, double hi, const std::string& what) {
  if (!(v >= lo && v <= hi)) {
    char text[128];
    std::snprintf(text, sizeof text, " must be a number from %g to %g, got %g", lo, hi, v);
    throw Error(what + text);
  }
}

// a·b for counts >= 0, LLONG_MAX where it would overflow: closed-form sizes compared to a limit.
inline long long saturating_mul(long long a, long long b) {
  long long r;
  return __builtin_mul_overflow(a, b, &r) ? LLONG_MAX : r;
}
inline long long saturating_add(long long a, long long b) {
  long long r;
  return __builtin_add_overflow(a, b, &r) ? LLONG_MAX : r;
}

}  // namespace uatlab::limits
