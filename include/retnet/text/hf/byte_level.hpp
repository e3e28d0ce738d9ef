// GPT-2's byte-to-unicode table: how byte-level BPE writes bytes as characters in its
// vocabulary and merges. The tokenizer undoes it at load, so the model works on raw bytes.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "retnet/text/hf/utf8.hpp"

namespace retnet::detail::hf {

/// The character GPT-2's byte-level BPE writes for each byte: printable Latin-1 bytes stand for
/// themselves, the other 68 bytes for U+0100 onwards, in byte order.
inline const std::array<uint32_t, 256>& byte_to_char() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[b] = printable ? uint32_t(b) : next++;
    }
    return t;
  }();
  return table;
}

/// Inverse of byte_to_char for code points below 512 (-1: no byte).
inline const std::array<int16_t, 512>& char_to_byte() {
  static const std::array<int16_t, 512> table = [] {
    std::array<int16_t, 512> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_char()[b]] = int16_t(b);
    return t;
  }();
  return table;
}

/// The bytes a byte-level token string stands for, into `out`; false if one of its characters
/// is not in the table (such a token can never come out of the byte-level pre-tokenizer).
inline bool byte_level_to_bytes(std::string_view token, std::string& out) {
  out.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  const auto& table = char_to_byte();
  for (size_t i = 0; i < token.size();) {
    const size_t len = utf8_length(p + i, token.size() - i);
    if (len == 0) return false;
    const uint32_t cp = code_point(p + i, len);
    if (cp >= 512 || table[cp] < 0) return false;
    out.push_back(char(table[cp]));
    i += len;
  }
  return true;
}
inline std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  std::string out;
  if (!byte_level_to_bytes(token, out)) return std::nullopt;
  return out;
}

}  // namespace retnet::detail::hf
