#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "uatlab/io/dataset.hpp"
#include "uatlab/io/json.hpp"
#include "uatlab/io/model_file.hpp"
#include "uatlab/io/safetensors.hpp"
#include "uatlab/model/init.hpp"

using namespace uatlab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

fs::path tmp(const std::string& name) {
  fs::create_directories(UATLAB_TEST_TMP);
  fs::path p = fs::path(UATLAB_TEST_TMP) / name;
  fs::remove(p);
  return p;
}

const char* kArch = R"({"d": 3, "vocab": 7, "max_len": 5, "readout": 2, "layers": [
  {"type": "attention", "heads": 2, "head_size": 2, "bias": true, "rpe": "t5", "t5_buckets": 4, "t5_max_distance": 8},
  {"type": "feedforward", "width": 4, "pre_norm": true}, {"type": "layernorm", "eps": "1/1000"},
  {"type": "attention", "heads": 1, "head_size": 1, "tied_qkv": true, "rpe": "lin"}]})";

Network<double> sample() {
  Network<double> net(Architecture::from_json(json::parse(kArch)));
  init_random(net, 5);
  return net;
}

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(ModelFile, SafetensorsF64RoundTripIsExact) {
  Network<double> net = sample();
  auto p = tmp("m.safetensors");
  save_network(net, p.string());
  Network<double> back = load_network<double>(p.string());
  EXPECT_EQ(back.arch.to_json(), net.arch.to_json());
  std::vector<Mat<double>> a, b;
  net.for_each_tensor([&](const std::string&, const Mat<double>& m, Layout) { a.push_back(m); });
  back.for_each_tensor([&](const std::string&, const Mat<double>& m, Layout) { b.push_back(m); });
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(a[i] == b[i]) << i;
  // PyTorch layouts: Linear weights (out, in); embedding (vocab, d).
  Safetensors st = Safetensors::parse(read_file(p.string()), "m");
  EXPECT_EQ(st.metadata.at("format"), "pt");
  EXPECT_EQ(st.tensors.at("layers.0.q.weight").shape, (std::vector<std::int64_t>{4, 3}));
  EXPECT_EQ(st.tensors.at("embed.weight").shape, (std::vector<std::int64_t>{7, 3}));
  EXPECT_EQ(st.tensors.at("embed.weight").values()[3], net.embed(0, 1));  // row 1 = token 1
  EXPECT_EQ(st.tensors.at("layers.0.q.weight").values()[1], net.layers[0].wq(0, 1));
  EXPECT_EQ(st.tensors.at("layers.0.rpe.table").shape, (std::vector<std::int64_t>{2, 4}));
}

TEST(ModelFile, SafetensorsF32RoundsOnce) {
  Network<Rational> net = network_cast<Rational>(sample());
  // a binary32 tie: rounds to even, 1
  net.layers[0].wq(0, 0) = Rational(1) + Rational(1, mp::mpz_int(1) << 24);
  auto p = tmp("m32.safetensors");
  save_network(net, p.string(), "F32");
  EXPECT_EQ(load_network<double>(p.string()).layers[0].wq(0, 0), 1.0);
}

TEST(ModelFile, JsonIsLosslessForRationalsAndMpfr) {
  Network<Rational> net = network_cast<Rational>(sample());
  net.layers[0].wq(1, 2) = Rational(1, 3);
  net.embed(2, 6) = parse_rational("-0.1e-400");
  auto p = tmp("m.json");
  save_network(net, p.string(), "F64", "rational");
  Network<Rational> back = load_network<Rational>(p.string());
  EXPECT_EQ(back.layers[0].wq(1, 2), Rational(1, 3));
  EXPECT_EQ(back.embed(2, 6), parse_rational("-1e-401"));
  const MpfrPrecision precision(3000);
  Network<Mpfr> m = network_cast<Mpfr>(net);
  save_network(m, p.string(), "F64", "mpfr:3000");
  Network<Mpfr> mback = load_network<Mpfr>(p.string());
  EXPECT_EQ(mback.layers[0].wq(1, 2), m.layers[0].wq(1, 2));
  EXPECT_NE(mback.layers[0].wq(1, 2), Mpfr(Scalar<double>::from(Rational(1, 3))));
}

