// Added tokens (tokenizer.json's added_tokens): their ids, and cutting them out of the text
// before the rest is normalized and pre-tokenized, as Hugging Face's AddedVocabulary does
// (leftmost-longest, honouring single_word, lstrip and rstrip).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "retnet/core/json.hpp"
#include "retnet/text/hf/aho_corasick.hpp"
#include "retnet/text/hf/bpe_model.hpp"
#include "retnet/text/hf/hash_tables.hpp"
#include "retnet/text/hf/normalizers.hpp"
#include "retnet/text/hf/regex.hpp"
#include "retnet/text/hf/token_index.hpp"
#include "retnet/text/hf/utf8.hpp"

namespace retnet::detail::hf {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedVocabulary {
 public:
  /// Reads tokenizer.json's "added_tokens". Ids as Hugging Face gives them
  /// (AddedVocabulary::add_tokens): a content that is in the model's vocabulary keeps that id,
  /// others are numbered from the vocabulary's size on; tokenizer.json's "id" fields only
  /// produce a warning there when they differ. A repeated content keeps its id and takes the
  /// later flags. Normalized tokens are searched for in normalized text, in normalized form.
  void parse(const JsonObject& root, const BpeModel& model, const Normalizer& normalizer,
             TokenIndex& index) {
    word_char_ = std::make_shared<Regex>(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])",
                                         false, true, root.label());
    space_char_ = std::make_shared<Regex>(R"(\p{White_Space})", false, true, root.label());
    index.special.assign(index.size(), 0);
    if (!root.has("added_tokens")) return;
    const nlohmann::json& list = root.array("added_tokens");
    std::vector<AddedToken> listed;
    listed.reserve(list.size());
    size_t bytes = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      listed.push_back(parse_token(root.element("added_tokens", list, i)));
      bytes += listed.back().content.size();
      if (bytes > kMaxAddedTokenBytes) fail_too_large(root);
    }
    const std::vector<size_t> searched = add_tokens(listed, model, index);
    build_matchers(root, listed, searched, normalizer);
  }

  /// The id of the added token `content`, if there is one.
  std::optional<int32_t> id(const std::string& content) const {
    const int64_t* token = by_content_.find(content);
    return token ? std::optional<int32_t>(tokens_[size_t(*token)].id) : std::nullopt;
  }

  /// At most this many bytes of added tokens (contents, and their normalized forms): the
  /// matchers take 13 bytes per byte.
  static constexpr size_t kMaxAddedTokenBytes = size_t(16) << 20;

  /// Cuts the added tokens out of `text` (those with normalized=false from raw text, or with
  /// `normalized` those with normalized=true), appending their ids to `out` and passing the
  /// pieces between them to on_piece(piece, at_start) (Hugging Face's find_matches).
  template <typename OnPiece>
  void split(std::string_view text, bool normalized, bool at_start, bool valid_utf8,
             std::vector<int32_t>& out, OnPiece&& on_piece) const {
    if (text.empty()) return;
    const Matcher& matcher = normalized ? normalized_ : raw_;
    size_t start_offset = 0;
    matcher.automaton.for_each_match(text, [&](size_t begin, size_t end, int32_t pattern) {
      const AddedToken& token = tokens_[matcher.token[size_t(pattern)]];
      size_t start = begin;
      size_t stop = end;
      if (token.single_word) {
        const bool start_space = start == 0 || !ends_with_word(text.substr(0, start), valid_utf8);
        const bool stop_space =
            stop == text.size() || !starts_with_word(text.substr(stop), valid_utf8);
        if (!start_space || !stop_space) return;
      }
      if (token.lstrip)
        start = std::max(leftmost_space_at_end(text.substr(0, start), valid_utf8), start_offset);
      if (token.rstrip) stop += rightmost_space_at_start(text.substr(stop), valid_utf8);
      if (start_offset < start)
        on_piece(text.substr(start_offset, start - start_offset), at_start && start_offset == 0);
      // Hugging Face drops empty splits: a match whose spaces an rstrip before it took.
      if (start < stop) out.push_back(token.id);
      start_offset = std::max(start_offset, stop);
    });
    if (start_offset < text.size())
      on_piece(text.substr(start_offset), at_start && start_offset == 0);
  }

 private:
  static AddedToken parse_token(const JsonObject& t) {
    AddedToken token;
    token.content = t.string("content");
    token.special = t.boolean("special", false);
    token.single_word = t.boolean("single_word", false);
    token.lstrip = t.boolean("lstrip", false);
    token.rstrip = t.boolean("rstrip", false);
    token.normalized = t.boolean("normalized", !token.special);
    t.optional_integer("id", 0, std::numeric_limits<int32_t>::max());  // checked, not used
    return token;
  }

  /// Hugging Face's add_tokens: ids, and the tokens searched for in the order it gives them
  /// (where two normalize alike, the first is found): the special contents first (their first
  /// entry), then every other entry that differs from the token its content has so far. A
  /// match takes the flags of the last entry of its content.
  std::vector<size_t> add_tokens(const std::vector<AddedToken>& listed, const BpeModel& model,
                                 TokenIndex& index) {
    std::vector<size_t> searched;  // indices into `listed`
    std::unordered_set<std::string_view> special_contents;
    for (size_t i = 0; i < listed.size(); ++i)
      if (listed[i].special && !listed[i].content.empty() &&
          special_contents.insert(listed[i].content).second)
        searched.push_back(i);
    tokens_.reserve(listed.size());
    by_content_.reserve(listed.size());
    int64_t next_id = int64_t(model.token_count());
    for (size_t i = 0; i < listed.size(); ++i) {
      AddedToken token = listed[i];
      if (token.content.empty()) continue;
      const int64_t* known = by_content_.find(token.content);
      if (known && same_token(tokens_[size_t(*known)], token)) continue;
      if (known)
        token.id = tokens_[size_t(*known)].id;
      else if (const auto id = model.token_id(token.content))
        token.id = *id;
      else
        token.id = int32_t(next_id++);
      record(token, index);
      if (!special_contents.count(token.content)) searched.push_back(i);
    }
    return searched;
  }

  /// The two matchers: entries with normalized=false by their content, the others by their
  /// normalized content.
  void build_matchers(const JsonObject& root, const std::vector<AddedToken>& listed,
                      const std::vector<size_t>& searched, const Normalizer& normalizer) {
    std::vector<std::string> forms;  // the normalized contents, where there is a normalizer
    size_t bytes = 0;
    for (const size_t i : searched) {
      const AddedToken& entry = listed[i];
      const uint32_t token = uint32_t(*by_content_.find(entry.content));
      (entry.normalized ? normalized_ : raw_).token.push_back(token);
      if (entry.normalized && !normalizer.empty()) {
        forms.push_back(normalizer.normalize(entry.content, true));
        bytes += forms.back().size();
      } else {
        bytes += entry.content.size();
      }
      if (bytes > kMaxAddedTokenBytes) fail_too_large(root);
    }
    std::vector<std::string_view> raw_patterns, normalized_patterns;
    size_t form = 0;
    for (const size_t i : searched) {
      const std::string& content = listed[i].content;
      if (!listed[i].normalized)
        raw_patterns.push_back(content);
      else
        normalized_patterns.push_back(normalizer.empty() ? content : forms[form++]);
    }
    raw_.automaton = LeftmostLongestMatcher(raw_patterns);
    normalized_.automaton = LeftmostLongestMatcher(normalized_patterns);
  }

  [[noreturn]] static void fail_too_large(const JsonObject& root) {
    root.fail("added_tokens", "holds more than " + std::to_string(kMaxAddedTokenBytes) +
                                  " bytes (16 MiB) of tokens, normalized forms included");
  }

  static bool same_token(const AddedToken& a, const AddedToken& b) {
    return a.content == b.content && a.single_word == b.single_word && a.lstrip == b.lstrip &&
           a.rstrip == b.rstrip && a.normalized == b.normalized && a.special == b.special;
  }

  void record(const AddedToken& token, TokenIndex& index) {
    const size_t id = size_t(token.id);
    index.grow(id + 1);
    index.text[id] = token.content;
    index.present[id] = 1;
    index.special[id] = index.special[id] || token.special;  // Hugging Face: special by content
    if (by_content_.insert(token.content, int64_t(tokens_.size())))
      tokens_.push_back(token);
    else
      tokens_[size_t(*by_content_.find(token.content))] = token;
  }

  // \w and \s as the Rust regex crate has them (Unicode), for single_word, lstrip and rstrip.
  bool is_word_char_at(std::string_view s, size_t pos, bool valid_utf8) const {
    return word_char_->matches_at(s, pos, valid_utf8);
  }
  bool is_space_at(std::string_view s, size_t pos, bool valid_utf8) const {
    return space_char_->matches_at(s, pos, valid_utf8);
  }
  bool ends_with_word(std::string_view s, bool valid_utf8) const {
    return !s.empty() && is_word_char_at(s, previous_unit(s, s.size()), valid_utf8);
  }
  bool starts_with_word(std::string_view s, bool valid_utf8) const {
    return !s.empty() && is_word_char_at(s, 0, valid_utf8);
  }
  size_t leftmost_space_at_end(std::string_view s, bool valid_utf8) const {
    size_t end = s.size();
    while (end > 0) {
      const size_t p = previous_unit(s, end);
      if (!is_space_at(s, p, valid_utf8)) break;
      end = p;
    }
    return end;
  }
  size_t rightmost_space_at_start(std::string_view s, bool valid_utf8) const {
    size_t p = 0;
    while (p < s.size() && is_space_at(s, p, valid_utf8)) p += unit_length(s, p);
    return p;
  }

  /// One matcher and, by pattern, the index into tokens_ of the token it finds.
  struct Matcher {
    LeftmostLongestMatcher automaton;
    std::vector<uint32_t> token;
  };

  std::vector<AddedToken> tokens_;  // one per content, with the flags of its last entry
  StringTable by_content_;          // index into tokens_
  Matcher raw_, normalized_;
  std::shared_ptr<Regex> word_char_, space_char_;
};

}  // namespace retnet::detail::hf
