// End-to-end: the uatlab binary as a user runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <sys/wait.h>
#include <fstream>
#include <sstream>
#include "run_cli.hpp"
#include "uatlab/version.hpp"

#include "uatlab/io/json.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/train/trainer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Result = CliResult;
Result run(const std::string& args) {
  return run_cli(args);
}

std::string dir() {
  fs::path d = fs::path(UATLAB_TEST_TMP) / "cli";
  fs::create_directories(d);
  return d.string() + "/";
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::vector<json> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> v;
  for (std::string l; std::getline(in, l);)
    v.push_back(json::parse(l));
  return v;
}

const std::string kData =
    "{\"x\": [[0.5, -0.25], [1, 0.125], [-0.75, 0.5]]}\n{\"x\": [[0.25, 0.25], [\"1/3\", 2]]}\n";

}  // namespace

// eval --capture: the residual stream before the first sub-layer and after each, and every head's
// pattern (queries × keys, rows summing to 1), in the precision asked (intervals with their ends).
TEST(Cli, EvalCertifiedWritesEnclosuresTheirTierAndWidthsPerLayer) {
  const std::string d = dir();
  write(d + "cert.jsonl", kData);
  ASSERT_EQ(
      run(R"(init --arch '{"d":2,"readout":3,"layers":[{"type":"attention","heads":2,"head_size":1},{"type":"feedforward","width":4}]}' -o )" +
          d + "cert.safetensors")
          .code,
      0);
  ASSERT_EQ(run("eval " + d + "cert.safetensors " + d + "cert.jsonl --precision certified -o " + d +
                "cert_out.jsonl")
                .code,
            0);
  const auto out = lines(d + "cert_out.jsonl");
  ASSERT_EQ(out.size(), 2u);
  for (const json& line : out) {
    EXPECT_EQ(line["tier"], "ball:53");
    EXPECT_TRUE(line["reached"].get<bool>());
    EXPECT_LE(line["relative_width"].get<double>(), 1e-9);
    EXPECT_EQ(line["layer_widths"].size(), 4u);  // the input, after each sub-layer, the output
    ASSERT_EQ(line["lo"].size(), line["y"].size());
    EXPECT_EQ(line["lo"][0].size(), 3u);
  }
  // A width below binary128's reach with no MPFI tier: enclosed, not reached, exit 0.
  ASSERT_EQ(run("eval " + d + "cert.safetensors " + d +
                "cert.jsonl --precision certified --max-width 1e-60 "
                "--max-bits 0 -o " +
                d + "cert_out.jsonl")
                .code,
            0);
  for (const json& line : lines(d + "cert_out.jsonl")) {
    EXPECT_EQ(line["tier"], "ball:113");
    EXPECT_FALSE(line["reached"].get<bool>());
  }
  const CliResult bad =
      run("eval " + d + "cert.safetensors " + d + "cert.jsonl --precision certified --max-width 0");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("max_width"), std::string::npos) << bad.out;
  EXPECT_NE(run("eval " + d + "cert.safetensors " + d + "cert.jsonl --precision certified --capture").code,
            0);
}

