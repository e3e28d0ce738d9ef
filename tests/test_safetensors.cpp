// Tests of the safetensors reader/writer: dtype names and sizes, round trips through
// save_safetensors, the real fixture, and one test per malformed input. The 16-bit float
// conversions themselves are tested in test_float_formats.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "fifo.hpp"
#include "retnet/core/error.hpp"
#include "retnet/io/config_json.hpp"
#include "retnet/io/safetensors.hpp"
#include "retnet/io/safetensors_writer.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using retnet::DType;
using retnet::FormatError;
using retnet::SafetensorsFile;
using retnet::save_safetensors;
using retnet::SavedTensor;

namespace {

using retnet::testing::expect_error;
using retnet::testing::TempDir;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A raw safetensors file: length prefix, the header text as given, `data_bytes` zero bytes.
std::string raw_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

// Expects FormatError from opening `contents` as a file and as a memory buffer, with a
// message containing the file label and every snippet. Returns the file's message.
std::string expect_format_error(const TempDir& dir, const std::string& contents,
                                const std::vector<std::string>& snippets) {
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, contents);
  const auto labelled = [&](const std::string& label) {
    std::vector<std::string> all = {label};
    all.insert(all.end(), snippets.begin(), snippets.end());
    return all;
  };
  const std::string message =
      expect_error<FormatError>([&] { SafetensorsFile file(path); }, labelled(path));
  expect_error<FormatError>(
      [&] {
        SafetensorsFile::parse("memory.safetensors",
                               reinterpret_cast<const uint8_t*>(contents.data()), contents.size());
      },
      labelled("memory.safetensors"));
  return message;
}

uint16_t u16_at(const std::string& bytes, size_t offset) {
  return static_cast<uint16_t>(static_cast<uint8_t>(bytes[offset]) |
                               (static_cast<uint8_t>(bytes[offset + 1]) << 8));
}

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  return n;
}

const float kInf = std::numeric_limits<float>::infinity();

}  // namespace

// ----------------------------------------------------------------------------------------
// Dtypes.

TEST(SafetensorsDtype, NamesAndSizes) {
  EXPECT_EQ(retnet::dtype_size(DType::F32), 4u);
  EXPECT_EQ(retnet::dtype_size(DType::F16), 2u);
  EXPECT_EQ(retnet::dtype_size(DType::BF16), 2u);
  EXPECT_EQ(retnet::dtype_size(DType::F64), 8u);
  EXPECT_STREQ(retnet::dtype_name(DType::BF16), "BF16");
  DType d;
  EXPECT_TRUE(retnet::dtype_from_name("F16", &d));
  EXPECT_EQ(d, DType::F16);
  EXPECT_FALSE(retnet::dtype_from_name("I64", &d));
}

// ----------------------------------------------------------------------------------------
// Round trips.

TEST(Safetensors, RoundTripF32AsFloatAndDouble) {
  TempDir dir;
  const std::string path = dir.file("f32.safetensors");
  std::vector<float> a = {1.5f, -2.25f, 3e-40f, kInf, 0.1f, -0.0f};
  std::vector<float> b = {42.0f};
  save_safetensors(path, {{"a", DType::F32, {2, 3}, a.data()}, {"b", DType::F32, {}, b.data()}});

  SafetensorsFile file(path);
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].name, "a");
  EXPECT_EQ(file.info("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file.info("a").numel(), 6);
  EXPECT_EQ(file.info("b").shape, std::vector<int64_t>{});
  EXPECT_EQ(file.info("b").numel(), 1);
  EXPECT_TRUE(file.contains("b"));
  EXPECT_FALSE(file.contains("c"));

  std::vector<float> f(6);
  std::vector<double> d(6);
  file.read("a", f.data());
  file.read("a", d.data());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(&f[i], &a[i], 4), 0) << i;  // bit-exact, sign of zero included
    EXPECT_EQ(d[i], static_cast<double>(a[i])) << i;
  }
  float scalar = 0;
  file.read("b", &scalar);
  EXPECT_EQ(scalar, 42.0f);
}

