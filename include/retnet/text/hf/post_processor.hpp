// What encode does after the model: the post-processor's special tokens around the text
// (TemplateProcessing; ByteLevel and Sequence), then truncation and padding when
// tokenizer.json asks for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "retnet/core/json.hpp"
#include "retnet/text/hf/tokenizer_json.hpp"

namespace retnet::detail::hf {

/// The ids the post-processor puts before and after the text of a single sequence.
struct PostProcessor {
  std::vector<int32_t> prefix_ids, suffix_ids;

  /// Reads tokenizer.json's "post_processor" (absent or null: nothing added).
  void parse(const JsonObject& root) {
    prefix_ids.clear();
    suffix_ids.clear();
    if (const auto p = root.optional_object("post_processor")) add(*p);
  }

 private:
  void add(const JsonObject& p) {
    const std::string type = p.string("type");
    if (type == "Sequence") {
      const nlohmann::json& list = p.array("processors");
      for (size_t i = 0; i < list.size(); ++i) add(p.element("processors", list, i));
    } else if (type == "ByteLevel") {
      // Only adjusts offsets: nothing to do for ids.
    } else if (type == "TemplateProcessing") {
      add_template(p);
    } else {
      fail_unsupported(p, type, "TemplateProcessing, ByteLevel, Sequence");
    }
  }

  /// The "single" template: special tokens, then $A once, then special tokens.
  void add_template(const JsonObject& p) {
    constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
    const nlohmann::json& single = p.array("single");
    const std::optional<JsonObject> specials = p.optional_object("special_tokens");
    std::vector<int32_t> before, after;
    bool seen_a = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const JsonObject item = p.element("single", single, i);
      if (const auto s = item.optional_object("SpecialToken")) {
        const std::string name = s->string("id");
        const auto entry = specials ? specials->optional_object(name) : std::nullopt;
        if (!entry)
          p.fail("single[" + std::to_string(i) + "]", "names special token " + excerpt(name) +
                                                          ", which " + p.path("special_tokens") +
                                                          " does not define");
        const size_t count = entry->array("ids").size();
        for (size_t k = 0; k < count; ++k)
          (seen_a ? after : before).push_back(int32_t(entry->integer_element("ids", k, 0, kMaxId)));
      } else if (const auto sequence = item.optional_object("Sequence")) {
        if (sequence->string("id") != "A" || seen_a)
          p.fail("single", "must hold the sequence $A once");
        seen_a = true;
      } else {
        p.fail("single[" + std::to_string(i) + "]", "must be a SpecialToken or a Sequence");
      }
    }
    if (!seen_a) p.fail("single", "has no $A");
    prefix_ids.insert(prefix_ids.begin(), before.begin(), before.end());
    suffix_ids.insert(suffix_ids.end(), after.begin(), after.end());
  }
};

/// tokenizer.json's "truncation" (of the text's ids, leaving room for the special tokens).
struct Truncation {
  size_t max_length = 0;
  bool left = false;

  static std::optional<Truncation> parse(const JsonObject& root) {
    const auto t = root.optional_object("truncation");
    if (!t) return std::nullopt;
    Truncation tr;
    tr.max_length = size_t(t->integer("max_length", 0, std::numeric_limits<int32_t>::max()));
    tr.left = parse_direction(*t);
    return tr;
  }

  void apply(std::vector<int32_t>& ids, size_t special_tokens) const {
    const size_t max = max_length > special_tokens ? max_length - special_tokens : 0;
    if (ids.size() <= max) return;
    if (left)
      ids.erase(ids.begin(), ids.end() - std::ptrdiff_t(max));
    else
      ids.resize(max);
  }

  /// "direction": "Right" (the default) or "Left"; true for Left.
  static bool parse_direction(const JsonObject& o) {
    const std::string direction = o.string("direction", "Right");
    if (direction != "Right" && direction != "Left") o.fail("direction", "must be Right or Left");
    return direction == "Left";
  }
};

/// tokenizer.json's "padding" (BatchLongest does nothing to one sequence).
struct Padding {
  static constexpr int64_t kMaxLength = int64_t(1) << 24;  // padding targets (tokens)
  std::optional<size_t> fixed;
  size_t multiple = 0;
  bool left = false;
  int32_t id = 0;

  static std::optional<Padding> parse(const JsonObject& root) {
    const auto p = root.optional_object("padding");
    if (!p) return std::nullopt;
    Padding pd;
    const nlohmann::json& strategy = p->require("strategy");
    if (strategy.is_object())
      pd.fixed = size_t(p->object("strategy").integer("Fixed", 0, kMaxLength));
    else if (!strategy.is_string() || strategy.get<std::string>() != "BatchLongest")
      p->fail("strategy", "must be \"BatchLongest\" or {\"Fixed\": n}");
    pd.left = Truncation::parse_direction(*p);
    pd.multiple = size_t(p->optional_integer("pad_to_multiple_of", 0, kMaxLength).value_or(0));
    pd.id = int32_t(p->integer("pad_id", 0, std::numeric_limits<int32_t>::max()));
    return pd;
  }

  void apply(std::vector<int32_t>& ids) const {
    size_t target = fixed ? *fixed : ids.size();
    if (multiple > 0 && target % multiple != 0) target += multiple - target % multiple;
    if (ids.size() >= target) return;
    if (left)
      ids.insert(ids.begin(), target - ids.size(), id);
    else
      ids.resize(target, id);
  }
};

}  // namespace retnet::detail::hf