TEST(Cli, EvalCapturesTheResidualStreamAndAttentionPatterns) {
  const std::string d = dir();
  write(d + "cap.jsonl", kData);
  ASSERT_EQ(
      run(R"(init --arch '{"d":2,"layers":[{"type":"attention","heads":2,"head_size":1,"source":"layers.0.self_attn"},{"type":"feedforward","width":4}]}' -o )" +
          d + "cap.safetensors")
          .code,
      0);
  ASSERT_EQ(run("eval " + d + "cap.safetensors " + d + "cap.jsonl --capture -o " + d + "cap_out.jsonl").code,
            0);
  const auto out = lines(d + "cap_out.jsonl");
  ASSERT_EQ(out.size(), 2u);
  const json& first = out[0];
  ASSERT_EQ(first["resid"].size(), 3u);           // the input, after the attention, after the feed-forward
  EXPECT_EQ(first["resid"][2]["y"], first["y"]);  // no readout: the last residual is the output
  EXPECT_EQ(first["resid"][0]["y"][1][0].get<double>(), 1.0);  // the input itself: token 2 is (1, 0.125)
  ASSERT_TRUE(first["pattern"].contains("0"));
  EXPECT_FALSE(first["pattern"].contains("1"));
  ASSERT_EQ(first["pattern"]["0"].size(), 2u);  // two heads
  for (const json& head : first["pattern"]["0"]) {
    ASSERT_EQ(head["y"].size(), 3u);  // three queries
    for (const json& query : head["y"]) {
      double sum = 0;
      for (const json& w : query)
        sum += w.get<double>();
      EXPECT_NEAR(sum, 1.0, 1e-15);
    }
  }
  EXPECT_FALSE(out[1].contains("lo"));
  ASSERT_EQ(run("eval " + d + "cap.safetensors " + d + "cap.jsonl --capture -p interval:80 -o " + d +
                "cap_iv.jsonl")
                .code,
            0);
  const auto iv = lines(d + "cap_iv.jsonl");
  EXPECT_TRUE(iv[0]["resid"][1].contains("lo") && iv[0]["pattern"]["0"][1].contains("hi"));
  EXPECT_FALSE(lines(d + "cap_out.jsonl")[0].contains("lo"));
  ASSERT_EQ(run("eval " + d + "cap.safetensors " + d + "cap.jsonl -o " + d + "plain.jsonl").code, 0);
  EXPECT_FALSE(lines(d + "plain.jsonl")[0].contains("resid"));  // only when asked
}

TEST(Cli, InfoNamesVersionAndArithmetics) {
  Result r = run("info");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("uatlab " UATLAB_VERSION), std::string::npos);
  EXPECT_NE(r.out.find("interval (MPFI"), std::string::npos);
}

TEST(Cli, InitEvalInEveryPrecision) {
  const std::string d = dir();
  write(d + "data.jsonl", kData);
  ASSERT_EQ(
      run("init --d 2 --layer attention:heads=2,head_size=1,score=hardmax --layer ff:width=3 --seed 4 -o " +
          d + "hard.safetensors")
          .code,
      0);
  Result info = run("info " + d + "hard.safetensors");
  EXPECT_NE(info.out.find("exact       yes"), std::string::npos) << info.out;
  for (const char* p : {"float", "double", "200", "interval:100", "rational"}) {
    fs::remove(d + "y.jsonl");
    Result r = run("eval " + d + "hard.safetensors " + d + "data.jsonl --precision " + p + " --out " + d +
                   "y.jsonl");
    ASSERT_EQ(r.code, 0) << p << ": " << r.out;
    auto ys = lines(d + "y.jsonl");
    ASSERT_EQ(ys.size(), 2u);
    EXPECT_EQ(ys[0]["y"].size(), 3u);
    EXPECT_EQ(ys[1]["y"][0].size(), 2u);
    if (std::string(p) == "interval:100") {
      EXPECT_TRUE(ys[0].contains("width"));
    }
    if (std::string(p) == "rational") {
      // Exact: the double evaluation is the rational one rounded (within one rounding per op).
      Result dr = run("eval " + d + "hard.safetensors " + d + "data.jsonl --precision double");
      json yd = json::parse(dr.out.substr(0, dr.out.find('\n')));
      std::string q = ys[0]["y"][0][0];
      EXPECT_NE(q.find('/'), std::string::npos);
      EXPECT_NEAR(yd["y"][0][0].get<double>(),
                  std::stod(q.substr(0, q.find('/'))) / std::stod(q.substr(q.find('/') + 1)), 1e-12);
    }
  }
}