TEST(Safetensors, RoundTripF16MatchesKnownBitPatterns) {
  TempDir dir;
  const std::string path = dir.file("f16.safetensors");
  const std::vector<float> values = {1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), kInf, 0.1f};
  const std::vector<uint16_t> bits = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x2E66};
  const std::vector<double> expected = {1.0,
                                        -2.0,
                                        65504.0,
                                        std::ldexp(1.0, -24),
                                        std::numeric_limits<double>::infinity(),
                                        0.0999755859375};
  save_safetensors(path, {{"h", DType::F16, {6}, values.data()}});

  // The bytes on disk are the known little-endian half patterns.
  const std::string bytes = read_bytes(path);
  const uint64_t data_start = 8 + header_length(bytes);
  ASSERT_EQ(bytes.size(), data_start + 12);
  for (size_t i = 0; i < bits.size(); ++i)
    EXPECT_EQ(u16_at(bytes, data_start + 2 * i), bits[i]) << i;

  SafetensorsFile file(path);
  EXPECT_EQ(file.info("h").dtype, DType::F16);
  std::vector<float> f(6);
  std::vector<double> d(6);
  file.read("h", f.data());
  file.read("h", d.data());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(f[i], static_cast<float>(expected[i])) << i;
    EXPECT_EQ(d[i], expected[i]) << i;
  }
}

TEST(Safetensors, RoundTripBf16MatchesKnownBitPatterns) {
  TempDir dir;
  const std::string path = dir.file("bf16.safetensors");
  const std::vector<float> values = {1.0f, -2.0f, kInf, 3.140625f, 1.00390625f};
  // 1.00390625 = 1 + 2^-8 is the tie between 0x3F80 and 0x3F81: even wins.
  const std::vector<uint16_t> bits = {0x3F80, 0xC000, 0x7F80, 0x4049, 0x3F80};
  const std::vector<double> expected = {1.0, -2.0, std::numeric_limits<double>::infinity(),
                                        3.140625, 1.0};
  save_safetensors(path, {{"w", DType::BF16, {5, 1}, values.data()}});

  // The bytes on disk are the known little-endian bfloat16 patterns, 2 bytes each.
  const std::string bytes = read_bytes(path);
  const uint64_t data_start = 8 + header_length(bytes);
  ASSERT_EQ(bytes.size(), data_start + 10);
  for (size_t i = 0; i < bits.size(); ++i)
    EXPECT_EQ(u16_at(bytes, data_start + 2 * i), bits[i]) << i;

  SafetensorsFile file(path);
  EXPECT_EQ(file.info("w").dtype, DType::BF16);
  std::vector<float> f(5);
  std::vector<double> d(5);
  file.read("w", f.data());
  file.read("w", d.data());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(f[i], static_cast<float>(expected[i])) << i;
    EXPECT_EQ(d[i], expected[i]) << i;
  }
}

TEST(Safetensors, RoundTripF64) {
  TempDir dir;
  const std::string path = dir.file("f64.safetensors");
  const std::vector<float> values = {0.1f, -7.0f, 1e-45f};
  save_safetensors(path, {{"x", DType::F64, {3}, values.data()}});
  SafetensorsFile file(path);
  EXPECT_EQ(file.info("x").nbytes(), 24u);
  std::vector<double> d(3);
  file.read("x", d.data());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(d[i], static_cast<double>(values[i]));
}

TEST(Safetensors, HeaderIsPaddedToMultipleOf8) {
  TempDir dir;
  for (const std::string name : {"a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg"}) {
    const std::string path = dir.file(name + ".safetensors");
    const float v = 1.0f;
    save_safetensors(path, {{name, DType::F32, {1}, &v}});
    const std::string bytes = read_bytes(path);
    const uint64_t n = header_length(bytes);
    EXPECT_EQ(n % 8, 0u) << name;
    EXPECT_EQ(bytes.size(), 8 + n + 4);
    SafetensorsFile file(path);
    EXPECT_EQ(file.data_start(), 8 + n);
  }
}

