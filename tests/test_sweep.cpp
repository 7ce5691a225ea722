// Sweeps: every cell runs once, results are appended as they finish, a killed sweep resumes;
// reports: CSV quoting, Markdown tables, PNG plots through gnuplot.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "uatlab/experiment/sweep.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/report.hpp"
#include "uatlab/model/init.hpp"
#include "uatlab/model/scalar.hpp"
#include "uatlab/train/tasks.hpp"
#include "uatlab/train/trainer.hpp"

using namespace uatlab;
using nlohmann::json;

namespace {

std::string fresh(const std::string& name) {
  std::filesystem::create_directories(UATLAB_TEST_TMP);
  const std::string path = std::string(UATLAB_TEST_TMP) + "/" + name;
  std::filesystem::remove(path);
  return path;
}

std::vector<json> grid(int k) {
  std::vector<json> cells;
  for (int i = 0; i < k; ++i)
    cells.push_back({{"i", i}, {"name", "cell " + std::to_string(i)}});
  return cells;
}

}  // namespace

TEST(Sweep, RunsEachCellOnceAndResumes) {
  SweepOptions o;
  o.results = fresh("sweep.jsonl");
  std::atomic<int> calls{0};
  auto square = [&](const json& c) {
    ++calls;
    return json{{"square", c["i"].get<int>() * c["i"].get<int>()}};
  };
  // A "killed" sweep: the first 5 cells done, plus half a line.
  auto first = run_sweep(grid(5), square, o);
  ASSERT_EQ(first.size(), 5u);
  { std::ofstream(o.results, std::ios::app) << R"({"cell":{"i":5,"name":"cell 5"},"res)"; }
  calls = 0;
  auto all = run_sweep(grid(12), square, o);
  EXPECT_EQ(calls.load(), 7);  // 5..11; the torn line is cut off and its cell run again
  ASSERT_EQ(all.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(all[i]["cell"]["i"], i);
    EXPECT_EQ(all[i]["result"]["square"], i * i);
  }
  std::ifstream in(o.results);
  int lines = 0;
  for (std::string l; std::getline(in, l);) {
    ++lines;
    EXPECT_NO_THROW(parse_json(l, "line"));
  }
  EXPECT_EQ(lines, 12);
  calls = 0;
  run_sweep(grid(12), square, o);
  EXPECT_EQ(calls.load(), 0);
}

TEST(Sweep, FailuresStopTheSweepAndKeepFinishedCells) {
  SweepOptions o;
  o.results = fresh("sweep-fail.jsonl");
  o.threads = 1;
  auto run = [](const json& c) {
    if (c["i"] == 3) throw Error("diverged");
    return json{{"ok", true}};
  };
  try {
    run_sweep(grid(6), run, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("diverged"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("\"i\":3"), std::string::npos);
  }
  std::ifstream in(o.results);
  int lines = 0;
  for (std::string l; std::getline(in, l);)
    ++lines;
  EXPECT_EQ(lines, 3);  // cells 0, 1, 2 (one thread, in order)
  std::vector<json> twice = {json{{"i", 1}}, json{{"i", 1}}};
  EXPECT_THROW(run_sweep(twice, run, o), Error);
  SweepOptions none;
  EXPECT_THROW(run_sweep(grid(1), run, none), Error);
}

// One cell at a time runs outside any parallel region: in a team of one thread, every parallel
// loop of a cell started a nested team whose threads ended with it (their MPFR caches lost:
// LeakSanitizer found it in the experiments that run serially).
TEST(Sweep, OneThreadRunsCellsOutsideAnyParallelRegion) {
  SweepOptions o;
  o.results = fresh("sweep-serial.jsonl");
  o.threads = 1;
  std::atomic<int> nested{0};
  run_sweep(
      grid(3),
      [&](const json&) {
        nested += omp_get_level() != 0;
        return json{{"ok", true}};
      },
      o);
  EXPECT_EQ(nested.load(), 0);
}

// A training inside a sweep's thread (no nested team) must see its whole batch, as outside one.
TEST(Sweep, TrainingInsideASweepMatchesTrainingAlone) {
  TaskOptions o;
  o.N = 64;
  o.n = 12;
  o.lags = {1, 3};
  o.seed = 4;
  const Dataset data = make_task("sparse-boolean", o);
  auto run = [&](const json& cell) {
    const Architecture a = Architecture::from_json(json::parse(R"({"d":4,"vocab":2,"readout":2,"layers":[
      {"type":"attention","heads":2,"head_size":2,"causal":true,"rpe":"lin"},{"type":"feedforward","width":8}]})"));
    Network<double> net(a);
    init_random(net, cell["seed"].get<std::uint64_t>());
    TrainConfig c;
    c.loss = Loss::cross_entropy;
    c.steps = 30;
    c.batch = 16;
    c.lr = 1e-2;
    c.log_every = 10;
    const TrainReport r = train(net, data, nullptr, c);
    return json{{"loss", r.loss}, {"accuracy", r.accuracy}};
  };
  SweepOptions so;
  so.results = fresh("sweep-train.jsonl");
  so.threads = 2;
  const auto lines = run_sweep({json{{"seed", 1}}, json{{"seed", 2}}}, run, so);
  for (const auto& l : lines) {
    const json alone = run(l["cell"]);
    EXPECT_NEAR(l["result"]["loss"].get<double>(), alone["loss"].get<double>(), 1e-12);
    EXPECT_DOUBLE_EQ(l["result"]["accuracy"].get<double>(), alone["accuracy"].get<double>());
  }
}