TEST(Cli, ConvertRoundTripsThroughLosslessJson) {
  const std::string d = dir();
  write(d + "data.jsonl", kData);
  ASSERT_EQ(run("init --d 2 --max-len 4 --readout 1 --layer attention:heads=1,head_size=2,rpe=log --layer ln "
                "--seed 9 -o " +
                d + "a.safetensors")
                .code,
            0);
  ASSERT_EQ(run("convert " + d + "a.safetensors " + d + "a.json").code, 0);
  ASSERT_EQ(run("convert " + d + "a.json " + d + "b.safetensors").code, 0);
  Result a = run("eval " + d + "a.safetensors " + d + "data.jsonl -p 300");
  Result b = run("eval " + d + "b.safetensors " + d + "data.jsonl -p 300");
  EXPECT_EQ(a.code, 0);
  EXPECT_EQ(a.out, b.out);
  // Doubles into F32, or 1/10 into F64: refused unless rounding is asked for (issue 78: "weights
  // exact" was printed for both).
  fs::remove(d + "c.safetensors");
  Result refused = run("convert " + d + "a.json " + d + "c.safetensors --dtype F32");
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.out.find("which F32 does not hold exactly; round first with --precision float"),
            std::string::npos)
      << refused.out;
  EXPECT_FALSE(fs::exists(d + "c.safetensors"));
  EXPECT_EQ(run("convert " + d + "a.json " + d + "c.safetensors --dtype F32 --precision double").code, 1);
  Result rounded = run("convert " + d + "a.json " + d + "c.safetensors --dtype F32 --precision float");
  ASSERT_EQ(rounded.code, 0) << rounded.out;
  EXPECT_NE(rounded.out.find("weights rounded to float first"), std::string::npos) << rounded.out;
  EXPECT_LT(fs::file_size(d + "c.safetensors"), fs::file_size(d + "b.safetensors"));
  std::string tenth;
  {
    std::ifstream in(d + "a.json");
    tenth.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  const std::size_t first = tenth.find("\"data\": [\n");
  ASSERT_NE(first, std::string::npos);
  const std::size_t value = tenth.find('"', first + 10);
  tenth.replace(value, tenth.find('"', value + 1) - value + 1, "\"1/10\"");
  write(d + "tenth.json", tenth);
  refused = run("convert " + d + "tenth.json " + d + "tenth.safetensors");
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.out.find("holds 1/10, which F64 does not hold exactly"), std::string::npos)
      << refused.out;
  EXPECT_EQ(run("convert " + d + "tenth.json " + d + "tenth.safetensors --precision double").code, 0);
  // The bits asked for are the bits written (MPFR carries 513 for 512: Boost's decimal digits).
  ASSERT_EQ(run("convert " + d + "a.json " + d + "m.json --precision 512").code, 0);
  std::ifstream in(d + "m.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"mpfr:512\""), std::string::npos);
  EXPECT_EQ(text.find("mpfr:513"), std::string::npos);
}

TEST(Cli, BadInputFailsClearlyAndLeavesNoOutput) {
  const std::string d = dir();
  ASSERT_EQ(run("init --d 2 --layer attention:heads=1,head_size=1 -o " + d + "soft.safetensors").code, 0);
  write(d + "good.jsonl", kData);
  write(d + "nan.jsonl", "{\"x\": [[\"nan\", 1]]}\n");
  write(d + "wide.jsonl", "{\"x\": [[1, 2, 3]]}\n");
  write(d + "garbage.safetensors", "not a model at all");
  struct Case {
    std::string args, message;
  } cases[] = {
      {"eval " + d + "soft.safetensors " + d + "nan.jsonl", "not a number: \"nan\""},
      {"eval " + d + "soft.safetensors " + d + "wide.jsonl",
       "the data's tokens have 3 numbers, the network takes d = 2"},
      {"eval " + d + "soft.safetensors " + d + "good.jsonl -p rational",
       "rational arithmetic cannot evaluate layer 0"},
      {"eval " + d + "soft.safetensors " + d + "good.jsonl -p interval:x",
       "expected float, double, rational, certified, BITS, mpfr:BITS or interval:BITS"},
      {"eval " + d + "garbage.safetensors " + d + "good.jsonl", "invalid safetensors file"},
      {"eval " + d + "soft.safetensors " + d + "missing.jsonl", "cannot open"},
  };
  for (auto& c : cases) {
    fs::remove(d + "out.jsonl");
    Result r = run(c.args + " --out " + d + "out.jsonl");
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_NE(r.out.find("uatlab: error: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(d + "out.jsonl")) << c.args;
  }
  fs::remove(d + "x.safetensors");
  Result r = run("init --d 2 --layer attention:heds=1 -o " + d + "x.safetensors");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("unknown field \"heds\""), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d + "x.safetensors"));
}

