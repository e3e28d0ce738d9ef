// Pre-tokenizers (Split, ByteLevel, Metaspace, Sequence of them): how a piece of normalized
// text is cut into the words the BPE model encodes one by one.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "retnet/core/json.hpp"
#include "retnet/text/hf/metaspace.hpp"
#include "retnet/text/hf/pattern.hpp"
#include "retnet/text/hf/tokenizer_json.hpp"

namespace retnet::detail::hf {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

/// Calls emit(begin, end) for the pieces Hugging Face's NormalizedString::split makes of `s`
/// from the matches of a pattern (`find` calls its argument with each match), empty pieces
/// dropped.
template <typename Find, typename Emit>
void split_by_behavior(std::string_view s, Find&& find, SplitBehavior behavior, bool invert,
                       Emit&& emit) {
  if (s.empty()) return;
  if (behavior == SplitBehavior::kIsolated) {  // every piece on its own: no flags needed
    size_t prev = 0;
    find([&](size_t b, size_t e) {
      if (prev != b) emit(prev, b);
      if (e > b) emit(b, e);
      prev = e;
    });
    if (prev != s.size()) emit(prev, s.size());
    return;
  }
  struct Piece {
    size_t begin, end;
    bool match;
  };
  std::vector<Piece> pieces;
  size_t prev = 0;
  find([&](size_t b, size_t e) {
    if (prev != b) pieces.push_back({prev, b, invert});
    pieces.push_back({b, e, !invert});
    prev = e;
  });
  if (prev != s.size()) pieces.push_back({prev, s.size(), invert});

  std::vector<std::pair<size_t, size_t>> out;  // kept pieces
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Piece& p : pieces)
        if (!p.match) out.emplace_back(p.begin, p.end);
      break;
    case SplitBehavior::kContiguous: {
      bool previous = false;
      for (const Piece& p : pieces) {
        if (p.match == previous && !out.empty())
          out.back().second = p.end;
        else
          out.emplace_back(p.begin, p.end);
        previous = p.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous = false;
      for (const Piece& p : pieces) {
        if (p.match && !previous && !out.empty())
          out.back().second = p.end;
        else
          out.emplace_back(p.begin, p.end);
        previous = p.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->match && !previous && !out.empty())
          out.back().first = it->begin;
        else
          out.emplace_back(it->begin, it->end);
        previous = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case SplitBehavior::kIsolated:
      break;
  }
  for (const auto& [b, e] : out)
    if (e > b) emit(b, e);
}

inline SplitBehavior parse_behavior(const JsonObject& o) {
  const std::string s = o.string("behavior");
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  o.fail("behavior", "= " + excerpt(s) +
                         " is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                         "Contiguous");
}

class PreTokenizer {
 public:
  /// Reads tokenizer.json's "pre_tokenizer" (absent or null: the piece is one word).
  void parse(const JsonObject& root) {
    steps_.clear();
    byte_level_ = false;
    if (const auto p = root.optional_object("pre_tokenizer")) add(*p);
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (steps_[i].kind != Step::Kind::kByteLevel) continue;
      if (i + 1 != steps_.size())
        throw FormatError(root.label() +
                          ": pre_tokenizer: ByteLevel must be the last pre-tokenizer (it is "
                          "followed by " +
                          std::to_string(steps_.size() - i - 1) + " more)");
      byte_level_ = true;
    }
    // A ByteLevel that neither splits nor adds a space (Llama 3's, after its Split) passes the
    // piece on as it is: leaving it out lets the Split before it hand out the words directly.
    if (byte_level_ && !steps_.back().use_pattern && !steps_.back().add_prefix_space)
      steps_.pop_back();
  }

  /// Whether the last step is ByteLevel: the model then works on bytes.
  bool byte_level() const { return byte_level_; }

  /// Calls on_word(word) for each word of `piece`, in order; `at_start`: the piece begins the
  /// text (Metaspace's prepend_scheme "first").
  /// The pattern matches are charged to `budget`.
  template <typename OnWord>
  void run(std::string_view piece, bool at_start, bool valid_utf8, MatchBudget& budget,
           OnWord&& on_word) const {
    run_step(piece, at_start, 0, valid_utf8, budget, on_word);
  }

 private:
  struct Step {
    enum class Kind { kSplit, kByteLevel, kMetaspace } kind = Kind::kSplit;
    Pattern pattern;  // Split's pattern; ByteLevel's GPT-2 expression when use_pattern
    bool use_pattern = true;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    Metaspace metaspace;
    bool split = true;  // Metaspace
  };
  enum class SplitAt { kPattern, kReplacement };

  void add(const JsonObject& p) {
    const std::string type = p.string("type");
    Step step;
    if (type == "Sequence") {
      const nlohmann::json& list = p.array("pretokenizers");
      for (size_t i = 0; i < list.size(); ++i) add(p.element("pretokenizers", list, i));
      return;
    }
    if (type == "ByteLevel") {
      step.kind = Step::Kind::kByteLevel;
      step.add_prefix_space = p.boolean("add_prefix_space", true);
      step.use_pattern = p.boolean("use_regex", true);
      if (step.use_pattern)  // GPT-2's expression, fixed in Hugging Face's ByteLevel
        step.pattern.regex = std::make_shared<Regex>(
            R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false,
            true, p.label() + ": key \"" + p.path("type") + "\"");
    } else if (type == "Split") {
      step.kind = Step::Kind::kSplit;
      step.pattern = parse_pattern(p, "pattern");
      step.behavior = parse_behavior(p);
      step.invert = p.boolean("invert", false);
    } else if (type == "Metaspace") {
      step.kind = Step::Kind::kMetaspace;
      step.metaspace = parse_metaspace(p);
      step.split = p.boolean("split", true);
    } else {
      fail_unsupported(p, type, "ByteLevel, Split, Metaspace, Sequence");
    }
    steps_.push_back(std::move(step));
  }

  template <typename OnWord>
  void run_step(std::string_view piece, bool at_start, size_t index, bool valid_utf8,
                MatchBudget& budget, OnWord& on_word) const {
    if (piece.empty()) return;
    if (index == steps_.size()) {
      on_word(piece);
      return;
    }
    const Step& p = steps_[index];
    switch (p.kind) {
      case Step::Kind::kSplit:
        split(piece, at_start, index, SplitAt::kPattern, valid_utf8, budget, on_word);
        return;
      case Step::Kind::kByteLevel: {
        std::string prefixed;
        std::string_view s = piece;
        if (p.add_prefix_space && piece.front() != ' ') {
          prefixed.reserve(piece.size() + 1);
          prefixed.push_back(' ');
          prefixed.append(piece);
          s = prefixed;
        }
        if (p.use_pattern)
          split(s, at_start, index, SplitAt::kPattern, valid_utf8, budget, on_word);
        else
          run_step(s, at_start, index + 1, valid_utf8, budget, on_word);
        return;
      }
      case Step::Kind::kMetaspace:
        run_metaspace(piece, at_start, index, valid_utf8, budget, on_word);
        return;
    }
  }

  template <typename OnWord>
  void run_metaspace(std::string_view piece, bool at_start, size_t index, bool valid_utf8,
                     MatchBudget& budget, OnWord& on_word) const {
    const Step& p = steps_[index];
    const std::string& replacement = p.metaspace.replacement;
    std::string s;
    s.reserve(piece.size() + replacement.size());
    for (char c : piece) {
      if (c == ' ')
        s += replacement;
      else
        s.push_back(c);
    }
    const bool starts = s.compare(0, replacement.size(), replacement) == 0;
    const PrependScheme prepend = p.metaspace.prepend;
    if (!starts &&
        (prepend == PrependScheme::kAlways || (prepend == PrependScheme::kFirst && at_start)))
      s.insert(0, replacement);
    if (p.split)
      split(s, at_start, index, SplitAt::kReplacement, valid_utf8, budget, on_word);
    else
      run_step(s, at_start, index + 1, valid_utf8, budget, on_word);
  }

  /// Cuts `s` at step `index`'s pattern (or Metaspace's replacement character) and runs the
  /// next step on each piece.
  template <typename OnWord>
  void split(std::string_view s, bool at_start, size_t index, SplitAt how, bool valid_utf8,
             MatchBudget& budget, OnWord& on_word) const {
    const Step& p = steps_[index];
    const std::string& replacement = p.metaspace.replacement;
    const bool last = index + 1 == steps_.size();
    split_by_behavior(
        s,
        [&](auto&& on_match) {
          if (how == SplitAt::kPattern)
            p.pattern.for_each_match(s, valid_utf8, budget, on_match);
          else
            for (size_t q = s.find(replacement); q != std::string_view::npos;
                 q = s.find(replacement, q + replacement.size()))
              on_match(q, q + replacement.size());
        },
        how == SplitAt::kPattern ? p.behavior : SplitBehavior::kMergedWithNext,
        how == SplitAt::kPattern && p.invert,
        [&](size_t b, size_t e) {
          if (last)  // (split_by_behavior emits no empty piece)
            on_word(s.substr(b, e - b));
          else
            run_step(s.substr(b, e - b), at_start && b == 0, index + 1, valid_utf8, budget,
                     on_word);
        });
  }

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace retnet::detail::hf
