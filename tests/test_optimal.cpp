// The optimal-capacity construction (construct/optimal.hpp): next-token and sequence-to-sequence
// memorization certified and checked independently in 2000-bit MPFR; a changed payload bit and half
// the fewest bits caught by the certificate; the ids' separation and its derived bound on adversarial
// data; the parameter count against the closed-form plan and its growth; the refusals; sequence
// labels in datasets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/construct/optimal.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/train/tasks.hpp"

using namespace uatlab;
namespace opt = uatlab::optimal;
using nlohmann::json;

namespace {

opt::Memorized run(const Dataset& ds, opt::Setting setting = opt::Setting::next_token, bool min_bits = true) {
  opt::Options o;
  o.setting = setting;
  o.search_min_bits = min_bits;
  return opt::memorize(ds, o);
}

// Every counted output of the network equals its label within 10^-100, in 2000-bit MPFR.
void expect_exact_outputs(const Network<Rational>& net, const Dataset& ds, bool last_only) {
  const MpfrPrecision reference(2000);
  const Network<Mpfr> nm = network_cast<Mpfr>(net);
  for (const auto& s : ds.sequences) {
    const Mat<Mpfr> y = forward(nm, matrix_cast<Mpfr>(s.x));
    for (Eigen::Index k = last_only ? y.cols() - 1 : 0; k < y.cols(); ++k)
      EXPECT_LT(mp::abs(y(0, k) - Scalar<Mpfr>::from(s.y(0, k))), Mpfr(1e-100));
  }
}

std::string refusal(const Dataset& ds, opt::Setting setting = opt::Setting::next_token) {
  try {
    run(ds, setting, false);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Optimal, NextTokenCertifiedCheckedIn2000BitsAndTheCertificateCanFail) {
  const Dataset ds = labelled_dataset(300, 8, 4, 64, 4, false, 1);
  const opt::Memorized m = run(ds);
  EXPECT_EQ(m.max_error, 0);
  EXPECT_EQ(m.ids.count, 300u);
  EXPECT_TRUE(m.ids.bound_holds);
  EXPECT_GE(m.ids.log10_delta, m.ids.log10_delta_bound);
  // The closed-form plan is the network's count; the depth and the payload as the plan says.
  EXPECT_EQ(m.plan_parameters, static_cast<long long>(m.net.parameter_count()));
  EXPECT_EQ(m.stored.parameters, m.net.parameter_count());
  EXPECT_EQ(static_cast<long long>(m.net.layers.size()), 1 + m.plan.at("depth").get<long long>());
  expect_exact_outputs(m.net, ds, true);
  // Half the fewest bits fails; so does one flipped payload bit (block 0's first label change).
  Dataset last = ds;  // what the certificate counts: the last tokens
  EXPECT_GT(kajitsuka::certified_max_error(m.net, last, m.min_bits / 2, 1e-6, {}, true), 1e-6);
  Network<Rational> wrong = m.net;
  Rational& E = wrong.layers[2].b2(1, 0);  // attention, load, select: the select layer's E
  const long long P = m.plan.at("payload_bits"), at = P - m.plan.at("beta").get<long long>() - 1;
  const mp::mpz_int bits = mp::numerator(Rational(E * Rational(mp::mpz_int(1) << static_cast<unsigned>(P))));
  const Rational flip = Rational(mp::mpz_int(1) << static_cast<unsigned>(at)) /
                        Rational(mp::mpz_int(1) << static_cast<unsigned>(P));
  E += mp::bit_test(bits, static_cast<unsigned>(at)) ? Rational(-flip) : flip;
  EXPECT_GT(kajitsuka::certified_max_error(wrong, last, m.bits_used, 1e-6, {}, true), 1e-6);
  EXPECT_LE(kajitsuka::certified_max_error(m.net, last, m.min_bits, 1e-6, {}, true), 1e-6);
}

TEST(Optimal, CountingBoundIsRoundedDown) {
  // q·log2 L bits: exact where log2 L is an integer, below the real value where it is not.
  EXPECT_EQ(opt::information_bits(1000, 4), 2000.0);
  EXPECT_EQ(opt::information_bits(1000, 1), 0.0);
  const MpfrPrecision high(256);
  const double b = opt::information_bits(1000, 3);
  EXPECT_LT(Mpfr(b), Mpfr(1000) * mp::log2(Mpfr(3)));
  EXPECT_GT(b, 1584.9);
}

TEST(Optimal, SeparationBoundHoldsOnAdversarialData) {
  Rng rng(7);
  auto token = [](std::initializer_list<long> v) {
    Vec<Rational> x(static_cast<Eigen::Index>(v.size()));
    Eigen::Index i = 0;
    for (long e : v)
      x(i++) = Rational(e, 10);
    return x;
  };
  const std::vector<Vec<Rational>> base = {token({1, 2, 3, 4}), token({-3, 1, 0, 2}), token({2, -1, 4, 1}),
                                           token({0, 3, -2, 5}), token({4, 0, 1, -1})};
  auto sequence = [&](const std::vector<Vec<Rational>>& toks, long label) {
    Sequence s;
    s.x = Mat<Rational>(4, static_cast<Eigen::Index>(toks.size()));
    for (std::size_t k = 0; k < toks.size(); ++k)
      s.x.col(static_cast<Eigen::Index>(k)) = toks[k];
    label_last_token(s, Vec<Rational>::Constant(1, Rational(label)));
    return s;
  };
  auto dataset = [](std::vector<Sequence> seqs) {
    Dataset ds;
    ds.d = 4, ds.label_dim = 1, ds.sequence_labels = true;
    ds.sequences = std::move(seqs);
    return ds;
  };
  // Every permutation of one set of five tokens (120 sequences, one multiset).
  std::vector<Sequence> perms;
  std::vector<int> order = {0, 1, 2, 3, 4};
  do {
    std::vector<Vec<Rational>> toks;
    for (int i : order)
      toks.push_back(base[static_cast<std::size_t>(i)]);
    perms.push_back(sequence(toks, static_cast<long>(rng.next() % 4)));
  } while (std::next_permutation(order.begin(), order.end()));
  // Repeated tokens: every sequence of length 5 over two tokens (32), the constant ones included.
  std::vector<Sequence> repeated;
  for (int mask = 0; mask < 32; ++mask) {
    std::vector<Vec<Rational>> toks;
    for (int k = 0; k < 5; ++k)
      toks.push_back(base[static_cast<std::size_t>((mask >> k) & 1)]);
    repeated.push_back(sequence(toks, static_cast<long>(rng.next() % 4)));
  }
  // Near-duplicates: 40 sequences equal but for one token moved by 10^-12 · k at a random place.
  std::vector<Sequence> near;
  for (int k = 0; k < 40; ++k) {
    std::vector<Vec<Rational>> toks(base.begin(), base.end());
    toks[static_cast<std::size_t>(rng.next() % 5)](0) += Rational(k, 1000000000000LL);
    near.push_back(sequence(toks, static_cast<long>(rng.next() % 4)));
  }
  for (const auto& [name, seqs] : {std::pair{"permutations", perms}, std::pair{"repeated tokens", repeated},
                                   std::pair{"near-duplicates", near}}) {
    SCOPED_TRACE(name);
    const Dataset ds = dataset(seqs);
    const opt::Memorized m = run(ds, opt::Setting::next_token, false);
    EXPECT_EQ(m.ids.count, seqs.size());
    EXPECT_TRUE(m.ids.bound_holds);
    EXPECT_GE(m.ids.log10_delta, m.ids.log10_delta_bound);
    EXPECT_EQ(m.max_error, 0);
    expect_exact_outputs(m.net, ds, true);
  }
}

TEST(Optimal, SequenceToSequenceLabelsEveryTokenWithPositions) {
  Dataset ds = labelled_dataset(40, 5, 4, 3, 4, true, 2);  // three tokens only: repeats everywhere
  ds.sequences[3].mask = {1, 0, 1, 1, 0};                  // masked tokens are not labelled
  ds.sequences[3].y(0, 1) = Rational(1, 3);                // (so this label needs no integer)
  const opt::Memorized m = run(ds, opt::Setting::seq_to_seq, false);
  EXPECT_EQ(m.ids.count, 40u * 5 - 2);
  EXPECT_EQ(m.max_error, 0);
  EXPECT_EQ(m.plan_parameters, static_cast<long long>(m.net.parameter_count()));
  EXPECT_EQ(m.net.arch.max_len, 5);  // the positional table
  const MpfrPrecision reference(2000);
  const Network<Mpfr> nm = network_cast<Mpfr>(m.net);
  for (const auto& s : ds.sequences) {
    const Mat<Mpfr> y = forward(nm, matrix_cast<Mpfr>(s.x));
    for (Eigen::Index k = 0; k < y.cols(); ++k)
      if (s.mask.empty() || s.mask[static_cast<std::size_t>(k)]) {
        EXPECT_LT(mp::abs(y(0, k) - Scalar<Mpfr>::from(s.y(0, k))), Mpfr(1e-100));
      }
  }
}

TEST(Optimal, ParametersGrowLikeTheSquareRootOfN) {
  const opt::Memorized small =
      run(labelled_dataset(250, 8, 4, 64, 4, false, 3), opt::Setting::next_token, false);
  const opt::Memorized large =
      run(labelled_dataset(4000, 8, 4, 64, 4, false, 3), opt::Setting::next_token, false);
  const double ratio =
      static_cast<double>(large.stored.parameters) / static_cast<double>(small.stored.parameters);
  EXPECT_GT(ratio, 2.0);  // 16 times the sequences: about 4 times the parameters, not 16
  EXPECT_LT(ratio, 7.0);
}

TEST(Optimal, BuiltWithoutTheCertificateIsTheCertifiedNetwork) {
  // The experiment's "built" runs count networks it does not certify: they must be the very networks
  // the certified path returns.
  const Dataset ds = labelled_dataset(250, 8, 4, 64, 4, false, 3);
  opt::Options o;
  o.search_min_bits = false;
  const opt::Memorized certified = opt::memorize(ds, o);
  o.certify = false;
  const opt::Memorized built = opt::memorize(ds, o);
  EXPECT_EQ(certified.max_error, 0);
  EXPECT_TRUE(std::isnan(built.max_error));
  EXPECT_EQ(built.stored.parameters, certified.stored.parameters);
  EXPECT_EQ(built.stored.total_bits, certified.stored.total_bits);
  EXPECT_EQ(built.plan_parameters, certified.plan_parameters);
  EXPECT_EQ(built.plan, certified.plan);
  ASSERT_EQ(built.net.layers.size(), certified.net.layers.size());
  for (std::size_t i = 0; i < built.net.layers.size(); ++i) {
    EXPECT_EQ(built.net.layers[i].w1, certified.net.layers[i].w1) << i;
    EXPECT_EQ(built.net.layers[i].w2, certified.net.layers[i].w2) << i;
    EXPECT_EQ(built.net.layers[i].b1, certified.net.layers[i].b1) << i;
    EXPECT_EQ(built.net.layers[i].b2, certified.net.layers[i].b2) << i;
    EXPECT_EQ(built.net.layers[i].wv, certified.net.layers[i].wv) << i;
    EXPECT_EQ(built.net.layers[i].wo, certified.net.layers[i].wo) << i;
    EXPECT_EQ(built.net.layers[i].rpe, certified.net.layers[i].rpe) << i;
  }
}

TEST(Optimal, RefusalsNameTheProblem) {
  Dataset ds = labelled_dataset(20, 4, 4, 16, 4, false, 4);
  {
    Dataset dup = ds;
    dup.sequences.push_back(dup.sequences[5]);
    dup.sequences.back().y(0, 3) = dup.sequences[5].y(0, 3) == 0 ? 1 : 0;
    EXPECT_NE(refusal(dup).find("sequence 21 repeats an earlier sequence with another label"),
              std::string::npos);
    dup.sequences.back().y(0, 3) = dup.sequences[5].y(0, 3);  // the same label again: merged
    EXPECT_EQ(run(dup, opt::Setting::next_token, false).distinct, 20u);
  }
  for (const Rational& bad : {Rational(1, 2), Rational(-1), Rational(1L << 20)}) {
    Dataset b = ds;
    b.sequences[2].y(0, 3) = bad;
    EXPECT_NE(
        refusal(b).find("sequence 3 token 4: the deep value map encodes labels as integers in [0, 2^20)"),
        std::string::npos)
        << bad.str();
  }
  // Tokens of 3 and 1 numbers are lifted to the deep map's 4 by an input projection [I; 0] (issue 78:
  // refused, "needs d >= 4"); the network takes the tokens as given and gives every label exactly.
  for (int d : {3, 1}) {
    const Dataset narrow = labelled_dataset(20, 4, d, 16, 4, false, 4);
    const opt::Memorized m = run(narrow);
    EXPECT_EQ(m.net.arch.input, d);
    EXPECT_EQ(m.net.arch.d, 4);
    EXPECT_EQ(m.net.in_w.topRows(d), (Mat<Rational>::Identity(d, d)));
    EXPECT_TRUE(m.net.in_w.bottomRows(4 - d).isZero() && m.net.in_b.isZero());
    EXPECT_LE(m.max_error, 1e-6);
    expect_exact_outputs(m.net, narrow, true);
  }
  Dataset ragged = ds;
  ragged.sequences[7].x = ragged.sequences[7].x.leftCols(3);
  ragged.sequences[7].y = ragged.sequences[7].y.leftCols(3);
  ragged.sequences[7].mask.resize(3);
  EXPECT_NE(refusal(ragged).find("sequence 8 has 3 tokens, sequence 1 has 4"), std::string::npos);
  Dataset unlabelled = ds;
  unlabelled.label_dim = 0;
  EXPECT_NE(refusal(unlabelled).find("needs labels"), std::string::npos);
  Dataset masked = labelled_dataset(20, 4, 4, 16, 4, true, 4);
  masked.sequences[1].mask = {1, 1, 1, 0};
  EXPECT_NE(refusal(masked).find("sequence 2: the last token's label is masked out"), std::string::npos);
  // Beyond the limit on labelled points (limits::kContexts; lowered here so that the data stay small):
  // refused while counting, before any id is computed.
  opt::Options o;
  o.max_points = 50;
  EXPECT_NE(
      [&] {
        try {
          opt::memorize(labelled_dataset(60, 4, 4, 16, 4, false, 5), o);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }()
          .find("more than 50 labelled points"),
      std::string::npos);
  EXPECT_EQ(opt::Options{}.max_points, limits::kContexts);
  // A certificate over data in which no label counts certifies nothing: refused.
  const opt::Memorized m = run(ds, opt::Setting::next_token, false);
  Dataset none = ds;
  for (Sequence& s : none.sequences)
    std::fill(s.mask.begin(), s.mask.end(), 0);
  try {
    kajitsuka::certified_max_error(m.net, none, m.bits_used, 1e-6, {}, true);
    ADD_FAILURE() << "certified nothing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing to certify"), std::string::npos) << e.what();
  }
  o.max_points = limits::kContexts;
  o.setting = opt::Setting::seq_to_seq;
  const Dataset longer = labelled_dataset(2, 1025, 4, 8, 4, true, 5);
  EXPECT_NE(
      [&] {
        try {
          opt::memorize(longer, o);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }()
          .find("n must be at most 1024 for seq-to-seq"),
      std::string::npos);
}

TEST(Optimal, FirstQueryComputesTheLaterColumnsAsTheFullForwardDoes) {
  // The next-token certificate evaluates the last token-mixing attention for the counted queries
  // only (EvalOptions::first_query): those columns must equal the whole forward's.
  Architecture a;
  a.d = 4;
  LayerSpec att;
  att.heads = 2, att.head_size = 2, att.bias = true, att.causal = true, att.rpe = Rpe::t5;
  att.t5_buckets = 8, att.t5_max_distance = 16;
  LayerSpec ff;
  ff.kind = LayerKind::feedforward, ff.width = 6;
  a.layers = {att, ff};
  a.validate();
  Network<double> nd(a);
  init_random(nd, 3);
  const MpfrPrecision precision(160);
  const Network<Mpfr> net = network_cast<Mpfr>(network_cast<Rational>(nd));
  Rng rng(4);
  Mat<Mpfr> x(4, 7);
  for (Eigen::Index i = 0; i < x.size(); ++i)
    x(i) = Mpfr(rng.gauss());
  const Mat<Mpfr> full = forward(net, x);
  for (Eigen::Index first : {0, 3, 6}) {
    EvalOptions o;
    o.first_query = first;
    const Mat<Mpfr> part = forward(net, x, o);
    for (Eigen::Index k = first; k < x.cols(); ++k)
      for (Eigen::Index r = 0; r < 4; ++r)
        EXPECT_LT(mp::abs(part(r, k) - full(r, k)), Mpfr(1e-40)) << first << " " << k;
  }
  Activations<Mpfr> capture;
  EvalOptions o;
  o.first_query = 2;
  EXPECT_THROW(forward(net, x, o, &capture), Error);
}

TEST(Optimal, TokenIdsGetAnEmbeddingInFront) {
  // Next-token data as a language model sees it: token ids, one label per sequence.
  Rng rng(9);
  Dataset ds;
  ds.token_input = true, ds.label_dim = 1, ds.sequence_labels = true;
  std::set<std::vector<int>> seen;
  while (ds.sequences.size() < 80) {
    Sequence s;
    for (int k = 0; k < 6; ++k)
      s.tokens.push_back(static_cast<int>(rng.next() % 20));
    if (!seen.insert(s.tokens).second) continue;
    label_last_token(s, Vec<Rational>::Constant(1, Rational(static_cast<long>(rng.next() % 5))));
    ds.sequences.push_back(std::move(s));
  }
  const opt::Memorized m = run(ds, opt::Setting::next_token, false);
  EXPECT_EQ(m.max_error, 0);
  EXPECT_TRUE(m.ids.bound_holds);
  EXPECT_EQ(m.net.arch.vocab, 20);
  EXPECT_EQ(m.plan_parameters, static_cast<long long>(m.net.parameter_count()));
  const MpfrPrecision reference(2000);
  const Network<Mpfr> nm = network_cast<Mpfr>(m.net);
  for (const auto& s : ds.sequences) {
    const Mat<Mpfr> y = forward_tokens(nm, s.tokens);
    EXPECT_LT(mp::abs(y(0, 5) - Scalar<Mpfr>::from(s.y(0, 5))), Mpfr(1e-100));
  }
}
