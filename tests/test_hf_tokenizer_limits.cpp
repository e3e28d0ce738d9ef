// The limits that keep encoding bounded whatever tokenizer.json asks for: the match budget of
// the patterns (ReDoS), the Oniguruma syntax PCRE2 would read differently, long words, and the
// growth of the normalized text (docs/TOKENIZERS.md, "Limits").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "expect_error.hpp"
#include "retnet/tokenizers.hpp"

namespace {

using retnet::HfTokenizer;
using retnet::testing::expect_error;
namespace hf = retnet::detail::hf;

// A tiny BPE whose pre-tokenizer is a Split on `regex` (JSON-escaped), with `normalizer`.
std::string split_json(const std::string& regex, const std::string& normalizer = "null") {
  return R"({"version": "1.0", "added_tokens": [], "normalizer": )" + normalizer +
         R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": ")" + regex +
         R"("}, "behavior": "Isolated", "invert": false},
    "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "unk_token": "?", "vocab": {"?": 0, "a": 1, "b": 2, "c": 3,
      "ab": 4, "bc": 5}, "merges": ["b c", "a b"]}})";
}

std::string repeat(const std::string& unit, size_t bytes) {
  std::string s;
  s.reserve(bytes + unit.size());
  while (s.size() < bytes) s += unit;
  return s;
}

TEST(TokenizerLimitsTest, BacktrackingPatternUsesUpTheBudget) {
  // Each run of 20 a's costs about 2^21 steps: 46 KB of them would take minutes.
  const HfTokenizer tok = HfTokenizer::from_json(split_json("(a+)+$|a"));
  const std::string text = repeat(std::string(20, 'a') + "b", 46 * 1024);
  const std::string message = expect_error<retnet::InvalidArgument>(
      [&] { tok.encode(text); },
      {"pattern \"(a+)+$|a\"", "match budget", "256 per byte", "backtracks too much"});
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(TokenizerLimitsTest, ExponentialPatternHitsThePerCallLimit) {
  const HfTokenizer tok = HfTokenizer::from_json(split_json("(a|a)*b|a"));
  // (The JIT stack overflows first; the interpreter then stops at its depth limit.)
  expect_error<retnet::InvalidArgument>([&] { tok.encode(std::string(1 << 20, 'a')); },
                                        {"pattern \"(a|a)*b|a\"", "limit"});
  expect_error<retnet::InvalidArgument>(
      [&] { tok.encode(std::string(40, 'a') + std::string(200000, 'c')); },
      {"more than 10000000 match steps"});
  // Runs of 22 a's stay under the per-call limit; 1 MB of them use up the budget instead.
  const std::string text = repeat(std::string(22, 'a') + "c", 1 << 20);
  expect_error<retnet::InvalidArgument>([&] { tok.encode(text); }, {"match budget"});
}

TEST(TokenizerLimitsTest, RealPatternsStayFarBelowTheBudget) {
  // Llama 3's expression, the most elaborate of the fixtures, over 1 MB of mixed text.
  const std::string pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const hf::Regex regex(pattern, false, true, "test");
  const std::string text =
      repeat("Hello, world! It's 2024: naïve café — 12345 tokens\n\n  indented\tx ", 1 << 20);
  hf::MatchBudget budget(text.size());
  size_t matches = 0;
  regex.for_each_match(text, true, budget, [&](size_t, size_t) { ++matches; });
  EXPECT_GT(matches, text.size() / 8);
  EXPECT_GT(budget.left(), budget.granted() * 3 / 4);
}

TEST(TokenizerLimitsTest, OnigurumaOnlySyntaxIsRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {"[a-z&&[^aeiou]]", "class intersection"},
      {"[a-z[0-9]]", "a character class inside a character class"},
      {"[\\\\W]", "\\\\W inside a character class"},
      {"[\\\\H ]", "\\\\H inside a character class"},
      {"(?~abc)", "absent operator"},
      {"(?m:a.b)", "the option \\\"m\\\""},
      {"a{1,3}+", "an interval followed by"},
      {"[[:space:]]", "a POSIX class"},
  };
  for (const auto& [regex, construct] : cases) {
    std::string want = construct;  // as the message quotes it (JSON escapes undone)
    for (size_t p; (p = want.find("\\\\")) != std::string::npos;) want.replace(p, 2, "\\");
    for (size_t p; (p = want.find("\\\"")) != std::string::npos;) want.replace(p, 2, "\"");
    expect_error<retnet::FormatError>([&] { HfTokenizer::from_json(split_json(regex)); },
                                      {"pre_tokenizer", want, "PCRE2 reads differently"});
  }
  // Where the meaning is the same it is translated.
  EXPECT_EQ(hf::oniguruma_to_pcre2("a{,3}b{2}c{1,}d{x}"), "a{0,3}b{2}c{1,}d{x}");
  EXPECT_EQ(hf::oniguruma_to_pcre2("(?i:'s)[\\h]"), "(?i:'s)[0-9a-fA-F]");
}

