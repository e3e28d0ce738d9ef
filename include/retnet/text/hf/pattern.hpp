// The pattern of Split, Replace (normalizer and decoder): {"String": ...} or {"Regex": ...}.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "retnet/core/json.hpp"
#include "retnet/text/hf/regex.hpp"

namespace retnet::detail::hf {

/// A String or Regex pattern. String patterns are searched with std::string_view::find (the
/// same non-overlapping leftmost matches).
struct Pattern {
  std::string literal;           // when regex is null
  std::shared_ptr<Regex> regex;  // when the pattern is a Regex

  template <typename F>
  void for_each_match(std::string_view text, bool valid_utf8, MatchBudget& budget,
                      F&& on_match) const {
    if (regex) return regex->for_each_match(text, valid_utf8, budget, on_match);
    for (size_t p = text.find(literal); p != std::string_view::npos;
         p = text.find(literal, p + literal.size()))
      on_match(p, p + literal.size());
  }

  /// `text` with every match replaced by `content` (Hugging Face's Replace). The result may
  /// not exceed `max_bytes`: `on_too_long()` is called (and must throw) before it would.
  template <typename OnTooLong>
  std::string replace_all(std::string_view text, std::string_view content, bool valid_utf8,
                          MatchBudget& budget, size_t max_bytes, OnTooLong&& on_too_long) const {
    std::string out;
    size_t prev = 0;
    const auto append = [&](std::string_view s) {
      if (s.size() > max_bytes - out.size()) on_too_long();
      out.append(s);
    };
    for_each_match(text, valid_utf8, budget, [&](size_t begin, size_t end) {
      append(text.substr(prev, begin - prev));
      append(content);
      prev = end;
    });
    append(text.substr(prev));
    return out;
  }

  /// replace_all with a budget of its own for `text` and no bound on the result beyond what
  /// `text` and `content` allow (the decoder's Replace, on one token at a time).
  std::string replace_all(std::string_view text, std::string_view content, bool valid_utf8) const {
    MatchBudget budget(text.size());
    return replace_all(text, content, valid_utf8, budget, std::string::npos, [] {});
  }
};

/// The pattern at `key` of component `o`.
inline Pattern parse_pattern(const JsonObject& o, const std::string& key) {
  const JsonObject p = o.object(key);
  const char* const shape = "must be {\"String\": ...} or {\"Regex\": ...}";
  if (p.value().size() != 1) o.fail(key, shape);
  Pattern pattern;
  if (p.has("String")) {
    pattern.literal = p.string("String");
    if (pattern.literal.empty()) p.fail("String", "is empty");
  } else if (p.has("Regex")) {
    pattern.regex = std::make_shared<Regex>(p.string("Regex"), false, true,
                                            p.label() + ": key \"" + p.path("Regex") + "\"");
  } else {
    o.fail(key, shape);
  }
  return pattern;
}

}  // namespace retnet::detail::hf
