// Added tokens (text/hf/added_vocabulary.hpp, text/hf/aho_corasick.hpp): the leftmost-longest
// matcher against a brute-force one, each flag and Hugging Face's search order against ids
// from its Rust implementation (tokenizers 0.22, through scripts/tokenizer_reference's
// @anush008/tokenizers), and hostile sets of added tokens (many, long, many lengths), bounded
// by their structure rather than by time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "expect_error.hpp"
#include "retnet/text/hf/aho_corasick.hpp"
#include "retnet/tokenizers.hpp"

namespace {

using retnet::HfTokenizer;
using retnet::detail::hf::LeftmostLongestMatcher;
using retnet::testing::expect_error;
using Ids = std::vector<int32_t>;

struct Match {
  size_t begin, end;
  int32_t pattern;
  bool operator==(const Match& o) const {
    return begin == o.begin && end == o.end && pattern == o.pattern;
  }
};

std::vector<Match> matches(const LeftmostLongestMatcher& m, std::string_view text) {
  std::vector<Match> found;
  m.for_each_match(text, [&](size_t b, size_t e, int32_t p) { found.push_back({b, e, p}); });
  return found;
}

// Leftmost-longest by definition: the first position where a pattern starts, the longest
// pattern there (the first of equal ones), then on from its end.
std::vector<Match> brute_force(const std::vector<std::string>& patterns, std::string_view text) {
  std::vector<Match> found;
  for (size_t p = 0; p < text.size();) {
    int32_t best = -1;
    for (size_t i = 0; i < patterns.size(); ++i)
      if (!patterns[i].empty() && text.substr(p, patterns[i].size()) == patterns[i] &&
          (best < 0 || patterns[i].size() > patterns[size_t(best)].size()))
        best = int32_t(i);
    if (best < 0) {
      ++p;
      continue;
    }
    found.push_back({p, p + patterns[size_t(best)].size(), best});
    p += patterns[size_t(best)].size();
  }
  return found;
}

TEST(LeftmostLongestMatcherTest, EqualsBruteForceOnRandomSets) {
  std::mt19937 rng(25);
  const auto random_string = [&](size_t max_length, const char* alphabet, size_t letters) {
    std::string s(std::uniform_int_distribution<size_t>(0, max_length)(rng), ' ');
    for (char& c : s) c = alphabet[std::uniform_int_distribution<size_t>(0, letters - 1)(rng)];
    return s;
  };
  const char kBytes[] = {'a', 'b', 'c', '\0', '\xFF', '\x80'};
  for (int round = 0; round < 3000; ++round) {
    const size_t letters = 2 + size_t(round % 5);
    std::vector<std::string> patterns(1 + size_t(round % 12));
    for (std::string& p : patterns) p = random_string(round % 3 == 0 ? 12 : 5, kBytes, letters);
    if (round % 4 == 0) patterns.push_back(patterns[0]);  // equal patterns: the first is found
    const std::vector<std::string_view> views(patterns.begin(), patterns.end());
    const LeftmostLongestMatcher matcher(views);
    for (int t = 0; t < 4; ++t) {
      const std::string text = random_string(120, kBytes, letters);
      ASSERT_EQ(matches(matcher, text), brute_force(patterns, text)) << "round " << round;
    }
  }
}

TEST(LeftmostLongestMatcherTest, MatchesAcrossItsBlocks) {
  // Texts longer than one block (16 KiB, or the longest pattern), matches on the block edges.
  const std::vector<std::vector<std::string>> sets = {
      {"ab", std::string(20000, 'a') + "b", "ba", "b"}, {"ab", "aab", "ba", "bb"}};
  std::mt19937 rng(7);
  for (const std::vector<std::string>& patterns : sets) {
    const std::vector<std::string_view> views(patterns.begin(), patterns.end());
    const LeftmostLongestMatcher matcher(views);
    for (int round = 0; round < 6; ++round) {
      std::string text(50000, 'a');
      for (int k = 0; k < 40; ++k) text[std::uniform_int_distribution<size_t>(0, 49999)(rng)] = 'b';
      if (round == 0) text[30000] = 'b';
      EXPECT_EQ(matches(matcher, text), brute_force(patterns, text)) << "round " << round;
    }
  }
}

TEST(LeftmostLongestMatcherTest, MemoryIsOneNodePerPatternByte) {
  // A 10 MB pattern: one node per byte (13 bytes each), found where it is and not elsewhere.
  const std::string big(10'000'000, 'q');
  const LeftmostLongestMatcher matcher(std::vector<std::string_view>{big, "qq", "x"});
  EXPECT_EQ(matcher.node_count(), big.size() + 1 + 1);  // root, the q chain, x
  const std::string text = "x" + big + "q";
  EXPECT_EQ(matches(matcher, text), (std::vector<Match>{{0, 1, 2}, {1, 1 + big.size(), 0}}));
  EXPECT_TRUE(LeftmostLongestMatcher(std::vector<std::string_view>{"", ""}).empty());
}

TEST(LeftmostLongestMatcherTest, LongNearMissesStayLinear) {
  // a^k b for k = 1..2000 against a^1000000 b: a byte trie walked from every position would take
  // 2 * 10^9 steps; the match is the longest pattern, as far left as it can start.
  std::vector<std::string> patterns;
  for (size_t k = 1; k <= 2000; ++k) patterns.push_back(std::string(k, 'a') + "b");
  patterns.push_back("a");  // matches everywhere before the long one can
  const std::vector<std::string_view> views(patterns.begin(), patterns.end());
  const LeftmostLongestMatcher matcher(views);
  EXPECT_EQ(matcher.node_count(), 1 + 2001 + 1);  // root, reversed b a a a ... a, and a
  const std::string text = std::string(1'000'000, 'a') + "b";
  size_t count = 0;
  Match last{};
  matcher.for_each_match(text, [&](size_t b, size_t e, int32_t p) {
    ++count;
    last = {b, e, p};
  });
  // "a" at each of the first 998000 positions, then a^2000 b.
  EXPECT_EQ(count, 998000u + 1);
  EXPECT_EQ(last, (Match{998000, 1'000'001, 1999}));
}

// ---- Through the tokenizer, against Hugging Face's ids ---------------------------------------

// Characters " abxyzX<>é" as ids 1..10 (0: "?", the unk token), a normalizer that turns X into
// x, and `added` as the added_tokens (fields not given take Hugging Face's defaults).
std::string tokenizer_json(const std::string& added) {
  return R"({"version": "1.0", "added_tokens": [)" + added + R"(],
    "normalizer": {"type": "Replace", "pattern": {"String": "X"}, "content": "x"},
    "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "unk_token": "?", "merges": [], "vocab": {"?": 0, " ": 1, "a": 2,
      "b": 3, "x": 4, "y": 5, "z": 6, "X": 7, "<": 8, ">": 9, "é": 10}}})";
}

