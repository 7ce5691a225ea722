// Yun et al.: the proof's constants and layer counts, Lemma 6 and ḡ = f̄ checked exactly in
// rationals, the four-ReLU replacement, d_p estimates, and `uatlab approximate` end to end.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "run_cli.hpp"
#include "uatlab/construct/yun.hpp"
#include "uatlab/experiment/targets.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/verify/affine.hpp"

using namespace uatlab;
namespace fs = std::filesystem;

TEST(Yun, PlanMatchesTheTheoryNotesTable) {
  const yun::Plan p = yun::plan(2, 2, 4, false);  // docs/theory/yun.md, sizes: d = 2, n = 2, K = 4
  EXPECT_EQ(p.J, Rational(256));
  EXPECT_EQ(p.c, Rational(4096));
  EXPECT_EQ(p.t_l, Rational(245760));
  EXPECT_EQ(p.t_r, Rational(4195328));
  EXPECT_EQ(p.windows.size(), 16u);
  EXPECT_EQ(p.u(1), Rational(4));
  EXPECT_THROW(yun::plan(1, 2, 1, false), Error);
}

TEST(Yun, LayerCountsFollowTheFormulasAndTheClassesOfTheProof) {
  // (d, n, K) -> quantization, attention, value-map layers (docs/theory/yun.md, sizes)
  const std::vector<std::array<int, 6>> rows = {
      {1, 2, 4, 5, 5, 14}, {1, 3, 4, 5, 5, 14}, {2, 2, 2, 6, 5, 15}, {2, 2, 4, 10, 17, 243}};
  for (const auto& r : rows) {
    const yun::Modified m = yun::build_modified(yun::builtin_target("center"), r[0], r[1], r[2], false);
    EXPECT_EQ(m.counts.quantization, r[3]);
    EXPECT_EQ(m.counts.attention, r[4]);
    EXPECT_EQ(m.counts.value_map, r[5]);
    EXPECT_EQ(m.counts.formula_value_map, r[5]);
    for (const auto& s : m.net.arch.layers) {
      if (s.kind == LayerKind::attention) {
        EXPECT_EQ(s.score, Score::hardmax);
        EXPECT_LE(s.heads, 2);
        EXPECT_EQ(s.head_size, 1);
      } else {
        EXPECT_TRUE(s.piecewise && s.activation.in_yun_class());
        EXPECT_EQ(s.width, 1);
      }
    }
  }
  EXPECT_THROW(yun::build_modified(yun::builtin_target("center"), 3, 3, 8, false, 1000), Error);
}

TEST(Yun, Lemma6AndTheGridHoldExactly) {
  struct Case {
    const char* target;
    int d, n, K;
    bool pe;
  };
  for (const Case& c :
       {Case{"tokenwise-sin", 1, 2, 4, false}, Case{"attention", 1, 3, 4, false},
        Case{"center", 2, 2, 2, false}, Case{"prefix-mean", 1, 2, 4, true}, Case{"reverse", 1, 3, 2, true}}) {
    const yun::Target f = yun::builtin_target(c.target);
    const yun::Modified m = yun::build_modified(f, c.d, c.n, c.K, c.pe);
    const yun::Lemma6 r = yun::check_lemma6(m, f, 100000, 1);
    EXPECT_TRUE(r.exhaustive);
    EXPECT_TRUE(r.ok()) << c.target << " " << r.report().dump();
    EXPECT_GT(r.with_sentinel, 0);
    EXPECT_GT(r.cubes, 0);
    EXPECT_LE(r.max_abs_gc, Scalar<Rational>::to_double(m.plan.M));
    EXPECT_EQ(r.with_sentinel + r.repeated + r.distinct, r.inputs);
    if (!c.pe) {  // inputs with a repeated column: property 4 checked on them, and they map to 0
      EXPECT_GT(r.repeated, 0);
      EXPECT_EQ(r.repeated_zero, r.repeated_cubes);
    }
  }
}

