// Options structs as field tables (TrainConfig, TaskOptions). A struct lists its fields once, in a
// static `fields(self, f)` that calls f(key, member, help) for each; JSON in both directions, the
// CLI's flags (tools/cmd_train.cpp), the Python module and the sweeps' cells go through that table,
// so they cannot drift apart.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "uatlab/error.hpp"
#include "uatlab/io/lists.hpp"
#include "uatlab/limits.hpp"

namespace uatlab {

// A field's JSON value and back. Reading checks the type: an integer field takes only integers in
// its type's range, a number field any number, a flag only true/false, a list only a list.
// Enumerations have overloads beside them (TrainConfig's Loss: trainer.hpp).
template <class T>
nlohmann::json field_to_json(const T& v) {
  return v;
}

template <class T>
void field_from_json(const nlohmann::json& j, T& out, const std::string& what) {
  auto refuse = [&](const char* expected) {
    throw Error(what + ": expected " + expected + ", got " + limits::excerpt(j.dump()));
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) refuse("true or false");
    out = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!j.is_number_integer()) refuse("an integer");
    if (j.is_number_unsigned()) {
      const std::uint64_t u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) refuse("a smaller integer");
      out = static_cast<T>(u);
    } else {
      const std::int64_t s = j.get<std::int64_t>();
      if constexpr (std::is_signed_v<T>) {
        if (s < std::numeric_limits<T>::min() || s > std::numeric_limits<T>::max())
          refuse("a smaller integer");
      } else if (s < 0) {
        refuse("an integer >= 0");
      }
      out = static_cast<T>(s);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number()) refuse("a number");
    out = j.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) refuse("a string");
    out = j.get<std::string>();
  } else {  // std::vector<...>
    if (!j.is_array()) refuse("a list");
    T items;
    for (const nlohmann::json& x : j) {
      typename T::value_type item{};
      field_from_json(x, item, what);
      items.push_back(item);
    }
    out = std::move(items);
  }
}

// Every field of an options struct as a JSON object.
template <class Options>
nlohmann::json fields_to_json(const Options& o) {
  nlohmann::json j = nlohmann::json::object();
  Options::fields(o,
                  [&](const char* key, const auto& member, const char*) { j[key] = field_to_json(member); });
  return j;
}

// The keys of an options struct, in its table's order.
template <class Options>
std::vector<std::string> field_keys() {
  std::vector<std::string> keys;
  Options o;
  Options::fields(o, [&](const char* key, const auto&, const char*) { keys.push_back(key); });
  return keys;
}

// Sets the fields that `j` names, over the defaults already in `o`. A key that is no field is an
// error (refuse: a user's options) or skipped (ignore: a record that also holds other things, as
// a sweep's cell does). `what` opens every message ("train options").
enum class UnknownKeys { refuse, ignore };
template <class Options>
void fields_from_json(const nlohmann::json& j, Options& o, const std::string& what,
                      UnknownKeys unknown = UnknownKeys::refuse) {
  if (!j.is_object()) throw Error(what + ": expected a JSON object, got " + limits::excerpt(j.dump()));
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    Options::fields(o, [&](const char* key, auto& member, const char*) {
      if (it.key() != key) return;
      known = true;
      field_from_json(it.value(), member, what + " \"" + key + "\"");
    });
    if (!known && unknown == UnknownKeys::refuse)
      throw Error(what + ": unknown option \"" + it.key() + "\" (known: " + join_list(field_keys<Options>()) +
                  ")");
  }
}

}  // namespace uatlab
