// Hostile inputs, by class: every reader of a kind refuses the same attack with an Error that
// names the problem, quickly and before allocating (limits.hpp). tests/test_hostile_flags.py does
// the same for every command-line flag; tests/fuzz/ holds the inputs the fuzzers found.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>

#include "run_cli.hpp"
#include "uatlab/construct/fang.hpp"
#include "uatlab/construct/kajitsuka.hpp"
#include "uatlab/construct/yun.hpp"
#include "uatlab/experiment/memorization.hpp"
#include "uatlab/experiment/targets.hpp"
#include "uatlab/io/dataset.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/io/safetensors.hpp"
#include "uatlab/limits.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/verify/analyse.hpp"
#include "uatlab/verify/evaluate.hpp"

using namespace uatlab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// f refuses with an Error containing `fragment`, within a second.
void refuses(const std::function<void()>& f, const std::string& fragment, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    f();
    ADD_FAILURE() << what << ": accepted; expected an error with \"" << fragment << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << what << ": " << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0) << what;
}

std::string deep(int k) {
  return std::string(k, '[') + std::string(k, ']');
}

// A safetensors file with this metadata and no tensors.
std::string safetensors_with(const std::map<std::string, std::string>& metadata) {
  Safetensors st;
  st.metadata = metadata;
  return st.serialize();
}

std::string model_json(const std::string& arch, const std::string& tensors = "{}") {
  return R"({"format": "uatlab-model-1", "architecture": )" + arch + R"(, "tensors": )" + tensors + "}";
}

std::string tmp(const std::string& name) {
  const fs::path d = fs::path(UATLAB_TEST_TMP) / "hostile";
  fs::create_directories(d);
  return (d / name).string();
}

}  // namespace

TEST(Hostile, EveryJsonReaderRefusesDeepNesting) {
  const std::string nested = deep(limits::kJsonDepth + 1), fine = deep(limits::kJsonDepth - 8);
  const std::string why = "nested deeper than 64 levels";
  refuses([&] { parse_dataset("{\"x\": " + nested + "}", "d.jsonl"); }, why, "dataset line");
  refuses([&] { parse_network<double>(model_json(nested), FileFormat::json); }, why, "JSON model");
  refuses(
      [&] {
        parse_network<double>(safetensors_with({{"uatlab", nested}}), FileFormat::safetensors);
      },
      why, "architecture in safetensors metadata");
  refuses([&] { Safetensors::parse(std::string(8, '\0') + nested, "s"); }, "", "safetensors header");
  refuses([&] { experiment::sweep_cells(parse_json("{\"N\": " + nested + "}", "sweep config")); }, why,
          "sweep config");
  // Just below the limit the JSON itself is fine: the refusal is about the content.
  refuses([&] { parse_dataset("{\"x\": " + fine + "}", "d.jsonl"); }, "d.jsonl line 1", "shallower");
}

TEST(Hostile, EveryExactNumberRefusesHugeExponentsAndDigits) {
  const std::string huge = "1e999999999", why = "decimal exponent beyond 10^6";
  refuses([&] { parse_rational(huge); }, why, "parse_rational");
  refuses([&] { parse_rational("0." + std::string(1100000, '0') + "1"); }, "", "many leading zeros");
  refuses([&] { parse_rational(std::string(1000001, '7')); }, "more than 10^6 digits", "many digits");
  refuses([&] { parse_rational("1/" + std::string(1000001, '3')); }, "more than 10^6 digits", "p/q");
  refuses([&] { parse_dataset("{\"x\": [[\"" + huge + "\"]]}", "d"); }, why, "dataset value");
  refuses([&] { parse_dataset("{\"x\": [[1e999999999]]}", "d"); }, "write it as a string", "JSON number");
  const std::string attention = R"({"d": 1, "layers": [{"type": "attention", "scale": ")" + huge + R"("}]})";
  refuses([&] { parse_network<double>(model_json(attention), FileFormat::json); }, why, "architecture scale");
  refuses([&] { fang::parse_polynomial(huge + "*x1", {"x1"}); }, why, "polynomial constant");
  kajitsuka::MemorizeOptions mo;
  mo.tolerance = huge;
  refuses([&] { kajitsuka::memorize(demo_dataset(4, 2, 2, 4, 1), mo); }, why, "memorize tolerance");
  mo.tolerance = "1e-999999";  // within the number limits, but it ran for hours: refused before any work
  refuses([&] { kajitsuka::memorize(demo_dataset(4, 2, 2, 4, 1), mo); }, "needs about 3321924 bits",
          "memorize tolerance past --max-bits");
  // At the limit a number is read in milliseconds.
  EXPECT_GT(parse_rational("1e1000000"), 0);
}

