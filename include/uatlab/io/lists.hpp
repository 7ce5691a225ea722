// Comma-separated lists from flags and configs ("1,4,9", "x1,x2"): the one parser, with errors
// that name the flag and the item.
#pragma once

#include <string>
#include <vector>

namespace uatlab {

// Items between commas, spaces around each trimmed; an empty item ("1,,2", "1,") is an error.
// `what` names the source in errors ("--task-lags"). At most 4096 items.
std::vector<std::string> parse_list(const std::string& text, const std::string& what);

// "a, b, c": the names of a table, for help texts and errors.
std::string join_list(const std::vector<std::string>& items);

// Integers in [lo, hi] (decimal digits with an optional leading '-'), checked without overflow.
std::vector<int> parse_int_list(const std::string& text, const std::string& what, int lo, int hi);

}  // namespace uatlab