TEST(Cli, DemoRunsAndCertifies) {
  Result r = run("demo");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("encloses y_ref"), std::string::npos) << r.out;
}

// ---- Kajitsuka & Sato commands -----------------------------------------------------------------

TEST(Cli, MemorizeWritesACertifiedModelAndItsF64Twin) {
  const std::string d = dir();
  fs::remove(d + "mem.json"), fs::remove(d + "mem.safetensors");
  Result r = run("memorize --out " + d + "mem.json --report " + d + "mem_report.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("certificate every output of all 40 sequences"), std::string::npos) << r.out;
  json rep = json::parse(std::ifstream(d + "mem_report.json"));
  EXPECT_LE(rep["max_error_certified"].get<double>(), 1e-6);
  EXPECT_TRUE(rep["float64_works"].get<bool>());
  // The stages' times and the total (the total once replaced the stages).
  for (const char* stage : {"contextual", "construct_and_certify", "min_bits_search", "total"})
    EXPECT_TRUE(rep["seconds"].contains(stage)) << stage;
  // The F64 file evaluates to the labels in double: run `eval` on the dataset made by make-data.
  ASSERT_EQ(run("make-data --out " + d + "mem_data.jsonl").code, 0);
  ASSERT_EQ(run("eval " + d + "mem.safetensors " + d + "mem_data.jsonl --out " + d + "mem_y.jsonl").code, 0);
  std::ifstream data(d + "mem_data.jsonl");
  auto ys = lines(d + "mem_y.jsonl");
  std::size_t i = 0;
  for (std::string l; std::getline(data, l); ++i) {
    json in = json::parse(l);
    for (std::size_t k = 0; k < in["y"].size(); ++k)
      EXPECT_NEAR(ys[i]["y"][k][0].get<double>(), std::stod(in["y"][k].get<std::string>()), 1e-6);
  }
  EXPECT_EQ(i, 40u);
  // The lossless model evaluates in intervals too.
  EXPECT_EQ(
      run("eval " + d + "mem.json " + d + "mem_data.jsonl -p interval:128 --out " + d + "mem_yi.jsonl").code,
      0);
}

TEST(Cli, MemorizeRefusesInconsistentLabelsWithoutOutput) {
  const std::string d = dir();
  write(d + "bad_labels.jsonl",
        "{\"x\": [[1,0],[0,1]], \"y\": [1, 2]}\n{\"x\": [[0,1],[1,0]], \"y\": [2, 5]}\n");
  fs::remove(d + "never.json");
  Result r = run("memorize " + d + "bad_labels.jsonl --out " + d + "never.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("inconsistent labels"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d + "never.json"));
  write(d + "dup.jsonl", "{\"x\": [[1,0],[1,0]], \"y\": [1, 1]}\n");
  r = run("contextual " + d + "dup.jsonl");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("sequence 1: tokens 1 and 2 are equal"), std::string::npos) << r.out;
}

TEST(Cli, MemorizeNextTokenWritesACertifiedModelAndRefusesContradictoryFlags) {
  const std::string d = dir();
  std::string data;  // 24 sequences of 3 tokens in R^4, one label each (the last token's)
  for (int i = 0; i < 24; ++i) {
    data += "{\"x\": [";
    for (int k = 0; k < 3; ++k)
      data += std::string(k ? ", " : "") + "[" + std::to_string((i * 7 + k * 3) % 11) + ", " +
              std::to_string(k) + ", " + std::to_string((i + k) % 5) + ", 1]";
    data += "], \"y\": " + std::to_string(i % 3) + "}\n";
  }
  write(d + "next.jsonl", data);
  fs::remove(d + "next.json"), fs::remove(d + "next.safetensors");
  Result r = run("memorize -q " + d + "next.jsonl --setting next-token --out " + d + "next.json --report " +
                 d + "next_report.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("certificate every last-token output of all 24 sequences"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("delta >= it (certified)"), std::string::npos) << r.out;
  const json rep = json::parse(std::ifstream(d + "next_report.json"));
  EXPECT_EQ(rep["setting"], "next-token");
  EXPECT_EQ(rep["max_error_certified"].get<double>(), 0);
  EXPECT_EQ(rep["accounting"]["parameters_stored"], rep["accounting"]["parameters_plan"]);
  // The lossless model gives each sequence's label at its last token (MPFR at the certified bits).
  ASSERT_EQ(run("eval " + d + "next.json " + d + "next.jsonl -p " +
                std::to_string(rep["bits_used"].get<int>()) + " --out " + d + "next_y.jsonl")
                .code,
            0);
  const auto ys = lines(d + "next_y.jsonl");
  ASSERT_EQ(ys.size(), 24u);
  for (std::size_t i = 0; i < ys.size(); ++i)
    EXPECT_NEAR(std::stod(ys[i]["y"][2][0].get<std::string>()), static_cast<double>(i % 3), 1e-30) << i;
  // Flags of the contextual setting are refused, and nothing is written.
  fs::remove(d + "next_never.json");
  for (const std::string& flags : {std::string("--value-map zhang"), std::string("--tied")}) {
    r = run("memorize " + d + "next.jsonl --setting next-token " + flags + " --out " + d + "next_never.json");
    EXPECT_EQ(r.code, 1) << flags;
    EXPECT_NE(r.out.find("uatlab: error:"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(d + "next_never.json"));
  }
  // The contextual setting refuses one label per sequence, naming the setting that takes it.
  r = run("memorize " + d + "next.jsonl --out " + d + "next_never.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--setting next-token"), std::string::npos) << r.out;
}

TEST(Cli, ContextualReportsBothModesAndHardmaxCounterexamplePasses) {
  const std::string d = dir();
  Result r = run("contextual --mode faithful --demo-N 4 --demo-n 2 --demo-d 2 --demo-V 3 --report " + d +
                 "ctx.json");
  ASSERT_EQ(r.code, 0) << r.out;
  json rep = json::parse(std::ifstream(d + "ctx.json"));
  EXPECT_TRUE(rep["certified"].get<bool>());
  EXPECT_GT(rep["log10_delta"].get<double>(), rep["log10_delta_bound"].get<double>());
  EXPECT_GE(rep["bits_used"].get<unsigned>(), rep["min_bits"].get<unsigned>());
  EXPECT_EQ(run("contextual --mode sloppy").code, 1);
  r = run("hardmax-counterexample --draws 24");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("identical in both sequences in 24 of 24 draws"), std::string::npos) << r.out;
}

TEST(Cli, PolynomialProvesExactnessAndRejectsBadInput) {
  const std::string d = dir();
  Result r = run("polynomial \"x1^2 - x1*x2/3 + 1\" --vars x1,x2 --out " + d + "poly.json --report " + d +
                 "poly_report.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("EXACT"), std::string::npos) << r.out;
  EXPECT_TRUE(json::parse(std::ifstream(d + "poly_report.json"))["exact"].get<bool>());
  // The lossless file loads back.
  EXPECT_EQ(run("info " + d + "poly.json").code, 0);
  fs::remove(d + "poly_bad.json");
  r = run("polynomial \"x1^2 + y\" --vars x1 --out " + d + "poly_bad.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown variable \"y\""), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d + "poly_bad.json"));
  r = run("fang-fit \"sin(x1)\" --vars x1 --degree 3 --samples 200 --test 100");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(run("fang-fit \"sin(\" --vars x1 --degree 3").code, 1);
  EXPECT_EQ(run("fang-regression \"x1^2\" --vars x1 --sizes 20,x").code, 1);
}

