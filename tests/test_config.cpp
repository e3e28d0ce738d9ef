// Tests of load_config_json (io/config_json.hpp): the fixture config, defaults, and one test per
// bad config, each expecting a FormatError that names the offending key.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "fifo.hpp"
#include "retnet/core/error.hpp"
#include "retnet/io/config_json.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using retnet::FormatError;
using retnet::ModelConfig;

namespace {

using retnet::testing::expect_error;
using retnet::testing::TempDir;

json good_config() {
  return {{"vocab_size", 97},
          {"decoder_embed_dim", 64},
          {"decoder_value_embed_dim", 128},
          {"decoder_retention_heads", 4},
          {"decoder_ffn_embed_dim", 96},
          {"decoder_layers", 2}};
}

// Writes `text` as config.json and returns its path.
std::string write_config(const TempDir& dir, const std::string& text) {
  const std::string path = dir.file("config.json");
  std::ofstream(path) << text;
  return path;
}

// Expects load_config_json to throw FormatError whose message has every snippet.
void expect_bad(const json& config, const std::vector<std::string>& snippets) {
  TempDir dir;
  const std::string path = write_config(dir, config.dump());
  SCOPED_TRACE(config.dump());
  expect_error<FormatError>([&] { retnet::load_config_json(path); }, snippets);
}

}  // namespace

TEST(Config, LoadsFixture) {
  const ModelConfig c =
      retnet::load_config_json(std::string(RETNET_TEST_DATA_DIR) + "/torchscale-tiny/config.json");
  EXPECT_EQ(c.vocab_size, 97);
  EXPECT_EQ(c.embed_dim, 64);
  EXPECT_EQ(c.value_embed_dim, 128);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.ffn_dim, 96);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.activation, retnet::Activation::kSwish);
  EXPECT_EQ(c.chunk_size, 4);
  EXPECT_DOUBLE_EQ(c.eps, 1e-6);
  EXPECT_FALSE(c.scale_embedding);
  EXPECT_FALSE(c.layernorm_embedding);
  EXPECT_EQ(c.key_head_dim(), 16);
  EXPECT_EQ(c.value_head_dim(), 32);
}

TEST(Config, DefaultsFollowTorchscale) {
  TempDir dir;
  const ModelConfig c = retnet::load_config_json(write_config(dir, good_config().dump()));
  EXPECT_EQ(c.activation, retnet::Activation::kGelu);
  EXPECT_EQ(c.norm, retnet::NormKind::kRMSNorm);
  EXPECT_DOUBLE_EQ(c.eps, 1e-6);
  EXPECT_FALSE(c.scale_embedding);
  EXPECT_FALSE(c.layernorm_embedding);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_TRUE(c.use_glu);
  EXPECT_FALSE(c.subln);
}

TEST(Config, OptionalKeys) {
  json j = good_config();
  j["tie_word_embeddings"] = true;
  j["no_scale_embedding"] = false;
  j["norm_type"] = "layernorm";
  j["activation_fn"] = "silu";
  TempDir dir;
  const ModelConfig c = retnet::load_config_json(write_config(dir, j.dump()));
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_TRUE(c.scale_embedding);
  EXPECT_EQ(c.norm, retnet::NormKind::kLayerNorm);
  EXPECT_EQ(c.activation, retnet::Activation::kSwish);
  // to_json writes a config that loads back to the same values.
  const ModelConfig back = retnet::read_config_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
}

TEST(ConfigBad, MissingRequiredKey) {
  for (const char* key : {"vocab_size", "decoder_embed_dim", "decoder_value_embed_dim",
                          "decoder_retention_heads", "decoder_ffn_embed_dim", "decoder_layers"}) {
    SCOPED_TRACE(key);
    json j = good_config();
    j.erase(key);
    expect_bad(j, {"missing required key", std::string("\"") + key + "\""});
  }
}

TEST(ConfigBad, EmbedDimNotDivisibleByHeads) {
  json j = good_config();
  j["decoder_embed_dim"] = 66;
  expect_bad(j, {"decoder_embed_dim 66", "not divisible by decoder_retention_heads 4"});
}