TEST(Hostile, ValuesBeyondTheWorkingPrecisionAreErrorsNotNull) {
  Network<double> net(Architecture::from_json(json::parse(R"({"d": 1, "layers": [{"type": "feedforward",
                                                                                   "width": 1}]})")));
  init_random(net, 1);
  const std::string model = tmp("one.safetensors");
  save_network(net, model);
  for (auto [value, precision] :
       {std::pair<std::string, std::string>{"1e400", "double"}, {"1e39", "float"}}) {
    const Dataset ds = parse_dataset("{\"x\": [[\"" + value + "\"]]}", "d");
    refuses([&] { evaluate_file(model, ds, Precision::parse(precision)); },
            "beyond the range of " + precision, value + " in " + precision);
    EXPECT_NO_THROW(evaluate_file(model, ds, Precision::parse("interval:64")));  // MPFR's range is wider
  }
  refuses(
      [&] {
        parse_network<double>(model_json(R"({"d": 1, "readout": 1, "layers": []})",
                                         R"({"readout.weight": {"shape": [1, 1], "data": ["1e400"]},
                                                     "readout.bias": {"shape": [1], "data": ["0"]}})"),
                              FileFormat::json);
      },
      "beyond the range of double", "a weight");
}

TEST(Hostile, DeclaredSizesAreCheckedBeforeAllocation) {
  // Every product of sizes in range, the total not, or more weights than the file holds.
  refuses(
      [] {
        Architecture::from_json(json::parse(R"({"d": 65536, "layers": [
            {"type": "feedforward", "width": 16384}]})"));
      },
      "weights in all exceed 2^30", "total");
  refuses(
      [] {
        Architecture::from_json(json::parse(R"({"d": 4, "layers": [
            {"type": "attention", "heads": 65536, "head_size": 65536}]})"));
      },
      "exceeds 2^30", "heads");
  refuses(
      [] {
        parse_network<double>(model_json(R"({"d": 16384, "layers": [
            {"type": "feedforward", "width": 16384}]})"),
                              FileFormat::json);
      },
      "the file holds only 0", "a small file declaring a large network");
  refuses(
      [] {
        Architecture::from_json(json::parse(R"({"d": 4, "layers": [{"type": "attention",
            "rpe": "t5", "t5_buckets": 3}]})"));
      },
      "t5 needs 4 <= t5_buckets", "bidirectional T5");
  EXPECT_EQ(
      Architecture::from_json(json::parse(R"({"d": 3, "vocab": 5, "max_len": 4, "readout": 2, "layers": [
            {"type": "attention", "heads": 2, "head_size": 3, "bias": true, "rpe": "t5", "t5_buckets": 4,
             "t5_max_distance": 8, "pre_norm": true}, {"type": "feedforward", "width": 7},
            {"type": "layernorm"}, {"type": "attention", "tied_qkv": true, "rpe": "lin"}]})"))
          .parameter_count(),
      static_cast<long long>(
          Network<double>(
              Architecture::from_json(json::parse(
                  R"({"d": 3, "vocab": 5, "max_len": 4, "readout": 2, "layers": [{"type": "attention", "heads": 2,
                "head_size": 3, "bias": true, "rpe": "t5", "t5_buckets": 4, "t5_max_distance": 8,
                "pre_norm": true}, {"type": "feedforward", "width": 7}, {"type": "layernorm"},
                {"type": "attention", "tied_qkv": true, "rpe": "lin"}]})")))
              .parameter_count()));
  // Yun et al.'s grid: closed-form counts refuse before any window is built, overflow included.
  for (int d : {22, 31, 63, 64})
    refuses([d] { yun::build_modified(yun::builtin_target("tokenwise-sin"), d, 2, 2, false, 20000); },
            "layers, over the limit", "d = " + std::to_string(d));
  refuses([] { yun::plan(40, 2, 2, true); }, "over the limit of 2^30", "plan");
  refuses([] { yun::build_kajitsuka(yun::builtin_target("tokenwise-sin"), 63, 2, 2); }, "over the limit",
          "Proposition 1");
}

