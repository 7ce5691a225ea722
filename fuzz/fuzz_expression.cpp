// The expression parsers: exact polynomials (Fang et al.), muParser functions and Yun targets,
// and exact numbers. The first byte picks the parser, the rest is the text.
#include "fuzz_target.hpp"
#include "uatlab/construct/fang.hpp"
#include "uatlab/experiment/targets.hpp"

void fuzz_one(const std::string& bytes) {
  using namespace uatlab;
  if (bytes.empty()) return;
  const std::string text = bytes.substr(1);
  switch (static_cast<unsigned char>(bytes[0]) % 4) {
    case 0:
      fang::parse_polynomial(text, {"x1", "x2"});
      break;
    case 1:
      experiment::scalar_expression(text, {"x1", "x2"})({0.25, -0.5});
      break;
    case 2:
      experiment::yun_target(text, 2, 3).f(Mat<double>::Constant(2, 3, 0.5));
      break;
    default:
      parse_rational(text);
  }
}
