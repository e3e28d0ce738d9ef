// UTF-8 as the tokenizer reads it: well-formed sequences, the units a text is cut into (a whole
// character, or a single byte that starts none), and Rust's lossy conversion for decode_lossy.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace retnet::detail::hf {

/// Length (1-4) of the well-formed UTF-8 sequence at p (n bytes available), 0 if there is none
/// (stray continuation byte, overlong form, surrogate, above U+10FFFF, truncated).
inline size_t utf8_length(const unsigned char* p, size_t n) {
  const unsigned c = p[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return n >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
  if (c < 0xF0) {
    if (n < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0)) return 0;
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
    if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90)) return 0;
    return 4;
  }
  return 0;
}

/// Bytes of the unit at s[i]: a whole character, or a single byte that starts none.
inline size_t unit_length(std::string_view s, size_t i) {
  const size_t n = utf8_length(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i);
  return n ? n : 1;
}

/// Start of the unit (character, or stray byte) that ends at `end` > 0.
inline size_t previous_unit(std::string_view s, size_t end) {
  for (size_t back = end < 4 ? end : 4; back >= 2; --back)
    if (utf8_length(reinterpret_cast<const unsigned char*>(s.data()) + end - back, back) == back)
      return end - back;
  return end - 1;
}

/// Offset of the first byte that is not part of well-formed UTF-8, or npos.
inline size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    if (i + 8 <= n) {  // ASCII runs eight bytes at a time
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const size_t len = utf8_length(p + i, n - i);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

inline bool is_valid_utf8(std::string_view s) {
  return first_invalid_utf8(s) == std::string_view::npos;
}

/// Code point of the well-formed sequence of `len` bytes at p.
inline uint32_t code_point(const unsigned char* p, size_t len) {
  switch (len) {
    case 1:
      return p[0];
    case 2:
      return (uint32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3:
      return (uint32_t(p[0] & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
      return (uint32_t(p[0] & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) |
             (uint32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
}

inline void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

/// `s` with every ill-formed part replaced by U+FFFD, one per maximal subpart (the longest
/// start of a valid sequence, or one byte), as Rust's String::from_utf8_lossy does.
inline std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto cont = [](unsigned c, unsigned lo, unsigned hi) { return c >= lo && c <= hi; };
  for (size_t i = 0; i < s.size();) {
    const size_t n = s.size() - i;
    const size_t len = utf8_length(p + i, n);
    if (len) {
      out.append(s.data() + i, len);
      i += len;
      continue;
    }
    const unsigned c = p[i];
    size_t bad = 1;
    if (c >= 0xE0 && c <= 0xEF && n >= 2) {
      const unsigned lo = c == 0xE0 ? 0xA0 : 0x80;
      const unsigned hi = c == 0xED ? 0x9F : 0xBF;
      if (cont(p[i + 1], lo, hi)) bad = 2;
    } else if (c >= 0xF0 && c <= 0xF4 && n >= 2) {
      const unsigned lo = c == 0xF0 ? 0x90 : 0x80;
      const unsigned hi = c == 0xF4 ? 0x8F : 0xBF;
      if (cont(p[i + 1], lo, hi)) bad = n >= 3 && cont(p[i + 2], 0x80, 0xBF) ? 3 : 2;
    }
    out += "\xEF\xBF\xBD";
    i += bad;
  }
  return out;
}

}  // namespace retnet::detail::hf