TEST(ConfigBad, ValueDimNotDivisibleByHeads) {
  json j = good_config();
  j["decoder_value_embed_dim"] = 130;
  expect_bad(j, {"decoder_value_embed_dim 130", "not divisible by decoder_retention_heads 4"});
}

TEST(ConfigBad, OddKeyHeadSize) {
  json j = good_config();
  j["decoder_embed_dim"] = 12;  // 12 / 4 heads = 3
  expect_bad(j, {"decoder_embed_dim", "= 3", "must be even"});
}

TEST(ConfigBad, ZeroSizes) {
  for (const char* key :
       {"vocab_size", "decoder_embed_dim", "decoder_value_embed_dim", "decoder_retention_heads",
        "decoder_ffn_embed_dim", "decoder_layers", "recurrent_chunk_size"}) {
    SCOPED_TRACE(key);
    json j = good_config();
    j[key] = 0;
    expect_bad(j, {std::string(key) + " must be > 0", "found 0"});
  }
}

TEST(ConfigBad, NegativeSize) {
  json j = good_config();
  j["decoder_layers"] = -2;
  expect_bad(j, {"decoder_layers must be > 0", "found -2"});
}

TEST(ConfigBad, SizeNotAnInteger) {
  json j = good_config();
  j["decoder_ffn_embed_dim"] = "96";
  expect_bad(j, {"\"decoder_ffn_embed_dim\" must be an integer"});
}

TEST(ConfigBad, BadActivation) {
  json j = good_config();
  j["activation_fn"] = "relu";
  expect_bad(j, {"key \"activation_fn\" must be gelu, swish or silu, found \"relu\""});
}

TEST(ConfigBad, BadNormType) {
  json j = good_config();
  j["norm_type"] = "batchnorm";
  expect_bad(j, {"key \"norm_type\" must be rmsnorm or layernorm, found \"batchnorm\""});
}

TEST(ConfigBad, BadEps) {
  json j = good_config();
  j["layernorm_eps"] = 0.0;
  expect_bad(j, {"layernorm_eps", "> 0"});
}

TEST(ConfigBad, FlagNotABoolean) {
  json j = good_config();
  j["use_glu"] = "yes";
  expect_bad(j, {"key \"use_glu\" must be true or false, found \"yes\""});
}

TEST(ConfigBad, NotJson) {
  TempDir dir;
  const std::string path = write_config(dir, "{\"vocab_size\": 97,");
  expect_error<FormatError>([&] { retnet::load_config_json(path); }, {path, "not valid JSON"});
}

TEST(ConfigBad, NotAnObject) {
  expect_bad(json::array({1, 2}), {"config.json", "expected a JSON object"});
}

TEST(ConfigBad, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  expect_error<FormatError>([&] { retnet::load_config_json(path); }, {path});
}

// ----------------------------------------------------------------------------------------
// Hostile configs: each refused with one line naming the key.

// Case 1: nesting is bounded while parsing; nothing is dumped unbounded into the message.
TEST(ConfigBad, DeeplyNestedValue) {
  TempDir dir;
  for (const char* key : {"vocab_size", "unused_key"}) {
    SCOPED_TRACE(key);
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    json j = good_config();
    std::string text = j.dump();
    text.insert(1, "\"" + std::string(key) + "\": " + deep + ", ");
    if (std::string(key) == "vocab_size")
      text.replace(text.find("\"vocab_size\":97"), 16, "\"x\":1");
    const std::string path = write_config(dir, text);
    const std::string message =
        expect_error<FormatError>([&] { retnet::load_config_json(path); },
                                  {path, "nests arrays and objects deeper than 64 levels"});
    EXPECT_LT(message.size(), 300u);
  }
}

TEST(ConfigBad, DuplicateKey) {
  TempDir dir;
  std::string text = good_config().dump();
  text.insert(1, "\"decoder_layers\": 2000, ");
  const std::string path = write_config(dir, text);
  expect_error<FormatError>([&] { retnet::load_config_json(path); },
                            {path, "has the key decoder_layers twice"});
}