TEST(Safetensors, MetadataRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("meta.safetensors");
  const float v = 3.0f;
  save_safetensors(path, {{"v", DType::F32, {1}, &v}}, {{"format", "pt"}, {"note", "x"}});
  SafetensorsFile file(path);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "x");
  EXPECT_EQ(file.tensors().size(), 1u);  // __metadata__ is not a tensor
}

TEST(Safetensors, EmptyTensorsSitAtTensorBoundaries) {
  TempDir dir;
  // Ordered by (begin, end): a [0, 0], b [0, 8], c [8, 8]: each begins where the last ended.
  const std::string header = R"({"a":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("c":{"dtype":"F16","shape":[3,0],"data_offsets":[8,8]}})";
  const std::string path = dir.file("empty.safetensors");
  write_bytes(path, raw_file(header, 8));
  SafetensorsFile file(path);
  EXPECT_EQ(file.info("a").numel(), 0);
  float unused = 7.0f;
  file.read("a", &unused);
  EXPECT_EQ(unused, 7.0f);
}

TEST(Safetensors, LargeTensorIsStreamedInBlocks) {
  TempDir dir;
  const std::string path = dir.file("large.safetensors");
  // 3.5 MiB of F32 and ~1.7 MiB of F16: several transfer blocks, the last one partial.
  std::vector<float> values(900001);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 2048) - 1024.0f;
  save_safetensors(path, {{"big32", DType::F32, {900001}, values.data()},
                          {"big16", DType::F16, {900001}, values.data()}});
  SafetensorsFile file(path);
  std::vector<float> out32(values.size()), out16(values.size());
  file.read("big32", out32.data());
  file.read("big16", out16.data());
  EXPECT_EQ(out32, values);
  EXPECT_EQ(out16, values);  // small integers are exact in half precision
}

TEST(Safetensors, ParseFromMemoryMatchesFile) {
  TempDir dir;
  const std::string path = dir.file("mem.safetensors");
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  save_safetensors(
      path, {{"m", DType::BF16, {3, 2}, values.data()}, {"n", DType::F32, {6}, values.data()}});
  const std::string bytes = read_bytes(path);
  SafetensorsFile mem = SafetensorsFile::parse(
      "buffer", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  EXPECT_EQ(mem.path(), "buffer");
  ASSERT_EQ(mem.tensors().size(), 2u);
  std::vector<double> m(6), n(6);
  mem.read("m", m.data());
  mem.read("n", n.data());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(m[i], values[i]);
    EXPECT_EQ(n[i], values[i]);
  }
}

TEST(Safetensors, WriterRejectsBadTensors) {
  TempDir dir;
  const float v = 0;
  const std::string path = dir.file("w.safetensors");
  EXPECT_THROW(save_safetensors(path, {{"a", DType::F32, {1}, &v}, {"a", DType::F32, {1}, &v}}),
               retnet::InvalidArgument);
  EXPECT_THROW(save_safetensors(path, {{"a", DType::F32, {-1}, &v}}), retnet::InvalidArgument);
  EXPECT_THROW(save_safetensors(path, {{"a", DType::F32, {2}, nullptr}}), retnet::InvalidArgument);
  EXPECT_THROW(save_safetensors(path, {{"", DType::F32, {1}, &v}}), retnet::InvalidArgument);
  EXPECT_THROW(save_safetensors(dir.file("no/such/dir.safetensors"), {}), retnet::Error);
}

// ----------------------------------------------------------------------------------------
// The torchscale fixture.

