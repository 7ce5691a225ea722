#include "uatlab/experiment/stats.hpp"

#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "uatlab/io/report.hpp"

namespace uatlab::experiment {

Welch welch(const std::vector<double>& a, const std::vector<double>& b, double shift) {
  Welch w;
  if (a.size() < 2 || b.size() < 2) return w;
  const double ma = mean(a), mb = mean(b), va = variance(a), vb = variance(b);
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  const double se2 = va / na + vb / nb, excess = ma - mb - shift;
  w.diff = ma - mb;
  w.valid = true;
  if (!(se2 > 0)) {  // no spread at all: the sign decides
    w.t = excess == 0 ? 0 : std::copysign(std::numeric_limits<double>::infinity(), excess);
    w.p_greater = excess > 0 ? 0 : 1, w.p_less = excess < 0 ? 0 : 1, w.df = na + nb - 2;
    return w;
  }
  w.t = excess / std::sqrt(se2);
  w.df = se2 * se2 / ((va / na) * (va / na) / (na - 1) + (vb / nb) * (vb / nb) / (nb - 1));
  const boost::math::students_t dist(w.df);
  w.p_greater = boost::math::cdf(boost::math::complement(dist, w.t));
  w.p_less = boost::math::cdf(dist, w.t);
  return w;
}

SignedRank signed_rank(const std::vector<double>& a, const std::vector<double>& b, double shift) {
  SignedRank s;
  if (a.empty() || a.size() != b.size()) return s;
  s.valid = true;
  std::vector<double> d, walsh;
  for (std::size_t i = 0; i < a.size(); ++i)
    d.push_back(a[i] - b[i]);
  for (std::size_t i = 0; i < d.size(); ++i)  // Hodges–Lehmann: the median of (d_i + d_j) / 2, i ≤ j
    for (std::size_t j = i; j < d.size(); ++j)
      walsh.push_back((d[i] + d[j]) / 2);
  std::sort(walsh.begin(), walsh.end());
  const std::size_t h = walsh.size() / 2;
  s.estimate = walsh.size() % 2 ? walsh[h] : (walsh[h - 1] + walsh[h]) / 2;

  std::vector<double> kept;  // the differences from the shift, zeros dropped
  for (double e : d)
    if (e - shift != 0) kept.push_back(e - shift);
  s.n = static_cast<int>(kept.size());
  if (kept.empty()) return s;  // every difference at the shift: no evidence either way (p = 1)
  std::vector<std::size_t> order(kept.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t i, std::size_t j) { return std::abs(kept[i]) < std::abs(kept[j]); });
  // Twice the mid-ranks, so that every rank is an integer: a tie over positions i … j − 1 (0-based)
  // has mid-rank (i + j + 1) / 2.
  std::vector<int> rank2(kept.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i + 1;
    while (j < order.size() && std::abs(kept[order[j]]) == std::abs(kept[order[i]]))
      ++j;
    for (std::size_t k = i; k < j; ++k)
      rank2[order[k]] = static_cast<int>(i + j + 1);
    i = j;
  }
  int total = 0, observed = 0;
  for (std::size_t i = 0; i < kept.size(); ++i)
    total += rank2[i], observed += kept[i] > 0 ? rank2[i] : 0;
  // The exact null distribution of 2·W+: each rank enters with probability 1/2.
  std::vector<double> dist(static_cast<std::size_t>(total) + 1, 0.0);
  dist[0] = 1;
  for (int r : rank2)
    for (int w = total; w >= r; --w)
      dist[static_cast<std::size_t>(w)] =
          (dist[static_cast<std::size_t>(w)] + dist[static_cast<std::size_t>(w - r)]);
  const double all = std::ldexp(1.0, s.n);
  double below = 0, above = 0;
  for (int w = 0; w <= total; ++w)
    (w <= observed ? below : above) += dist[static_cast<std::size_t>(w)];
  s.w_plus = observed / 2.0;
  s.p_less = below / all;
  s.p_greater = (above + dist[static_cast<std::size_t>(observed)]) / all;
  return s;
}

