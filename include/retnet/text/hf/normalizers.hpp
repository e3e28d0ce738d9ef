// Normalizers (Prepend, Replace, Sequence of them): what the text becomes before it is
// pre-tokenized, and the form in which normalized added tokens are searched for.
#pragma once

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
    if (const auto n = root.optional_object("normalizer")) add(*n);
  }

  bool empty() const { return steps_.empty(); }

  std::string normalize(std::string_view piece, bool valid_utf8) const {
    std::string s(piece);
    for (const Step& step : steps_) {
      if (step.kind == Step::Kind::kPrepend) {
        if (!s.empty()) s.insert(0, step.text);
      } else {
        s = step.pattern.replace_all(s, step.text, valid_utf8);
      }
    }
    return s;
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

  std::vector<Step> steps_;
};

}  // namespace retnet::detail::hf