TEST(Safetensors, ReadsTorchscaleFixture) {
  const std::string model_dir = std::string(RETNET_TEST_DATA_DIR) + "/torchscale-tiny";
  const retnet::ModelConfig c = retnet::load_config_json(model_dir + "/config.json");
  SafetensorsFile file(model_dir + "/model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");

  const int64_t d = c.embed_dim, dv = c.value_embed_dim, f = c.ffn_dim, v = c.vocab_size;
  std::map<std::string, std::vector<int64_t>> expected = {
      {"embed_tokens.weight", {v, d}},
      {"layer_norm.weight", {d}},
      {"output_projection.weight", {v, d}},
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    expected[p + "retention_layer_norm.weight"] = {d};
    expected[p + "retention.q_proj.weight"] = {d, d};
    expected[p + "retention.k_proj.weight"] = {d, d};
    expected[p + "retention.v_proj.weight"] = {dv, d};
    expected[p + "retention.g_proj.weight"] = {dv, d};
    expected[p + "retention.out_proj.weight"] = {d, dv};
    expected[p + "final_layer_norm.weight"] = {d};
    expected[p + "ffn.fc1.weight"] = {f, d};
    expected[p + "ffn.gate.weight"] = {f, d};
    expected[p + "ffn.fc2.weight"] = {d, f};
  }
  ASSERT_EQ(file.tensors().size(), expected.size());
  EXPECT_EQ(expected.size(), 23u);
  uint64_t bytes = 0;
  for (const retnet::TensorInfo& t : file.tensors()) {
    ASSERT_TRUE(expected.count(t.name)) << t.name;
    EXPECT_EQ(t.shape, expected[t.name]) << t.name;
    EXPECT_EQ(t.dtype, DType::F32) << t.name;
    bytes += t.nbytes();
    std::vector<float> data(static_cast<size_t>(t.numel()));
    file.read(t.name, data.data());
    double sum_sq = 0;
    for (float x : data) {
      ASSERT_TRUE(std::isfinite(x)) << t.name;
      sum_sq += static_cast<double>(x) * x;
    }
    EXPECT_GT(sum_sq, 0.0) << t.name;
  }
  EXPECT_EQ(bytes, file.data_size());  // the tensors tile the whole data area
}

// ----------------------------------------------------------------------------------------
// Malformed files: one test per defect. Each checks the file is named with the specifics.

TEST(SafetensorsBad, TruncatedFile) {
  TempDir dir;
  expect_format_error(dir, std::string("\x10\x00\x00", 3), {"truncated", "8 bytes", "found 3"});
}

TEST(SafetensorsBad, EmptyFile) {
  TempDir dir;
  expect_format_error(dir, "", {"truncated", "found 0"});
}

TEST(SafetensorsBad, HeaderLengthPastEndOfFile) {
  TempDir dir;
  expect_format_error(dir, le64(1000) + "{}" + std::string(10, ' '),
                      {"header length 1000", "past the end", "expected at most 12"});
}

TEST(SafetensorsBad, HugeHeaderLengthIsRejectedBeforeAllocating) {
  TempDir dir;
  expect_format_error(dir, le64(0xFFFFFFFFFFFFFFF0ull) + "{}",
                      {"header length 18446744073709551600", "past the end"});
}

TEST(SafetensorsBad, HeaderNotJson) {
  TempDir dir;
  expect_format_error(dir, raw_file("{\"a\": [1, 2", 0), {"header is not valid JSON"});
}

TEST(SafetensorsBad, HeaderNotAnObject) {
  TempDir dir;
  expect_format_error(
      dir, raw_file("[1, 2, 3]", 0),
      {"not a JSON object", "expected it to begin with '{'", "found \"[1, 2, 3]\""});
}

// ----------------------------------------------------------------------------------------
// The reference implementation's rules (docs/FORMATS.md, "What the loaders check"), and nesting.

TEST(SafetensorsBad, HeaderMustBeginWithABrace) {
  TempDir dir;
  // Valid JSON, but the reference refuses leading whitespace.
  expect_format_error(
      dir, raw_file(R"( {"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4),
      {"expected it to begin with '{'", "found \" {\\\"w\\\": {\\\"dtype\\\":\""});
}

TEST(SafetensorsBad, DuplicateTensorName) {
  TempDir dir;
  // Before: the second entry silently replaced the first, whose bytes went unused.
  expect_format_error(dir,
                      raw_file(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                               R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                               8),
                      {"header has the key w twice", "duplicate keys are refused"});
}

TEST(SafetensorsBad, DuplicateKeyInsideAnEntry) {
  TempDir dir;
  expect_format_error(
      dir,
      raw_file(R"({"w": {"dtype": "F32", "dtype": "F16", "shape": [1], "data_offsets": [0, 4]}})",
               4),
      {"header has the key dtype twice"});
}