TEST(ModelFile, RejectsInconsistentFilesAndWritesNothingOnError) {
  auto p = tmp("bad.safetensors");
  Safetensors st;
  st.metadata = {{"format", "pt"},
                 {"uatlab", R"({"d": 2, "layers": [{"type": "feedforward", "width": 3}]})"}};
  st.tensors["layers.0.fc1.weight"] = Tensor::f64({3, 2}, std::vector<double>(6, 0.5));
  st.tensors["layers.0.fc1.bias"] = Tensor::f64({3}, std::vector<double>(3, 0.5));
  st.tensors["layers.0.fc2.weight"] = Tensor::f64({2, 3}, std::vector<double>(6, 0.5));
  write_file_atomic(p.string(), st.serialize());
  expect_error([&] { load_network<double>(p.string()); }, "missing tensor \"layers.0.fc2.bias\"");
  st.tensors["layers.0.fc2.bias"] = Tensor::f64({3}, std::vector<double>(3, 0.5));
  write_file_atomic(p.string(), st.serialize());
  expect_error([&] { load_network<double>(p.string()); }, "has shape [3], the architecture needs [2]");
  st.tensors["layers.0.fc2.bias"] = Tensor::f64({2}, {0.5, NAN});
  write_file_atomic(p.string(), st.serialize());
  expect_error([&] { load_network<double>(p.string()); }, "NaN or infinity");
  st.tensors["layers.0.fc2.bias"] = Tensor::f64({2}, {0.5, 0.5});
  st.tensors["extra"] = Tensor::f64({1}, {0});
  write_file_atomic(p.string(), st.serialize());
  expect_error([&] { load_network<double>(p.string()); }, "unexpected tensor \"extra\"");
  st.tensors.erase("extra");
  st.metadata.erase("uatlab");
  write_file_atomic(p.string(), st.serialize());
  expect_error([&] { load_network<double>(p.string()); }, "no \"uatlab\" architecture");
  expect_error([&] { load_network<double>((fs::path(UATLAB_TEST_TMP) / "missing.safetensors").string()); },
               "cannot open");
  // torch.save's two formats, a zip archive and a pickle, are named as such.
  for (const std::string& head : {std::string("PK\x03\x04rest"), std::string("\x80\x02}q\x00")}) {
    auto pt = tmp("model.pt");
    write_file_atomic(pt.string(), head);
    expect_error([&] { load_network<double>(pt.string()); }, "a PyTorch checkpoint (torch.save)");
  }

  // A value that overflows binary32: error, and no file appears.
  Network<Rational> big = network_cast<Rational>(sample());
  big.layers[0].wq(0, 0) = parse_rational("1e50");
  auto out = tmp("overflow.safetensors");
  expect_error([&] { save_network(big, out.string(), "F32"); }, "does not fit F32");
  EXPECT_FALSE(fs::exists(out));
}

TEST(Dataset, ParsesExactNumbersTokensAndLabels) {
  Dataset ds = parse_dataset(
      "{\"x\": [[0.1, \"1/3\"], [2, \"0.1e-400\"]], \"y\": [1, \"-1/2\"]}\n\n"
      "{\"x\": [[1, 2]], \"y\": [0]}\n",
      "d");
  ASSERT_EQ(ds.sequences.size(), 2u);
  EXPECT_EQ(ds.d, 2);
  EXPECT_EQ(ds.label_dim, 1);
  EXPECT_EQ(ds.sequences[0].x(0, 0), Rational(1, 10));
  EXPECT_EQ(ds.sequences[0].x(1, 0), Rational(1, 3));
  EXPECT_EQ(ds.sequences[0].x(1, 1), parse_rational("1e-401"));
  EXPECT_EQ(ds.sequences[0].y(0, 1), Rational(-1, 2));
  Dataset t = parse_dataset(R"({"tokens": [3, 0, 2], "y": [[1, 0], [0, 1], [1, 1]]})", "t");
  EXPECT_TRUE(t.token_input);
  EXPECT_EQ(t.label_dim, 2);
  EXPECT_EQ(t.sequences[0].y(1, 1), Rational(1));
}

TEST(Dataset, OneLabelPerSequenceIsTheLastTokens) {
  // "y" a number, or an array of k != n numbers: the label of the last token, kept as the last
  // column of y with a mask counting the last token only; written back as it was read.
  const std::string text =
      "{\"x\":[[\"1\"],[\"2\"],[\"3\"]],\"y\":\"1/2\"}\n{\"x\":[[\"4\"],[\"5\"],[\"6\"]],\"y\":\"3\"}\n";
  const Dataset ds = parse_dataset(text, "d");
  EXPECT_TRUE(ds.sequence_labels);
  EXPECT_EQ(ds.label_dim, 1);
  EXPECT_EQ(ds.sequences[0].y(0, 2), Rational(1, 2));
  EXPECT_EQ(ds.sequences[0].y(0, 0), Rational(0));
  EXPECT_EQ(ds.sequences[1].mask, (std::vector<char>{0, 0, 1}));
  EXPECT_EQ(format_dataset(ds), text);
  const Dataset v = parse_dataset(R"({"x": [[1], [2], [3]], "y": ["0.5", 1]})", "d");
  EXPECT_EQ(v.label_dim, 2);
  EXPECT_EQ(v.sequences[0].y(0, 2), Rational(1, 2));
  EXPECT_EQ(v.sequences[0].y(1, 2), Rational(1));
  EXPECT_EQ(parse_dataset(format_dataset(v), "again").sequences[0].y, v.sequences[0].y);
  // n labels stay per token, as before.
  EXPECT_FALSE(parse_dataset(R"({"x": [[1], [2]], "y": [1, 2]})", "d").sequence_labels);
}

