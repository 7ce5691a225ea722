// Kajitsuka & Sato's Theorem 1: one hardmax attention layer cannot tell two collinear sequences'
// shared token apart, where the softmax construction can (kajitsuka.hpp).
#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/init.hpp"

namespace uatlab::kajitsuka {

Dataset theorem1_pair() {
  const std::vector<int> L1 = {1, 3, 5, 7}, L2 = {1, 2, 6, 7};
  const Rational u0(3, 5), u1(4, 5);
  Dataset ds;
  ds.d = 2;
  for (const auto* L : {&L1, &L2}) {
    Sequence s;
    s.x = Mat<Rational>(2, 4);
    for (int k = 0; k < 4; ++k) {
      s.x(0, k) = u0 * (*L)[k];
      s.x(1, k) = u1 * (*L)[k];
    }
    ds.sequences.push_back(s);
  }
  return ds;
}

HardmaxCounterexample hardmax_counterexample(int draws, std::uint64_t seed) {
  limits::check_count(draws, 1, 1 << 20, "draws");
  HardmaxCounterexample h;
  h.draws = draws;
  h.data = theorem1_pair();
  const std::vector<int> heads = {1, 2, 3, 4}, sizes = {1, 2};
  h.heads_tried = heads;
  for (int i = 0; i < draws; ++i) {
    Architecture a;
    a.d = 2;
    LayerSpec s;
    s.kind = LayerKind::attention;
    s.score = Score::hardmax;
    s.heads = heads[i % heads.size()];
    s.head_size = sizes[(i / heads.size()) % sizes.size()];
    s.bias = i % 3 == 2;
    a.layers.push_back(s);
    a.validate();
    Network<double> nd(a);
    init_random(nd, seed + static_cast<std::uint64_t>(i), 2.0);
    const Network<Rational> nq = network_cast<Rational>(nd);
    Mat<Rational> y1 = forward(nq, h.data.sequences[0].x), y2 = forward(nq, h.data.sequences[1].x);
    if (y1.col(0) == y2.col(0)) ++h.identical;  // token λ = 1 is column 0 of both
  }
  // The softmax construction on the same two sequences.
  const Facts f = analyse(h.data);
  ContextualOptions opt;
  opt.seed = seed;
  opt.search_min_bits = false;
  const Contextual c = build_contextual(f, opt);
  h.softmax_separates = c.separation.certified;
  h.log10_softmax_gap = std::to_string(c.separation.log10_delta);
  return h;
}

nlohmann::json HardmaxCounterexample::report() const {
  return {{"sequences", {"Λ1 = {1,3,5,7}·u", "Λ2 = {1,2,6,7}·u"}},
          {"hardmax_draws", draws},
          {"hardmax_identical_for_token_1", identical},
          {"heads_tried", heads_tried},
          {"softmax_separates", softmax_separates},
          {"softmax_log10_delta", log10_softmax_gap}};
}

}  // namespace uatlab::kajitsuka