TEST(SafetensorsBad, GapBetweenTensors) {
  TempDir dir;
  expect_format_error(dir,
                      raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                               R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                               12),
                      {"tensor b", "data_offsets [8, 12]", "gap of 4 bytes after tensor a",
                       "expected contiguous byte ranges"});
}

TEST(SafetensorsBad, GapAtTheStart) {
  TempDir dir;
  expect_format_error(
      dir, raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
      {"tensor a", "gap of 4 bytes after the start of the data area"});
}

TEST(SafetensorsBad, TrailingBytesAfterTheTensors) {
  TempDir dir;
  expect_format_error(
      dir, raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 9),
      {"the tensors cover 4 bytes of the 9-byte data area", "5 trailing bytes"});
  expect_format_error(dir, raw_file("{}", 3), {"cover 0 bytes of the 3-byte data area"});
}

TEST(SafetensorsBad, EmptyTensorInsideAnother) {
  TempDir dir;
  expect_format_error(dir,
                      raw_file(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},)"
                               R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                               8),
                      {"tensor a", "data_offsets [4, 4]", "overlap tensor b"});
}

TEST(SafetensorsBad, MetadataNested) {
  TempDir dir;
  expect_format_error(dir, raw_file(R"({"__metadata__": {"format": {"pt": "x"}}})", 0),
                      {"__metadata__ entry format must be a string", "found object"});
}

// A one-tensor header whose `key` value is 1 wrapped in `depth` arrays: [[[...1...]]].
std::string nested_header(const std::string& key, size_t depth) {
  std::map<std::string, std::string> fields = {
      {"dtype", "\"F32\""}, {"shape", "[1]"}, {"data_offsets", "[0, 4]"}};
  fields[key] = std::string(depth, '[') + "1" + std::string(depth, ']');
  std::string entry;
  for (const auto& [k, v] : fields) entry += (entry.empty() ? "" : ", ") + ("\"" + k + "\": " + v);
  return "{\"w\": {" + entry + "}}";
}

TEST(SafetensorsBad, DeeplyNestedValuesAreRefusedWithoutRecursion) {
  // Before: a value nested 100 000 deep (a 200 KB header) crashed with a stack overflow in
  // nlohmann's dump() while the error message was built.
  TempDir dir;
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    SCOPED_TRACE(key);
    const std::string message =
        expect_format_error(dir, raw_file(nested_header(key, 100000), 4),
                            {"header nests arrays and objects deeper than 64 levels"});
    EXPECT_LT(message.size(), 400u);
  }
  // 64 levels is the limit (the header object is one of them); 63 nested arrays still parse.
  expect_format_error(dir, raw_file(nested_header("shape", 62), 4),
                      {"tensor w", "shape dimension must be an integer", "found [[[[["});
  expect_format_error(dir, raw_file(nested_header("shape", 63), 4), {"deeper than 64 levels"});
}

TEST(SafetensorsBad, FileContentIsQuotedBoundedAndEscaped) {
  TempDir dir;
  // A megabyte-long dtype holding a newline and a terminal escape.
  const std::string dtype = "F\\n\\u001b[31m" + std::string(1 << 20, 'x');  // JSON escapes
  const std::string message = expect_format_error(
      dir,
      raw_file(R"({"w": {"dtype": ")" + dtype + R"(", "shape": [1], "data_offsets": [0, 4]}})", 4),
      {"tensor w", "unknown dtype \"F\\x0a\\x1b[31mxxx", "bytes)"});
  EXPECT_LT(message.size(), 300u);
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_EQ(message.find('\x1b'), std::string::npos);
  // A tensor name that is not plain is quoted and escaped too.
  const std::string m2 = expect_format_error(
      dir,
      raw_file("{\"" + std::string("bad\\nname") + std::string(5000, 'n') +
                   R"(": {"dtype": "I16", "shape": [1], "data_offsets": [0, 2]}})",
               2),
      {"tensor \"bad\\x0aname"});
  EXPECT_LT(m2.size(), 400u);
  EXPECT_EQ(m2.find('\n'), std::string::npos);
}