TEST(Yun, PropertyFourCanFailOnRepeatedColumns) {
  // A control: with t_r raised a thousandfold, shifted repeated-column entries fall inside
  // [t_l, t_r] and the check must say so.
  const yun::Target f = yun::builtin_target("tokenwise-sin");
  yun::Modified m = yun::build_modified(f, 1, 2, 4, false);
  m.plan.t_r *= 1000;
  const yun::Lemma6 r = yun::check_lemma6(m, f, 100000, 1);
  EXPECT_GT(r.violations[3], 0);
  EXPECT_FALSE(r.ok());
}

TEST(Yun, LargeGridsAreSampledAndSaySo) {
  const yun::Target f = yun::builtin_target("max-pool");
  const yun::Modified m = yun::build_modified(f, 2, 2, 4, false);
  const yun::Lemma6 r = yun::check_lemma6(m, f, 200, 5);  // 625 inputs > 200: sampled
  EXPECT_FALSE(r.exhaustive);
  EXPECT_EQ(r.inputs, 200);
  EXPECT_TRUE(r.ok()) << r.report().dump();
  EXPECT_EQ(r.cubes + r.repeated_cubes, 200);
}

TEST(Yun, BrokenConstantsAreCaught) {
  const yun::Target f = yun::builtin_target("tokenwise-sin");
  yun::Modified m = yun::build_modified(f, 1, 2, 4, false);
  const std::size_t global = static_cast<std::size_t>(m.counts.quantization + m.counts.attention - 1);
  m.net.layers[global].wo(0, 0) = 1;  // a global shift of 1 instead of c: contexts collide with thresholds
  EXPECT_FALSE(yun::check_lemma6(m, f, 100000, 1).ok());
}

namespace {
// One feed-forward sub-layer of one unit with a random Φ (three pieces, the constant one at
// `constant`, breakpoints c1 < c2 on a 1/4 grid) that reads entry 0 and writes entry `row` of d.
Network<Rational> random_phi(Rng& rng, int constant, int d, int row, Rational& c1, Rational& c2) {
  c1 = Rational(static_cast<long>(rng.uniform() * 20) - 10, 4);
  c2 = c1 + Rational(1 + static_cast<long>(rng.uniform() * 8), 4);
  auto r = [&] { return Rational(static_cast<long>(rng.uniform() * 21) - 10, 3); };
  std::vector<std::pair<std::string, std::string>> pieces = {
      {r().str(), r().str()}, {r().str(), r().str()}, {r().str(), r().str()}};
  pieces[static_cast<std::size_t>(constant)].first = "0";
  Architecture a;
  a.d = d;
  LayerSpec s;
  s.kind = LayerKind::feedforward;
  s.width = 1;
  s.piecewise = true;
  s.activation.breakpoints = {c1.str(), c2.str()};
  s.activation.pieces = pieces;
  a.layers = {s};
  Network<Rational> net(a);
  net.layers[0].w1(0, 0) = 1;
  net.layers[0].w2(row, 0) = 1;
  return net;
}
}  // namespace

TEST(Yun, FourReluReplacementEqualsPhiOutsideItsRamps) {
  Rng rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    Rational c1, c2;
    const Network<Rational> net = random_phi(rng, trial % 3, 1, 0, c1, c2);
    const Rational eta(1, 64);
    const Network<Rational> g = yun::standardize(net, Rational(1), eta);
    EXPECT_LE(g.arch.layers[0].width, 4);
    EXPECT_FALSE(g.arch.layers[0].piecewise);
    for (int k = 0; k < 50; ++k) {
      Mat<Rational> x(1, 1);
      x(0, 0) = Rational(static_cast<long>(rng.uniform() * 4000) - 2000, 128);
      const bool ramp = (x(0, 0) >= c1 - eta && x(0, 0) < c1) || (x(0, 0) >= c2 - eta && x(0, 0) < c2);
      if (!ramp) {
        EXPECT_EQ(forward(g, x), forward(net, x)) << "x = " << x(0, 0);
      }
    }
  }
}