// analyse on a memorization network: every prediction certified; with one label changed the
// summary names it, and --check turns it into an error that leaves no report.
TEST(Cli, AnalyseNamesAWrongLabel) {
  const std::string d = dir();
  ASSERT_EQ(run("make-data --seed 2 -o " + d + "an.jsonl").code, 0);
  ASSERT_EQ(run("memorize -q " + d + "an.jsonl --force --out " + d + "an.json").code, 0);
  Result r = run("analyse -q " + d + "an.json " + d + "an.jsonl --report " + d + "an_report.json --check");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("160 of 160 predictions certified"), std::string::npos) << r.out;
  EXPECT_TRUE(json::parse(std::ifstream(d + "an_report.json"))["memorization"]["all_certified"]);
  std::vector<json> data = lines(d + "an.jsonl");
  data[1]["y"][0] = "1000";
  std::string text;
  for (const json& l : data)
    text += l.dump() + "\n";
  write(d + "an_wrong.jsonl", text);
  r = run("analyse -q " + d + "an.json " + d + "an_wrong.jsonl");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("159 of 160"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sequence 2 token 1: wrong"), std::string::npos) << r.out;
  fs::remove(d + "an_wrong_report.json");
  r = run("analyse -q " + d + "an.json " + d + "an_wrong.jsonl --check --report " + d +
          "an_wrong_report.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("uatlab: error: 1 of 160 predictions not certified"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d + "an_wrong_report.json"));
}

// The two binaries (tools/uatlab.cpp): uatlab-lab's commands are uatlab's own and the ones its
// --help names as uatlab-lab's, each once, and every named one runs through uatlab. (The names
// are a table in uatlab.cpp; this keeps it from drifting from the commands uatlab-lab registers.)
TEST(Cli, TheLabCommandsUatlabNamesAreUatlabLabsOwn) {
  auto subcommands = [](const std::string& help) {
    std::vector<std::string> names;
    const std::size_t at = help.find("Subcommands:\n");
    std::istringstream in(help.substr(at == std::string::npos ? help.size() : at + 13));
    for (std::string line; std::getline(in, line) && line.rfind("  ", 0) == 0;)
      names.push_back(line.substr(2, line.find(' ', 2) - 2));
    return names;
  };
  const CliResult core = run("--help");
  const CliResult lab = run_cli("--help", (fs::path(UATLAB_BIN).parent_path() / "uatlab-lab").string());
  ASSERT_EQ(core.code, 0);
  ASSERT_EQ(lab.code, 0);
  std::vector<std::string> named = subcommands(core.out);  // uatlab's own, then the footer's
  const std::size_t footer = core.out.find("Training and experiments");
  ASSERT_NE(footer, std::string::npos) << core.out;
  std::istringstream list(core.out.substr(core.out.find('\n', footer) + 1));
  for (std::string name; list >> name;) {
    if (name.back() == ',') name.pop_back();
    EXPECT_EQ(run(name + " --help").code, 0) << name;
    named.push_back(name);
  }
  std::vector<std::string> registered = subcommands(lab.out);
  std::sort(named.begin(), named.end());
  std::sort(registered.begin(), registered.end());
  EXPECT_FALSE(registered.empty());
  EXPECT_EQ(named, registered);
}

TEST(Cli, TrainHasAFlagForEveryFieldOfItsOptions) {
  const Result r = run("train --help");
  ASSERT_EQ(r.code, 0);
  auto flag = [](std::string f) {
    std::replace(f.begin(), f.end(), '_', '-');
    return f + " ";
  };
  for (const std::string& key : uatlab::field_keys<uatlab::TrainConfig>())
    EXPECT_NE(r.out.find(flag("--" + key)), std::string::npos) << key;
  for (const std::string& key : uatlab::field_keys<uatlab::TaskOptions>())
    EXPECT_NE(r.out.find(flag("--task-" + key)), std::string::npos) << key;
}

TEST(Cli, OutputsThatWouldOverwriteAnInputAreRefusedBeforeAnyWork) {
  const std::string d = dir(), data = d + "clobber.jsonl";
  const std::string text = "{\"x\": [[1, 0], [0, 1]], \"y\": [[1, 0], [0, 1]]}\n";
  write(data, text);
  Result r = run("train --data " + data + " --d 2 --layer attention --steps 2 --metrics " + data + " -o " +
                 d + "clobber.safetensors");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--metrics " + data + " is the input --data"), std::string::npos) << r.out;
  std::ifstream in(data);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text);  // the training data is intact
  EXPECT_FALSE(fs::exists(d + "clobber.safetensors"));
  r = run("memorize demo --demo-N 4 --demo-n 2 --demo-V 4 --out " + d + "same.json --report " + d +
          "same.json");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("is also --out"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d + "same.json"));
}