TEST(Hostile, ExpressionsAreBoundedInDepthDegreeTermsAndLength) {
  const std::vector<std::string> v = {"x1", "x2"};
  refuses([&] { fang::parse_polynomial(std::string(300, '(') + "x1" + std::string(300, ')'), v); },
          "nested deeper than 256", "parentheses");
  refuses([&] { fang::parse_polynomial(std::string(300, '-') + "x1", v); }, "nested deeper", "unary minus");
  refuses([&] { fang::parse_polynomial("(x1+x2+1)^999", v); }, "degree exceeds 64", "degree");
  refuses([&] { fang::parse_polynomial(std::string(100001, '1'), v); }, "the limit is 100000", "length");
  refuses([&] { fang::parse_polynomial("(x1 + 1e300000)^63", v); }, "coefficients grow beyond",
          "coefficients");
  refuses([&] { fang::parse_polynomial("x1", {"x1", "x1"}); }, "listed twice", "duplicate variables");
  refuses([&] { fang::parse_polynomial("x1", {"1x"}); }, "is not a name", "bad variable");
  EXPECT_EQ(fang::degree(fang::parse_polynomial(std::string(200, '(') + "x1^64" + std::string(200, ')'), v)),
            64);
  refuses([&] { experiment::scalar_expression("x1=1", {"x1"}); }, "assignment", "muParser assignment");
  refuses([&] { experiment::scalar_expression("x1, x1", {"x1"}); }, "several values", "muParser list");
  refuses([&] { experiment::yun_target("x=2", 1, 2).f(Mat<double>::Zero(1, 2)); }, "assignment", "target");
  EXPECT_NO_THROW(
      experiment::scalar_expression("x1 <= 0.5 ? x1 : (x1 == 1) + (x1 != 2) + (x1 >= 0)", {"x1"}));
}

TEST(Hostile, SweepConfigKeysAreTyped) {
  auto cells = [](const std::string& text) { return experiment::sweep_cells(parse_json(text, "cfg")); };
  refuses([&] { cells(R"({"d": [4, 8]})"); }, "\"d\" takes one integer", "list for a scalar");
  refuses([&] { cells(R"({"tied": 1})"); }, "\"tied\" takes one true or false", "wrong type");
  refuses([&] { cells(R"({"seeds": 0})"); }, "\"seeds\" must hold integers from 1", "zero seeds");
  refuses([&] { cells(R"({"lr": -1})"); }, "lr must be", "negative rate");
  refuses(
      [&] {
        cells(R"({"N": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "n": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
                           "H": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "s": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
                           "m": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "seeds": 11})");
      },
      "more than 10^6 runs", "grid size");
  // An integer past int's range is refused, not wrapped (issue 78: "steps": 4294967346 ran 50).
  refuses([&] { cells(R"({"steps": 4294967346})"); }, "\"steps\" is beyond the range", "wrapped steps");
  refuses([&] { cells(R"({"d": 9223372036854775808})"); }, "\"d\" is beyond the range", "2^63");
  refuses([&] { cells(R"({"d": -4294967292})"); }, "\"d\" is beyond the range", "wrapped to 4");
  EXPECT_EQ(cells(R"({"N": [8, 16], "seeds": 3})").size(), 6u);
}