TEST(ConfigBad, SizeBeyondSigned64Bits) {
  json j = good_config();
  j["decoder_layers"] = std::numeric_limits<uint64_t>::max();
  expect_bad(j, {"\"decoder_layers\" = 18446744073709551615", "does not fit"});
}

TEST(ConfigBad, LongStringValueIsQuotedBounded) {
  json j = good_config();
  j["activation_fn"] = "relu\n\x1b[2J" + std::string(1 << 20, 'z');
  TempDir dir;
  const std::string path = write_config(dir, j.dump());
  const std::string message = expect_error<FormatError>(
      [&] { retnet::load_config_json(path); },
      {"key \"activation_fn\" must be gelu, swish or silu, found \"relu\\x0a\\x1b[2Jzzz",
       "bytes)"});
  EXPECT_LT(message.size(), 300u);
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

// Case 8: a FIFO must not hang, a directory must not give a raw stream error.
TEST(ConfigBad, NotARegularFile) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  {
    retnet::testing::Fifo fifo(path);
    ASSERT_TRUE(fifo.ok());
    expect_error<FormatError>([&] { retnet::load_config_json(path); },
                              {path, "is a FIFO (named pipe), expected a regular file"});
  }
  fs::remove(path);
  fs::create_directory(path);
  expect_error<FormatError>([&] { retnet::load_config_json(path); },
                            {path, "is a directory, expected a regular file"});
}

TEST(ConfigBad, TooLarge) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  {
    std::ofstream out(path);
    out << good_config().dump() << std::string(retnet::kMaxConfigBytes, ' ');
  }
  expect_error<FormatError>([&] { retnet::load_config_json(path); },
                            {path, "more than the 16777216-byte limit for a config file"});
}

// fla's dims from ratios: int(d * expand) is computed in double and checked before it becomes an
// integer (beyond int64 the conversion is undefined behaviour); a key dim that truncates to 0
// is refused, not read as "the default, d".
namespace {

json fla_config() {
  std::ifstream in(std::string(RETNET_TEST_DATA_DIR) + "/fla-tiny/config.json");
  return json::parse(in);
}

}  // namespace

TEST(ConfigBad, FlaKeyDimTruncatingToZero) {
  json j = fla_config();  // hidden_size 64
  j["expand_k"] = 0.01;
  expect_bad(j, {"key \"expand_k\" = 0.01 gives key dim int(hidden_size * expand_k) = 0.0",
                 "outside [1, 1048576]"});
}

TEST(ConfigBad, FlaRatiosBeyondInt64) {
  for (const auto& [key, dim] : std::vector<std::pair<const char*, const char*>>{
           {"expand_k", "key dim int(hidden_size * expand_k)"},
           {"expand_v", "value dim int(hidden_size * expand_v)"},
           {"hidden_ratio", "intermediate_size 256 * ceil(int(hidden_size * hidden_ratio"}}) {
    for (const double ratio : {1e300, -1e300, 1.5e17, -3.0}) {
      SCOPED_TRACE(std::string(key) + " " + std::to_string(ratio));
      json j = fla_config();
      j[key] = ratio;
      expect_bad(j, {"key \"" + std::string(key) + "\" = ", dim, "outside [1, 1048576]"});
    }
  }
  // A size beyond the limits with an invalid d is reported as d's.
  json j = fla_config();
  j["hidden_size"] = int64_t(1) << 60;
  j["expand_v"] = 1e300;
  expect_bad(j, {"hidden_size = 1152921504606846976 is above the supported 1048576"});
}

TEST(ConfigBad, FlaStringsAreQuotedBoundedAndEscaped) {
  const std::string hostile = "\n\x1b[2J" + std::string(1500000, 'x') + "\n\x1b[2J";
  for (const char* key : {"hidden_act", "feature_map"}) {
    SCOPED_TRACE(key);
    json j = fla_config();
    j[key] = hostile;
    TempDir dir;
    const std::string path = write_config(dir, j.dump());
    const std::string message =
        expect_error<FormatError>([&] { retnet::load_config_json(path); }, {path, key});
    EXPECT_LT(message.size(), 400u + path.size());
    EXPECT_EQ(message.find('\n'), std::string::npos);
    EXPECT_EQ(message.find('\x1b'), std::string::npos);
  }
}
