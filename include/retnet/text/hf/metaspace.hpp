// Metaspace's settings, shared by its pre-tokenizer and its decoder: the character that
// stands for a space, and when one is put before the text.
#pragma once

#include <string>

#include "retnet/core/json.hpp"
#include "retnet/text/hf/utf8.hpp"

namespace retnet::detail::hf {

enum class PrependScheme { kAlways, kFirst, kNever };

struct Metaspace {
  std::string replacement;  // UTF-8 of its one character
  PrependScheme prepend = PrependScheme::kAlways;
};

inline Metaspace parse_metaspace(const JsonObject& o) {
  Metaspace m;
  m.replacement = o.string("replacement");
  if (m.replacement.empty() || !is_valid_utf8(m.replacement) ||
      unit_length(m.replacement, 0) != m.replacement.size())
    o.fail("replacement", "must be one character");
  if (const auto scheme = o.optional_string("prepend_scheme")) {
    if (*scheme == "always")
      m.prepend = PrependScheme::kAlways;
    else if (*scheme == "first")
      m.prepend = PrependScheme::kFirst;
    else if (*scheme == "never")
      m.prepend = PrependScheme::kNever;
    else
      o.fail("prepend_scheme", "= " + excerpt(*scheme) + " is not always, first or never");
  }
  if (!o.boolean("add_prefix_space", true)) m.prepend = PrependScheme::kNever;
  return m;
}

}  // namespace retnet::detail::hf