TEST(Hostile, CheckpointsReadAsTheModelTheyHold) {
  Network<double> net(Architecture::from_json(json::parse(R"({"d": 2, "layers": [{"type": "attention"}]})")));
  init_random(net, 2);
  Network<double> m = zero_like(net), v = zero_like(net);
  const std::string path = tmp("ck.safetensors");
  save_checkpoint<double>(path, net, {{"adam_m.", &m}, {"adam_v.", &v}}, {{"uatlab_step", "3"}});
  const Network<double> back = load_network<double>(path);
  EXPECT_TRUE(back.layers[0].wq == net.layers[0].wq);
  Network<double> resumed, moment;
  load_checkpoint<double>(path, resumed, {{"adam_m.", &moment}});
  EXPECT_TRUE(resumed.layers[0].wq == net.layers[0].wq);
  // Resuming reads a checkpoint like any model file: its size is checked before allocation.
  const std::string large = tmp("large-ck.safetensors");
  write_file_atomic(large, safetensors_with({{"uatlab", R"({"d": 16384, "layers": [{"type": "feedforward",
                                                            "width": 16384}]})"}}));
  refuses([&] { load_checkpoint<double>(large, resumed, {}); }, "the file holds only 0", "a checkpoint");
}

TEST(Hostile, CommandLineRefusalsNameTheFlagAndWriteNothing) {
  CliResult r = run_cli("approximate --d 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("uatlab: error: --d: Value 0 not in range"), std::string::npos) << r.out;
  r = run_cli("eval");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("uatlab: error: model is required"), std::string::npos) << r.out;
  // memorize writes a lossless .json and refuses to replace the F64 file beside it.
  const std::string out = tmp("mine.json"), beside = tmp("mine.safetensors");
  fs::remove(out);
  std::ofstream(beside) << "mine";
  r = run_cli("memorize demo --out " + out);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("exists: memorize writes the F64 model there (--force replaces it)"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(out));
  std::ifstream in(beside);
  std::string kept;
  in >> kept;
  EXPECT_EQ(kept, "mine");
  r = run_cli("memorize demo --out " + beside);
  EXPECT_NE(r.out.find("a .json file"), std::string::npos) << r.out;
  r = run_cli("memorize demo --quiet --force --out " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("[ "), std::string::npos) << "--quiet printed progress";
  EXPECT_TRUE(fs::exists(out) && fs::file_size(beside) > 100);
  // A check that fails is a failure: Lemma 6 does not hold for n = 1.
  // An empty radius is an error, not "no region" (issue 78).
  r = run_cli("analyse m.safetensors d.jsonl --epsilon ''");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--epsilon: an empty radius"), std::string::npos) << r.out;
  // Nothing is written, the networks included (issue 78: both were left on disk).
  r = run_cli("approximate tokenwise-sin --d 1 --n 1 --K 2 --report " + tmp("n1.json") + " -o " +
              tmp("n1.safetensors") + " --standard-out " + tmp("n1-standard.safetensors"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("Lemma 6 does not hold"), std::string::npos) << r.out;
  for (const char* f : {"n1.json", "n1.safetensors", "n1-standard.safetensors"})
    EXPECT_FALSE(fs::exists(tmp(f))) << f;
  // Two outputs at one path, refused before the work (issue 78: both ran, exit 0, one output lost).
  for (const std::string& cmd :
       {"approximate tokenwise-sin --d 1 --n 2 --K 2 -o " + tmp("same.safetensors") + " --standard-out " +
            tmp("same.safetensors"),
        "polynomial x1 -o " + tmp("same.json") + " --report " + tmp("same.json"),
        "contextual demo -o " + tmp("same.json") + " --report " + tmp("same.json")}) {
    r = run_cli(cmd);
    EXPECT_EQ(r.code, 1) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("one output would overwrite the other"), std::string::npos) << cmd << ": " << r.out;
  }
  EXPECT_FALSE(fs::exists(tmp("same.safetensors")) || fs::exists(tmp("same.json")));
  // A network past double's range in the Monte Carlo distance: an error, not an exception leaving
  // its parallel loop (issue 78: "1e300*x" printed -nan; later it ended in std::terminate, rc 134).
  r = run_cli("approximate '1e300*x' --K 2 --samples 100 --samples-standard 100 --report " + tmp("big.json"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("uatlab: error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("beyond the range of double"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(tmp("big.json")));

  ASSERT_EQ(run_cli("init --d 1 --layer attention:score=hardmax -o " + tmp("hm.safetensors")).code, 0);
  std::ofstream(tmp("hm.jsonl")) << "{\"x\": [[1], [2]]}\n";
  r = run_cli("eval " + tmp("hm.safetensors") + " " + tmp("hm.jsonl") + " --hardmax-tol -1");
  EXPECT_NE(r.out.find("hardmax tie tolerance must be"), std::string::npos) << r.out;
  // Contradictory flags and NaN are refused, not resolved silently (issue 78), before any work.
  const std::string trained = tmp("contradictory.safetensors"),
                    rest = " --task memorize --task-N 8 --steps 1 -o " + trained;
  fs::remove(trained);
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {"--init " + tmp("hm.safetensors") + " --layer feedforward:width=4",
            "--init takes the architecture"},
           {"--d 4 --layer feedforward:width=4,width=8", "width is given twice"},
           {"--d 4 --layer feedforward:width=4 --val-fraction nan", "--val-fraction must be a number"},
           {"--d 4 --layer feedforward:width=4 --gain nan", "gain must be a number"}}) {
    r = run_cli("train " + flags + rest);
    EXPECT_EQ(r.code, 1) << flags << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << flags << ": " << r.out;
  }
  EXPECT_FALSE(fs::exists(trained));
}

// A write stopped by a signal leaves no temporary, and a file-size limit is an error with its
// reason, not a kill by SIGXFSZ (issue 78: both left a .tmp.PID; the limit ended uatlab silently).
TEST(Hostile, AStoppedOrLimitedWriteLeavesNothing) {
  const std::string out = tmp("stopped.safetensors");
  const std::string init =
      std::string(UATLAB_BIN) + " init --d 2048 --layer feedforward:width=8192 --dtype F32 -o ";
  fs::remove(out);
  // SIGINT once the temporary exists (134 MB to write: the signal comes long before the rename).
  const CliResult r = run_cli("-c '" + init + out + " & p=$!; while ! ls " + out +
                                  ".tmp.* >/dev/null 2>&1; do sleep 0.01; done; kill -INT $p; wait $p'",
                              "sh");
  EXPECT_EQ(r.code, 130) << r.out;  // stopped by the signal, as without the handler
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path()))
    EXPECT_EQ(e.path().filename().string().rfind("stopped.safetensors", 0), std::string::npos) << e.path();
  // --metrics M beside an M.partial that is not this run's: refused, that file kept (it was truncated).
  fs::remove(tmp("m.csv"));
  std::ofstream(tmp("m.csv.partial")) << "mine";
  const CliResult metrics = run_cli(
      "train --task memorize --task-N 8 --d 4 --layer feedforward:width=4 --steps 2 "
      "--metrics " +
      tmp("m.csv") + " -o " + tmp("m.safetensors"));
  EXPECT_EQ(metrics.code, 1) << metrics.out;
  EXPECT_NE(metrics.out.find("m.csv.partial exists"), std::string::npos) << metrics.out;
  std::string kept;
  std::ifstream(tmp("m.csv.partial")) >> kept;
  EXPECT_EQ(kept, "mine");
  fs::remove(tmp("m.csv.partial"));
  const CliResult limited = run_cli("-c 'ulimit -f 64; " + init + out + "'", "sh");
  EXPECT_EQ(limited.code, 1) << limited.out;
  EXPECT_NE(limited.out.find("cannot write " + out + ": File too large"), std::string::npos) << limited.out;
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path()))
    EXPECT_EQ(e.path().filename().string().rfind("stopped.safetensors", 0), std::string::npos) << e.path();
}

