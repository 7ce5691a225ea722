// The building blocks of Kajitsuka & Sato's contextual mapping (kajitsuka.cpp) that the sweep of
// its score scale (experiment/scale_sweep.cpp) reuses. Internal: not installed.
#pragma once

#include <limits>
#include <optional>

#include "uatlab/construct/kajitsuka.hpp"

namespace uatlab::kajitsuka {

// The projected tokens α = vᵀx and what the scale of c depends on.
struct Projected {
  double gap = std::numeric_limits<double>::infinity(), min_abs = std::numeric_limits<double>::infinity(),
         range = 0, max_abs = 0;
};
Projected projected(const Facts& f, const Vec<Rational>& v);
// The bits a certificate at scale c needs, about: the scores of one query span c·max|α|·range nats.
double bits_guess(const Facts& f, const Projected& p, double c);
// The scale below which one query's scores span under 1 nat (softmax nearly mean pooling).
double c_floor_of(const Projected& p);
// W_O's scale, ≤ ε/(4 r_max).
Rational wo_scale_of(const Facts& f);
// One softmax head of size 1: W_Q = c·vᵀ, W_K = W_V = vᵀ, W_O = wo_scale·v (tied: W = √c·vᵀ).
Network<Rational> attention_network(const Facts& f, const Vec<Rational>& v, const Rational& c,
                                    const Rational& wo_scale, bool tied);
// The separation certified from `bits` up, doubling until certified or max_bits (`used`: the last).
Separation certify_doubling(const Network<Rational>& net, const Facts& f, unsigned bits, unsigned max_bits,
                            const OnProgress& progress, unsigned& used);
// The smallest squared distance between two contexts of the same token, in S (none when no token
// occurs in two vocabulary sets); instantiated for Rational.
template <class S>
std::optional<S> smallest_same_token_sq(const Network<Rational>& attention, const Facts& f);
extern template std::optional<Rational> smallest_same_token_sq<Rational>(const Network<Rational>&,
                                                                         const Facts&);

}  // namespace uatlab::kajitsuka