TEST(Report, CsvMarkdownAndStatistics) {
  EXPECT_EQ(csv_text({"a", "b"}, {{"1", "x,y"}, {"say \"hi\"", ""}}),
            "a,b\n1,\"x,y\"\n\"say \"\"hi\"\"\",\n");
  EXPECT_EQ(markdown_table({"H", "m=8"}, {{"1", "0.5"}}), "| H | m=8 |\n|---|---|\n| 1 | 0.5 |\n");
  EXPECT_DOUBLE_EQ(mean({1, 2, 3}), 2);
  EXPECT_DOUBLE_EQ(sd({1, 2, 3}), 1);
  EXPECT_EQ(mean_sd({2}, 3), "2");
  EXPECT_EQ(mean_sd({1, 3}, 3), "2 ± 1.4");
}

TEST(Report, PlotsArePngFilesWrittenWhole) {
  const std::string line = fresh("line.png"), heat = fresh("heat.png");
  LinePlot p{"title's", "x", "y"};
  p.logy = true;
  p.series.push_back({"empty", {}, {}, {}});  // left out of the plot, which gnuplot would refuse
  p.series.push_back({"a", {1, 2, 4}, {1, 0.1, 0.01}, {0.1, 0.01, 0.001}});
  plot_png(line, p);
  const std::string none = fresh("none.png");
  plot_png(none, LinePlot{"nothing to draw", "x", "y"});  // a report on a part of its grid
  EXPECT_FALSE(std::filesystem::exists(none));
  HeatMap h{"heat",
            "N",
            "params",
            "accuracy",
            {"10", "20"},
            {"a", "b", "c"},
            {{1, 0.5}, {0.2, std::nan("")}, {0, 1}},
            {}};
  plot_png(heat, h);
  for (const auto& path : {line, heat}) {
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG") << path;
    EXPECT_GT(std::filesystem::file_size(path), 1000u);
  }
  for (const auto& e : std::filesystem::directory_iterator(UATLAB_TEST_TMP))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(Sweep, ARefusedResultsFileIsLeftAsItWas) {  // its torn last line was cut, then the file refused
  SweepOptions o;
  o.results = fresh("refused.jsonl");
  const std::string text = "{\"cell\": {\"i\": 0}}\n{\"cell\":{\"i\":1},\"res";  // line 1 lacks "result"
  { std::ofstream(o.results) << text; }
  EXPECT_THROW(run_sweep(
                   grid(2),
                   [](const json&) {
                     return json{{"r", 1}};
                   },
                   o),
               Error);
  std::ifstream in(o.results);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text);
}