TEST(AddedTokensTest, IdsAreGivenAsHuggingFaceDoes) {
  // Hugging Face ignores an added token's "id" (it only warns): a content in the vocabulary
  // keeps that id, others are numbered from the vocabulary's size on.
  const std::string json = R"({"version": "1.0", "added_tokens": [
      {"id": 40, "content": "<x>", "special": true}, {"id": 2, "content": "b", "special": false}],
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})";
  const HfTokenizer tok = HfTokenizer::from_json(json);
  EXPECT_EQ(tok.token_to_id("<x>"), 2);
  EXPECT_EQ(tok.token_to_id("b"), 1);
  EXPECT_EQ(tok.encode("a<x>b"), (Ids{0, 2, 1}));
  EXPECT_EQ(tok.vocab_size(), 3);
}

TEST(AddedTokensTest, LeftmostLongestAsHuggingFace) {
  const HfTokenizer tok = HfTokenizer::from_json(tokenizer_json(
      R"({"content": "a"}, {"content": "ab"}, {"content": "abyz"}, {"content": "by"})"));
  EXPECT_EQ(tok.encode("abyx"), (Ids{11, 5, 4}));
  EXPECT_EQ(tok.encode("abyz"), (Ids{12}));
  EXPECT_EQ(tok.encode("aabyzb"), (Ids{2, 12, 3}));
}