TEST(Dataset, ErrorsNameLineAndProblem) {
  expect_error([] { parse_dataset("{\"x\": [[1, 2]]}\n{\"x\": [[1, 2]]", "d.jsonl"); },
               "d.jsonl line 2: JSON: invalid JSON");
  expect_error([] { parse_dataset(R"({"x": [[1, 2], [3]]})", "d"); }, "entry 1 has 1 values, entry 0 has 2");
  expect_error([] { parse_dataset("{\"x\": [[1, 2]]}\n{\"x\": [[1, 2, 3]]}", "d"); },
               "line 2: tokens have 3 numbers, earlier lines have d = 2");
  expect_error([] { parse_dataset("{\"x\": [[1]]}\n{\"tokens\": [1]}", "d"); }, "mixes \"x\" and \"tokens\"");
  expect_error([] { parse_dataset(R"({"x": [["nan"]]})", "d"); }, "not a number: \"nan\"");
  // A label count that is neither n nor one label: a per-token dataset's line with too few labels
  // reads as one sequence label, and the dataset refuses the mixture.
  expect_error(
      [] { parse_dataset("{\"x\": [[1], [2]], \"y\": [1, 2]}\n{\"x\": [[1], [2]], \"y\": [1]}", "d"); },
      "line 2: mixes lines with one label per sequence and lines with one per token");
  expect_error([] { parse_dataset(R"({"x": [[1], [2]], "y": [[1], [2], [3]]})", "d"); },
               "\"y\" has 3 labels for 2 tokens");
  expect_error([] { parse_dataset(R"({"x": [[1], [2]], "y": 1, "mask": [0, 1]})", "d"); },
               "a \"mask\" beside it contradicts it");
  expect_error([] { parse_dataset(R"({"x": [[1]], "label": [1]})", "d"); }, "unknown field \"label\"");
  expect_error([] { parse_dataset(R"({"x": [[1]], "x": [[2]]})", "d"); }, "duplicate key \"x\"");
  expect_error([] { parse_dataset(R"({"tokens": [1, -2]})", "d"); }, "token id -2");
  expect_error([] { parse_dataset("\n\n", "d"); }, "no sequences");
  expect_error([] { parse_dataset(R"({"x": [[1]], "y": [true]})", "d"); }, "expected a number");
}

// Issue 38: inputs and outputs are regular files; JSON holds no NUL; an output never overwrites an
// input or another output.
TEST(Files, NulBytesAreRefusedInEveryJsonInput) {
  const std::string text = std::string("{\"d\": 2}") + '\0' + "{\"garbage\": true}";
  EXPECT_THROW(parse_json(text, "architecture"), Error);
  try {
    parse_json(text, "x.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a NUL byte at offset 8"), std::string::npos) << e.what();
  }
}

TEST(Files, SpecialFilesAreNeitherReadToTheEndNorReplaced) {
  EXPECT_THROW(read_file("/dev/zero"), Error);  // read until memory ran out before
  const std::string dir = UATLAB_TEST_TMP "/special";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string fifo = dir + "/fifo", link = dir + "/link", target = dir + "/target";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  write_file_atomic(target, "kept");
  std::filesystem::create_symlink(target, link);
  EXPECT_THROW(write_file_atomic(fifo, "x"), Error);
  EXPECT_THROW(write_file_atomic(link, "x"), Error);
  EXPECT_THROW(write_file_atomic(dir, "x"), Error);
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(read_file(target), "kept");
}

TEST(Files, AnOutputNeverOverwritesAnInputOrAnotherOutput) {
  const std::string dir = UATLAB_TEST_TMP "/outputs";
  std::filesystem::create_directories(dir);
  const std::string data = dir + "/data.jsonl";
  write_file_atomic(data, "{}\n");
  EXPECT_THROW(check_outputs({{"--data", data}}, {{"--metrics", dir + "/../outputs/data.jsonl"}}), Error);
  EXPECT_THROW(check_outputs({}, {{"--out", dir + "/m.json"}, {"--report", dir + "/m.json"}}), Error);
  EXPECT_NO_THROW(
      check_outputs({{"--data", data}}, {{"--out", dir + "/m.json"}, {"--report", "-"}, {"--plot", ""}}));
  EXPECT_THROW(check_outputs({}, {{"-o", dir + "/no/such/folder/m.safetensors"}}), Error);  // before training
  // A folder read as a model (a GPT-2 checkpoint): no output inside it, at any depth or spelling,
  // whether the file exists or not; beside it is fine.
  const std::string folder = dir + "/gpt2";
  std::filesystem::create_directories(folder + "/sub");
  write_file_atomic(folder + "/config.json", "{}");
  for (const std::string out : {"/model.safetensors", "/config.json", "/sub/new.json", "/../gpt2/new.json"})
    EXPECT_THROW(check_outputs({{"model", folder}}, {{"-o", folder + out}}), Error) << out;
  EXPECT_THROW(check_outputs({{"model", folder + "/"}}, {{"-o", folder + "/config.json"}}), Error);
  EXPECT_NO_THROW(check_outputs({{"model", folder}}, {{"-o", dir + "/gpt2-model.safetensors"}}));
  EXPECT_NO_THROW(check_outputs({{"model", folder}}, {{"-o", dir + "/gpt2.json"}}));
  EXPECT_EQ(read_file(folder + "/config.json"), "{}");
}