// The standardization's ReLUs of one Φ unit are enclosed together (AffineForward's groups and its
// one-direction path): over an interval that holds a ramp, the enclosure is the exact range of the
// function up to rounding, whatever η is; the units' own enclosures summed would be 1/η wide. The
// input reads entry 0 and writes entry 1 (a group), or reads and writes entry 0 (the residual
// folded in); random Φ as above, η = 1/64 and 2^-200, at 128 bits.
TEST(Yun, StandardizedRampsAreEnclosedByTheirRangeWhateverEta) {
  Rng rng(5);
  long direction = 0, grouped = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const bool fold = trial % 2 == 0;
    Rational c1, c2;
    const Network<Rational> net = random_phi(rng, trial % 3, 2, fold ? 0 : 1, c1, c2);
    const Rational lo = c1 - 1, hi = c2 + Rational(1, 3);  // holds both ramps
    Rational tiny(1);
    for (int k = 0; k < 200; ++k)
      tiny /= 2;
    for (const Rational& eta : {Rational(1, 64), tiny}) {
      const Network<Rational> g = yun::standardize(net, Rational(1), eta);
      // The exact range of the output entry over t ∈ [lo, hi]: at the ends and at every breakpoint.
      const int row = fold ? 0 : 1;
      Rational ylo, yhi;
      bool first = true;
      for (const Rational& t : {lo, hi, c1 - eta, c1, c2 - eta, c2}) {
        Mat<Rational> x(2, 1);
        x(0, 0) = t, x(1, 0) = 0;
        const Rational y = forward(g, x)(row, 0);
        if (first || y < ylo) ylo = y;
        if (first || y > yhi) yhi = y;
        first = false;
      }
      const MpfrPrecision precision(128);
      const AffineForward affine(g);
      Mat<Mpfi> x(2, 1);
      x(0, 0) = hull(lower(Scalar<Mpfi>::from(lo)), upper(Scalar<Mpfi>::from(hi)));
      x(1, 0) = Mpfi(0);
      const Mpfi y = affine(x)(row, 0);
      EXPECT_LE(lower(y), lower(Scalar<Mpfi>::from(ylo))) << trial;
      EXPECT_GE(upper(y), upper(Scalar<Mpfi>::from(yhi))) << trial;
      const Mpfr slack = Mpfr(1e-30) * (1 + mp::abs(Mpfr(lower(y))) + mp::abs(Mpfr(upper(y))));
      EXPECT_LE(Mpfr(upper(y) - lower(y)), Scalar<Mpfr>::from(Rational(yhi - ylo)) + slack)
          << "trial " << trial << ", eta " << eta << ": [" << lower(y) << ", " << upper(y) << "] against ["
          << Scalar<Rational>::to_double(ylo) << ", " << Scalar<Rational>::to_double(yhi) << "]";
      const int units = g.arch.layers[0].width;
      (trial % 3 == 0 && units > 1 ? direction : grouped) += 1;
    }
  }
  EXPECT_GT(direction, 0);  // the constant piece first: every ReLU reads +t, the one-direction path
  EXPECT_GT(grouped, 0);
}

TEST(Yun, KajitsukaPropositionOneIsThreeSubLayersAndHitsTheGrid) {
  const yun::Target f = yun::builtin_target("center");
  const yun::Modified m = yun::build_kajitsuka(f, 1, 2, 4);
  ASSERT_EQ(m.net.arch.layers.size(), 3u);   // FF ∘ rank-1 softmax attention ∘ FF
  EXPECT_EQ(m.net.arch.layers[0].width, 4);  // F1: one unit per grid cell and coordinate
  EXPECT_EQ(m.net.arch.layers[1].heads, 1);
  EXPECT_EQ(m.net.arch.layers[1].head_size, 1);
  EXPECT_EQ(m.contexts, 12u);  // n·C(K, n) = 2·6
  {
    const MpfrPrecision precision(std::max(m.bits, 64u));
    EXPECT_LT(yun::grid_max_error(network_cast<Mpfr>(m.net), m.plan, f, 1000, 1), 1e-9);
  }
  // F1 alone, standardized: the cell centre outside the ramps.
  Network<Rational> f1 = m.net;
  f1.arch.layers.resize(1), f1.layers.resize(1);
  const Network<Rational> s1 = yun::standardize(f1, Rational(1), Rational(1, 1024));
  EXPECT_EQ(s1.arch.layers[0].width, 4 * 4);  // 4 ReLUs per unit: φ jumps at 0 and at δ
  for (int k = 0; k < 40; ++k) {
    Mat<Rational> x(1, 2);
    x(0, 0) = Rational(k, 40);
    x(0, 1) = Rational(39 - k, 41);
    const Mat<Rational> y = forward(s1, x);
    for (int j = 0; j < 2; ++j)
      EXPECT_EQ(y(0, j),
                Rational(static_cast<long>(Scalar<Rational>::to_double(x(0, j)) * 4), 4) + Rational(1, 8))
          << k;
  }
}

