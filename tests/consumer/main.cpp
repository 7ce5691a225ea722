// A user's program linking the installed uatlab: a seeded network evaluated in double and in
// certified intervals; exits 0 only if the interval result encloses the double one (to within
// double rounding) and the library's experiment registry is reachable.
#include <cstdio>

#include "uatlab/uatlab.hpp"  // the umbrella header: everything the library offers

int main() {
  using namespace uatlab;
  Architecture a = Architecture::from_json(
      {{"d", 3},
       {"layers", {{{"type", "attention"}, {"heads", 2}}, {{"type", "feedforward"}, {"width", 8}}}}});
  Network<double> net(a);
  init_random(net, 7);
  Mat<double> x = Mat<double>::Constant(3, 5, 0.25);
  x(0, 1) = -0.5;
  const Mat<double> y = forward(net, x);
  MpfrPrecision scope(128);
  const Network<Mpfi> exact = network_cast<Mpfi>(net);
  const Mat<Mpfi> yi = forward(exact, matrix_cast<Mpfi>(x));
  double worst = 0;
  for (Eigen::Index i = 0; i < y.size(); ++i) {
    const double lo = Scalar<Mpfr>::to_double(lower(yi(i))), hi = Scalar<Mpfr>::to_double(upper(yi(i)));
    worst = std::max({worst, lo - y(i), y(i) - hi});
  }
  std::printf("consumer (uatlab " UATLAB_VERSION "): %zu parameters, %u bits, worst excursion %.3g\n",
              net.parameter_count(), scope.bits(), worst);
  return worst < 1e-12 ? 0 : 1;
}
