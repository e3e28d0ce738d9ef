// text/text_stream.hpp: the pieces a stream hands out, against known cases and against a
// reference written from the contract, on random token sequences:
//   - the pieces, then finish(), concatenate to the whole text cut before the first stop string;
//   - a piece never ends inside a UTF-8 character (a lead byte C2..F4 whose continuation bytes
//     have not all arrived);
//   - what is held back is no more than an unfinished character plus the longest end of the
//     text that is a proper prefix of a stop string.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "retnet/text/text_stream.hpp"

namespace {

using retnet::TextStream;

// Pushes every token; returns the pieces, then finish()'s text as the last element.
std::vector<std::string> stream(TextStream& s, const std::vector<std::string>& tokens) {
  std::vector<std::string> pieces;
  std::string piece;
  for (const std::string& t : tokens) {
    const bool stopped = s.push(t, piece);
    pieces.push_back(piece);
    if (stopped) break;
  }
  pieces.push_back(s.finish());
  return pieces;
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string all;
  for (const std::string& p : pieces) all += p;
  return all;
}

// The length of the longest prefix of text[0, end) that does not end inside a UTF-8 character,
// by decoding from the start: a lead byte C2..F4 followed only by continuation bytes up to `end`,
// fewer than its length needs, starts the unfinished character. Other bytes pass as they are.
size_t complete_prefix_by_decoding(const std::string& text, size_t end) {
  size_t i = 0;
  while (i < end) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t length = c >= 0xC2 && c <= 0xDF   ? 2
                          : c >= 0xE0 && c <= 0xEF ? 3
                          : c >= 0xF0 && c <= 0xF4 ? 4
                                                   : 1;
    size_t j = i + 1;
    while (j < end && j < i + length && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) ++j;
    if (j == end && j - i < length) return i;
    i = j;
  }
  return end;
}

// What a stream may hold back after `text` (no stop string in it): the longest end of the text
// that is a proper prefix of a stop string, then back to the start of an unfinished character.
size_t final_length_by_contract(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& stop : stops)
    for (size_t k = 1; k < stop.size() && k <= text.size(); ++k)
      if (text.substr(text.size() - k) == stop.substr(0, k)) hold = std::max(hold, k);
  return complete_prefix_by_decoding(text, text.size() - hold);
}

TEST(TextStream, WithoutStopsEveryCompleteTokenIsHandedOutAtOnce) {
  TextStream s;
  std::string piece;
  EXPECT_FALSE(s.push("Hello", piece));
  EXPECT_EQ(piece, "Hello");
  EXPECT_FALSE(s.push(", world", piece));
  EXPECT_EQ(piece, ", world");
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.text(), "Hello, world");
  EXPECT_FALSE(s.stopped());
}

// "é" is C3 A9 and "€" E2 82 AC: a piece waits for the character's last byte.
TEST(TextStream, HoldsAnUnfinishedCharacterUntilItsLastByte) {
  TextStream s;
  std::string piece;
  s.push("caf\xC3", piece);
  EXPECT_EQ(piece, "caf");
  s.push("\xA9 \xE2", piece);
  EXPECT_EQ(piece, "\xC3\xA9 ");
  s.push("\x82", piece);
  EXPECT_EQ(piece, "");
  s.push("\xAC", piece);
  EXPECT_EQ(piece, "\xE2\x82\xAC");
  // A byte that cannot start a character (C0, FF) or a stray continuation byte passes at once.
  s.push("\xC0\xFF\x80", piece);
  EXPECT_EQ(piece, "\xC0\xFF\x80");
  // An unfinished character at the end is handed out by finish() as it is.
  s.push("\xF0\x9F", piece);
  EXPECT_EQ(piece, "");
  EXPECT_EQ(s.finish(), "\xF0\x9F");
}

TEST(TextStream, StopsBeforeAStopStringSplitOverTokens) {
  TextStream s({"\n\nUser:"});
  const auto pieces = stream(s, {"Sure.", "\n", "\nUs", "er:", " never seen"});
  // Four tokens: the stop string completes in the fourth; finish() has nothing left.
  EXPECT_EQ(pieces, (std::vector<std::string>{"Sure.", "", "", "", ""}));
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.text(), "Sure.");
}