TEST(SafetensorsBad, InvalidJsonMessageIsBounded) {
  TempDir dir;
  // nlohmann quotes the token read so far ("last read: ..."), here a 1 MB string.
  const std::string message =
      expect_format_error(dir, raw_file("{\"" + std::string(1 << 20, 'k') + "\x01\": 1}", 0),
                          {"header is not valid JSON"});
  EXPECT_LT(message.size(), 400u);
}

TEST(SafetensorsBad, EntryNotAnObject) {
  TempDir dir;
  expect_format_error(dir, raw_file(R"({"w": [1, 2]})", 0),
                      {"tensor w", "must be a JSON object", "found array"});
}

TEST(SafetensorsBad, MissingDtype) {
  TempDir dir;
  expect_format_error(dir, raw_file(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4),
                      {"tensor w", "missing \"dtype\""});
}

TEST(SafetensorsBad, MissingShape) {
  TempDir dir;
  expect_format_error(dir, raw_file(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4),
                      {"tensor w", "missing \"shape\""});
}

TEST(SafetensorsBad, MissingDataOffsets) {
  TempDir dir;
  expect_format_error(dir, raw_file(R"({"w": {"dtype": "F32", "shape": [1]}})", 4),
                      {"tensor w", "missing \"data_offsets\""});
}

TEST(SafetensorsBad, DtypeNotAString) {
  TempDir dir;
  expect_format_error(dir,
                      raw_file(R"({"w": {"dtype": 32, "shape": [1], "data_offsets": [0, 4]}})", 4),
                      {"tensor w", "\"dtype\" must be a string", "found 32"});
}

TEST(SafetensorsBad, ShapeNotAnArray) {
  TempDir dir;
  expect_format_error(
      dir, raw_file(R"({"w": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}})", 4),
      {"tensor w", "\"shape\" must be an array"});
}

TEST(SafetensorsBad, ShapeDimensionNotAnInteger) {
  TempDir dir;
  expect_format_error(
      dir, raw_file(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4),
      {"tensor w", "shape dimension must be an integer", "found 1.5"});
}

TEST(SafetensorsBad, NegativeDimension) {
  TempDir dir;
  expect_format_error(
      dir, raw_file(R"({"w": {"dtype": "F32", "shape": [2, -3], "data_offsets": [0, 4]}})", 4),
      {"tensor w", "shape dimension must be >= 0", "found -3"});
}

TEST(SafetensorsBad, DataOffsetsNotAPair) {
  TempDir dir;
  expect_format_error(dir,
                      raw_file(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4),
                      {"tensor w", "\"data_offsets\" must be an array [begin, end]", "found [0]"});
}

TEST(SafetensorsBad, NegativeDataOffset) {
  TempDir dir;
  expect_format_error(
      dir, raw_file(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4),
      {"tensor w", "data_offsets begin must be >= 0", "found -4"});
}

TEST(SafetensorsBad, UnknownDtype) {
  TempDir dir;
  expect_format_error(
      dir, raw_file(R"({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8),
      {"tensor w", "unknown dtype \"I64\"", "expected F32, F16, BF16, F64, I8 or U8"});
}

TEST(SafetensorsBad, NumelOverflow) {
  TempDir dir;
  expect_format_error(dir,
                      raw_file(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 16],)"
                               R"( "data_offsets": [0, 4]}})",
                               4),
                      {"tensor w", "overflows 64 bits"});
}

TEST(SafetensorsBad, ByteSizeOverflow) {
  TempDir dir;
  // 2^62 elements fit in int64 but 2^62 x 4 bytes does not fit in 64 bits.
  expect_format_error(dir,
                      raw_file(R"({"w": {"dtype": "F32", "shape": [4611686018427387904],)"
                               R"( "data_offsets": [0, 4]}})",
                               4),
                      {"tensor w", "byte size", "overflows 64 bits"});
}

TEST(SafetensorsBad, DataOffsetsOutsideDataArea) {
  TempDir dir;
  expect_format_error(
      dir, raw_file(R"({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", 16),
      {"tensor w", "data_offsets [0, 32]", "outside the data area", "expected end <= 16"});
}

