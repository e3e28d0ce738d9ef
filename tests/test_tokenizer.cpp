#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "retnet/text/tokenizer.hpp"

namespace {

using retnet::ByteTokenizer;

// Expects `fn` to throw exception type E whose message contains every string in `parts`.
template <typename E, typename Fn>
void ExpectThrowContaining(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception thrown";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const auto& part : parts)
      EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' not in: " << what;
  }
}

// A fresh, empty folder under the system temp directory, removed on destruction.
class TempDir {
 public:
  TempDir() {
    // ctest may run these tests in parallel processes: time plus a random word keeps
    // their folders apart.
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ =
        std::filesystem::temp_directory_path() / ("retnet_tokenizer_test_" + std::to_string(stamp) +
                                                  "_" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

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
}

TEST(ByteTokenizerTest, OutOfRangeIdThrowsNamingIt) {
  const ByteTokenizer tok;
  ExpectThrowContaining<retnet::InvalidArgument>([&] { tok.decode_token(256); }, {"256"});
  ExpectThrowContaining<retnet::InvalidArgument>([&] { tok.decode_token(-1); }, {"-1"});
  ExpectThrowContaining<retnet::InvalidArgument>([&] { tok.decode({65, 66, 1000, 67}); }, {"1000"});
  // InvalidArgument is a retnet::Error, so callers can catch the base class.
  EXPECT_THROW(tok.decode({300}), retnet::Error);
}

TEST(LoadTokenizerTest, FolderWithoutTokenizerJsonGivesBytes) {
  TempDir dir;
  const auto tok = retnet::load_tokenizer(dir.path().string(), 256);
  ASSERT_NE(tok, nullptr);
  EXPECT_NE(dynamic_cast<const ByteTokenizer*>(tok.get()), nullptr);
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->decode(tok->encode("hi\xFF")), "hi\xFF");
}

TEST(LoadTokenizerTest, LargerModelVocabIsAccepted) {
  // Models often pad their embedding beyond the tokenizer's ids.
  TempDir dir;
  const auto tok = retnet::load_tokenizer(dir.path().string(), 512);
  EXPECT_EQ(tok->vocab_size(), 256);
}

TEST(LoadTokenizerTest, SmallModelVocabThrowsNamingBothNumbers) {
  TempDir dir;
  ExpectThrowContaining<retnet::FormatError>(
      [&] { retnet::load_tokenizer(dir.path().string(), 100); }, {"100", "256"});
  ExpectThrowContaining<retnet::FormatError>(
      [&] { retnet::load_tokenizer(dir.path().string(), 255); }, {"255", "256"});
}

TEST(LoadTokenizerTest, TokenizerJsonIsRejected) {
  TempDir dir;
  std::ofstream(dir.path() / "tokenizer.json") << R"({"model": {"type": "BPE"}})";
  ExpectThrowContaining<retnet::FormatError>(
      [&] { retnet::load_tokenizer(dir.path().string(), 50000); },
      {"tokenizer.json is not supported yet; only byte-level models"});
}

}  // namespace
