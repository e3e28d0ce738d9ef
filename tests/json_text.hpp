// Test helper: JSON texts whose parsed form costs far more than their bytes, for the tests of
// parse_json's memory budget (core/json.hpp) and of the readers built on it.
#pragma once

#include <cstddef>
#include <string>

namespace retnet::testing {

// "[{},{},...]" with `count` elements: 3 bytes of text for 24 + 64 estimated bytes, 29 times
// the text. kTooManyEmptyObjects of them (3 MiB of text) need 88 MiB, over the 70 MiB budget of
// that text.
inline std::string empty_objects(size_t count) {
  std::string text = "[";
  for (size_t i = 0; i < count; ++i) text += "{},";
  text.back() = ']';
  return text;
}
constexpr size_t kTooManyEmptyObjects = size_t{1} << 20;

}  // namespace retnet::testing