TEST(SafetensorsBad, DataOffsetsBeginAfterEnd) {
  TempDir dir;
  expect_format_error(
      dir, raw_file(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8),
      {"tensor w", "data_offsets [8, 4]", "begin > end"});
}

TEST(SafetensorsBad, OverlappingDataOffsets) {
  TempDir dir;
  expect_format_error(
      dir,
      raw_file(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
               R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
               24),
      {"tensor b", "data_offsets [8, 24]", "overlap tensor a", "[0, 16]", "disjoint"});
}

TEST(SafetensorsBad, DataOffsetsDoNotMatchShapeTimesDtype) {
  TempDir dir;
  expect_format_error(
      dir, raw_file(R"({"w": {"dtype": "F16", "shape": [3, 2], "data_offsets": [0, 24]}})", 24),
      {"tensor w", "span 24 bytes, expected 12", "shape [3, 2] x 2 bytes of F16"});
}

TEST(SafetensorsBad, MetadataNotAStringMap) {
  TempDir dir;
  expect_format_error(dir, raw_file(R"({"__metadata__": {"format": 1}})", 0),
                      {"__metadata__ entry format must be a string"});
}

TEST(SafetensorsBad, MissingTensor) {
  TempDir dir;
  const std::string path = dir.file("one.safetensors");
  const float v = 1;
  save_safetensors(path, {{"present", DType::F32, {1}, &v}});
  SafetensorsFile file(path);
  float out;
  expect_error<FormatError>([&] { file.read("absent.weight", &out); },
                            {path, "missing tensor absent.weight"});
}

TEST(SafetensorsBad, FileTruncatedAfterOpening) {
  TempDir dir;
  const std::string path = dir.file("shrunk.safetensors");
  std::vector<float> values(1000, 1.0f);
  save_safetensors(path, {{"w", DType::F32, {1000}, values.data()}});
  SafetensorsFile file(path);
  fs::resize_file(path, fs::file_size(path) - 100);
  expect_error<FormatError>([&] { file.read("w", values.data()); },
                            {path, "tensor w", "expected 4000 bytes"});
}

TEST(SafetensorsBad, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("nope.safetensors");
  expect_error<FormatError>([&] { SafetensorsFile file(path); }, {path, "no such file"});
}

TEST(SafetensorsBad, NotARegularFile) {
  TempDir dir;
  expect_error<FormatError>([&] { SafetensorsFile file(dir.str()); },
                            {dir.str(), "is a directory, expected a regular file"});
  const std::string fifo = dir.file("fifo.safetensors");
  retnet::testing::Fifo made(fifo);
  ASSERT_TRUE(made.ok());
  expect_error<FormatError>([&] { SafetensorsFile file(fifo); },
                            {fifo, "is a FIFO (named pipe), expected a regular file"});
}

TEST(SafetensorsBad, NonFiniteValuesRefusedWhenAsked) {
  TempDir dir;
  const std::string path = dir.file("nan.safetensors");
  const std::vector<float> values = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  const double huge = 1e300;  // finite as F64, +inf as float
  save_safetensors(path, {{"v", DType::F32, {3}, values.data()}});
  SafetensorsFile file(path);
  std::vector<float> out(3);
  file.read(file.info("v"), out.data());  // a plain read returns the values as stored
  EXPECT_TRUE(std::isnan(out[1]));
  expect_error<FormatError>([&] { file.read(file.info("v"), out.data(), true); },
                            {path, "tensor v: element 1 of 3 is NaN", "expected finite weights"});
  // F64 beyond float's range is finite in the file but +inf once read as float.
  std::string bytes =
      raw_file(R"({"d": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 0);
  std::string value(8, '\0');
  std::memcpy(&value[0], &huge, 8);
  bytes += value;
  const SafetensorsFile mem =
      SafetensorsFile::parse("mem", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  float f = 0;
  double d = 0;
  mem.read(mem.info("d"), &d, true);
  EXPECT_EQ(d, huge);
  expect_error<FormatError>([&] { mem.read(mem.info("d"), &f, true); },
                            {"mem: tensor d: element 0 of 1 is +inf (as float)"});
}