// eval in float and double estimates its memory before the work, as MPFR does (issue 78: a
// 20,000-token sequence took 6.3 GB or ended in a bare std::bad_alloc; an 89 KB input with
// --capture took 5.4 GB and wrote 1.6 GB).
TEST(Hostile, EvalEstimatesMemoryInEveryArithmetic) {
  const std::string model = tmp("long.safetensors"), data = tmp("long.jsonl"), out = tmp("long-out.jsonl");
  ASSERT_EQ(run_cli("init --d 4 --vocab 8 --layer attention:heads=4,head_size=1 -o " + model).code, 0);
  std::string ids;
  for (int k = 0; k < 30000; ++k)  // 4 heads of 30,000² weights: 14 GB in float, over the 8 GiB default
    ids += (k ? "," : "") + std::to_string(k % 8);
  std::ofstream(data) << "{\"tokens\": [" << ids << "]}\n";
  fs::remove(out);
  for (const std::string how : {"-p double", "-p float", "-p double --capture"}) {
    const auto t0 = std::chrono::steady_clock::now();
    const CliResult r = run_cli("eval " + model + " " + data + " " + how + " -o " + out);
    EXPECT_EQ(r.code, 1) << how << ": " << r.out;
    EXPECT_NE(r.out.find("needs about"), std::string::npos) << how << ": " << r.out;
    EXPECT_NE(r.out.find("UATLAB_MEMORY_GIB"), std::string::npos) << how << ": " << r.out;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0) << how;
    EXPECT_FALSE(fs::exists(out)) << how;
  }
}

