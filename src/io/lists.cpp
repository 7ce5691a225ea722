#include "uatlab/io/lists.hpp"

#include "uatlab/error.hpp"

namespace uatlab {

std::vector<std::string> parse_list(const std::string& text, const std::string& what) {
  std::vector<std::string> items;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = text.find(',', begin);
    std::string item = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    const std::size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    item = a == std::string::npos ? "" : item.substr(a, b - a + 1);
    if (item.empty())
      throw Error(what + " \"" + text + "\": expected a comma-separated list with no empty item");
    if (items.size() == 4096) throw Error(what + ": more than 4096 items");
    items.push_back(item);
    if (comma == std::string::npos) return items;
    begin = comma + 1;
  }
}

std::string join_list(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items)
    out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& what, int lo, int hi) {
  std::vector<int> values;
  for (const std::string& item : parse_list(text, what)) {
    const bool neg = item[0] == '-';
    const std::string digits = item.substr(neg ? 1 : 0);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
      throw Error(what + " \"" + text + "\": \"" + item + "\" is not an integer");
    long long v = 0;
    for (char c : digits) {
      v = 10 * v + (c - '0');
      if (v > (1LL << 40)) break;  // far beyond any int: stop before overflowing
    }
    if (neg) v = -v;
    if (v < lo || v > hi)
      throw Error(what + " \"" + text + "\": " + item + " is outside [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
    values.push_back(static_cast<int>(v));
  }
  return values;
}

}  // namespace uatlab