// UATLAB_SIMD restricts the kernels' instruction set: the emulated path trains; an unknown name, or a
// path this CPU lacks, is an error before any work and any output.
TEST(Cli, UatlabSimdChoosesTheKernelsPathOrIsRefused) {
  const std::string d = dir(), data = d + "simd.jsonl";
  write(data, "{\"x\": [[1, 0], [0, 1]], \"y\": [[1, 0], [0, 1]]}\n");
  const std::string train = " train --data " + data + " --d 2 --layer attention --steps 2 -o " + d;
  fs::remove(d + "simd.safetensors");
  Result r = run_cli(train + "simd.safetensors", "UATLAB_SIMD=scalar " + std::string(UATLAB_BIN));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(d + "simd.safetensors"));
#if defined(__x86_64__) || defined(__i386__)
  const std::string absent = "neon";
#else
  const std::string absent = "avx512";
#endif
  for (const auto& [name, says] : std::vector<std::pair<std::string, std::string>>{
           {"bogus", "unknown (avx512, avx2, sse4, neon or scalar)"}, {absent, "has no such path"}}) {
    r = run_cli(train + "refused.safetensors", "UATLAB_SIMD=" + name + " " + std::string(UATLAB_BIN));
    EXPECT_EQ(r.code, 1) << name;
    EXPECT_NE(r.out.find("uatlab: error: UATLAB_SIMD=" + name + ": "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(d + "refused.safetensors"));
  }
}