// ^ and $ match at every line, as in Oniguruma. The ids are Hugging Face's (tokenizers 0.22,
// through scripts/tokenizer_reference's bindings); at the text's ends only, "ab" would merge.
TEST(TokenizerLimitsTest, AnchorsMatchAtEveryLineAsInOniguruma) {
  const std::vector<int32_t> each_byte = {1, 2, 0, 1, 2};  // a b \n(unknown) a b
  EXPECT_EQ(HfTokenizer::from_json(split_json("b$")).encode("ab\nab"), each_byte);
  EXPECT_EQ(HfTokenizer::from_json(split_json("^a")).encode("ab\nab"), each_byte);
}

TEST(TokenizerLimitsTest, LongWordsAreCutIntoBoundedPieces) {
  constexpr size_t kMax = hf::WordEncoder::kMaxWordBytes;
  const std::string ascii(kMax + 10, 'a');
  EXPECT_EQ(hf::WordEncoder::piece_end(ascii, 0), kMax);
  EXPECT_EQ(hf::WordEncoder::piece_end(ascii, kMax), ascii.size());
  // Two-byte characters: the cut moves back to a character's first byte.
  const std::string wide = "a" + repeat("\xC3\xA9", kMax + 4);
  EXPECT_EQ(hf::WordEncoder::piece_end(wide, 0), kMax - 1);

  const HfTokenizer tok = HfTokenizer::from_json(split_json("\\\\s+"));
  // Up to the limit a word is merged whole: "abc" is a, bc.
  std::vector<int32_t> want;
  for (size_t i = 0; i < kMax / 3; ++i) want.insert(want.end(), {1, 5});
  EXPECT_EQ(tok.encode(repeat("abc", kMax / 3 * 3).substr(0, kMax / 3 * 3)), want);
  // Beyond it, in pieces of kMax bytes, each merged on its own.
  const std::string word = "c" + repeat("ab", kMax + 100).substr(0, kMax + 99);
  std::vector<int32_t> pieces = tok.encode(word.substr(0, kMax));
  const std::vector<int32_t> rest = tok.encode(word.substr(kMax));
  pieces.insert(pieces.end(), rest.begin(), rest.end());
  EXPECT_EQ(tok.encode(word), pieces);
}

TEST(TokenizerLimitsTest, NormalizedTextIsBounded) {
  std::string steps;
  for (int i = 0; i < 40; ++i)
    steps += std::string(i ? "," : "") +
             R"({"type": "Replace", "pattern": {"String": "a"}, "content": "aa"})";
  const HfTokenizer tok = HfTokenizer::from_json(
      split_json("\\\\s+", R"({"type": "Sequence", "normalizers": [)" + steps + "]}"));
  const std::string message = expect_error<retnet::InvalidArgument>(
      [&] { tok.encode("a b"); }, {"normalizer step 20", "longer than 1048600 bytes"});
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

}  // namespace
