#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "uatlab/io/json.hpp"
#include "uatlab/io/safetensors.hpp"
#include "uatlab/model/scalar.hpp"

using namespace uatlab;

namespace {

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

std::string file(const std::string& header, std::size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

void expect_error(const std::string& bytes, const std::string& fragment) {
  try {
    Safetensors::parse(bytes, "test.safetensors");
    ADD_FAILURE() << "accepted a malformed file; expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

Safetensors zero_to_five(const std::string& name, std::vector<std::int64_t> shape) {
  Safetensors st;
  st.tensors[name] = Tensor::f32(std::move(shape), {0, 1, 2, 3, 4, 5});
  return st;
}

}  // namespace

TEST(Safetensors, GoldenVectorF32) {
  std::string b = zero_to_five("attn.0", {1, 2, 3}).serialize();
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  const unsigned char data[] = {0, 0, 0,    0,    0, 0, 0x80, 0x3f, 0, 0, 0,    0x40,
                                0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40, 0, 0, 0xa0, 0x40};
  EXPECT_EQ(b, le64(64) + header + std::string(reinterpret_cast<const char*>(data), 24));
  EXPECT_EQ(b.size(), 96u);
}

TEST(Safetensors, GoldenVectorPadding) {
  std::string b = zero_to_five("attn0", {1, 1, 2, 3}).serialize();
  EXPECT_EQ(b.size(), 104u);
  EXPECT_EQ(b.substr(0, 8), le64(72));
  EXPECT_EQ(b.substr(8, 72),
            std::string(R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})") + "       ");
}

TEST(Safetensors, GoldenVectorEmpty) {
  EXPECT_EQ(Safetensors{}.serialize(), le64(8) + "{}      ");
  EXPECT_TRUE(Safetensors::parse(Safetensors{}.serialize(), "x").tensors.empty());
}

TEST(Safetensors, RoundTripWithMetadataAndOrder) {
  Safetensors st;
  st.metadata = {{"format", "pt"}, {"uatlab", "{\"d\":2}"}};
  st.tensors["b"] = Tensor::f32({2}, {1.5, -2});
  st.tensors["a"] = Tensor::f64({2, 1}, {0.1, 1e300});
  st.tensors["scalar"] = Tensor::f64({}, {3});
  st.tensors["empty"] = Tensor::f64({0, 3}, {});
  std::string bytes = st.serialize();
  EXPECT_EQ(bytes.find("{\"__metadata__\":{\"format\":\"pt\""), 8u);
  EXPECT_LT(bytes.find("\"a\""), bytes.find("\"b\""));  // F64 (alignment 8) before F32
  Safetensors back = Safetensors::parse(bytes, "x");
  EXPECT_EQ(back.metadata, st.metadata);
  EXPECT_EQ(back.tensors.at("a").values(), (std::vector<double>{0.1, 1e300}));
  EXPECT_EQ(back.tensors.at("b").values(), (std::vector<double>{1.5, -2}));
  EXPECT_EQ(back.tensors.at("scalar").values(), (std::vector<double>{3}));
  EXPECT_EQ(back.tensors.at("empty").numel(), 0);
}

TEST(Safetensors, RejectsEveryMalformedFile) {
  const std::string ok = R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  ASSERT_NO_THROW(Safetensors::parse(file(ok, 16), "x"));
  expect_error("1234", "shorter than the 8-byte header size");
  expect_error(le64(200000000) + "{}", "exceeds 100000000");
  expect_error(le64(100) + "{}", "runs past the end");
  expect_error(file("{\"w\":", 0), "invalid JSON");
  expect_error(file("[1,2]", 0), "not a JSON object");
  expect_error(
      file(
          R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"w":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})",
          16),
      "duplicate key \"w\"");
  expect_error(file(R"({"w":{"dtype":"F65","shape":[2],"data_offsets":[0,16]}})", 16), "unknown dtype");
  expect_error(file(R"({"w":{"dtype":"F64","shape":[2]}})", 16), "exactly dtype, shape and data_offsets");
  expect_error(file(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,16],"x":1}})", 16),
               "exactly dtype, shape and data_offsets");
  expect_error(file(R"({"w":{"dtype":"F64","shape":[-2],"data_offsets":[0,16]}})", 16),
               "not a non-negative integer");
  expect_error(file(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[16,0]}})", 16), "begin > end");
  expect_error(file(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,24]}})", 16), "out of range");
  expect_error(file(R"({"w":{"dtype":"F64","shape":[3],"data_offsets":[0,16]}})", 16),
               "does not match shape and dtype");
  expect_error(file(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})", 16),
               "gap before tensor \"w\"");
  expect_error(
      file(
          R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"b":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})",
          16),
      "overlaps");
  expect_error(file(ok, 17), "1 trailing bytes");
  expect_error(file(R"({"__metadata__":{"format":1}})", 0), "is not a string");
  expect_error(file(R"({"__metadata__":[1]})", 0), "__metadata__ is not an object");
  expect_error(file(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,"16"]}})", 16),
               "two non-negative integers");
}