TEST(Hostile, AResumedResultWithoutItsFieldsIsAnError) {
  const std::string dir = tmp("sweep"), config = "'{\"N\": [8], \"n\": [4], \"steps\": 3}'";
  fs::remove_all(dir);
  ASSERT_EQ(run_cli("sweep " + config + " --quiet --out-dir " + dir).code, 0);
  std::string line;
  std::getline(std::ifstream(dir + "/runs.jsonl"), line);
  json j = json::parse(line);
  j["result"].erase("accuracy");
  std::ofstream(dir + "/runs.jsonl") << j.dump() << "\n";
  fs::remove(dir + "/summary.csv");
  const CliResult r = run_cli("sweep " + config + " --out-dir " + dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("runs.jsonl: a stored result lacks what the report reads"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("accuracy"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/summary.csv"));
  // A stored line is checked for meaning, and one cell's two different results are refused (issue
  // 78: an accuracy of 2.5 and contradictory lines were accepted).
  json bad = json::parse(line);
  bad["result"]["accuracy"] = 2.5;
  std::ofstream(dir + "/runs.jsonl") << bad.dump() << "\n";
  CliResult refused = run_cli("sweep " + config + " --out-dir " + dir);
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.out.find("runs.jsonl line 1: \"accuracy\" must be an accuracy from 0 to 1, got 2.5"),
            std::string::npos)
      << refused.out;
  json other = json::parse(line);
  other["result"]["parameters"] = other["result"]["parameters"].get<long>() + 1;
  std::ofstream(dir + "/runs.jsonl") << line << "\n" << other.dump() << "\n";
  refused = run_cli("sweep " + config + " --out-dir " + dir);
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.out.find("two different results for the cell"), std::string::npos) << refused.out;
  // Two sweeps on one folder: the second is refused while the first holds it (issue 78: not locked).
  std::ofstream(dir + "/runs.jsonl") << line << "\n";
  const int held = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
  refused = run_cli("sweep " + config + " --out-dir " + dir);
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.out.find("another sweep is running in " + dir), std::string::npos) << refused.out;
  ::close(held);
  EXPECT_EQ(run_cli("sweep " + config + " --quiet --out-dir " + dir).code, 0);
}

