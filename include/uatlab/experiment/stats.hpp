// The one statistics layer behind every experiment's verdicts (docs/statistics.md says how a
// verdict is decided, for a referee to check):
//
//   1. each claim is a Comparison of two samples (one value per seed) on the scale the claim lives
//      on: log10 for losses and errors that span decades, raw otherwise;
//   2. samples whose seeds pair (the same data for both arms) are compared by the exact Wilcoxon
//      signed-rank test, the others by Welch's t-test;
//   3. a claim has one or more "holds" outcomes and one or more "contradicted" outcomes, each a
//      one-sided test; its p is the smallest of them times their number (Bonferroni inside the
//      claim), and the p of all claims of one report are Holm-adjusted together;
//   4. the verdict is one of four words: holds, contradicted, equivalent within ±margin (the
//      "holds" of an equivalence claim), or inconclusive (nothing shown at α after Holm).
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "uatlab/names.hpp"

namespace uatlab::experiment {

// ---- tests ---------------------------------------------------------------------------------------

// Welch's t-test of mean(a) − mean(b) against `shift` (unequal variances): the difference of the
// means, t, the Welch–Satterthwaite degrees of freedom, and the one-sided p-values of
// H1: mean(a) − mean(b) > shift (p_greater) and < shift (p_less), from Student's t (Boost.Math).
// valid: both samples have ≥ 2 values. Without any spread the sign of the difference decides.
struct Welch {
  double diff = 0, t = 0, df = 0, p_greater = 1, p_less = 1;
  bool valid = false;
};
Welch welch(const std::vector<double>& a, const std::vector<double>& b, double shift = 0);

// The exact Wilcoxon signed-rank test of the paired differences d_i = a_i − b_i against `shift`:
// the differences equal to the shift are dropped, the others ranked by |d_i − shift| (ties get
// their mid-rank), and the statistic W+ (the rank sum of the positive ones) is compared with its
// exact distribution over all 2^n sign patterns given those ranks (a permutation test, no normal
// approximation). p_greater: H1 the differences lie above the shift; p_less: below. estimate: the
// Hodges–Lehmann estimate of the shift (the median of the Walsh averages of the d_i). n: the
// differences kept. valid: a.size() == b.size() ≥ 1.
struct SignedRank {
  double estimate = std::numeric_limits<double>::quiet_NaN(), w_plus = 0, p_greater = 1, p_less = 1;
  int n = 0;
  bool valid = false;
};
SignedRank signed_rank(const std::vector<double>& a, const std::vector<double>& b, double shift = 0);

// Holm's step-down adjustment of a family of p-values (same order; monotone, capped at 1).
std::vector<double> holm(const std::vector<double>& p);

// ---- claims and verdicts -------------------------------------------------------------------------

enum class Scale { raw, log10 };
inline constexpr EnumNames<Scale::log10> scale_names{"scale", {"raw", "log10"}};
static_assert(scale_names.complete());

// What a claim says about a (the first arm) against b, with d = a − b on the scale:
//   lower       a is lower than b                   holds: d < 0; contradicted: d > 0
//   equivalent  a and b differ by less than margin  holds: −margin < d < margin (two one-sided
//               tests, TOST); contradicted: d > margin, or d < −margin
//   not_higher  a is at most margin above b         holds: d < margin; contradicted: d > margin
//               ("at least as good" when lower is better)
enum class ClaimKind { lower, equivalent, not_higher };

// The values of one arm, with the seed of each run ("" when the runs carry none).
struct Sample {
  std::vector<double> values;
  std::vector<std::string> seeds;
};

struct Comparison {
  std::string claim, comparison;  // "more heads lower the loss", "H=8 vs H=1 at m=64"
  ClaimKind kind = ClaimKind::lower;
  Sample a, b;
  Scale scale = Scale::log10;
  double margin = 0;     // on the scale (decades for log10); equivalent and not_higher only
  bool control = false;  // a positive control: an effect the set-up must be able to see
};

struct Verdict {
  std::string word;  // holds | contradicted | equivalent within ±margin | inconclusive
  std::string test;  // "Wilcoxon signed-rank, paired by seed" or "Welch t"
  std::string why;   // for an inconclusive verdict that could not be otherwise: what is missing
  double estimate = std::numeric_limits<double>::quiet_NaN();  // a − b on the scale
  double p = std::numeric_limits<double>::quiet_NaN(), p_holm = p;
  int runs = 0;  // pairs (paired) or the smaller sample (Welch)
  bool tested = false;
};

// The runs of two arms pair when both carry the same non-empty set of seeds (each seed once): the
// pair is (a's value, b's value) of one seed, in a's order.
bool seeds_pair(const Sample& a, const Sample& b);

// The verdicts of one report's comparisons: every tested comparison's p enters one Holm family.
// A comparison is not tested (inconclusive, with `why`) when it has too few runs, or a value that
// is not finite or, on the log10 scale, not positive. A tested comparison whose smallest
// attainable p after Holm is above alpha (a paired rank test over few seeds) says so in `why`.
std::vector<Verdict> decide(const std::vector<Comparison>& comparisons, double alpha = 0.05);

// The Markdown of decide(): a table of claim, comparison, test, runs, estimate, p, Holm p and
// verdict, preceded by the rule and followed by the positive controls' outcome.
std::string verdict_markdown(const std::vector<Comparison>& comparisons, double alpha = 0.05);

}  // namespace uatlab::experiment