std::vector<double> holm(const std::vector<double>& p) {
  std::vector<std::size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t i, std::size_t j) { return p[i] < p[j]; });
  std::vector<double> adjusted(p.size());
  double running = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    running = std::max(running, std::min(1.0, static_cast<double>(p.size() - k) * p[order[k]]));
    adjusted[order[k]] = running;
  }
  return adjusted;
}

bool seeds_pair(const Sample& a, const Sample& b) {
  if (a.seeds.size() != a.values.size() || b.seeds.size() != b.values.size() || a.seeds.empty() ||
      a.seeds.size() != b.seeds.size())
    return false;
  std::vector<std::string> sa = a.seeds, sb = b.seeds;
  std::sort(sa.begin(), sa.end()), std::sort(sb.begin(), sb.end());
  return sa == sb && std::adjacent_find(sa.begin(), sa.end()) == sa.end() &&
         std::none_of(sa.begin(), sa.end(), [](const std::string& s) { return s.empty(); });
}

namespace {

// The values on the scale; false when one is not finite or, on log10, not positive.
bool on_scale(const std::vector<double>& v, Scale s, std::vector<double>& out) {
  out.clear();
  for (double x : v) {
    if (!std::isfinite(x) || (s == Scale::log10 && !(x > 0))) return false;
    out.push_back(s == Scale::log10 ? std::log10(x) : x);
  }
  return true;
}

// One one-sided outcome of a claim: H1 "d > shift" (above) or "d < shift".
struct Outcome {
  bool holds;  // the outcome supports the claim (else it contradicts it)
  bool above;
  double shift;
};
std::vector<Outcome> outcomes(const Comparison& c) {
  const double m = c.margin;
  switch (c.kind) {
    case ClaimKind::lower:
      return {{true, false, 0}, {false, true, 0}};
    case ClaimKind::not_higher:
      return {{true, false, m}, {false, true, m}};
    case ClaimKind::equivalent:  // the TOST pair counts as one outcome (its p is the larger)
      return {{true, true, -m}, {false, true, m}, {false, false, -m}};
  }
  return {};
}

std::string number(double x, const char* format) {
  char b[48];
  std::snprintf(b, sizeof b, format, x);
  return b;
}

}  // namespace

std::vector<Verdict> decide(const std::vector<Comparison>& comparisons, double alpha) {
  std::vector<Verdict> out(comparisons.size());
  std::vector<double> family;
  std::vector<std::size_t> tested;
  std::vector<int> support;   // per tested comparison: whether its smallest outcome holds
  std::vector<double> least;  // per tested comparison: its smallest attainable p
  for (std::size_t i = 0; i < comparisons.size(); ++i) {
    const Comparison& c = comparisons[i];
    Verdict& v = out[i];
    v.word = "inconclusive";
    std::vector<double> a, b;
    if (!on_scale(c.a.values, c.scale, a) || !on_scale(c.b.values, c.scale, b)) {
      v.why = c.scale == Scale::log10 ? "a value not finite or not positive" : "a value not finite";
      continue;
    }
    const bool paired = seeds_pair(c.a, c.b);
    if (paired) {  // b in a's seed order
      std::vector<double> bb;
      for (const std::string& s : c.a.seeds)
        bb.push_back(b[static_cast<std::size_t>(std::find(c.b.seeds.begin(), c.b.seeds.end(), s) -
                                                c.b.seeds.begin())]);
      b = bb;
    }
    // The p of one outcome: H1 "d > shift" or "d < shift".
    auto one_sided = [&](bool above, double shift) {
      if (paired) {
        const SignedRank s = signed_rank(a, b, shift);
        return above ? s.p_greater : s.p_less;
      }
      const Welch w = welch(a, b, shift);
      return above ? w.p_greater : w.p_less;
    };
    v.runs = static_cast<int>(paired ? a.size() : std::min(a.size(), b.size()));
    v.test = paired ? "Wilcoxon signed-rank, paired by seed" : "Welch t";
    const Welch unpaired = paired ? Welch{} : welch(a, b);
    if (paired ? a.empty() : !unpaired.valid) {
      v.why = "too few runs";
      continue;
    }
    v.estimate = paired ? signed_rank(a, b).estimate : unpaired.diff;
    const std::vector<Outcome> os = outcomes(c);
    double best = 2;
    bool holds = false;
    for (std::size_t k = 0; k < os.size(); ++k) {
      double p = one_sided(os[k].above, os[k].shift);
      if (c.kind == ClaimKind::equivalent && k == 0)  // TOST: both one-sided tests must reject
        p = std::max(p, one_sided(false, c.margin));
      if (p < best) best = p, holds = os[k].holds;
    }
    v.p = std::min(1.0, static_cast<double>(os.size()) * best);
    v.tested = true;
    // A paired rank test over n pairs cannot give a one-sided p below 2^-n.
    least.push_back(paired ? static_cast<double>(os.size()) * std::ldexp(1.0, -static_cast<int>(a.size()))
                           : 0);
    family.push_back(v.p);
    tested.push_back(i);
    support.push_back(holds);
  }
  const std::vector<double> adjusted = holm(family);
  for (std::size_t k = 0; k < tested.size(); ++k) {
    Verdict& v = out[tested[k]];
    const Comparison& c = comparisons[tested[k]];
    v.p_holm = adjusted[k];
    const double m = static_cast<double>(tested.size());
    if (v.p_holm >= alpha && least[k] * m > alpha)  // Holm's first step needs p < α/m
      v.why = std::to_string(v.runs) + " pairs: smallest attainable p " + number(least[k], "%.2g") +
              ", Holm's first step needs < " + number(alpha / m, "%.2g");
    if (v.p_holm >= alpha) continue;
    if (!support[k])
      v.word = "contradicted";
    else
      v.word = c.kind == ClaimKind::equivalent ? "equivalent within ±" + number(c.margin, "%g") : "holds";
  }
  return out;
}