TEST(Yun, DistancesAreSeededAndTheStandardNetworkTracksTheModifiedOne) {
  const yun::Target f = yun::builtin_target("center");
  const yun::Modified m = yun::build_modified(f, 1, 2, 4, false);
  const Network<double> md = network_cast<double>(m.net);
  const yun::Distance a = yun::distance(md, f, 1, 2, 2, 4000, 7), b = yun::distance(md, f, 1, 2, 2, 4000, 7);
  EXPECT_EQ(a.value, b.value);
  EXPECT_LT(a.lo, a.value);
  EXPECT_GT(a.hi, a.value);
  Rational eta(1, 4);
  for (int k = 0; k < 40; ++k)
    eta /= 2;
  const Network<Rational> g = yun::standardize(m.net, yun::default_lambda(m.plan), eta);
  Network<Mpfr> gm;
  {
    const MpfrPrecision precision(yun::standard_bits(m.plan, eta));
    gm = network_cast<Mpfr>(g);
  }
  EXPECT_EQ(weight_bits(gm), mpfr_carried_bits(yun::standard_bits(m.plan, eta)));
  const yun::Distance s = yun::distance(gm, f, 1, 2, 2, 400, 7), t = yun::distance(md, f, 1, 2, 2, 400, 7);
  EXPECT_NEAR(s.value, t.value, 1e-6);
}

TEST(Yun, EquivarianceIsDetected) {
  EXPECT_TRUE(yun::looks_equivariant(yun::builtin_target("attention"), 2, 3, 10, 1));
  EXPECT_TRUE(yun::looks_equivariant(yun::builtin_target("max-pool"), 2, 3, 10, 1));
  EXPECT_FALSE(yun::looks_equivariant(yun::builtin_target("prefix-mean"), 2, 3, 10, 1));
  EXPECT_FALSE(yun::looks_equivariant(yun::builtin_target("reverse"), 1, 3, 10, 1));
  EXPECT_THROW(yun::builtin_target("nope"), Error);
}

namespace {
std::pair<int, std::string> cli(const std::string& args) {
  const CliResult r = run_cli(args);
  return {r.code, r.out};
}
}  // namespace

TEST(Yun, ApproximateCommand) {
  const fs::path dir = fs::path(UATLAB_TEST_TMP) / "yun";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto [code, out] =
      cli("approximate \"x*x - mean\" --d 1 --n 2 --K 4 --samples 500 --samples-standard 100 --report " +
          (dir / "r.json").string());
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("lemma 6      holds, checked exactly"), std::string::npos) << out;
  EXPECT_NE(out.find("d_1          modified"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir / "r.json"));
  std::tie(code, out) =
      cli("approximate tokenwise-sin --d 1 --n 2 --K 2 --samples 50 --samples-standard 10 --json");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"ok\": true"), std::string::npos) << out;
  std::tie(code, out) =
      cli("approximate prefix-mean --d 1 --n 2 --K 4 --out " + (dir / "g.safetensors").string());
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("not permutation equivariant"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "g.safetensors"));
  std::tie(code, out) = cli("approximate \"x +\" --d 1 --n 2 --K 4");
  EXPECT_NE(code, 0);
  std::tie(code, out) =
      cli("approximate reverse --pe --d 1 --n 2 --K 2 --samples 300 --samples-standard 50 --sweep-delta 2,4 "
          "--out-dir " +
          (dir / "sweep").string());
  ASSERT_EQ(code, 0) << out;
  for (const char* f : {"sweep.csv", "error_vs_delta.png", "size_vs_delta.png"})
    EXPECT_GT(fs::file_size(dir / "sweep" / f), 100u) << f;
}
