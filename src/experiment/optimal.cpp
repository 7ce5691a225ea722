// `uatlab reproduce memorization-optimal`: parameters and bits of the optimal-capacity constructions
// (construct/optimal.hpp) against N and against n, next-token and sequence-to-sequence, with the
// closed-form plan beyond what is built, the one-layer counts and the counting lower bound beside
// them, and the fitted exponents judged against the theory. docs/memorization-optimal.md.
#include <algorithm>
#include <cmath>
#include <map>

#include "registry.hpp"
#include "uatlab/construct/deep_value_map.hpp"
#include "uatlab/construct/optimal.hpp"
#include "uatlab/experiment/memorization.hpp"
#include "uatlab/experiment/table.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/train/trainer.hpp"

namespace uatlab::experiment {

namespace optimal_capacity {  // named: the unity build puts other experiments' helpers beside these
namespace {

constexpr int kD = 4, kV = 64, kL = 4, kRho = 2;  // tokens in R^4 from 64, labels in [0, 4): ρ = 2 bits

bool seq2seq(const json& cell) {
  return cell.at("setting") == "seq-to-seq";
}
// A "built" cell: the next-token network built on the data and counted, not certified (many seeds
// at the upper decade, for the exponent's interval; a certified run of the same seed and N is its twin).
bool built_only(const json& cell) {
  return cell.at("sweep") == "built";
}

json run_optimal(const json& cell) {
  const std::uint64_t seed = cell.at("seed");
  const Dataset ds = labelled_dataset(cell.at("N"), cell.at("n"), kD, kV, kL, seq2seq(cell), seed);
  optimal::Options o;
  o.setting = optimal::setting_names.parse(cell.at("setting").get<std::string>());
  o.seed = seed;
  o.certify = !built_only(cell);  // built: the counts of the network built on these data alone
  const optimal::Memorized m = optimal::memorize(ds, o);
  const json r = m.report();
  json out = {{"q", m.ids.count},
              {"parameters", m.stored.parameters},
              {"nonzero", m.stored.nonzero},
              {"plan_parameters", m.plan_parameters},
              {"max_weight_bits", m.stored.max_bits},
              {"total_weight_bits", m.stored.total_bits},
              {"log10_delta", r.at("ids").at("log10_delta_certified")},
              {"bound_holds", m.ids.bound_holds},
              {"beta", m.plan.at("beta")},
              {"blocks", m.plan.at("blocks")},
              {"block_size", m.plan.at("block_size")},
              {"depth", m.plan.at("depth")}};
  if (!o.certify) {
    out.update({{"certified", false}, {"built_only", true}, {"seconds", m.seconds_build}});
    return out;
  }
  out.update(
      {{"min_bits", m.min_bits},
       {"min_bits_x_parameters", static_cast<double>(m.min_bits) * static_cast<double>(m.stored.parameters)},
       {"information_bits_lower", r.at("accounting").at("information_bits_lower")},
       {"log10_delta_bound", r.at("ids").at("log10_delta_bound")},
       {"certified", m.max_error == 0},
       {"float64_works", m.float64_works},
       {"seconds", m.seconds_build + m.seconds_certify + m.seconds_min_bits}});
  return out;
}

// A trained model on the same next-token data: one attention sub-layer (4 heads of size 1), a ReLU
// feed-forward sub-layer of width m and a linear readout of the 4 classes, AdamW on the last token's
// cross-entropy (the mask) until every sequence is right or the step cap; the smallest width of the
// grid that memorizes, by bisection (memorizing taken to be monotone in the width). A run memorizes
// when every last-token argmax of the float32 model is certified in MPFI (64 bits, then 256).
json train_next_token(const json& cell) {
  const std::uint64_t seed = cell.at("seed");
  const Dataset data = labelled_dataset(cell.at("N"), cell.at("n"), kD, kV, kL, false, seed);
  const std::vector<int> widths = cell.at("widths");
  json best;
  long found = -1;
  Network<float> best_net;  // the smallest memorizing model
  for (long lo = 0, hi = static_cast<long>(widths.size()); lo < hi;) {
    const long mid = (lo + hi) / 2;
    Architecture a;
    a.d = kD, a.readout = kL;
    LayerSpec att;
    att.heads = 4, att.head_size = 1;
    a.layers.push_back(att);
    if (widths[mid] > 0) {
      LayerSpec ff;
      ff.kind = LayerKind::feedforward, ff.width = widths[mid];
      a.layers.push_back(ff);
    }
    Network<double> nd(a);
    init_random(nd, seed);
    TrainConfig c;
    c.loss = Loss::cross_entropy;
    c.steps = cell.at("steps");
    c.batch = std::min(64, static_cast<int>(data.sequences.size()));
    c.lr = 0.01, c.min_lr = 0.001, c.warmup = std::min<long>(100, c.steps / 10);
    c.seed = seed;
    c.stop_at_full_accuracy = true, c.log_every = 25, c.evaluate_training_set = true;
    Network<float> net = network_cast<float>(nd);
    const TrainReport r = train(net, data, nullptr, c);
    const bool certified = r.train_accuracy == 1.0 && argmax_certified(net, data);
    if (certified) {
      const StoredBits b = count_stored_bits(network_cast<Rational>(net));
      best = {{"q", data.sequences.size()},
              {"parameters", b.parameters},
              {"nonzero", b.nonzero},
              {"width", widths[mid]},
              {"steps", r.steps},
              {"max_weight_bits", b.max_bits},
              {"total_weight_bits", b.total_bits},
              {"min_bits", 24},  // float32 weights: 24 significand bits, evaluated exactly
              {"min_bits_x_parameters", 24.0 * static_cast<double>(b.parameters)},
              {"information_bits_lower", optimal::information_bits(data.sequences.size(), kL)},
              {"criterion", "argmax, float32 weights"},
              {"seconds", r.seconds}};
      found = mid, hi = mid;
      best_net = std::move(net);
    } else {
      lo = mid + 1;
    }
  }
  if (found >= 0) {
    // The constructions' outputs are the labels themselves, so they also decode to the right
    // label: the trained model's storage at the fewest bits that keep its argmax is the
    // comparison at one criterion (the constructions' stored bits bound theirs from above).
    const RoundedWeights w = fewest_weight_bits(best_net, data);
    best.update({{"rounded_bits", w.bits},
                 {"rounded_max_weight_bits", w.max_bits},
                 {"rounded_total_bits", w.total_bits}});
  }
  json out = best.is_null() ? json{{"q", cell.at("N")}} : best;
  out["certified"] = found >= 0;
  out["at_floor"] = found == 0;
  return out;
}

// The one-layer counts beside the constructions (closed forms, d = 4): Zhang et al.'s value map, one
// hidden unit per id (uatlab's form: 4d attention + d + q + dq), and a count linear in q(L − 1), the
// form of Madden, Fox & Thrampoulidis's one-layer bound for real-valued next-token distributions
// (constant 1: theirs is not known here).
double zhang_count(double q) {
  return 4 * kD + kD + q + kD * q;
}
double madden_count(double q) {
  return q * (kL - 1);
}

std::string curve(const json& cell) {
  if (cell.at("sweep") == "trained") return "next-token, trained (4 heads of size 1 + FF), against N";
  if (built_only(cell)) return "next-token, built (not certified), against N";
  return cell.at("setting").get<std::string>() + ", against " + cell.at("sweep").get<std::string>();
}

bool trained(const json& line) {
  return line.at("cell").at("sweep") == "trained";
}

// Per seed, the least-squares slope of log(parameters) on log(x) over the runs whose x lies in the
// upper decade of the sweep (x ≥ max/10), x = q (against N) or n (against n).
// count (default: the run's stored parameters) gives the y of each run.
Sample exponents(
    const std::vector<json>& lines, const std::string& which, bool upper_decade,
    const std::function<double(const json& result)>& count = [](const json& r) {
      return r.at("parameters").get<double>();
    }) {
  std::map<std::string, std::vector<std::pair<double, double>>> per_seed;
  for (const json& l : lines)
    if (curve(l.at("cell")) == which &&
        (l.at("result").at("certified").get<bool>() || l.at("result").value("built_only", false)) &&
        !l.at("result").value("at_floor", false)) {  // a trained run at the width grid's floor: a bound
      const double x = which.find("against n") != std::string::npos ? l.at("cell").at("n").get<double>()
                                                                    : l.at("result").at("q").get<double>();
      per_seed[label(l.at("cell").at("seed"))].push_back({x, count(l.at("result"))});
    }
  Sample s;
  for (auto& [seed, pts] : per_seed) {
    double top = 0;
    for (const auto& p : pts)
      top = std::max(top, p.first);
    std::vector<double> x, y;
    for (const auto& [xi, yi] : pts)
      if (!upper_decade || xi >= top / 10 * 0.999) x.push_back(std::log(xi)), y.push_back(std::log(yi));
    const double e = slope(x, y);
    if (std::isfinite(e)) s.values.push_back(e), s.seeds.push_back(seed);
  }
  return s;
}

Sample constant(double v, std::size_t runs) {  // a fixed threshold as a sample without spread or seeds
  return {std::vector<double>(std::max<std::size_t>(runs, 2), v), {}};
}

std::string optimal_report(const std::vector<json>& lines, const Outputs& out, const Context& c) {
  auto column = [](const json& cell) {
    return cell.at("sweep") == "n" ? "n=" + label(cell.at("n")) : "N=" + label(cell.at("N"));
  };
  auto value = [](const char* key) { return [key](const json& r) { return r.at(key).get<double>(); }; };
  auto numbered = [&](const char* key) {  // the runs that have the value (no bound seq-to-seq)
    std::vector<json> with;
    for (const json& l : lines)
      if (l.at("result").contains(key) && l.at("result").at(key).is_number()) with.push_back(l);
    return with;
  };
  std::string md =
      "Stored parameters of the certified network (constructions: every labelled output within 10^-6 of "
      "its integer label, MPFI; trained: the smallest width of the grid whose every last-token argmax is "
      "certified, float32 weights), mean ± sd over the seeds that memorized; tokens in R^4 drawn from 64, "
      "labels in [0, 4); against N at n = 8, against n at a fixed N:\n\n" +
      write_grouped(group(numbered("parameters"), curve, column, value("parameters")), "setting, sweep", out,
                    5);
  for (const auto& [title, key] :
       {std::pair{"ids q (sequences, or labelled tokens)", "q"},
        {"largest bits in one weight", "max_weight_bits"},
        {"total bits stored (Σ over weights)", "total_weight_bits"},
        {"fewest certifying bits × parameters", "min_bits_x_parameters"},
        {"trained: fewest significand bits whose rounded weights keep every argmax certified",
         "rounded_bits"},
        {"trained: total bits stored by those rounded weights", "rounded_total_bits"},
        {"counting lower bound on any memorizer's bits, q·log2 L", "information_bits_lower"},
        {"certified log10 δ, the ids' smallest gap", "log10_delta"},
        {"derived bound log10 ‖v‖²γ/(2e·n·N²) (next-token)", "log10_delta_bound"},
        {"seconds (build, certify, fewest bits)", "seconds"}})
    md += "\n" + std::string(title) + ":\n\n" +
          grouped_markdown(group(numbered(key), curve, column, value(key)), "setting, sweep", 4);
  std::size_t bound_fails = 0, next_runs = 0;
  for (const json& l : lines)
    if (!seq2seq(l.at("cell")) && !trained(l))
      ++next_runs, bound_fails += !l.at("result").at("bound_holds").get<bool>();
  std::vector<Row> runs;  // the trained family: how many seeds memorized, at which widths
  std::map<long long, std::pair<int, int>> tally;
  std::map<long long, std::vector<std::string>> at;
  for (const json& l : lines)
    if (trained(l)) {
      auto& [yes, all] = tally[l.at("cell").at("N").get<long long>()];
      ++all;
      if (l.at("result").at("certified").get<bool>()) {
        ++yes;
        at[l.at("cell").at("N").get<long long>()].push_back(
            label(l.at("result").at("width")) + (l.at("result").value("at_floor", false) ? " (floor)" : ""));
      }
    }
  for (const auto& [N, t] : tally) {
    std::string w;
    for (const std::string& x : at[N])
      w += (w.empty() ? "" : ", ") + x;
    runs.push_back({std::to_string(N), std::to_string(t.first) + "/" + std::to_string(t.second), w});
  }
  if (!runs.empty())
    md +=
        "\nTrained models (one attention sub-layer of 4 heads of size 1, FF width m, 4-class readout; AdamW "
        "on the last token, to every sequence right or the step cap): seeds whose model memorized "
        "(certified), and the smallest widths found. The criteria differ: a trained model's argmax with "
        "float32 weights (24 significand bits), a construction's exact label at its fewest bits:\n\n" +
        markdown_table({"N", "memorized", "widths m"}, runs);
  md += "\nNext-token runs whose certified δ is below the derived bound: " + std::to_string(bound_fails) +
        " of " + std::to_string(next_runs) + ".\n";
  // The built runs stand for certified ones only if a certified run of the same seed and N has the
  // same network: their parameters (and the plan's) compared wherever both exist.
  std::map<std::pair<long long, long long>, long long> certified_params;
  for (const json& l : lines)
    if (curve(l.at("cell")) == "next-token, against N" && l.at("result").at("certified").get<bool>())
      certified_params[{l.at("cell").at("seed").get<long long>(), l.at("cell").at("N").get<long long>()}] =
          l.at("result").at("parameters").get<long long>();
  std::size_t built = 0, twins = 0, same = 0, plan_same = 0;
  for (const json& l : lines)
    if (built_only(l.at("cell"))) {
      ++built;
      const json& r = l.at("result");
      plan_same += r.at("plan_parameters") == r.at("parameters");
      const auto it = certified_params.find(
          {l.at("cell").at("seed").get<long long>(), l.at("cell").at("N").get<long long>()});
      if (it == certified_params.end()) continue;
      ++twins, same += it->second == r.at("parameters").get<long long>();
    }
  if (built > 0)
    md += "Built (not certified) next-token runs: " + std::to_string(built) +
          "; the closed-form plan's count "
          "equals the built network's in " +
          std::to_string(plan_same) + " of them, and " + std::to_string(same) + " of the " +
          std::to_string(twins) +
          " with a certified run of the same seed and N have that run's parameters exactly.\n";

  // The exponents and their verdicts against the theory.
  const Sample next_N = exponents(lines, "next-token, against N", true),
               next_n = exponents(lines, "next-token, against n", false),
               s2s_N = exponents(lines, "seq-to-seq, against N", true),
               s2s_n = exponents(lines, "seq-to-seq, against n", false),
               next_built = exponents(lines, "next-token, built (not certified), against N", true);
  // The positive control: Zhang's one-unit-per-id count over the same q has exponent ~1, which the
  // set-up must see above 0.55.
  const Sample zhang = exponents(lines, "next-token, against N", true,
                                 [](const json& r) { return zhang_count(r.at("q").get<double>()); });
  std::vector<Comparison> claims;
  auto raw = [&](Comparison cmp) {
    cmp.scale = Scale::raw;
    claims.push_back(std::move(cmp));
  };
  raw({"Zhang's one-layer count grows faster than N^0.55", "0.55 vs its exponent in N", ClaimKind::lower,
       constant(0.55, zhang.values.size()), zhang, Scale::raw, 0, true});
  raw({"next-token parameters grow at most like N^0.55 (upper decade)", "exponent in N vs 0.55",
       ClaimKind::lower, next_N, constant(0.55, next_N.values.size())});
  // The built runs' claim only where they add seeds the certified runs lack (else it repeats that
  // claim on the same numbers: a built run's network is its certified twin's).
  const bool more_seeds =
      std::any_of(next_built.seeds.begin(), next_built.seeds.end(), [&](const std::string& s) {
        return std::find(next_N.seeds.begin(), next_N.seeds.end(), s) == next_N.seeds.end();
      });
  if (more_seeds)
    raw({"next-token parameters grow at most like N^0.55 (upper decade; built, not certified)",
         "exponent in N vs 0.55", ClaimKind::lower, next_built, constant(0.55, next_built.values.size())});
  // √N with a logarithm: the deep map's count is about √(q(β + ρ + 1)) times a constant (β the bits
  // of one threshold, growing like log q as the ids' gaps shrink), so the exponent in N of
  // parameters / √(q(β + ρ + 1)) is 0 where the count has that form (margin ±0.02: a power of N
  // beyond it that large would show), on the built runs where they add seeds.
  const auto per_root = [](const json& r) {
    return r.at("parameters").get<double>() /
           std::sqrt(r.at("q").get<double>() * (r.at("beta").get<double>() + kRho + 1));
  };
  const auto log_bits = [](const json& r) { return r.at("beta").get<double>() + kRho + 1; };
  const std::string root_curve =
      more_seeds ? "next-token, built (not certified), against N" : "next-token, against N";
  const Sample root = exponents(lines, root_curve, true, per_root),
               threshold_bits = exponents(lines, root_curve, true, log_bits);
  raw({std::string("next-token parameters grow like √(N(β + ρ + 1)) (upper decade") +
           (more_seeds ? "; built, not certified)" : ")"),
       "exponent of parameters/√(q(β+ρ+1)) in N vs 0, margin ±0.02", ClaimKind::equivalent, root,
       constant(0, root.values.size()), Scale::raw, 0.02});
  raw({"next-token parameters are flat in n", "exponent in n vs 0, margin ±0.1", ClaimKind::equivalent,
       next_n, constant(0, next_n.values.size()), Scale::raw, 0.1});
  raw({"seq-to-seq parameters grow at most like (nN)^0.55 (upper decade)", "exponent in q = nN vs 0.55",
       ClaimKind::lower, s2s_N, constant(0.55, s2s_N.values.size())});
  raw({"seq-to-seq parameters grow with n faster than next-token's",
       "exponent in n, next-token vs seq-to-seq", ClaimKind::lower, next_n, s2s_n});
  auto interval = [](const Sample& s) {
    const Interval e = mean_interval(s.values);
    return std::vector<std::string>{
        fixed(e.mean, 3), std::isnan(e.lo) ? "" : "[" + fixed(e.lo, 3) + ", " + fixed(e.hi, 3) + "]",
        std::to_string(s.values.size())};
  };
  std::vector<Row> rows;
  for (const auto& [name, s] :
       {std::pair{"next-token, parameters against N (upper decade)", next_N},
        {"next-token built (not certified), parameters against N (upper decade)", next_built},
        {"next-token, parameters against n", next_n},
        {"seq-to-seq, parameters against q = nN (upper decade)", s2s_N},
        {"seq-to-seq, parameters against n", s2s_n},
        {"parameters / √(q(β + ρ + 1)) against N (upper decade)", root},
        {"β + ρ + 1, the bits of one threshold and of a label, against N (upper decade)", threshold_bits},
        {"Zhang's one-layer count against N (control)", zhang},
        {"trained models against N (descriptive)",
         exponents(lines, "next-token, trained (4 heads of size 1 + FF), against N", false)}}) {
    Row r = {name};
    for (const std::string& v : interval(s))
      r.push_back(v);
    rows.push_back(r);
  }
  if (!more_seeds) rows.erase(rows.begin() + 1);  // the built row: the certified row's numbers
  md +=
      "\nFitted exponents: per seed, least squares of log(parameters) on log(x), over the sweep's upper "
      "decade against N and over all n against n; mean and 95% Student-t interval over seeds. The theory: "
      "Õ(√N) next-token, nearly independent of n; Õ(√(nN)) sequence-to-sequence "
      "(docs/theory/optimal-capacity.md).\n\n" +
      markdown_table({"curve", "exponent", "95% interval", "seeds"}, rows) + verdict_markdown(claims);

  // The closed-form plan beyond what is built: β extrapolated from the largest built next-token run
  // as β + ⌈1.5·log2(q/q_built)⌉ (the gap ∝ 1/q² and the block span ∝ s/q with s ≈ √q).
  double q_built = 0, beta_built = 0;
  for (const json& l : lines)
    if (curve(l.at("cell")) == "next-token, against N" && l.at("result").at("q").get<double>() > q_built)
      q_built = l.at("result").at("q").get<double>(), beta_built = l.at("result").at("beta").get<double>();
  rows.clear();
  LinePlot plot{"Memorization at optimal capacity: parameters against the ids q (" +
                    std::string(mode_names(c.mode)) + " mode)",
                "q (sequences next-token, labelled tokens seq-to-seq)", "stored parameters"};
  plot.logx = plot.logy = true;
  for (const std::string which : {"next-token, against N", "seq-to-seq, against N",
                                  "next-token, trained (4 heads of size 1 + FF), against N"}) {
    std::map<double, std::vector<double>> by_q;
    for (const json& l : lines)
      if (curve(l.at("cell")) == which && l.at("result").contains("parameters"))
        by_q[l.at("result").at("q").get<double>()].push_back(l.at("result").at("parameters").get<double>());
    Series s{which.find("trained") != std::string::npos
                 ? "next-token, trained (argmax, float32)"
                 : which.substr(0, which.find(',')) + " (built, certified)",
             {},
             {},
             {}};
    for (const auto& [q, v] : by_q)
      s.x.push_back(q), s.y.push_back(mean(v)), s.err.push_back(sd(v));
    plot.series.push_back(s);
  }
  Series plan{"deep map plan, beta extrapolated", {}, {}, {}}, zh{"Zhang one-layer: (d+1)q + 5d", {}, {}, {}},
      md_{"linear in q(L-1) (Madden et al.'s form)", {}, {}, {}};
  plan.style = zh.style = md_.style = Series::Style::lines;
  if (q_built > 0) {
    for (double q = 1000; q <= 1e7 * 1.0001; q *= std::sqrt(10.0)) {
      const long long qi = std::llround(q);
      const long long beta = static_cast<long long>(beta_built) +
                             std::max(0LL, static_cast<long long>(std::ceil(1.5 * std::log2(q / q_built))));
      const deep::PlanCount p = deep::plan_count(kD, qi, beta, kRho);
      const double total = static_cast<double>(p.parameters) + 4 * kD + 2 * 8;  // + the attention (n = 8)
      plan.x.push_back(q), plan.y.push_back(total);
      zh.x.push_back(q), zh.y.push_back(zhang_count(q));
      md_.x.push_back(q), md_.y.push_back(madden_count(q));
      rows.push_back({fixed(q, 3), std::to_string(beta), std::to_string(p.blocks),
                      std::to_string(p.block_size), fixed(total, 6),
                      fixed(total / std::sqrt(q * static_cast<double>(beta + kRho + 1)), 3),
                      fixed(zhang_count(q), 6), fixed(madden_count(q), 6), fixed(q * std::log2(kL), 6)});
    }
    std::vector<double> lx, ly;
    for (std::size_t i = 0; i < plan.x.size(); ++i)
      if (plan.x[i] >= 1e6 * 0.999) lx.push_back(std::log(plan.x[i])), ly.push_back(std::log(plan.y[i]));
    md +=
        "\nThe closed-form plan beyond what is built (next-token, d = 4, n = 8, ρ = 2): β extrapolated from "
        "the largest built run (q = " +
        fixed(q_built, 6) + ", β = " + fixed(beta_built, 3) +
        ") as β + ⌈1.5·log2(q/q_built)⌉ (a design: the gap between ids shrinks like 1/q² and a block spans "
        "about s/q with s ≈ √q); beside it the one-layer counts and the counting lower bound on bits. "
        "Exponent of the plan over the last decade: " +
        fixed(slope(lx, ly), 3) + ".\n\n" +
        markdown_table({"q", "β", "B", "s", "parameters", "parameters / √(q(β+ρ+1))", "Zhang one-layer",
                        "q(L−1)", "bits lower bound q·log2 L"},
                       rows);
  }
  plot.series.push_back(plan), plot.series.push_back(zh), plot.series.push_back(md_);
  plot_png(out.path(".png"), plot);
  // Bits against q: what the networks store and what any memorizer must.
  LinePlot bits{"Bits: stored, certifying, and the counting lower bound", "q", "bits"};
  bits.logx = bits.logy = true;
  for (const auto& [name, key] :
       {std::pair{"total bits stored (next-token)", "total_weight_bits"},
        {"fewest certifying bits x parameters (next-token)", "min_bits_x_parameters"},
        {"any memorizer: q log2 L", "information_bits_lower"}}) {
    std::map<double, std::vector<double>> by_q;
    for (const json& l : lines)
      if (curve(l.at("cell")) == "next-token, against N")
        by_q[l.at("result").at("q").get<double>()].push_back(l.at("result").at(key).get<double>());
    Series s{name, {}, {}, {}};
    for (const auto& [q, v] : by_q)
      s.x.push_back(q), s.y.push_back(mean(v)), s.err.push_back(sd(v));
    bits.series.push_back(s);
  }
  plot_png(out.dir + "/" + out.name + "-bits.png", bits);
  md +=
      "\nOne criterion for both: a construction's outputs are its labels, so they also decode to them, and "
      "a trained model is compared at the fewest bits per weight that keep its argmax (the rows "
      "\"trained: ...\" above); a construction's bits under that weaker criterion are at most its stored "
      "bits (not searched). What is not here: the paper's own lower bound (its constant is not known "
      "here); the "
      "contextual setting's constructions need data "
      "without repeated tokens whose labels depend on the token and its vocabulary set only, which these "
      "data are not (docs/memorization-optimal.md).\n";
  write_file_atomic(out.path(".md"), md);
  return md;
}

}  // namespace
}  // namespace optimal_capacity

Experiment memorization_optimal() {
  using namespace optimal_capacity;
  Experiment e;
  e.name = "memorization-optimal";
  e.serial = true;  // MPFR precision scopes (experiment.hpp)
  e.summary =
      "Kajitsuka & Sato 2025: parameters and bits of the optimal-capacity constructions against N and n, "
      "next-token (sqrt N) and seq-to-seq (sqrt nN), certified, with fitted exponents";
  e.cells = [](const Context& c) {
    std::vector<json> cells;
    const int seeds = c.seed_count(1, 3, 5);
    const std::vector<int> next_N =
        c.pick({32, 64}, {100, 316, 1000, 3162, 10000}, {100, 316, 1000, 3162, 10000, 31623, 100000});
    const std::vector<int> s2s_N =
        c.pick({4, 8}, {13, 40, 125, 400, 1250}, {13, 40, 125, 400, 1250, 4000, 12500});
    const std::vector<int> ns = c.pick({4, 8}, {4, 8, 16, 32, 64}, {4, 8, 16, 32, 64});
    for (int seed = 1; seed <= seeds; ++seed) {
      for (int N : next_N)
        cells.push_back({{"setting", "next-token"}, {"sweep", "N"}, {"N", N}, {"n", 8}, {"seed", seed}});
      for (int N : s2s_N)
        cells.push_back({{"setting", "seq-to-seq"}, {"sweep", "N"}, {"N", N}, {"n", 8}, {"seed", seed}});
      for (int N : c.pick({32}, {100, 316, 1000}, {100, 316, 1000, 3162}))
        cells.push_back({{"setting", "next-token"},
                         {"sweep", "trained"},
                         {"N", N},
                         {"n", 8},
                         {"seed", seed},
                         {"steps", c.step_count(200, 4000, 20000)},
                         {"widths", c.pick(std::vector<int>{0, 16, 64}, {0, 8, 16, 32, 64, 128, 256, 512},
                                           {0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048})}});
      for (int n : ns) {
        cells.push_back({{"setting", "next-token"},
                         {"sweep", "n"},
                         {"N", c.pick(32, 1000, 1000)},
                         {"n", n},
                         {"seed", seed}});
        cells.push_back({{"setting", "seq-to-seq"},
                         {"sweep", "n"},
                         {"N", c.pick(4, 100, 100)},
                         {"n", n},
                         {"seed", seed}});
      }
    }
    // The exponent's interval from more seeds than are certified: networks built and counted at the
    // upper decade (seconds each where the certificate takes minutes to hours), at least as many
    // seeds as certified ones. Full mode's 128: a 20-seed pilot (0.546, sd 0.013 over seeds) would be
    // told from 0.55 at p 0.01 with 80% power (the 128 gave 0.548: docs/memorization-optimal.md).
    for (int seed = 1; seed <= std::max(seeds, c.pick(1, 12, 128)); ++seed)
      for (int N : c.pick({32, 64}, {1000, 3162, 10000}, {10000, 31623, 100000}))
        cells.push_back({{"setting", "next-token"}, {"sweep", "built"}, {"N", N}, {"n", 8}, {"seed", seed}});
    return cells;
  };
  e.run = [](const json& cell, const Context&) {
    return cell.at("sweep") == "trained" ? train_next_token(cell) : run_optimal(cell);
  };
  e.report = optimal_report;
  return e;
}

}  // namespace uatlab::experiment
