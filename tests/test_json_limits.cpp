// Tests of parse_json's memory budget (core/json.hpp: JsonMemoryEstimate, json_memory_budget)
// and of the readers built on it (config.json, the safetensors index, the safetensors header):
// a document whose parsed form would take more than 64 MiB + 2 bytes per byte of text is
// refused while it is read, naming the file and the limit; real-shaped documents pass.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "expect_error.hpp"
#include "json_text.hpp"
#include "retnet/core/json.hpp"
#include "retnet/io/checkpoint.hpp"
#include "retnet/io/config_json.hpp"
#include "retnet/io/safetensors.hpp"
#include "retnet/model/config.hpp"
#include "temp_dir.hpp"

using retnet::FormatError;
using retnet::JsonMemoryEstimate;
using retnet::testing::empty_objects;
using retnet::testing::expect_error;

namespace {

constexpr size_t kTooMany = retnet::testing::kTooManyEmptyObjects;

// The estimate of `text`, parsed with no budget.
uint64_t estimate(const std::string& text) {
  retnet::detail::BoundedJsonBuilder builder(retnet::kMaxJsonDepth, UINT64_MAX);
  EXPECT_TRUE(nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &builder));
  return builder.bytes();
}

}  // namespace

TEST(JsonLimits, EstimateCountsEveryValueKeyAndString) {
  using C = JsonMemoryEstimate;
  EXPECT_EQ(estimate("[]"), C::kValue + C::kArray);
  EXPECT_EQ(estimate("[0,1,2]"), C::kValue + C::kArray + 3 * C::kValue);
  EXPECT_EQ(estimate(R"({"a":{}})"), C::kValue + C::kObject + C::kKey + C::kValue + C::kObject);
  const std::string long_text(100, 'x');
  EXPECT_EQ(estimate("[\"" + long_text + "\",\"short\"]"),
            C::kValue + C::kArray + 2 * (C::kValue + C::kString) + 100 + 32);
  EXPECT_EQ(estimate("{\"" + long_text + "\":null}"),
            C::kValue + C::kObject + C::kKey + 100 + 32 + C::kValue);
  EXPECT_EQ(estimate(empty_objects(1000)), C::kValue + C::kArray + 1000 * (C::kValue + C::kObject));
}

TEST(JsonLimits, RefusesADocumentOverItsBudgetWhileReadingIt) {
  const std::string text = empty_objects(kTooMany);
  EXPECT_GT(estimate(text), retnet::json_memory_budget(text.size()));
  expect_error<FormatError>([&] { retnet::parse_json(text, "big.json"); },
                            {"big.json: the file would take more than 70.0 MiB of memory once "
                             "parsed (the limit for a text of this size: 64 MiB + 2 bytes per "
                             "byte of text"});
  // The same number of values, half of them: inside the budget.
  EXPECT_NO_THROW(retnet::parse_json(empty_objects(kTooMany / 2), "half.json"));
}

// A checkpoint index of 100 000 tensors in 1 000 shards (8 MB of text) is estimated well
// inside its budget.
TEST(JsonLimits, ARealShapedIndexPasses) {
  std::string text = R"({"metadata":{"total_size":1},"weight_map":{)";
  for (int i = 0; i < 100000; ++i) {
    char shard[64];
    std::snprintf(shard, sizeof shard, "model-%05d-of-01000.safetensors", i / 100 + 1);
    text += "\"model.layers." + std::to_string(i) + ".self_attn.q_proj.weight\":\"" + shard + "\",";
  }
  text.back() = '}';
  text += "}";
  EXPECT_LT(estimate(text), retnet::json_memory_budget(text.size()) / 2);
  EXPECT_EQ(retnet::CheckpointReader::parse_index(text, "index").size(), 100000u);
}

// Issue 25, cause 8: a config.json of unused keys took 36 times its size.
TEST(JsonLimits, ConfigJsonOverItsBudgetIsRefused) {
  retnet::testing::TempDir dir;
  const std::string path = dir.str() + "/config.json";
  nlohmann::json config = retnet::ModelConfig().to_json();
  std::string text = config.dump();
  text.back() = ',';
  text += "\"unused\":" + empty_objects(kTooMany) + "}";
  std::ofstream(path) << text;
  expect_error<FormatError>([&] { retnet::load_config_json(path); },
                            {path + ": the file would take more than", "of memory once parsed"});
}

// Issue 25, cause 8: an index with a large unused key took 33 times its size.
TEST(JsonLimits, IndexOverItsBudgetIsRefused) {
  const std::string text =
      R"({"weight_map":{"a":"model.safetensors"},"unused":)" + empty_objects(kTooMany) + "}";
  expect_error<FormatError>(
      [&] { retnet::CheckpointReader::parse_index(text, "DIR/model.safetensors.index.json"); },
      {"DIR/model.safetensors.index.json: the file would take more than", "once parsed"});
}

// Issue 25, cause 8: a safetensors header took up to 47 times its size.
TEST(JsonLimits, SafetensorsHeaderOverItsBudgetIsRefused) {
  const std::string header = R"({"__metadata__":{"a":"b"},"t":)" + empty_objects(kTooMany) + "}";
  std::string file(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(&file[0], &length, 8);
  file += header;
  expect_error<FormatError>(
      [&] {
        retnet::SafetensorsFile::parse("m.safetensors",
                                       reinterpret_cast<const uint8_t*>(file.data()), file.size());
      },
      {"m.safetensors: header would take more than", "of memory once parsed"});
}

TEST(JsonLimits, ANumberBeyondADoubleNamesItsKey) {
  try {
    retnet::parse_json(R"({"prompt":"a","max_tokens":1e999})", "request", "the body");
    FAIL() << "1e999 parsed";
  } catch (const retnet::JsonNumberOverflow& e) {
    EXPECT_EQ(e.key(), "max_tokens");
    EXPECT_STREQ(e.what(),
                 "request: the body has a number too large for a double (1e999) as the value of "
                 "key max_tokens");
  }
  try {
    retnet::parse_json("[1,-1e400]", "a.json");
    FAIL() << "-1e400 parsed";
  } catch (const retnet::JsonNumberOverflow& e) {
    EXPECT_EQ(e.key(), "");
    EXPECT_STREQ(e.what(), "a.json: the file has a number too large for a double (-1e400)");
  }
  EXPECT_NO_THROW(retnet::parse_json(R"({"a":1e308,"b":1e-400})", "ok.json"));
}
