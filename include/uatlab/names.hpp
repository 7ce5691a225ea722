// Enum names written once (ggml's habit): one table per enum, beside it, in the enumerators' order;
// printing, parsing, JSON and help texts go through it. The table's length is the last
// enumerator's value + 1, and `static_assert(table.complete())` where it is defined catches a
// missing name:
//
//   enum class Loss { mse, cross_entropy };
//   inline constexpr EnumNames<Loss::cross_entropy> loss_names{"loss", {"mse", "ce"}};
//   static_assert(loss_names.complete());
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "uatlab/error.hpp"

namespace uatlab {

template <auto Last>
struct EnumNames {
  using Enum = decltype(Last);
  static constexpr std::size_t count = static_cast<std::size_t>(Last) + 1;
  const char* what;  // the thing named, for messages: "loss", "score", ...
  std::array<const char*, count> names;

  constexpr bool complete() const {
    for (const char* n : names)
      if (n == nullptr || *n == '\0') return false;
    return true;
  }
  const char* operator()(Enum e) const { return names[static_cast<std::size_t>(e)]; }
  // "a, b or c"
  std::string choices() const {
    std::string s;
    for (std::size_t i = 0; i < count; ++i)
      s += std::string(i == 0 ? "" : i + 1 == count ? " or " : ", ") + names[i];
    return s;
  }
  // The enumerator named `text`; throws Error `WHAT "TEXT": expected a, b or c` otherwise.
  Enum parse(const std::string& text) const {
    for (std::size_t i = 0; i < count; ++i)
      if (text == names[i]) return static_cast<Enum>(i);
    throw Error(std::string(what) + " \"" + text + "\": expected " + choices());
  }
};

}  // namespace uatlab