std::string verdict_markdown(const std::vector<Comparison>& comparisons, double alpha) {
  const std::vector<Verdict> vs = decide(comparisons, alpha);
  std::size_t family = 0;
  for (const Verdict& v : vs)
    family += v.tested;
  std::vector<Row> rows;
  std::string controls;
  for (std::size_t i = 0; i < vs.size(); ++i) {
    const Comparison& c = comparisons[i];
    const Verdict& v = vs[i];
    const bool log = c.scale == Scale::log10;
    std::string claim = c.claim;
    if (c.kind != ClaimKind::lower)
      claim += std::string(" (margin ") + (c.kind == ClaimKind::equivalent ? "±" : "+") +
               number(c.margin, "%g") + (log ? " dec)" : ")");
    if (c.control) claim = "positive control: " + claim;
    const std::string estimate =
        std::isnan(v.estimate) ? "" : number(v.estimate, "%+.3g") + (log ? " dec" : "");
    rows.push_back({claim, c.comparison, v.test.empty() ? "-" : v.test + (log ? ", log10" : ""),
                    std::to_string(v.runs), estimate, v.tested ? number(v.p, "%.2g") : "-",
                    v.tested ? number(v.p_holm, "%.2g") : "-",
                    v.word + (v.why.empty() ? "" : " (" + v.why + ")")});
    if (c.control)
      controls += "\n- Positive control \"" + c.claim + "\" (" + c.comparison + "): " +
                  (v.word == "holds" ? "holds, so the set-up and " + std::to_string(v.runs) +
                                           " runs per arm can see an effect of this size."
                                     : v.word +
                                           ": the set-up did not show the effect it must see, so no "
                                           "inconclusive verdict of this table is evidence of absence.");
  }
  return "\nComputed verdicts (docs/statistics.md): per claim, the smallest one-sided p of its outcomes "
         "times their number; Holm over the " +
         std::to_string(family) + " tested claims; α = " + number(alpha, "%g") +
         ". Estimates are a − b on the test's scale (dec: decades, log10 of the ratio; Hodges–Lehmann "
         "for paired runs, the difference of means for Welch).\n\n" +
         markdown_table({"claim", "comparison", "test", "runs", "a − b", "p", "Holm p", "verdict"}, rows) +
         controls + (controls.empty() ? "" : "\n");
}

}  // namespace uatlab::experiment