// A held-back start that turns out not to be a stop string is handed out with what follows.
TEST(TextStream, ReleasesAFalseStartOfAStopString) {
  TextStream s({"END"});
  std::string piece;
  s.push("the EN", piece);
  EXPECT_EQ(piece, "the ");
  EXPECT_FALSE(s.push("TRY", piece));
  EXPECT_EQ(piece, "ENTRY");
  EXPECT_TRUE(s.push(" END", piece));
  EXPECT_EQ(piece, "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.text(), "the ENTRY ");
  EXPECT_EQ(s.finish(), " ");
}

// Of several stop strings, the one that starts first cuts; an empty stop string is ignored.
TEST(TextStream, TheEarliestStopStringCuts) {
  TextStream s({"", "cd", "bcde"});
  EXPECT_EQ(joined(stream(s, {"ab", "cdef"})), "a");
  EXPECT_TRUE(s.stopped());
  TextStream t({""});
  EXPECT_EQ(joined(stream(t, {"ab", "cd"})), "abcd");
  EXPECT_FALSE(t.stopped());
}

TEST(TextStream, CompleteUtf8PrefixKnownCases) {
  EXPECT_EQ(TextStream::complete_utf8_prefix("", 0), 0u);
  EXPECT_EQ(TextStream::complete_utf8_prefix("ab\xC3", 3), 2u);
  EXPECT_EQ(TextStream::complete_utf8_prefix("ab\xC3\xA9", 4), 4u);
  EXPECT_EQ(TextStream::complete_utf8_prefix("ab\xC3\xA9", 3), 2u);  // only up to `end`
  EXPECT_EQ(TextStream::complete_utf8_prefix("\xF0\x9F\x98", 3), 0u);
  EXPECT_EQ(TextStream::complete_utf8_prefix("\xF0\x9F\x98\x80", 4), 4u);
  EXPECT_EQ(TextStream::complete_utf8_prefix("a\xC1", 2), 2u);  // C1 never starts a character
  EXPECT_EQ(TextStream::complete_utf8_prefix("a\xF5\x80", 3), 3u);
}

// Random tokens from pieces of stop strings, multi-byte characters cut anywhere and stray
// bytes: every push hands out exactly what the contract allows, and the whole is exact.
TEST(TextStream, RandomTokensFollowTheContract) {
  const std::vector<std::string> alphabet = {
      "a",    "b",        "ab",   "\n",   "\n\n", "Us",   "er",   ":",        "\xC3",
      "\xA9", "\xE2\x82", "\xAC", "\xF0", "\x9F", "\x98", "\x80", "\xC3\xA9", "\xE2\x82\xAC",
      "\xFF", "<e",       "nd>",  "x"};
  const std::vector<std::vector<std::string>> stop_sets = {
      {}, {"\n\nUser:"}, {"<end>", "ab\n"}, {"\xC3\xA9"}, {"b", "aaa"}};
  std::mt19937 rng(31);
  for (const auto& stops : stop_sets)
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<std::string> tokens(size_t(1 + rng() % 12));
      for (std::string& t : tokens) t = alphabet[rng() % alphabet.size()];
      std::string whole;
      for (const std::string& t : tokens) whole += t;
      size_t cut = std::string::npos;
      for (const std::string& stop : stops) cut = std::min(cut, whole.find(stop));
      const std::string expected = cut == std::string::npos ? whole : whole.substr(0, cut);

      TextStream s(stops);
      std::string piece, handed_out, seen;
      bool stopped = false;
      for (const std::string& t : tokens) {
        stopped = s.push(t, piece);
        handed_out += piece;
        seen += t;
        ASSERT_EQ(expected.compare(0, handed_out.size(), handed_out), 0)
            << "handed out text that is not final: " << handed_out;
        if (stopped) break;
        ASSERT_EQ(handed_out.size(), final_length_by_contract(seen, stops))
            << "after " << trial << ": held back more or less than the contract says: " << seen;
      }
      EXPECT_EQ(stopped, cut != std::string::npos);
      EXPECT_EQ(handed_out + s.finish(), expected);
      EXPECT_EQ(s.text(), expected);
    }
}

}  // namespace