TEST(Hostile, MemoryIsEstimatedBeforeAPrecisionThatCannotFit) {
  // eval of a 4,360-weight model at interval:67108864 needed ~35 GB and GMP aborted the process.
  Network<double> net(Architecture::from_json(nlohmann::json::parse(
      R"({"d": 16, "layers": [{"type": "attention", "heads": 4, "head_size": 4}, {"type": "feedforward", "width": 64}]})")));
  const std::string model = tmp("big_bits.safetensors");
  save_network(net, model);
  const Dataset ds =
      parse_dataset("{\"x\": [[" + std::string("0,") + "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]]}", "d");
  refuses([&] { evaluate_file(model, ds, Precision::parse("interval:67108864")); },
          "over the budget of 8 GiB", "eval at interval:67108864");
  EXPECT_NO_THROW(evaluate_file(model, ds, Precision::parse("interval:256")));
  // The budget from UATLAB_MEMORY_GIB, checked: 4,360 weights at 2^24 bits need ~4.3 GB.
  ::setenv("UATLAB_MEMORY_GIB", "1", 1);
  refuses([&] { evaluate_file(model, ds, Precision::parse("interval:16777216")); },
          "over the budget of 1 GiB", "UATLAB_MEMORY_GIB=1");
  // analyse estimates too, before it converts the network (it used to start at any precision).
  std::string tokens, labels;  // 8 tokens: the weights and each thread's activations, ~2 GB at 2^20 bits
  for (int k = 0; k < 8; ++k) {
    tokens += std::string(k ? "," : "") + "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]";
    labels += std::string(k ? "," : "") + "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]";
  }
  const Dataset labelled = parse_dataset("{\"x\": [" + tokens + "], \"y\": [" + labels + "]}", "d");
  AnalyseOptions at_many_bits;
  at_many_bits.bits = 1 << 20, at_many_bits.max_bits = 1 << 20, at_many_bits.separation = false;
  refuses([&] { analyse(load_network<Rational>(model), labelled, at_many_bits); }, "over the budget of 1 GiB",
          "analyse at 2^20 bits, UATLAB_MEMORY_GIB=1");
  ::setenv("UATLAB_MEMORY_GIB", "64", 1);
  EXPECT_NO_THROW(limits::check_memory(4360, 1 << 24, 2, "eval"));
  ::setenv("UATLAB_MEMORY_GIB", "8GB", 1);
  refuses([&] { evaluate_file(model, ds, Precision::parse("interval:256")); }, "UATLAB_MEMORY_GIB=8GB",
          "a budget that is not an integer");
  ::unsetenv("UATLAB_MEMORY_GIB");
}

TEST(Hostile, MemoryEstimateIsTheBytesMpfrTakes) {
  // Measured with glibc (RSS of 4 million mpfr_init2): an MPFR number takes 64 bytes up to 128 bits,
  // 80 at 256, 96 at 320, 176 at 1024; the estimate used to count bits/8 + 32 (39 bytes at 53 bits), 1.6x too
  // few, and let GPT-2 124M in MPFI past the budget.
  EXPECT_EQ(limits::mpfr_bytes(53), 64);
  EXPECT_EQ(limits::mpfr_bytes(128), 64);
  EXPECT_EQ(limits::mpfr_bytes(256), 80);
  EXPECT_EQ(limits::mpfr_bytes(320), 96);
  EXPECT_EQ(limits::mpfr_bytes(1024), 176);
}

TEST(Hostile, PolynomialWidthsSaturateInsteadOfWrapping) {  // d^N wrapped: "got -1773790757"
  refuses([] { fang::build(40, 12, Rational(1), fang::Variant::single_head); },
          "residual width 2625721 is too large, over 200000", "fang build 40 variables, 12 blocks");
  refuses([] { fang::build(1000, 64, Rational(1), fang::Variant::multi_head); }, "is too large",
          "fang build 1000 variables, 64 blocks");
}
