// Test helper: an independent check that a cut in streamed text does not split a UTF-8
// character.
#pragma once

#include <cstddef>
#include <string>

namespace retnet::testing {

/// Whether cutting `text` at n splits a UTF-8 character that the following bytes complete: a
/// lead byte (C2-F4; C0, C1 and F5-FF never start one) before n whose continuation bytes follow
/// n (written independently of the Generator's own check).
inline bool splits_a_character(const std::string& text, size_t n) {
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if (c >= 0x80 && c < 0xC0) continue;
    if (c < 0xC2 || c > 0xF4) return false;
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (need <= back) return false;
    for (size_t i = n; i < n + need - back; ++i)  // the rest must follow as continuation bytes
      if (i >= text.size() || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) return false;
    return true;
  }
  return false;
}

}  // namespace retnet::testing