TEST(Cli, ContradictoryFlagsAreRefused) {  // accepted silently before, one of them ignored
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"train --task memorize --arch {\"d\":4} --layer attention --steps 1 -o " + dir() +
                "x.safetensors",
            "--arch excludes --layer"},
           {"train --task memorize --val-fraction -1 --steps 1 -o " + dir() + "x.safetensors",
            "--val-fraction"},
           {"contextual demo --sweep-c 0", "--sweep-c"}}) {
    const Result r = run(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.out.find("uatlab: error: " + says), std::string::npos) << r.out;
  }
}

TEST(Cli, FailuresComeBeforeOutputAndBeforeTheWork) {
  // fang-fit printed its table's header, then failed on an RMSE of inf; approximate --certify on an
  // expression was refused only after the construction.
  Result r = run("fang-fit 1e300*x1^4 --vars x1 --degree 2 --samples 20 --test 10");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.out.find("| degree"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("is not finite"), std::string::npos) << r.out;
  r = run("approximate x+1 --d 1 --n 2 --K 4 --certify");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("needs one"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("approximate: build"), std::string::npos) << r.out;  // no stage started
}

TEST(Cli, GradientDoesNotAdviseAPrecisionItLacks) {  // "use MPFR" from a command computing in double only
  const std::string d = dir();
  ASSERT_EQ(run("init --d 1 --readout 1 -o " + d + "grad.json").code, 0);
  std::ifstream in(d + "grad.json");
  json m = json::parse(in);
  m["tensors"]["readout.weight"]["data"] = {"1e400"};
  write(d + "grad_big.json", m.dump());
  write(d + "grad.jsonl", "{\"x\": [[1]], \"y\": [[1]]}\n");
  const Result r =
      run("gradient " + d + "grad_big.json " + d + "grad.jsonl --loss mse -o " + d + "g.safetensors");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("the one precision gradient computes in"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("use MPFR"), std::string::npos) << r.out;
}