TEST(Safetensors, OnlyF32AndF64CarryValues) {
  Safetensors st =
      Safetensors::parse(file(R"({"w":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 4), "x");
  EXPECT_THROW(st.tensors.at("w").values(), Error);
}

TEST(Safetensors, ParsingCopiesNoValues) {
  // A 500 MB checkpoint was held three times (read, parsed, converted): the parsed tensors are now
  // views of the one buffer the file was read into.
  Safetensors st;
  st.tensors["a"] = Tensor::f64({2}, {0.25, -3});
  st.tensors["b"] = Tensor::f32({3}, {1, 2, 3});
  const auto bytes = std::make_shared<const std::string>(st.serialize());
  const Safetensors back = Safetensors::parse(bytes, "x");
  for (const auto& [name, t] : back.tensors) {
    EXPECT_EQ(t.buffer.get(), bytes.get()) << name;
    EXPECT_GE(t.data(), bytes->data());
    EXPECT_LE(t.data() + t.size, bytes->data() + bytes->size());
  }
  EXPECT_EQ(back.tensors.at("a").at(1), -3);
  EXPECT_EQ(back.tensors.at("b").values(), (std::vector<double>{1, 2, 3}));
}

TEST(Safetensors, ShapeWhoseProductOverflowsIsRefused) {
  // 2^62 × 4 elements of 8 bytes wrapped around int64 (undefined behaviour) before the size check.
  expect_error(file(R"({"w":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0),
               "overflows");
  expect_error(file(R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", 0),
               "overflows");
}

// The streaming writer (a model of gigabytes is written one tensor at a time) writes the bytes the
// in-memory serializer would, in the reference order whatever order the tensors come in; a tensor
// that fails leaves no file and the previous one as it was.
TEST(Safetensors, StreamedFileEqualsTheSerializedOne) {
  const std::string path = std::string(UATLAB_TEST_TMP) + "/streamed.safetensors";
  std::remove(path.c_str());
  Safetensors st;
  st.metadata = {{"format", "pt"}, {"k", "v"}};
  st.tensors["b.weight"] = Tensor::f64({2, 3}, {1, -2, 0.1, 4e300, -0.0, 6});
  st.tensors["a.bias"] = Tensor::f32({3}, {0.1, 1e-40, -3});
  st.tensors["c"] = Tensor::f64({0}, {});
  std::vector<TensorWriter> w;
  for (const char* name : {"c", "b.weight", "a.bias"}) {  // not in the file's order
    const Tensor& t = st.tensors.at(name);
    w.push_back({name, t.dtype, t.shape, [&t](std::string& out) { out.append(t.data(), t.size); }});
  }
  write_safetensors(path, st.metadata, w);
  EXPECT_EQ(read_file(path), st.serialize());
  const std::string before = read_file(path);
  std::vector<TensorWriter> bad = w;
  bad[1].bytes = [](std::string&) { throw Error("no value"); };
  EXPECT_THROW(write_safetensors(path, st.metadata, bad), Error);
  bad[1].bytes = [](std::string& out) { out += "short"; };
  EXPECT_THROW(write_safetensors(path, st.metadata, bad), Error);
  bad = w;
  bad[0].name = "a.bias";  // twice
  EXPECT_THROW(write_safetensors(path, st.metadata, bad), Error);
  bad = w;
  bad[0].dtype = "BF16";
  EXPECT_THROW(write_safetensors(path, st.metadata, bad), Error);
  EXPECT_EQ(read_file(path), before);
  for (const auto& e : std::filesystem::directory_iterator(UATLAB_TEST_TMP))  // no temporary left
    EXPECT_EQ(e.path().string().find("streamed.safetensors.tmp"), std::string::npos) << e.path();
}
