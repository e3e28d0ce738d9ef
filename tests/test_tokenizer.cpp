#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "expect_error.hpp"
#include "retnet/text/tokenizer.hpp"

namespace {

using retnet::ByteTokenizer;
using retnet::testing::expect_error;

TEST(ByteTokenizerTest, RoundTripsAllBytes) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  ASSERT_EQ(all.size(), 256u);

  const ByteTokenizer tok;
  const std::vector<int32_t> ids = tok.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(ids[b], b);  // ids are the unsigned byte values, never negative
    EXPECT_EQ(tok.decode_token(b), std::string(1, static_cast<char>(b)));
  }
  EXPECT_EQ(tok.decode(ids), all);
}

TEST(ByteTokenizerTest, RoundTripsInvalidUtf8AndNul) {
  // Lone continuation byte, truncated 3-byte sequence, overlong NUL, surrogate, 0xFF,
  // embedded NULs; the string_view constructor with a length keeps the NULs.
  const char raw[] =
      "a\x80"
      "b\xE2\x82"
      "\0c\xC0\x80\xED\xA0\x80\xFF\0";
  const std::string text(raw, sizeof(raw) - 1);
  ASSERT_EQ(text.size(), 14u);

  const ByteTokenizer tok;
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0x80);
  EXPECT_EQ(ids[5], 0);
  EXPECT_EQ(ids[12], 0xFF);
  EXPECT_EQ(ids[13], 0);
  EXPECT_EQ(tok.decode(ids), text);

  // Token by token gives the same bytes, as a streaming printer would see them.
  std::string streamed;
  for (int32_t id : ids) streamed += tok.decode_token(id);
  EXPECT_EQ(streamed, text);
}

TEST(ByteTokenizerTest, EmptyText) {
  const ByteTokenizer tok;
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode({}), "");
}

TEST(ByteTokenizerTest, VocabAndEos) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_FALSE(tok.eos_id().has_value());
  EXPECT_TRUE(tok.eos_ids().empty());
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_FALSE(tok.is_special(0));
}

TEST(ByteTokenizerTest, OutOfRangeIdThrowsNamingIt) {
  const ByteTokenizer tok;
  expect_error<retnet::InvalidArgument>([&] { tok.decode_token(256); }, {"256"});
  expect_error<retnet::InvalidArgument>([&] { tok.decode_token(-1); }, {"-1"});
  expect_error<retnet::InvalidArgument>([&] { tok.decode({65, 66, 1000, 67}); }, {"1000"});
  // InvalidArgument is a retnet::Error, so callers can catch the base class.
  EXPECT_THROW(tok.decode({300}), retnet::Error);
}

// load_tokenizer (tokenizer.json or bytes) is tested in test_hf_tokenizer.cpp.

}  // namespace