TEST(Cli, MemorizeForceLeavesNoStaleFloat64Model) {  // the previous run's .safetensors stayed beside it
  const std::string d = dir(), out = d + "stale.json", f64 = d + "stale.safetensors";
  write(f64, "an earlier run's F64 model");
  const std::string args =
      "memorize demo --demo-N 6 --demo-n 2 --demo-d 2 --demo-V 3 --mode faithful --out " + out;
  EXPECT_NE(run(args).code, 0);  // without --force: refused, the file kept
  EXPECT_TRUE(fs::exists(f64));
  const Result r = run(args + " --force");  // float64 fails here (faithful mode): no F64 model is written
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("float64     fails"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(f64)) << r.out;
  EXPECT_TRUE(fs::exists(out));
}

// A training that fails leaves --metrics as it was (it used to be truncated to its header) and
// keeps the run's own lines beside it; a loss that is not finite before any update blames the
// data, not the learning rate.
TEST(Cli, FailedTrainingLeavesTheMetricsFileAsItWas) {
  const std::string d = dir(), data = d + "huge_label.jsonl", metrics = d + "kept.csv";
  write(data, "{\"x\": [[1],[2]], \"y\": [[1e30],[2]]}\n{\"x\": [[3],[4]], \"y\": [[1],[2]]}\n");
  write(metrics, "an earlier run's metrics\n");
  fs::remove(metrics + ".partial");  // a previous run's: a run beside one is refused
  const Result r =
      run("train --data " + data + " --d 1 --readout 1 --layer feedforward:width=4 --steps 5 --metrics " +
          metrics + " -o " + d + "huge.safetensors");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("before any update"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("lower the learning rate"), std::string::npos) << r.out;
  std::ifstream in(metrics);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "an earlier run's metrics\n");
  EXPECT_TRUE(fs::exists(metrics + ".partial"));
  EXPECT_FALSE(fs::exists(d + "huge.safetensors"));
}

// GMP cannot recover from a failed allocation and aborted the process (SIGABRT, its own message):
// the CLI's allocation hooks end it as every error, "uatlab: error:" and status 1, with no output.
// An address-space limit of 800 MB makes a 2^22-bit evaluation (within the memory estimate's
// budget) run out.
TEST(Cli, GmpOutOfMemoryIsAnErrorNotAnAbort) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit this test sets";
#endif
  const std::string d = dir(), model = d + "gmp_oom.safetensors", data = d + "gmp_oom.jsonl",
                    out = d + "gmp_oom_out.jsonl";
  ASSERT_EQ(
      run("init --d 16 --layer attention:heads=4,head_size=4 --layer feedforward:width=64 -o " + model).code,
      0);
  std::string tokens;
  for (int k = 0; k < 8; ++k)
    tokens += std::string(k ? "," : "") + "[0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1,1.1,1.2,1.3,1.4,1.5]";
  write(data, "{\"x\": [" + tokens + "]}\n");
  fs::remove(out);
  FILE* p = popen(("ulimit -v 800000; " + std::string(UATLAB_BIN) + " eval " + model + " " + data +
                   " -p interval:4194304 -o " + out + " 2>&1")
                      .c_str(),
                  "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, p))
    text.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by a signal: " << text;
  EXPECT_EQ(WEXITSTATUS(status), 1) << text;
  EXPECT_NE(text.find("uatlab: error: out of memory: GMP/MPFR could not allocate"), std::string::npos)
      << text;
  EXPECT_FALSE(fs::exists(out));
}
