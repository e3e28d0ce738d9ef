// Added tokens (tokenizer.json's added_tokens): their ids, and cutting them out of the text
// before the rest is normalized and pre-tokenized, as Hugging Face's AddedVocabulary does
// (leftmost-longest, honouring single_word, lstrip and rstrip).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "retnet/core/json.hpp"
#include "retnet/text/hf/bpe_model.hpp"
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

/// Leftmost-longest search for a set of strings (a byte trie), as the Aho-Corasick automaton
/// Hugging Face builds for its added tokens.
class TokenTrie {
 public:
  TokenTrie() : nodes_(1) { first_.fill(-1); }

  void add(std::string_view s, int32_t value) {
    if (s.empty()) return;
    int32_t node = first_[static_cast<unsigned char>(s[0])];
    if (node < 0) {
      node = new_node();
      first_[static_cast<unsigned char>(s[0])] = node;
    }
    for (size_t i = 1; i < s.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      int32_t next = child(node, c);
      if (next < 0) {
        next = new_node();
        nodes_[node].children.emplace_back(c, next);
      }
      node = next;
    }
    nodes_[node].value = value;
    empty_ = false;
  }

  bool empty() const { return empty_; }

  /// The leftmost match at or after `from` (the longest of those starting there).
  bool find(std::string_view text, size_t from, size_t& begin, size_t& end, int32_t& value) const {
    for (size_t p = from; p < text.size(); ++p) {
      int32_t node = first_[static_cast<unsigned char>(text[p])];
      if (node < 0) continue;
      int32_t found = -1;
      size_t found_end = 0;
      for (size_t q = p + 1;; ++q) {
        if (nodes_[node].value >= 0) {
          found = nodes_[node].value;
          found_end = q;
        }
        if (q == text.size()) break;
        node = child(node, static_cast<unsigned char>(text[q]));
        if (node < 0) break;
      }
      if (found >= 0) {
        begin = p;
        end = found_end;
        value = found;
        return true;
      }
    }
    return false;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t value = -1;
  };
  int32_t new_node() {
    nodes_.emplace_back();
    return int32_t(nodes_.size() - 1);
  }
  int32_t child(int32_t node, unsigned char c) const {
    for (const auto& [k, v] : nodes_[node].children)
      if (k == c) return v;
    return -1;
  }

  std::vector<Node> nodes_;  // nodes_[0] unused; first_ holds the root's children
  std::array<int32_t, 256> first_;
  bool empty_ = true;
};

class AddedVocabulary {
 public:
  /// Reads tokenizer.json's "added_tokens". Ids as Hugging Face gives them
  /// (AddedVocabulary::add_tokens): a content that is in the model's vocabulary keeps that id,
  /// others are numbered from the vocabulary's size on; tokenizer.json's "id" fields only
  /// produce a warning there when they differ. Normalized tokens are searched for in
  /// normalized text, in normalized form.
  void parse(const JsonObject& root, const BpeModel& model, const Normalizer& normalizer,
             TokenIndex& index) {
    word_char_ = std::make_shared<Regex>(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])",
                                         false, true, root.label());
    space_char_ = std::make_shared<Regex>(R"(\p{White_Space})", false, true, root.label());
    index.special.assign(index.size(), 0);
    if (!root.has("added_tokens")) return;
    const nlohmann::json& list = root.array("added_tokens");
    int64_t next_id = int64_t(model.token_count());
    for (size_t i = 0; i < list.size(); ++i) {
      AddedToken token = parse_token(root.element("added_tokens", list, i));
      if (token.content.empty()) continue;
      if (const auto it = by_content_.find(token.content); it != by_content_.end())
        token.id = it->second;  // a repeated content updates the earlier entry
      else if (const auto id = model.token_id(token.content))
        token.id = *id;
      else
        token.id = int32_t(next_id++);
      record(token, index);
    }
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const AddedToken& a = tokens_[i];
      if (!a.normalized)
        raw_trie_.add(a.content, int32_t(i));
      else
        normalized_trie_.add(normalizer.empty() ? a.content : normalizer.normalize(a.content, true),
                             int32_t(i));
    }
  }

  /// The id of the added token `content`, if there is one.
  std::optional<int32_t> id(const std::string& content) const {
    const auto it = by_content_.find(content);
    return it == by_content_.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }

  /// Cuts the added tokens out of `text` (those with normalized=false from raw text, or with
  /// `normalized` those with normalized=true), appending their ids to `out` and passing the
  /// pieces between them to on_piece(piece, at_start) (Hugging Face's find_matches).
  template <typename OnPiece>
  void split(std::string_view text, bool normalized, bool at_start, bool valid_utf8,
             std::vector<int32_t>& out, OnPiece&& on_piece) const {
    if (text.empty()) return;
    const TokenTrie& trie = normalized ? normalized_trie_ : raw_trie_;
    if (trie.empty()) {
      on_piece(text, at_start);
      return;
    }
    size_t start_offset = 0;
    size_t from = 0;
    size_t b = 0;
    size_t e = 0;
    int32_t index = 0;
    while (trie.find(text, from, b, e, index)) {
      from = e;
      const AddedToken& token = tokens_[size_t(index)];
      size_t start = b;
      size_t stop = e;
      if (token.single_word) {
        const bool start_space = start == 0 || !ends_with_word(text.substr(0, start), valid_utf8);
        const bool stop_space =
            stop == text.size() || !starts_with_word(text.substr(stop), valid_utf8);
        if (!start_space || !stop_space) continue;
      }
      if (token.lstrip)
        start = std::max(leftmost_space_at_end(text.substr(0, start), valid_utf8), start_offset);
      if (token.rstrip) stop += rightmost_space_at_start(text.substr(stop), valid_utf8);
      if (start_offset < start)
        on_piece(text.substr(start_offset, start - start_offset), at_start && start_offset == 0);
      out.push_back(token.id);
      start_offset = stop;
    }
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

  void record(const AddedToken& token, TokenIndex& index) {
    const size_t id = size_t(token.id);
    index.grow(id + 1);
    index.text[id] = token.content;
    index.present[id] = 1;
    index.special[id] = index.special[id] || token.special;  // Hugging Face: special by content
    by_content_[token.content] = token.id;
    const auto same = std::find_if(tokens_.begin(), tokens_.end(),
                                   [&](const AddedToken& a) { return a.content == token.content; });
    if (same != tokens_.end())
      *same = token;
    else
      tokens_.push_back(token);
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

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, int32_t> by_content_;
  TokenTrie raw_trie_, normalized_trie_;
  std::shared_ptr<Regex> word_char_, space_char_;
};

}  // namespace retnet::detail::hf
