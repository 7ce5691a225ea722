#include "uatlab/model/init.hpp"

#include <cmath>

#include "uatlab/limits.hpp"

namespace uatlab {

// xoshiro256** seeded by splitmix64: tiny, fast and fully specified.
Rng::Rng(std::uint64_t seed) {
  for (auto& s : s_) {
    seed += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    s = z ^ (z >> 31);
  }
}

std::uint64_t Rng::next() {
  auto rotl = [](std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const std::uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
  s_[2] ^= s_[0], s_[3] ^= s_[1], s_[1] ^= s_[2], s_[0] ^= s_[3], s_[2] ^= t, s_[3] = rotl(s_[3], 45);
  return r;
}

double Rng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

double Rng::gauss() {
  const double u = uniform(), v = uniform();
  return std::sqrt(-2 * std::log1p(-u)) * std::cos(2 * 3.14159265358979323846 * v);
}

void init_random(Network<double>& net, std::uint64_t seed, double gain) {
  limits::check_real(gain, 0, 1e6, "the initial weights' gain");
  Rng rng(seed);
  net.for_each_tensor([&](const std::string&, Mat<double>& m, Layout, Role role) {
    auto fill = [&](double a, double b) { m = m.unaryExpr([&](double) { return rng.uniform(a, b); }); };
    const double fan_in = gain / std::sqrt(static_cast<double>(m.cols()));
    switch (role) {
      case Role::norm_gain:
        fill(0.9, 1.1);
        break;
      case Role::norm_bias:
        fill(-0.1, 0.1);
        break;
      case Role::rpe_slope:
        fill(0.0, 1.0);
        break;
      case Role::rpe_table:
      case Role::embedding:
        fill(-1.0, 1.0);
        break;
      case Role::position:
        fill(-0.5, 0.5);
        break;
      case Role::bias:
        fill(-0.1, 0.1);
        break;
      case Role::weight:
        fill(-fan_in, fan_in);
        break;
    }
  });
}

}  // namespace uatlab
