// Normalizers (Prepend, Replace, Sequence of them): what the text becomes before it is
// pre-tokenized, and the form in which normalized added tokens are searched for.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "retnet/core/json.hpp"
#include "retnet/text/hf/pattern.hpp"
#include "retnet/text/hf/tokenizer_json.hpp"

namespace retnet::detail::hf {

class Normalizer {
 public:
  /// Reads tokenizer.json's "normalizer" (absent or null: none).
  void parse(const JsonObject& root) {
    steps_.clear();
    label_ = root.label();
    if (const auto n = root.optional_object("normalizer")) add(*n);
  }

  bool empty() const { return steps_.empty(); }

  /// The normalized text may be at most kMaxGrowth times the piece plus kMaxExtraBytes long:
  /// a step that would make it longer is refused before the text is allocated.
  static constexpr size_t kMaxGrowth = 8;
  static constexpr size_t kMaxExtraBytes = size_t(1) << 20;

  /// `piece` normalized; the Replace steps' matches are charged to `budget`.
  std::string normalize(std::string_view piece, bool valid_utf8, MatchBudget& budget) const {
    const size_t max_bytes = kMaxGrowth * piece.size() + kMaxExtraBytes;
    std::string s(piece);
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step& step = steps_[i];
      const auto too_long = [&] { fail_too_long(i, piece.size(), max_bytes); };
      if (step.kind == Step::Kind::kPrepend) {
        if (s.empty()) continue;
        if (step.text.size() > max_bytes - s.size()) too_long();
        s.insert(0, step.text);
      } else {
        s = step.pattern.replace_all(s, step.text, valid_utf8, budget, max_bytes, too_long);
      }
    }
    return s;
  }

  /// normalize with a match budget of its own (an added token's content, at load).
  std::string normalize(std::string_view piece, bool valid_utf8) const {
    MatchBudget budget(piece.size());
    return normalize(piece, valid_utf8, budget);
  }

 private:
  struct Step {
    enum class Kind { kPrepend, kReplace } kind = Kind::kPrepend;
    std::string text;  // what Prepend adds, or Replace's content
    Pattern pattern;   // Replace
  };

  void add(const JsonObject& n) {
    const std::string type = n.string("type");
    Step step;
    if (type == "Sequence") {
      const nlohmann::json& list = n.array("normalizers");
      for (size_t i = 0; i < list.size(); ++i) add(n.element("normalizers", list, i));
      return;
    }
    if (type == "Prepend") {
      step.kind = Step::Kind::kPrepend;
      step.text = n.string("prepend");
    } else if (type == "Replace") {
      step.kind = Step::Kind::kReplace;
      step.pattern = parse_pattern(n, "pattern");
      step.text = n.string("content");
    } else {
      fail_unsupported(n, type, "Prepend, Replace, Sequence");
    }
    steps_.push_back(std::move(step));
  }

  [[noreturn]] void fail_too_long(size_t step, size_t piece_bytes, size_t max_bytes) const {
    throw InvalidArgument(label_ + ": normalizer step " + std::to_string(step) +
                          " makes a piece of " + std::to_string(piece_bytes) +
                          " bytes longer than " + std::to_string(max_bytes) + " bytes (" +
                          std::to_string(kMaxGrowth) + " times the piece + " +
                          std::to_string(kMaxExtraBytes) + "): refused");
  }

  std::vector<Step> steps_;
  std::string label_ = "tokenizer.json";
};

}  // namespace retnet::detail::hf
