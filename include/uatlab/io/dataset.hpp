// Datasets as JSONL: one sequence a line.
//   {"x": [[x_11, ..., x_d1], ..., [x_1n, ..., x_dn]], "y": [...]}   continuous tokens (n of them, d each)
//   {"tokens": [id_1, ..., id_n], "y": [...]}                        token ids
// "mask" is optional: n values 0/1, which tokens a training loss counts (default all).
// "y" is optional: n numbers (one label per token) or n arrays of k numbers; or one label for the
// sequence, its last token's (next-token prediction): a number, or an array of k numbers with k != n
// (a k = n label is written per token with a mask). A sequence label is kept as a k×n y whose last
// column holds it and a mask counting the last token only; every line of a dataset labels the same
// way. Numbers may be JSON integers or strings ("1/3", "0.1e-400"); they are kept exactly, as rationals.
#pragma once

#include <string>
#include <vector>

#include "uatlab/model/scalar.hpp"

namespace uatlab {

struct Sequence {
  Mat<Rational> x;          // d×n (continuous input)
  std::vector<int> tokens;  // n ids (token input)
  Mat<Rational> y;          // k×n labels, or 0×0 when the line has none
  std::vector<char> mask;   // n flags (1: the token counts in a training loss); empty: all count
  std::size_t n() const { return tokens.empty() ? static_cast<std::size_t>(x.cols()) : tokens.size(); }
};

// One label for the whole sequence, its last token's (next-token prediction): y becomes k×n with the
// label in its last column and zeros elsewhere, and the mask counts the last token only. The one
// home of that representation (the dataset reader, generated data).
void label_last_token(Sequence& s, const Vec<Rational>& label);

struct Dataset {
  std::vector<Sequence> sequences;
  bool token_input = false;
  int d = 0;                     // token dimension of continuous inputs
  int label_dim = 0;             // k, 0 without labels
  bool sequence_labels = false;  // each line had one label, its last token's (y's last column, mask)
};

// Throws Error naming the line and the problem: malformed JSON, ragged tokens, mixed input kinds,
// inconsistent label shapes, NaN/inf or non-numeric values.
Dataset parse_dataset(const std::string& text, const std::string& what);
Dataset read_dataset(const std::string& path);
// The JSONL text of a dataset, every number an exact string ("3/4", "-2"); parse_dataset reads it back.
std::string format_dataset(const Dataset& ds);

}  // namespace uatlab