TEST(AddedTokensTest, SingleWordAsHuggingFace) {
  const HfTokenizer tok = HfTokenizer::from_json(
      tokenizer_json(R"({"content": "ab", "single_word": true, "normalized": false})"));
  EXPECT_EQ(tok.encode("ab"), (Ids{11}));
  EXPECT_EQ(tok.encode("x ab y"), (Ids{4, 1, 11, 1, 5}));
  EXPECT_EQ(tok.encode("xab y"), (Ids{4, 2, 3, 1, 5}));
  EXPECT_EQ(tok.encode("ab<"), (Ids{11, 8}));
  EXPECT_EQ(tok.encode("éab"), (Ids{10, 2, 3}));  // é is a word character
  EXPECT_EQ(tok.encode("ab ab"), (Ids{11, 1, 11}));
}

TEST(AddedTokensTest, LstripAndRstripAsHuggingFace) {
  const HfTokenizer left = HfTokenizer::from_json(
      tokenizer_json(R"({"content": "<a>", "lstrip": true, "normalized": false})"));
  EXPECT_EQ(left.encode("b  <a> b"), (Ids{3, 11, 1, 3}));
  EXPECT_EQ(left.encode("<a>"), (Ids{11}));
  EXPECT_EQ(left.encode(" <a><a>"), (Ids{11, 11}));
  const HfTokenizer right = HfTokenizer::from_json(
      tokenizer_json(R"({"content": "<a>", "rstrip": true, "normalized": false})"));
  EXPECT_EQ(right.encode("b  <a>  b"), (Ids{3, 1, 1, 11, 3}));
  EXPECT_EQ(right.encode("<a> "), (Ids{11}));
  EXPECT_EQ(right.encode("<a> <a>"), (Ids{11, 11}));
  // A match inside the spaces an rstrip took is an empty split, which Hugging Face drops.
  const HfTokenizer both = HfTokenizer::from_json(tokenizer_json(
      R"({"content": "é", "lstrip": true, "rstrip": true, "normalized": false},
         {"content": "  ", "lstrip": true, "normalized": false})"));
  EXPECT_EQ(both.encode("aé  éa"), (Ids{2, 10, 10, 2}));
}

TEST(AddedTokensTest, NormalizedAndSpecialAsHuggingFace) {
  const HfTokenizer tok = HfTokenizer::from_json(tokenizer_json(
      R"({"content": "Xy"}, {"content": "Xz", "normalized": false, "special": true})"));
  EXPECT_EQ(tok.encode("xy Xy"), (Ids{11, 1, 11}));    // matched in normalized form
  EXPECT_EQ(tok.encode("Xz xz"), (Ids{12, 1, 4, 6}));  // matched in the raw text only
  EXPECT_TRUE(tok.is_special(12));
  EXPECT_FALSE(tok.is_special(11));
  EXPECT_EQ(tok.decode({11, 12, 3}), "Xy b");  // special tokens skipped, no decoder: spaces
}

TEST(AddedTokensTest, SearchOrderAsHuggingFace) {
  // Two tokens that normalize alike: the first is found...
  const HfTokenizer first =
      HfTokenizer::from_json(tokenizer_json(R"({"content": "<X>"}, {"content": "<x>"})"));
  EXPECT_EQ(first.encode("<x>"), (Ids{11}));
  EXPECT_EQ(first.encode("<X>"), (Ids{11}));
  // ... with the special contents before the others.
  const HfTokenizer special = HfTokenizer::from_json(tokenizer_json(
      R"({"content": "<x>"}, {"content": "<X>", "special": true, "normalized": true})"));
  EXPECT_EQ(special.encode("<x>"), (Ids{12}));
  EXPECT_EQ(special.encode("<X>"), (Ids{12}));
  // A content listed normalized and not: searched for both ways.
  const HfTokenizer both = HfTokenizer::from_json(
      tokenizer_json(R"({"content": "Xb"}, {"content": "Xb", "normalized": false})"));
  EXPECT_EQ(both.encode("xb"), (Ids{11}));
  EXPECT_EQ(both.encode("Xb"), (Ids{11}));
  // A special content is searched for as its first entry has it (here: raw only).
  const HfTokenizer first_entry = HfTokenizer::from_json(tokenizer_json(
      R"({"content": "Xb", "special": true, "normalized": false},
         {"content": "Xb", "special": true, "normalized": true})"));
  EXPECT_EQ(first_entry.encode("xb"), (Ids{4, 3}));
  EXPECT_EQ(first_entry.encode("Xb"), (Ids{11}));
}

// ---- Hostile sets of added tokens ------------------------------------------------------------

std::string added_entry(const std::string& content, bool special = false) {
  return R"({"content": ")" + content + R"(", "special": )" + (special ? "true" : "false") + "}";
}

TEST(AddedTokensTest, HundredThousandTokensLoad) {
  // Each token is looked up by content once: loading is linear in the number of tokens.
  std::string added;
  for (int i = 0; i < 100000; ++i)
    added += (i ? "," : "") + added_entry("<t" + std::to_string(i) + ">");
  added += "," + added_entry("<t5>", true);  // a repeated content keeps its id
  const HfTokenizer tok = HfTokenizer::from_json(tokenizer_json(added));
  EXPECT_EQ(tok.vocab_size(), 11 + 100000);
  EXPECT_EQ(tok.token_to_id("<t99999>"), 11 + 99999);
  EXPECT_EQ(tok.token_to_id("<t5>"), 16);
  EXPECT_TRUE(tok.is_special(16));
  EXPECT_EQ(tok.encode("a<t12345>b<t7><t5>"), (Ids{2, 11 + 12345, 3, 18, 16}));
}

TEST(AddedTokensTest, TenMegabyteTokenLoadsAndMatches) {
  const std::string big(10'000'000, 'y');
  const HfTokenizer tok =
      HfTokenizer::from_json(tokenizer_json(added_entry(big) + "," + added_entry("yy")));
  EXPECT_EQ(tok.token_to_id(big), 11);
  EXPECT_EQ(tok.encode("a" + big + "y"), (Ids{2, 11, 5}));
  EXPECT_EQ(tok.encode("yyyyy"), (Ids{12, 12, 5}));
}

TEST(AddedTokensTest, MillionBytesAgainstTokensOfManyLengths) {
  // a^k b for k = 1..2000 against a^1000000 b: a near miss at every position, then the longest
  // token as far left as it can start.
  std::string added;
  for (size_t k = 1; k <= 2000; ++k)
    added += (k > 1 ? "," : "") + added_entry(std::string(k, 'a') + "b");
  const HfTokenizer tok = HfTokenizer::from_json(tokenizer_json(added));
  const Ids ids = tok.encode(std::string(1'000'000, 'a') + "b");
  ASSERT_EQ(ids.size(), 998000u + 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 998000);
  EXPECT_EQ(ids.back(), 11 + 1999);
}

TEST(AddedTokensTest, MoreThanSixteenMebibytesIsRefused) {
  const std::string mebibyte(size_t(1) << 20, 'z');
  std::string added;
  for (int i = 0; i < 17; ++i) added += (i ? "," : "") + added_entry(mebibyte + std::to_string(i));
  const std::string message =
      expect_error<retnet::FormatError>([&] { HfTokenizer::from_json(tokenizer_json(added)); },
                                        {"\"added_tokens\"", "16777216 bytes"});
  EXPECT_LT(message.size(), 300u);
}

}  // namespace
