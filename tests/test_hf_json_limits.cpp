// The memory budget of tokenizer.json (text/hf/tokenizer_json.hpp: parse_tokenizer_json): the
// DOM of the keys the library reads or ignores and the streamed vocabulary and merges share
// json_memory_budget(text size), so that no part of the file costs more than the budget.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "expect_error.hpp"
#include "json_text.hpp"
#include "retnet/core/json.hpp"
#include "retnet/text/hf/tokenizer_json.hpp"

using retnet::FormatError;
using retnet::testing::empty_objects;
using retnet::testing::expect_error;

namespace {

constexpr size_t kTooMany = retnet::testing::kTooManyEmptyObjects;

const char* kModel = R"("model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]})";

}  // namespace

// Issue 25, cause 8: keys the library does not read took 690 MB in a DOM.
TEST(TokenizerJsonLimits, UnusedKeysOverTheBudgetAreRefused) {
  const std::string text =
      std::string("{") + kModel + ",\"unused\":" + empty_objects(kTooMany) + "}";
  expect_error<FormatError>(
      [&] { retnet::detail::hf::parse_tokenizer_json(text, "DIR/tokenizer.json"); },
      {"DIR/tokenizer.json: the file would take more than", "of memory once parsed"});
}

// The streamed merges count against the same budget: 3 bytes of text ("\"\",") for 96 bytes of
// Merge each.
TEST(TokenizerJsonLimits, StreamedMergesCountAgainstTheBudget) {
  std::string merges = "[";
  for (size_t i = 0; i < kTooMany; ++i) merges += "\"\",";
  merges.back() = ']';
  const std::string text = R"({"model":{"type":"BPE","vocab":{"a":0},"merges":)" + merges + "}}";
  expect_error<FormatError>(
      [&] { retnet::detail::hf::parse_tokenizer_json(text, "DIR/tokenizer.json"); },
      {"DIR/tokenizer.json: the file would take more than", "of memory once parsed"});
  // A tenth as many: parsed, every merge kept.
  std::string fewer = "[";
  for (size_t i = 0; i < kTooMany / 10; ++i) fewer += "\"a b\",";
  fewer.back() = ']';
  const auto parts = retnet::detail::hf::parse_tokenizer_json(
      R"({"model":{"type":"BPE","vocab":{"a":0},"merges":)" + fewer + "}}", "t.json");
  EXPECT_EQ(parts.merges.size(), kTooMany / 10);
}
