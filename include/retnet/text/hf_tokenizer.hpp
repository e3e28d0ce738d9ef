// Hugging Face tokenizer.json with a BPE model, as the `tokenizers` library (Rust, 0.22)
// encodes and decodes it: byte-level BPE (GPT-2, GPT-NeoX without NFC, Llama 3) and
// SentencePiece-style BPE with byte fallback (Llama 2, Mistral). docs/TOKENIZERS.md lists the
// supported components, what is refused, and the choices made.
//
// Needs PCRE2 (8-bit library, UTF + Unicode properties): link RetNet::tokenizers, or include
// retnet/tokenizers.hpp. The core library (retnet/retnet.hpp) does not include this header.
//
// Pipeline of encode(text), as in Hugging Face's TokenizerImpl::encode:
//   1. added tokens with normalized=false are cut out of the raw text (leftmost-longest,
//      honouring single_word, lstrip and rstrip);
//   2. every other piece is normalized (Prepend, Replace, Sequence), then added tokens with
//      normalized=true are cut out of it;
//   3. the remaining pieces are pre-tokenized into words (Split, ByteLevel, Metaspace,
//      Sequence; regular expressions through PCRE2);
//   4. each word goes through the BPE model (merges by rank, lowest first, leftmost on ties;
//      byte fallback or unk for unknown characters; ignore_merges);
//   5. the post-processor adds its special tokens (TemplateProcessing), then truncation and
//      padding apply when tokenizer.json asks for them.
// Byte-level vocabularies are held as raw bytes (GPT-2's byte-to-unicode table undone at load),
// so ByteLevel costs nothing at encode time and any byte string can be encoded.
#pragma once

#if defined(PCRE2_CODE_UNIT_WIDTH) && PCRE2_CODE_UNIT_WIDTH != 8 && PCRE2_CODE_UNIT_WIDTH != 0
#error "retnet/text/hf_tokenizer.hpp uses PCRE2's 8-bit library (PCRE2_CODE_UNIT_WIDTH 8 or 0)"
#endif
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/text/tokenizer.hpp"

namespace retnet {

namespace hf_detail {

// ---- UTF-8 ----------------------------------------------------------------------------------

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
      const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
      if (cont(p[i + 1], lo, hi)) bad = 2;
    } else if (c >= 0xF0 && c <= 0xF4 && n >= 2) {
      const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
      if (cont(p[i + 1], lo, hi)) bad = n >= 3 && cont(p[i + 2], 0x80, 0xBF) ? 3 : 2;
    }
    out += "\xEF\xBF\xBD";
    i += bad;
  }
  return out;
}

/// A short, printable rendering of a token or pattern for error messages (one line).
inline std::string quote(std::string_view s, size_t max = 60) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    } else {
      out.push_back(char(c));
    }
  }
  if (s.size() > max) out += "...";
  return out + "'";
}

// ---- GPT-2's byte-to-unicode table ----------------------------------------------------------

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

/// The bytes a byte-level token string stands for; nullopt if one of its characters is not in
/// the table (such a token can never come out of the byte-level pre-tokenizer).
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

// ---- Regular expressions (PCRE2) ------------------------------------------------------------

/// `pattern` with the escapes whose meaning differs between Oniguruma (which Hugging Face
/// compiles tokenizer.json's patterns with) and PCRE2 spelled out as Oniguruma reads them:
/// \s and \S are Unicode White_Space (PCRE2's \s also takes U+180E), \w and \W are
/// letters, marks, numbers and connector punctuation (PCRE2's lack marks), and \h and \H are
/// hexadecimal digits (horizontal space in PCRE2). Inside a character class \W and \H keep
/// PCRE2's meaning (a negated set cannot be listed there).
inline std::string oniguruma_to_pcre2(std::string_view p) {
  static const std::string word = R"(\p{L}\p{M}\p{N}\p{Pc})";
  std::string out;
  out.reserve(p.size() + 16);
  int depth = 0;  // inside how many character classes
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 'Q') {  // \Q...\E is literal
        const size_t end = p.find("\\E", i + 1);
        const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out.append(p.substr(i - 1, stop - (i - 1)));
        i = stop - 1;
        continue;
      }
      switch (e) {
        case 's':
          out += R"(\p{White_Space})";
          break;
        case 'S':
          out += R"(\P{White_Space})";
          break;
        case 'w':
          out += depth ? word : "[" + word + "]";
          break;
        case 'W':
          out += depth ? std::string(R"(\W)") : "[^" + word + "]";
          break;
        case 'h':
          out += depth ? "0-9a-fA-F" : "[0-9a-fA-F]";
          break;
        case 'H':
          out += depth ? R"(\H)" : "[^0-9a-fA-F]";
          break;
        default:
          out.push_back(c);
          out.push_back(e);
      }
      continue;
    }
    if (c == '[') {
      if (depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:] inside a class
        const size_t end = p.find(":]", i + 2);
        const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out.append(p.substr(i, stop - i));
        i = stop - 1;
        continue;
      }
      ++depth;
      out.push_back(c);
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);  // a leading ] is literal
      continue;
    }
    if (c == ']' && depth > 0) --depth;
    out.push_back(c);
  }
  return out;
}

/// A compiled pattern (UTF, Unicode properties, JIT when available), matched the way
/// Oniguruma's find_iter does in Hugging Face's tokenizers: successive non-overlapping matches,
/// an empty match right after a non-empty one skipped, one character skipped after an empty
/// match. Immutable after construction, so one Regex may be used by several threads at once.
class Regex {
 public:
  /// `literal`: the pattern is a plain string. `invalid_utf8`: also compile a variant that
  /// matches in text that is not valid UTF-8 (invalid bytes then match nothing).
  Regex(std::string_view pattern, bool literal, bool invalid_utf8, const std::string& what) {
    valid_ = compile(pattern, literal, false, what);
    if (invalid_utf8) invalid_ = compile(pattern, literal, true, what);
  }

  /// Calls on_match(begin, end) for each match in `text`. `valid_utf8` says whether text is
  /// well-formed UTF-8; if not, the Regex must have been built with invalid_utf8.
  template <typename F>
  void for_each_match(std::string_view text, bool valid_utf8, F&& on_match) const {
    const Compiled& c = valid_utf8 ? valid_ : invalid_;
    if (!c.code) throw InvalidArgument("tokenizer: text is not valid UTF-8");
    std::unique_ptr<pcre2_match_data_8, MatchDataDeleter> md(pcre2_match_data_create_8(1, nullptr));
    if (!md) throw std::bad_alloc();
    const auto* subject = reinterpret_cast<PCRE2_SPTR8>(text.data());
    const uint32_t options = valid_utf8 ? PCRE2_NO_UTF_CHECK : 0;
    size_t last_end = 0;
    bool skip_next_empty = false;
    while (last_end <= text.size()) {
      int rc = c.jit ? pcre2_jit_match_8(c.code.get(), subject, text.size(), last_end, options,
                                         md.get(), nullptr)
                     : PCRE2_ERROR_JIT_BADOPTION;
      if (!c.jit ||
          rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its stack on the heap
        rc = pcre2_match_8(c.code.get(), subject, text.size(), last_end, options | PCRE2_NO_JIT,
                           md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0)
        throw InvalidArgument("tokenizer: regular expression match failed: " + message(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer_8(md.get());
      const size_t begin = ov[0], end = ov[1];
      if (begin > end || end > text.size())  // \K in a lookahead can do this
        throw InvalidArgument(
            "tokenizer: regular expression gave a match that ends before it starts");
      last_end = end;
      if (begin == end) {
        last_end += end < text.size() ? unit_length(text, end) : 1;
        if (skip_next_empty) {
          skip_next_empty = false;
          continue;
        }
      } else {
        skip_next_empty = true;
      }
      on_match(begin, end);
    }
  }

  /// Whether the pattern matches at exactly `pos` (anchored there).
  bool matches_at(std::string_view text, size_t pos, bool valid_utf8) const {
    const Compiled& c = valid_utf8 ? valid_ : invalid_;
    if (!c.code) return false;
    std::unique_ptr<pcre2_match_data_8, MatchDataDeleter> md(pcre2_match_data_create_8(1, nullptr));
    if (!md) throw std::bad_alloc();
    const int rc =
        pcre2_match_8(c.code.get(), reinterpret_cast<PCRE2_SPTR8>(text.data()), text.size(), pos,
                      PCRE2_ANCHORED | (valid_utf8 ? PCRE2_NO_UTF_CHECK : 0u), md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) throw InvalidArgument("tokenizer: regular expression match failed: " + message(rc));
    return true;
  }

 private:
  struct CodeDeleter {
    void operator()(pcre2_code_8* c) const { pcre2_code_free_8(c); }
  };
  struct MatchDataDeleter {
    void operator()(pcre2_match_data_8* m) const { pcre2_match_data_free_8(m); }
  };
  struct Compiled {
    std::shared_ptr<pcre2_code_8> code;
    bool jit = false;
  };

  static std::string message(int code) {
    PCRE2_UCHAR8 buffer[256];
    if (pcre2_get_error_message_8(code, buffer, sizeof(buffer)) < 0)
      return "error " + std::to_string(code);
    return reinterpret_cast<const char*>(buffer);
  }

  static Compiled compile(std::string_view original, bool literal, bool invalid_utf8,
                          const std::string& what) {
    const std::string converted = literal ? std::string() : oniguruma_to_pcre2(original);
    const std::string_view pattern = literal ? original : std::string_view(converted);
    uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    if (invalid_utf8) options |= PCRE2_MATCH_INVALID_UTF;
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code_8* code = pcre2_compile_8(reinterpret_cast<PCRE2_SPTR8>(pattern.data()),
                                         pattern.size(), options, &error, &offset, nullptr);
    if (!code)
      throw FormatError(what + ": pattern " + quote(original) + " does not compile: " +
                        message(error) + " (at offset " + std::to_string(offset) + ")");
    Compiled c;
    c.code.reset(code, CodeDeleter());
    c.jit = pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE) == 0;
    return c;
  }

  Compiled valid_, invalid_;
};

// ---- Hash tables ----------------------------------------------------------------------------

inline void prefetch(const void* p) {
#if defined(__GNUC__)
  __builtin_prefetch(p);
#else
  (void)p;
#endif
}

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = mix64(h ^ v) + 0x632BE59BD9B4E019ull;
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return mix64(h ^ v ^ (uint64_t(n) << 59));
}

/// Open-addressing map from byte strings to int64 values; lookups take a string_view and
/// allocate nothing. Keys of up to 8 bytes are kept in the slot itself (most tokens: a lookup
/// then touches one cache line), longer ones in one shared buffer.
class StringTable {
 public:
  StringTable() { rehash(16); }

  const int64_t* find(std::string_view key) const { return find(key, hash_bytes(key)); }

  /// find with the key's hash_bytes computed already; prefetch(h) beforehand hides the
  /// memory latency when many lookups are made in a row.
  void prefetch(uint64_t h) const { hf_detail::prefetch(&slots_[h & mask_]); }
  const int64_t* find(std::string_view key, uint64_t h) const {
    const uint32_t tag = uint32_t(h >> 32) | 1;  // 0 marks an empty slot
    const uint64_t inline_key = pack(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.tag == 0) return nullptr;
      if (s.tag == tag && s.length == key.size() && same(s, key, inline_key)) return &s.value;
    }
  }

  /// Inserts or overwrites.
  void assign(std::string_view key, int64_t value) { *slot_for(key) = value; }

  /// Inserts unless present; returns whether it did.
  bool insert(std::string_view key, int64_t value) {
    const size_t before = size_;
    int64_t* v = slot_for(key);
    if (size_ == before) return false;
    *v = value;
    return true;
  }

  void reserve(size_t n) {
    size_t want = 16;
    while (want < 2 * n) want *= 2;
    if (want > slots_.size()) rehash(want);
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint32_t tag = 0;
    uint32_t length = 0;
    uint64_t data = 0;  // the key's bytes if it has up to 8, else its offset in keys_
    int64_t value = 0;
  };

  static uint64_t pack(std::string_view key) {
    uint64_t v = 0;
    if (key.size() <= 8) std::memcpy(&v, key.data(), key.size());
    return v;
  }
  bool same(const Slot& s, std::string_view key, uint64_t inline_key) const {
    return key.size() <= 8 ? s.data == inline_key
                           : std::memcmp(keys_.data() + s.data, key.data(), key.size()) == 0;
  }

  int64_t* slot_for(std::string_view key) {
    if (key.size() > std::numeric_limits<uint32_t>::max()) throw std::length_error("key too long");
    if (2 * (size_ + 1) > slots_.size()) rehash(2 * slots_.size());
    const uint64_t h = hash_bytes(key);
    const uint32_t tag = uint32_t(h >> 32) | 1;
    const uint64_t inline_key = pack(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.tag == 0) {
        s.tag = tag;
        s.length = uint32_t(key.size());
        if (key.size() <= 8) {
          s.data = inline_key;
        } else {
          s.data = keys_.size();
          keys_.append(key.data(), key.size());
        }
        ++size_;
        return &s.value;
      }
      if (s.tag == tag && s.length == key.size() && same(s, key, inline_key)) return &s.value;
    }
  }

  void rehash(size_t n) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot());
    mask_ = n - 1;
    for (const Slot& s : old) {
      if (s.tag == 0) continue;
      const std::string_view key =
          s.length <= 8 ? std::string_view(reinterpret_cast<const char*>(&s.data), s.length)
                        : std::string_view(keys_.data() + s.data, s.length);
      size_t i = hash_bytes(key) & mask_;
      while (slots_[i].tag != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::string keys_;
  size_t size_ = 0;
  size_t mask_ = 0;
};

/// Open-addressing map from a pair of token ids to a merge (rank, id of the merged token).
class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };

  MergeTable() { rehash(16); }

  const Merge* find(int32_t a, int32_t b) const {
    const uint64_t key = pack(a, b);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }

  void prefetch(int32_t a, int32_t b) const {
    hf_detail::prefetch(&slots_[mix64(pack(a, b)) & mask_]);
  }

  /// Inserts or overwrites (a later duplicate of a merge wins, as in Hugging Face's map).
  void assign(int32_t a, int32_t b, Merge m) {
    if (4 * (size_ + 1) > 3 * slots_.size()) rehash(2 * slots_.size());
    const uint64_t key = pack(a, b);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == key) {
        s.merge = m;
        return;
      }
      if (s.key == kEmpty) {
        s.key = key;
        s.merge = m;
        ++size_;
        return;
      }
    }
  }

  void reserve(size_t n) {
    size_t want = 16;
    while (3 * want < 4 * n) want *= 2;
    if (want > slots_.size()) rehash(want);
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative: never a real key
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{0, 0};
  };
  static uint64_t pack(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  void rehash(size_t n) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot());
    mask_ = n - 1;
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = mix64(s.key) & mask_;
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
};

// ---- Added tokens ---------------------------------------------------------------------------

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

/// Leftmost-longest search for a set of strings (a byte trie), as the Aho-Corasick automaton
/// Hugging Face builds for its added tokens.
class TokenTrie {
 public:
  TokenTrie() : nodes_(1) { first_.fill(-1); }

  void add(std::string_view s, int32_t value) {
    if (s.empty()) return;
    int32_t node = first_[static_cast<unsigned char>(s[0])];
    if (node < 0) {
      node = new_node();
      first_[static_cast<unsigned char>(s[0])] = node;
    }
    for (size_t i = 1; i < s.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      int32_t next = child(node, c);
      if (next < 0) {
        next = new_node();
        nodes_[node].children.emplace_back(c, next);
      }
      node = next;
    }
    nodes_[node].value = value;
    empty_ = false;
  }

  bool empty() const { return empty_; }

  /// The leftmost match at or after `from` (the longest of those starting there).
  bool find(std::string_view text, size_t from, size_t& begin, size_t& end, int32_t& value) const {
    for (size_t p = from; p < text.size(); ++p) {
      int32_t node = first_[static_cast<unsigned char>(text[p])];
      if (node < 0) continue;
      int32_t found = -1;
      size_t found_end = 0;
      for (size_t q = p + 1;; ++q) {
        if (nodes_[node].value >= 0) found = nodes_[node].value, found_end = q;
        if (q == text.size()) break;
        node = child(node, static_cast<unsigned char>(text[q]));
        if (node < 0) break;
      }
      if (found >= 0) {
        begin = p, end = found_end, value = found;
        return true;
      }
    }
    return false;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t value = -1;
  };
  int32_t new_node() {
    nodes_.emplace_back();
    return int32_t(nodes_.size() - 1);
  }
  int32_t child(int32_t node, unsigned char c) const {
    for (const auto& [k, v] : nodes_[node].children)
      if (k == c) return v;
    return -1;
  }

  std::vector<Node> nodes_;  // nodes_[0] unused; first_ holds the root's children
  std::array<int32_t, 256> first_;
  bool empty_ = true;
};

// ---- Components -----------------------------------------------------------------------------

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

/// A String or Regex pattern as Split and Replace take it. String patterns are searched with
/// std::string_view::find (the same non-overlapping leftmost matches).
struct Pattern {
  std::string literal;           // when regex is null
  std::shared_ptr<Regex> regex;  // when the pattern is a Regex

  template <typename F>
  void for_each_match(std::string_view text, bool valid_utf8, F&& on_match) const {
    if (regex) return regex->for_each_match(text, valid_utf8, on_match);
    for (size_t p = text.find(literal); p != std::string_view::npos;
         p = text.find(literal, p + literal.size()))
      on_match(p, p + literal.size());
  }
};

struct NormalizerStep {
  enum class Kind { kPrepend, kReplace } kind = Kind::kPrepend;
  std::string text;  // what Prepend adds, or Replace's content
  Pattern pattern;   // Replace
};

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace } kind = Kind::kSplit;
  Pattern pattern;  // Split's pattern; ByteLevel's GPT-2 expression when use_regex
  bool use_pattern = true;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
  std::string replacement;        // Metaspace, UTF-8 of its one character
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = true;
};

struct DecoderStep {
  enum class Kind {
    kReplace,
    kByteFallback,
    kFuse,
    kStrip,
    kMetaspace,
    kByteLevel
  } kind = Kind::kFuse;
  Pattern pattern;          // Replace
  std::string content;      // Replace's content; Strip's character (UTF-8)
  size_t start = 0;         // Strip
  size_t stop = 0;          // Strip
  std::string replacement;  // Metaspace
  PrependScheme prepend = PrependScheme::kAlways;
};

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

// ---- JSON reading ---------------------------------------------------------------------------

using Json = nlohmann::json;

/// Field access with one-line FormatErrors naming the file and the field.
class JsonReader {
 public:
  explicit JsonReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw FormatError(source_ + ": " + message);
  }
  const std::string& source() const { return source_; }

  /// The field, or nullptr when it is missing or null.
  const Json* find(const Json& object, const char* key, const std::string& where) const {
    if (!object.is_object()) fail(where + " must be an object");
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const Json& require(const Json& object, const char* key, const std::string& where) const {
    const Json* v = find(object, key, where);
    if (!v) fail(where + "." + key + " is missing");
    return *v;
  }
  std::string string(const Json& v, const std::string& where) const {
    if (!v.is_string()) fail(where + " must be a string");
    return v.get<std::string>();
  }
  std::string string(const Json& object, const char* key, const std::string& where) const {
    return string(require(object, key, where), where + "." + key);
  }
  std::optional<std::string> optional_string(const Json& object, const char* key,
                                             const std::string& where) const {
    const Json* v = find(object, key, where);
    if (!v) return std::nullopt;
    return string(*v, where + "." + key);
  }
  bool boolean(const Json& object, const char* key, const std::string& where, bool fallback) const {
    const Json* v = find(object, key, where);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(where + "." + key + " must be true or false");
    return v->get<bool>();
  }
  int64_t integer(const Json& v, const std::string& where, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail(where + " must be an integer");
    const int64_t x = v.is_number_unsigned()
                          ? int64_t(std::min<uint64_t>(v.get<uint64_t>(), uint64_t(INT64_MAX)))
                          : v.get<int64_t>();
    if (x < lo || x > hi)
      fail(where + " is " + std::to_string(x) + ", outside [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    return x;
  }
  const Json& array(const Json& object, const char* key, const std::string& where) const {
    const Json& v = require(object, key, where);
    if (!v.is_array()) fail(where + "." + key + " must be an array");
    return v;
  }
  std::string type(const Json& object, const std::string& where) const {
    return string(object, "type", where);
  }

 private:
  std::string source_;
};

inline Json parse_json(std::string_view text, const std::string& source) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    throw FormatError(source + ": not valid JSON: " + what);
  }
}

/// tokenizer.json read in one pass: a DOM of everything but model.vocab and model.merges,
/// whose entries go to flat arrays instead (a DOM of Llama 3's 128000-entry vocabulary object
/// and 280000-entry merges array would cost more than all the rest of loading).
struct TokenizerJsonParts {
  struct Merge {
    std::string a, b;  // b unused for a merge given as one "a b" string
    bool line = false;
  };
  Json root;
  bool has_vocab = false, has_merges = false;
  std::vector<std::pair<std::string, int64_t>> vocab;  // in file order
  std::vector<Merge> merges;
};

/// nlohmann's SAX interface, building TokenizerJsonParts.
class TokenizerJsonSax {
 public:
  using number_integer_t = int64_t;
  using number_unsigned_t = uint64_t;
  using number_float_t = double;
  using string_t = std::string;
  using binary_t = Json::binary_t;

  explicit TokenizerJsonSax(TokenizerJsonParts& out) : out_(out) {}

  /// Set when parsing stopped: a syntax error, or a vocabulary or merges entry of a wrong type.
  const std::string& error() const { return error_; }
  bool syntax_error() const { return syntax_; }

  bool null() { return value(Json(nullptr)); }
  bool boolean(bool v) { return value(Json(v)); }
  bool number_integer(int64_t v) { return in(Kind::kVocab) ? vocab_entry(v) : value(Json(v)); }
  bool number_unsigned(uint64_t v) {
    return in(Kind::kVocab) ? vocab_entry(int64_t(std::min<uint64_t>(v, uint64_t(INT64_MAX))))
                            : value(Json(v));
  }
  bool number_float(double v, const std::string&) { return value(Json(v)); }
  bool binary(binary_t& v) { return value(Json::binary(std::move(v))); }
  bool string(std::string& v) {
    if (in(Kind::kMerges)) {
      out_.merges.push_back({std::move(v), std::string(), true});
      return true;
    }
    if (in(Kind::kMergePair)) {
      Frame& f = frames_.back();
      if (f.count >= 2) return bad_merge();
      std::string& part = f.count++ == 0 ? out_.merges.back().a : out_.merges.back().b;
      part = std::move(v);
      return true;
    }
    return value(Json(std::move(v)));
  }
  bool start_object(size_t) {
    if (in(Kind::kModel) && key_ == "vocab") {
      out_.has_vocab = true;
      out_.vocab.clear();
      frames_.push_back({nullptr, Kind::kVocab, 0});
      return true;
    }
    return open(Json::object());
  }
  bool key(std::string& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() {
    frames_.pop_back();
    return true;
  }
  bool start_array(size_t) {
    if (in(Kind::kModel) && key_ == "merges") {
      out_.has_merges = true;
      out_.merges.clear();
      frames_.push_back({nullptr, Kind::kMerges, 0});
      return true;
    }
    if (in(Kind::kMerges)) {
      out_.merges.push_back({});
      frames_.push_back({nullptr, Kind::kMergePair, 0});
      return true;
    }
    return open(Json::array());
  }
  bool end_array() {
    if (in(Kind::kMergePair) && frames_.back().count != 2) return bad_merge();
    frames_.pop_back();
    return true;
  }
  bool parse_error(size_t, const std::string&, const Json::exception& e) {
    error_ = std::string("not valid JSON: ") + e.what();
    std::replace(error_.begin(), error_.end(), '\n', ' ');
    syntax_ = true;
    return false;
  }

 private:
  enum class Kind { kDom, kModel, kVocab, kMerges, kMergePair };
  struct Frame {
    Json* container;
    Kind kind;
    size_t count;
  };

  bool in(Kind k) const { return !frames_.empty() && frames_.back().kind == k; }

  Json* insert(Json v) {
    if (frames_.empty()) {
      out_.root = std::move(v);
      return &out_.root;
    }
    Json& c = *frames_.back().container;
    if (c.is_object()) {
      Json& slot = c[key_];
      slot = std::move(v);
      return &slot;
    }
    c.push_back(std::move(v));
    return &c.back();
  }
  bool value(Json v) {
    if (in(Kind::kVocab)) return fail("model.vocab[" + quote(key_) + "] must be an integer");
    if (in(Kind::kMerges) || in(Kind::kMergePair)) return bad_merge();
    insert(std::move(v));
    return true;
  }
  bool open(Json container) {
    if (in(Kind::kVocab) || in(Kind::kMerges) || in(Kind::kMergePair)) return value(Json());
    const bool model = frames_.size() == 1 && key_ == "model" && container.is_object();
    Json* c = insert(std::move(container));
    frames_.push_back({c, model ? Kind::kModel : Kind::kDom, 0});
    return true;
  }
  bool vocab_entry(int64_t id) {
    out_.vocab.emplace_back(std::move(key_), id);
    return true;
  }
  bool bad_merge() {
    return fail("model.merges[" + std::to_string(out_.merges.size() - (in(Kind::kMerges) ? 0 : 1)) +
                "] must be \"a b\" or [\"a\", \"b\"]");
  }
  bool fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

  TokenizerJsonParts& out_;
  std::vector<Frame> frames_;
  std::string key_;
  std::string error_;
  bool syntax_ = false;
};

inline TokenizerJsonParts parse_tokenizer_json(std::string_view text, const std::string& source) {
  TokenizerJsonParts parts;
  TokenizerJsonSax sax(parts);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const Json::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    throw FormatError(source + ": not valid JSON: " + what);
  }
  if (!ok)
    throw FormatError(source + ": " + (sax.error().empty() ? "not valid JSON" : sax.error()));
  return parts;
}

inline std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path.string() + ": cannot be opened");
  std::string text;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size > 0) {
    text.resize(static_cast<size_t>(size));
    in.seekg(0);
    in.read(text.data(), size);
  }
  if (!in) throw FormatError(path.string() + ": cannot be read");
  return text;
}

}  // namespace hf_detail

/// The texts of the files that may sit beside tokenizer.json (each optional).
struct HfTokenizerFiles {
  std::optional<std::string> tokenizer_config;    // tokenizer_config.json
  std::optional<std::string> special_tokens_map;  // special_tokens_map.json
  std::optional<std::string> generation_config;   // generation_config.json
};

/// A Hugging Face tokenizer.json with a BPE model. encode() gives the ids of Hugging Face's
/// `tokenizer.encode(text)` (default special tokens added); decode() those of
/// `decode(ids, skip_special_tokens=True)` without clean-up of tokenization spaces, except that
/// bytes which do not form UTF-8 are returned as they are rather than as U+FFFD. Immutable
/// after loading: encode and decode may run on several threads at once.
class HfTokenizer : public Tokenizer {
 public:
  /// Reads `dir`/tokenizer.json and, where present, tokenizer_config.json,
  /// special_tokens_map.json and generation_config.json beside it.
  static HfTokenizer load(const std::string& dir) {
    namespace fs = std::filesystem;
    const fs::path base(dir);
    HfTokenizerFiles files;
    const auto optional_file = [&](const char* name) -> std::optional<std::string> {
      std::error_code ec;
      if (!fs::exists(base / name, ec)) return std::nullopt;
      return hf_detail::read_text_file(base / name);
    };
    files.tokenizer_config = optional_file("tokenizer_config.json");
    files.special_tokens_map = optional_file("special_tokens_map.json");
    files.generation_config = optional_file("generation_config.json");
    const fs::path json = base / "tokenizer.json";
    return from_json(hf_detail::read_text_file(json), files, json.string(), dir);
  }

  /// Builds the tokenizer from the text of a tokenizer.json (and of its companion files).
  /// `source` names the file in error messages; `dir` names the folder for the companions.
  static HfTokenizer from_json(std::string_view tokenizer_json, const HfTokenizerFiles& files = {},
                               const std::string& source = "tokenizer.json",
                               const std::string& dir = "") {
    HfTokenizer t;
    t.parse(tokenizer_json, source);
    t.read_companions(files, dir);
    return t;
  }

  std::vector<int32_t> encode(std::string_view text) const override { return encode(text, true); }

  /// encode with or without the post-processor's special tokens (add_special_tokens).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const {
    EncodeState st;
    const size_t bad = hf_detail::first_invalid_utf8(text);
    st.valid_utf8 = bad == std::string_view::npos;
    if (!st.valid_utf8 && !accepts_invalid_utf8_)
      throw InvalidArgument("tokenizer: the text is not valid UTF-8 (byte " + std::to_string(bad) +
                            "), and this tokenizer has neither byte-level BPE nor byte fallback");
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 8);
    encode_text(text, st, ids);
    if (truncation_) truncate(ids, add_special_tokens);
    if (add_special_tokens) {
      ids.insert(ids.begin(), prefix_ids_.begin(), prefix_ids_.end());
      ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
    }
    if (padding_) pad(ids);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      check_id(id);
      if (!special_[size_t(id)]) tokens.push_back(id_to_token_[size_t(id)]);
    }
    return run_decoders(std::move(tokens), false, false);
  }

  /// decode as Hugging Face returns it, a Rust String: bytes that do not form UTF-8 become
  /// U+FFFD (ByteFallback: one per byte of the run; ByteLevel: one per ill-formed part). The
  /// same as decode whenever that gives valid UTF-8.
  std::string decode_lossy(const std::vector<int32_t>& ids) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      check_id(id);
      if (!special_[size_t(id)]) tokens.push_back(id_to_token_[size_t(id)]);
    }
    return run_decoders(std::move(tokens), false, true);
  }

  /// The token's bytes as they read after earlier text: the decoder without the steps that
  /// only apply at the start of a text (Strip's start, Metaspace's first-token rule).
  std::string decode_token(int32_t id) const override {
    check_id(id);
    if (special_[size_t(id)]) return "";
    return run_decoders({id_to_token_[size_t(id)]}, true, false);
  }

  int64_t vocab_size() const override { return int64_t(id_to_token_.size()); }
  std::optional<int32_t> eos_id() const override {
    return eos_ids_.empty() ? std::nullopt : std::optional<int32_t>(eos_ids_.front());
  }
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  bool is_special(int32_t id) const override {
    return id >= 0 && size_t(id) < special_.size() && special_[size_t(id)];
  }

  /// The id of a token given as tokenizer.json writes it (added tokens first).
  std::optional<int32_t> token_to_id(std::string_view token) const {
    if (const auto it = added_by_content_.find(std::string(token)); it != added_by_content_.end())
      return it->second;
    std::optional<std::string> key;
    if (byte_level_) {
      key = hf_detail::byte_level_to_bytes(token);
      if (!key) {
        const auto it = unmapped_.find(std::string(token));
        return it == unmapped_.end() ? std::nullopt : std::optional<int32_t>(it->second);
      }
    }
    const int64_t* v = vocab_.find(key ? std::string_view(*key) : token);
    return v ? std::optional<int32_t>(int32_t(*v)) : std::nullopt;
  }

  /// The token string tokenizer.json gives for `id` (throws InvalidArgument if there is none).
  const std::string& id_to_token(int32_t id) const {
    check_id(id);
    return id_to_token_[size_t(id)];
  }

  /// The ids encode adds around the text (from the post-processor and tokenizer_config.json).
  const std::vector<int32_t>& prefix_ids() const { return prefix_ids_; }
  const std::vector<int32_t>& suffix_ids() const { return suffix_ids_; }
  /// Byte-level BPE (ByteLevel pre-tokenizer) and byte fallback: either lets encode take any
  /// bytes, valid UTF-8 or not.
  bool byte_level() const { return byte_level_; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  using Json = hf_detail::Json;
  using JsonReader = hf_detail::JsonReader;

  HfTokenizer() = default;

  // ---- Encoding ----

  /// Scratch space of one encode call: the per-call word cache (Hugging Face keeps one per
  /// tokenizer; one per call needs no locking) and the merge loop's buffers.
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t start, len;  // bytes of the word this symbol covers; len 0: merged away
    bool plain;           // a one-character vocabulary entry (not unk or byte fallback)
  };
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t left, right, id;
  };
  struct EncodeState {
    bool valid_utf8 = true;
    hf_detail::StringTable word_cache, segment_cache;  // value: offset << 24 | count in cached
    std::vector<int32_t> cached;
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
    std::string scratch;
  };
  static constexpr size_t kMaxCachedBytes = 256;            // Hugging Face's MAX_LENGTH
  static constexpr size_t kShortWord = 24;                  // merge_short up to this many symbols
  static constexpr int64_t kMaxPadding = int64_t(1) << 24;  // padding targets (tokens)
  static constexpr size_t kMaxCachedIds = size_t(1) << 24;  // bound on one call's cache

  void encode_text(std::string_view text, EncodeState& st, std::vector<int32_t>& out) const {
    split_added(text, raw_trie_, true, st, out, [&](std::string_view piece, bool at_start) {
      if (normalizers_.empty()) {
        split_added(piece, normalized_trie_, at_start, st, out,
                    [&](std::string_view p, bool s) { pre_tokenize(p, s, 0, st, out); });
      } else {
        const std::string normalized = normalize(piece, st.valid_utf8);
        split_added(normalized, normalized_trie_, at_start, st, out,
                    [&](std::string_view p, bool s) { pre_tokenize(p, s, 0, st, out); });
      }
    });
  }

  /// Hugging Face's AddedVocabulary::find_matches: cuts the added tokens of `trie` out of
  /// `text`, emitting their ids into `out` and the pieces between them through on_piece.
  template <typename OnPiece>
  void split_added(std::string_view text, const hf_detail::TokenTrie& trie, bool at_start,
                   EncodeState& st, std::vector<int32_t>& out, OnPiece&& on_piece) const {
    if (text.empty()) return;
    if (trie.empty()) {
      on_piece(text, at_start);
      return;
    }
    size_t start_offset = 0, from = 0, b = 0, e = 0;
    int32_t index = 0;
    while (trie.find(text, from, b, e, index)) {
      from = e;
      const hf_detail::AddedToken& token = added_[size_t(index)];
      size_t start = b, stop = e;
      if (token.single_word) {
        const bool start_space = start == 0 || !ends_with_word(text.substr(0, start), st);
        const bool stop_space = stop == text.size() || !starts_with_word(text.substr(stop), st);
        if (!start_space || !stop_space) continue;
      }
      if (token.lstrip)
        start = std::max(leftmost_space_at_end(text.substr(0, start), st), start_offset);
      if (token.rstrip) stop += rightmost_space_at_start(text.substr(stop), st);
      if (start_offset < start)
        on_piece(text.substr(start_offset, start - start_offset), at_start && start_offset == 0);
      out.push_back(token.id);
      start_offset = stop;
    }
    if (start_offset < text.size())
      on_piece(text.substr(start_offset), at_start && start_offset == 0);
  }

  // \w and \s as the Rust regex crate has them (Unicode), for single_word, lstrip and rstrip.
  bool is_word_char_at(std::string_view s, size_t pos, const EncodeState& st) const {
    return word_char_->matches_at(s, pos, st.valid_utf8);
  }
  bool is_space_at(std::string_view s, size_t pos, const EncodeState& st) const {
    return space_char_->matches_at(s, pos, st.valid_utf8);
  }
  /// Start of the unit (character, or stray byte) that ends at `end` > 0.
  static size_t previous_unit(std::string_view s, size_t end) {
    for (size_t back = std::min<size_t>(4, end); back >= 2; --back)
      if (hf_detail::utf8_length(reinterpret_cast<const unsigned char*>(s.data()) + end - back,
                                 back) == back)
        return end - back;
    return end - 1;
  }
  bool ends_with_word(std::string_view s, const EncodeState& st) const {
    return !s.empty() && is_word_char_at(s, previous_unit(s, s.size()), st);
  }
  bool starts_with_word(std::string_view s, const EncodeState& st) const {
    return !s.empty() && is_word_char_at(s, 0, st);
  }
  size_t leftmost_space_at_end(std::string_view s, const EncodeState& st) const {
    size_t end = s.size();
    while (end > 0) {
      const size_t p = previous_unit(s, end);
      if (!is_space_at(s, p, st)) break;
      end = p;
    }
    return end;
  }
  size_t rightmost_space_at_start(std::string_view s, const EncodeState& st) const {
    size_t p = 0;
    while (p < s.size() && is_space_at(s, p, st)) p += hf_detail::unit_length(s, p);
    return p;
  }

  std::string normalize(std::string_view piece, bool valid_utf8) const {
    std::string s(piece);
    for (const hf_detail::NormalizerStep& n : normalizers_) {
      if (n.kind == hf_detail::NormalizerStep::Kind::kPrepend) {
        if (!s.empty()) s.insert(0, n.text);
        continue;
      }
      std::string replaced;
      size_t prev = 0;
      n.pattern.for_each_match(s, valid_utf8, [&](size_t b, size_t e) {
        replaced.append(s, prev, b - prev);
        replaced += n.text;
        prev = e;
      });
      replaced.append(s, prev, std::string::npos);
      s = std::move(replaced);
    }
    return s;
  }

  void pre_tokenize(std::string_view piece, bool at_start, size_t step, EncodeState& st,
                    std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (step == pre_tokenizers_.size()) {
      encode_word(piece, st, out);
      return;
    }
    using Kind = hf_detail::PreTokenizerStep::Kind;
    const hf_detail::PreTokenizerStep& p = pre_tokenizers_[step];
    const auto recurse = [&](std::string_view s, SplitAt how) {
      hf_detail::split_by_behavior(
          s,
          [&](auto&& on_match) {
            if (how == SplitAt::kPattern)
              p.pattern.for_each_match(s, st.valid_utf8, on_match);
            else
              for (size_t q = s.find(p.replacement); q != std::string_view::npos;
                   q = s.find(p.replacement, q + p.replacement.size()))
                on_match(q, q + p.replacement.size());
          },
          how == SplitAt::kPattern ? p.behavior : hf_detail::SplitBehavior::kMergedWithNext,
          how == SplitAt::kPattern && p.invert,
          [&](size_t b, size_t e) {
            pre_tokenize(s.substr(b, e - b), at_start && b == 0, step + 1, st, out);
          });
    };
    switch (p.kind) {
      case Kind::kSplit:
        recurse(piece, SplitAt::kPattern);
        return;
      case Kind::kByteLevel: {
        std::string prefixed;
        std::string_view s = piece;
        if (p.add_prefix_space && piece.front() != ' ') {
          prefixed.reserve(piece.size() + 1);
          prefixed.push_back(' ');
          prefixed.append(piece);
          s = prefixed;
        }
        if (p.use_pattern)
          recurse(s, SplitAt::kPattern);
        else
          pre_tokenize(s, at_start, step + 1, st, out);
        return;
      }
      case Kind::kMetaspace: {
        std::string s;
        s.reserve(piece.size() + p.replacement.size());
        for (char c : piece) {
          if (c == ' ')
            s += p.replacement;
          else
            s.push_back(c);
        }
        const bool starts = s.compare(0, p.replacement.size(), p.replacement) == 0;
        if (!starts && (p.prepend == hf_detail::PrependScheme::kAlways ||
                        (p.prepend == hf_detail::PrependScheme::kFirst && at_start)))
          s.insert(0, p.replacement);
        if (p.split)
          recurse(s, SplitAt::kReplacement);
        else
          pre_tokenize(s, at_start, step + 1, st, out);
        return;
      }
    }
  }
  enum class SplitAt { kPattern, kReplacement };

  /// One pre-tokenized word through the BPE model (Hugging Face's BPE::tokenize).
  void encode_word(std::string_view word, EncodeState& st, std::vector<int32_t>& out) const {
    const bool cacheable = word.size() <= kMaxCachedBytes;
    if (cacheable && append_cached(st.word_cache, word, st, out)) return;
    const size_t first = out.size();
    const int64_t* whole = ignore_merges_ ? vocab_.find(word) : nullptr;
    if (whole)
      out.push_back(int32_t(*whole));
    else
      merge_word(word, st, out);
    if (cacheable) store_cached(st.word_cache, word, st, out, first);
  }

  bool append_cached(const hf_detail::StringTable& cache, std::string_view key,
                     const EncodeState& st, std::vector<int32_t>& out) const {
    const int64_t* v = cache.find(key);
    if (!v) return false;
    const auto begin = st.cached.begin() + (*v >> 24);
    out.insert(out.end(), begin, begin + (*v & 0xFFFFFF));
    return true;
  }
  void store_cached(hf_detail::StringTable& cache, std::string_view key, EncodeState& st,
                    const std::vector<int32_t>& out, size_t first) const {
    if (st.cached.size() > kMaxCachedIds) return;
    const int64_t value = (int64_t(st.cached.size()) << 24) | int64_t(out.size() - first);
    st.cached.insert(st.cached.end(), out.begin() + first, out.end());
    cache.insert(key, value);
  }

  /// Hugging Face's BPE::merge_word: the word's characters (bytes for byte-level BPE) as
  /// symbols, then merges. Long words are cut where no merge can ever cross (see
  /// left_partners_) and the parts merged (and cached) one by one: the result is the same.
  void merge_word(std::string_view word, EncodeState& st, std::vector<int32_t>& out) const {
    std::vector<Symbol>& sym = st.symbols;
    sym.clear();
    // Long words go out part by part: the symbols so far are merged (or found in the cache)
    // as soon as the next one may be cut from them.
    const bool cut = word.size() > kMaxCachedBytes && segmentable_;
    hf_detail::StringTable& cache = ignore_merges_ ? st.segment_cache : st.word_cache;
    size_t part_begin = 0, part_end = 0;  // bytes of the part in sym
    const auto flush_part = [&] {
      const std::string_view key = word.substr(part_begin, part_end - part_begin);
      if (key.size() > kMaxCachedBytes) {
        merge_symbols(0, sym.size(), st, out);
      } else if (!append_cached(cache, key, st, out)) {
        const size_t before = out.size();
        merge_symbols(0, sym.size(), st, out);
        store_cached(cache, key, st, out, before);
      }
      sym.clear();
      part_begin = part_end;
    };
    const auto add = [&](int32_t id, size_t start, size_t len, bool plain) {
      const Symbol s{id, 0, 0, uint32_t(start), uint32_t(len), plain};
      if (cut && !sym.empty() && can_cut(sym.back(), s)) flush_part();
      sym.push_back(s);
      part_end = std::max(part_end, start + len);
    };
    std::optional<std::pair<int32_t, std::pair<size_t, size_t>>> unk;  // pending (id, start, len)
    const auto flush_unk = [&] {
      if (unk) add(unk->first, unk->second.first, unk->second.second, false);
      unk.reset();
    };
    const bool affixes = !prefix_.empty() || !suffix_.empty();
    const auto* bytes = reinterpret_cast<const unsigned char*>(word.data());
    for (size_t i = 0; i < word.size();) {
      size_t len = 1;
      int32_t id = -1;
      if (affixes) {
        len = byte_level_ ? 1 : hf_detail::unit_length(word, i);
        std::string& s = st.scratch;
        s.clear();
        if (i > 0) s += prefix_;
        s.append(word, i, len);
        if (i + len == word.size()) s += suffix_;
        const int64_t* v = vocab_.find(s);
        id = v ? int32_t(*v) : -1;
      } else if (byte_level_) {
        id = byte_ids_[bytes[i]];
      } else if (bytes[i] < 0x80) {
        id = char_ids_[bytes[i]];
      } else {
        const size_t n = hf_detail::utf8_length(bytes + i, word.size() - i);
        len = n ? n : 1;
        const uint32_t cp = n ? hf_detail::code_point(bytes + i, n) : 0xFFFFFFFFu;
        if (cp < char_ids_.size()) {
          id = char_ids_[cp];
        } else if (n) {
          const int64_t* v = vocab_.find(word.substr(i, len));
          id = v ? int32_t(*v) : -1;
        }
      }
      if (id >= 0) {
        flush_unk();
        add(id, i, len, !affixes);
      } else if (byte_fallback_ &&
                 std::all_of(word.begin() + i, word.begin() + i + len, [&](char c) {
                   return byte_fallback_ids_[static_cast<unsigned char>(c)] >= 0;
                 })) {
        // (A pending unk goes after these bytes, as in Hugging Face's merge_word.)
        for (size_t k = 0; k < len; ++k)
          add(byte_fallback_ids_[static_cast<unsigned char>(word[i + k])], i + k, 1, false);
      } else if (unk_id_) {
        if (unk && fuse_unk_) {
          unk->second.second += len;
        } else {
          flush_unk();
          unk = {*unk_id_, {i, len}};
        }
      }  // else: the character is dropped, as Hugging Face does without an unk token
      i += len;
    }
    flush_unk();
    if (sym.empty()) return;
    if (cut)
      flush_part();
    else
      merge_symbols(0, sym.size(), st, out);
  }

  /// Whether no merge can ever join a symbol ending with `l` to one starting with `r`: then
  /// the word can be cut between them and the parts merged on their own.
  bool can_cut(const Symbol& l, const Symbol& r) const {
    if (l.start + l.len != r.start) return false;  // (pending unk after byte fallback)
    // A symbol that no merge names stays on its own (a newline's byte token, say).
    if (!in_merge_[size_t(l.id)] || !in_merge_[size_t(r.id)]) return true;
    if (!l.plain || !r.plain || !partners_known_) return false;
    const int32_t* partners = &left_partners_[size_t(r.id) * 4];
    if (partners[0] < 0) return false;
    for (int32_t k = 0; k < partners[0]; ++k)
      if (partners[1 + k] == l.id) return false;
    return true;
  }

  /// Hugging Face's Word::merge_all on symbols [first, last): the lowest-ranked merge first,
  /// the leftmost of equal ranks, through a priority queue over a linked list (O(n log n)).
  void merge_symbols(size_t first, size_t last, EncodeState& st, std::vector<int32_t>& out) const {
    std::vector<Symbol>& sym = st.symbols;
    const size_t n = last - first;
    if (n == 1) {
      out.push_back(sym[first].id);
      return;
    }
    if (n <= kShortWord) {
      merge_short(&sym[first], n, out);
      return;
    }
    for (size_t i = first; i < last; ++i) {
      sym[i].prev = i == first ? -1 : int32_t(i - 1);
      sym[i].next = i + 1 == last ? -1 : int32_t(i + 1);
    }
    std::vector<Candidate>& heap = st.heap;
    heap.clear();
    const auto later = [](const Candidate& a, const Candidate& b) {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    const auto push = [&](size_t pos) {
      const int32_t next = sym[pos].next;
      if (next < 0) return;
      if (const auto* m = merges_.find(sym[pos].id, sym[size_t(next)].id)) {
        heap.push_back(Candidate{m->rank, uint32_t(pos), sym[pos].id, sym[size_t(next)].id, m->id});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    };
    for (size_t i = first; i + 1 < last; ++i) push(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const Candidate top = heap.back();
      heap.pop_back();
      Symbol& left = sym[top.pos];
      // Stale entries: the left symbol was merged away or changed, or its right neighbour did.
      if (left.len == 0 || left.next < 0 || left.id != top.left) continue;
      Symbol& right = sym[size_t(left.next)];
      if (right.id != top.right) continue;
      left.id = top.id;
      left.len += right.len;
      left.next = right.next;
      right.len = 0;
      if (left.next >= 0) sym[size_t(left.next)].prev = int32_t(top.pos);
      if (left.prev >= 0) push(size_t(left.prev));
      push(top.pos);
    }
    for (int32_t i = int32_t(first); i >= 0; i = sym[size_t(i)].next)
      out.push_back(sym[size_t(i)].id);
  }

  /// The same merges for a few symbols, without the queue: the pair of lowest rank (leftmost
  /// of equal ranks) is found by a scan, merged, and its two neighbouring pairs looked up again.
  /// Quadratic, so only for short words, where it is faster than the queue.
  void merge_short(const Symbol* symbols, size_t n, std::vector<int32_t>& out) const {
    constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
    int32_t ids[kShortWord];
    uint32_t rank[kShortWord];
    int32_t merged[kShortWord];
    for (size_t i = 0; i < n; ++i) ids[i] = symbols[i].id;
    const auto look = [&](size_t i) {
      const auto* m = merges_.find(ids[i], ids[i + 1]);
      rank[i] = m ? m->rank : kNone;
      merged[i] = m ? m->id : 0;
    };
    for (size_t i = 0; i + 1 < n; ++i) look(i);
    while (n > 1) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < n; ++i)
        if (rank[i] < rank[best]) best = i;
      if (rank[best] == kNone) break;
      ids[best] = merged[best];
      --n;
      for (size_t i = best + 1; i < n; ++i) ids[i] = ids[i + 1];
      for (size_t i = best + 1; i + 1 < n; ++i) rank[i] = rank[i + 1], merged[i] = merged[i + 1];
      if (best > 0) look(best - 1);
      if (best + 1 < n) look(best);
    }
    out.insert(out.end(), ids, ids + n);
  }

  void truncate(std::vector<int32_t>& ids, bool add_special_tokens) const {
    size_t max = truncation_->max_length;
    if (add_special_tokens) {
      const size_t added = prefix_ids_.size() + suffix_ids_.size();
      max = max > added ? max - added : 0;
    }
    if (ids.size() <= max) return;
    if (truncation_->left)
      ids.erase(ids.begin(), ids.end() - std::ptrdiff_t(max));
    else
      ids.resize(max);
  }

  void pad(std::vector<int32_t>& ids) const {
    size_t target = padding_->fixed ? *padding_->fixed : ids.size();
    if (padding_->multiple > 0 && target % padding_->multiple != 0)
      target += padding_->multiple - target % padding_->multiple;
    if (ids.size() >= target) return;
    if (padding_->left)
      ids.insert(ids.begin(), target - ids.size(), padding_->id);
    else
      ids.resize(target, padding_->id);
  }

  // ---- Decoding ----

  void check_id(int32_t id) const {
    if (id < 0 || size_t(id) >= id_to_token_.size() || !has_token_[size_t(id)])
      throw InvalidArgument("tokenizer: token id " + std::to_string(id) +
                            " is not in the vocabulary" +
                            (id >= 0 && size_t(id) < id_to_token_.size()
                                 ? std::string()
                                 : " (ids are below " + std::to_string(id_to_token_.size()) + ")"));
  }

  /// Hugging Face's decoder chain over token strings, joined. `stream`: the tokens follow
  /// earlier text (no start-of-text rules).
  std::string run_decoders(std::vector<std::string> tokens, bool stream, bool lossy) const {
    using Kind = hf_detail::DecoderStep::Kind;
    if (!has_decoder_) {  // Hugging Face joins with spaces when there is no decoder
      std::string joined;
      for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
      return joined;
    }
    for (const hf_detail::DecoderStep& d : decoders_) {
      switch (d.kind) {
        case Kind::kReplace:
          for (std::string& t : tokens) {
            std::string r;
            size_t prev = 0;
            const bool valid = hf_detail::first_invalid_utf8(t) == std::string::npos;
            d.pattern.for_each_match(t, valid, [&](size_t b, size_t e) {
              r.append(t, prev, b - prev);
              r += d.content;
              prev = e;
            });
            r.append(t, prev, std::string::npos);
            t = std::move(r);
          }
          break;
        case Kind::kByteFallback: {
          std::vector<std::string> merged;
          std::string bytes;
          bool in_bytes = false;
          for (std::string& t : tokens) {
            const int byte = fallback_byte(t);
            if (byte >= 0) {
              bytes.push_back(char(byte));
              in_bytes = true;
              continue;
            }
            if (in_bytes) merged.push_back(std::move(bytes)), bytes.clear(), in_bytes = false;
            merged.push_back(std::move(t));
          }
          if (in_bytes) merged.push_back(std::move(bytes));
          tokens = std::move(merged);
          if (lossy)  // Hugging Face: a byte run that is not UTF-8 becomes one U+FFFD per byte
            for (std::string& t : tokens)
              if (hf_detail::first_invalid_utf8(t) != std::string::npos) {
                const size_t n = t.size();
                t.clear();
                for (size_t k = 0; k < n; ++k) t += "\xEF\xBF\xBD";
              }
          break;
        }
        case Kind::kFuse: {
          std::string all;
          for (const std::string& t : tokens) all += t;
          tokens.assign(1, std::move(all));
          break;
        }
        case Kind::kStrip:
          for (std::string& t : tokens) {
            size_t begin = 0, end = t.size();
            if (!stream)
              for (size_t k = 0; k < d.start && t.compare(begin, d.content.size(), d.content) == 0;
                   ++k)
                begin += d.content.size();
            if (!stream)  // the end of a stream is not known yet
              for (size_t k = 0;
                   k < d.stop && end >= begin + d.content.size() &&
                   t.compare(end - d.content.size(), d.content.size(), d.content) == 0;
                   ++k)
                end -= d.content.size();
            t = t.substr(begin, end - begin);
          }
          break;
        case Kind::kMetaspace:
          for (size_t i = 0; i < tokens.size(); ++i) {
            const bool drop = i == 0 && !stream && d.prepend != hf_detail::PrependScheme::kNever;
            std::string r;
            const std::string& t = tokens[i];
            for (size_t p = 0; p < t.size();) {
              if (t.compare(p, d.replacement.size(), d.replacement) == 0) {
                if (!drop) r.push_back(' ');
                p += d.replacement.size();
              } else {
                r.push_back(t[p++]);
              }
            }
            tokens[i] = std::move(r);
          }
          break;
        case Kind::kByteLevel: {
          std::string all;
          for (const std::string& t : tokens) {
            if (const auto bytes = hf_detail::byte_level_to_bytes(t))
              all += *bytes;
            else
              all += t;
          }
          tokens.assign(1, lossy ? hf_detail::utf8_lossy(all) : std::move(all));
          break;
        }
      }
    }
    std::string text;
    for (const std::string& t : tokens) text += t;
    return text;
  }

  /// The byte of a "<0xNN>" token (as Hugging Face's ByteFallback reads it), or -1.
  static int fallback_byte(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; ++k) {
      const char c = t[size_t(k)];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }

  // ---- Loading ----

  void parse(std::string_view text, const std::string& source) {
    hf_detail::TokenizerJsonParts parts = hf_detail::parse_tokenizer_json(text, source);
    const Json& root = parts.root;
    const JsonReader r(source);
    try {
      if (!root.is_object()) r.fail("the top level must be an object");
      if (const auto version = r.optional_string(root, "version", "tokenizer");
          version && *version != "1.0")
        r.fail("unknown tokenizer.json version '" + *version + "' (expected 1.0)");
      parse_pre_tokenizer(r, root);  // first: the model needs to know whether it is byte-level
      parse_model(r, r.require(root, "model", "tokenizer"), parts);
      parse_normalizer(r, root);
      parse_added_tokens(r, root);
      parse_post_processor(r, root);
      parse_decoder(r, root);
      parse_truncation_padding(r, root);
      accepts_invalid_utf8_ = byte_level_ || byte_fallback_;
      hf_detail::Regex word(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])", false, true,
                            source);
      hf_detail::Regex space(R"(\p{White_Space})", false, true, source);
      word_char_ = std::make_shared<hf_detail::Regex>(std::move(word));
      space_char_ = std::make_shared<hf_detail::Regex>(std::move(space));
    } catch (const Json::exception& e) {  // a type the explicit checks missed
      r.fail(std::string("unexpected content: ") + e.what());
    }
  }

  hf_detail::Pattern parse_pattern(const JsonReader& r, const Json& p, const std::string& where) {
    if (!p.is_object() || p.size() != 1)
      r.fail(where + " must be {\"String\": ...} or {\"Regex\": ...}");
    hf_detail::Pattern pattern;
    if (const Json* s = r.find(p, "String", where)) {
      pattern.literal = r.string(*s, where + ".String");
      if (pattern.literal.empty()) r.fail(where + ".String is empty");
    } else if (const Json* re = r.find(p, "Regex", where)) {
      pattern.regex = std::make_shared<hf_detail::Regex>(r.string(*re, where + ".Regex"), false,
                                                         true, r.source() + ": " + where);
    } else {
      r.fail(where + " must be {\"String\": ...} or {\"Regex\": ...}");
    }
    return pattern;
  }

  void parse_pre_tokenizer(const JsonReader& r, const Json& root) {
    const Json* p = r.find(root, "pre_tokenizer", "tokenizer");
    if (p) add_pre_tokenizer(r, *p, "pre_tokenizer");
    for (size_t i = 0; i < pre_tokenizers_.size(); ++i) {
      if (pre_tokenizers_[i].kind != hf_detail::PreTokenizerStep::Kind::kByteLevel) continue;
      if (i + 1 != pre_tokenizers_.size())
        r.fail("pre_tokenizer: ByteLevel must be the last pre-tokenizer (it is followed by " +
               std::to_string(pre_tokenizers_.size() - i - 1) + " more)");
      byte_level_ = true;
    }
  }

  void add_pre_tokenizer(const JsonReader& r, const Json& p, const std::string& where) {
    using Step = hf_detail::PreTokenizerStep;
    const std::string type = r.type(p, where);
    Step step;
    if (type == "Sequence") {
      const Json& list = r.array(p, "pretokenizers", where);
      for (size_t i = 0; i < list.size(); ++i)
        add_pre_tokenizer(r, list[i], where + ".pretokenizers[" + std::to_string(i) + "]");
      return;
    } else if (type == "ByteLevel") {
      step.kind = Step::Kind::kByteLevel;
      step.add_prefix_space = r.boolean(p, "add_prefix_space", where, true);
      step.use_pattern = r.boolean(p, "use_regex", where, true);
      if (step.use_pattern)  // GPT-2's expression, fixed in Hugging Face's ByteLevel
        step.pattern.regex = std::make_shared<hf_detail::Regex>(
            R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false,
            true, r.source() + ": " + where);
    } else if (type == "Split") {
      step.kind = Step::Kind::kSplit;
      step.pattern = parse_pattern(r, r.require(p, "pattern", where), where + ".pattern");
      step.behavior = parse_behavior(r, r.string(p, "behavior", where), where + ".behavior");
      step.invert = r.boolean(p, "invert", where, false);
    } else if (type == "Metaspace") {
      step.kind = Step::Kind::kMetaspace;
      parse_metaspace(r, p, where, step.replacement, step.prepend);
      step.split = r.boolean(p, "split", where, true);
    } else {
      r.fail(where + ": pre-tokenizer type '" + type +
             "' is not supported (supported: ByteLevel, Split, Metaspace, Sequence)");
    }
    pre_tokenizers_.push_back(std::move(step));
  }

  static void parse_metaspace(const JsonReader& r, const Json& p, const std::string& where,
                              std::string& replacement, hf_detail::PrependScheme& prepend) {
    replacement = r.string(p, "replacement", where);
    if (replacement.empty() || hf_detail::first_invalid_utf8(replacement) != std::string::npos ||
        hf_detail::unit_length(replacement, 0) != replacement.size())
      r.fail(where + ".replacement must be one character");
    prepend = hf_detail::PrependScheme::kAlways;
    if (const auto scheme = r.optional_string(p, "prepend_scheme", where)) {
      if (*scheme == "always")
        prepend = hf_detail::PrependScheme::kAlways;
      else if (*scheme == "first")
        prepend = hf_detail::PrependScheme::kFirst;
      else if (*scheme == "never")
        prepend = hf_detail::PrependScheme::kNever;
      else
        r.fail(where + ".prepend_scheme '" + *scheme + "' is not always, first or never");
    }
    if (!r.boolean(p, "add_prefix_space", where, true)) prepend = hf_detail::PrependScheme::kNever;
  }

  static hf_detail::SplitBehavior parse_behavior(const JsonReader& r, const std::string& s,
                                                 const std::string& where) {
    using B = hf_detail::SplitBehavior;
    if (s == "Removed") return B::kRemoved;
    if (s == "Isolated") return B::kIsolated;
    if (s == "MergedWithPrevious") return B::kMergedWithPrevious;
    if (s == "MergedWithNext") return B::kMergedWithNext;
    if (s == "Contiguous") return B::kContiguous;
    r.fail(where + " '" + s + "' is not one of Removed, Isolated, MergedWithPrevious, " +
           "MergedWithNext, Contiguous");
  }

  void parse_normalizer(const JsonReader& r, const Json& root) {
    if (const Json* n = r.find(root, "normalizer", "tokenizer"))
      add_normalizer(r, *n, "normalizer");
  }

  void add_normalizer(const JsonReader& r, const Json& n, const std::string& where) {
    using Step = hf_detail::NormalizerStep;
    const std::string type = r.type(n, where);
    Step step;
    if (type == "Sequence") {
      const Json& list = r.array(n, "normalizers", where);
      for (size_t i = 0; i < list.size(); ++i)
        add_normalizer(r, list[i], where + ".normalizers[" + std::to_string(i) + "]");
      return;
    } else if (type == "Prepend") {
      step.kind = Step::Kind::kPrepend;
      step.text = r.string(n, "prepend", where);
    } else if (type == "Replace") {
      step.kind = Step::Kind::kReplace;
      step.pattern = parse_pattern(r, r.require(n, "pattern", where), where + ".pattern");
      step.text = r.string(n, "content", where);
    } else {
      r.fail(where + ": normalizer type '" + type +
             "' is not supported (supported: Prepend, Replace, Sequence)");
    }
    normalizers_.push_back(std::move(step));
  }

  void parse_model(const JsonReader& r, const Json& m, hf_detail::TokenizerJsonParts& parts) {
    const std::string where = "model";
    if (!m.is_object()) r.fail("model must be an object");
    const std::string type = r.find(m, "type", where) ? r.type(m, where) : "BPE";
    if (type != "BPE")
      r.fail("model type '" + type +
             "' is not supported (only BPE; not WordPiece, Unigram, WordLevel)");
    if (const Json* d = r.find(m, "dropout", where)) {
      if (!d->is_number()) r.fail("model.dropout must be a number");
      if (d->get<double>() != 0.0)
        r.fail("model.dropout is set: random BPE dropout is not supported");
    }
    byte_fallback_ = r.boolean(m, "byte_fallback", where, false);
    fuse_unk_ = r.boolean(m, "fuse_unk", where, false);
    ignore_merges_ = r.boolean(m, "ignore_merges", where, false);
    prefix_ = r.optional_string(m, "continuing_subword_prefix", where).value_or("");
    suffix_ = r.optional_string(m, "end_of_word_suffix", where).value_or("");
    if (byte_level_) {  // the model works on raw bytes: undo the byte-to-unicode map
      for (std::string* affix : {&prefix_, &suffix_}) {
        const auto bytes = hf_detail::byte_level_to_bytes(*affix);
        if (!bytes) r.fail("model: " + hf_detail::quote(*affix) + " is not byte-level text");
        *affix = *bytes;
      }
    }

    // Vocabulary (a repeated token keeps its last id, as in Hugging Face's map).
    if (!parts.has_vocab)
      r.fail(r.find(m, "vocab", where) ? "model.vocab must be an object of token: id"
                                       : "model.vocab is missing");
    if (parts.vocab.empty()) r.fail("model.vocab is empty");
    const int64_t max_id = int64_t(2 * parts.vocab.size() + 4096);  // ids must be dense-ish
    vocab_.reserve(parts.vocab.size());
    int64_t largest = -1;
    for (const auto& [token, id] : parts.vocab) {
      if (id < 0 || id > max_id)
        r.fail("model.vocab[" + hf_detail::quote(token) + "] is " + std::to_string(id) +
               ", outside [0, " + std::to_string(max_id) + "] (ids must be dense)");
      largest = std::max(largest, id);
    }
    id_to_token_.assign(size_t(largest + 1), std::string());
    has_token_.assign(size_t(largest + 1), 0);
    std::string bytes;
    bool repeated = false;
    const auto key_of = [&](const std::string& token) -> std::optional<std::string_view> {
      if (!byte_level_) return std::string_view(token);
      if (!hf_detail::byte_level_to_bytes(token, bytes)) return std::nullopt;
      return std::string_view(bytes);
    };
    for (const auto& [token, id] : parts.vocab) {
      const auto key = key_of(token);
      if (!key) {
        repeated |= !unmapped_.emplace(token, int32_t(id)).second;
        unmapped_[token] = int32_t(id);
      } else if (!vocab_.insert(*key, id)) {
        repeated = true;
        vocab_.assign(*key, id);
      }
    }
    for (auto& [token, id] : parts.vocab) {
      if (repeated) {  // keep only the last id of a repeated token
        const auto key = key_of(token);
        const int64_t last = key ? *vocab_.find(*key) : unmapped_.at(token);
        if (last != id) continue;
      }
      if (has_token_[size_t(id)])
        r.fail("model.vocab gives id " + std::to_string(id) + " to both " +
               hf_detail::quote(id_to_token_[size_t(id)]) + " and " + hf_detail::quote(token));
      id_to_token_[size_t(id)] = std::move(token);
      has_token_[size_t(id)] = 1;
    }
    vocab_count_ = vocab_.size() + unmapped_.size();

    if (const auto unk = r.optional_string(m, "unk_token", where)) {
      const auto id = model_token_id(*unk);
      if (!id) r.fail("model.unk_token " + hf_detail::quote(*unk) + " is not in model.vocab");
      unk_id_ = *id;
    }

    // Single characters and bytes, for the merge loop's initial symbols.
    byte_ids_.fill(-1);
    byte_fallback_ids_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      if (byte_level_) {
        if (const int64_t* v = vocab_.find(std::string(1, char(b))))
          byte_ids_[size_t(b)] = int32_t(*v);
      }
      static const char* hex = "0123456789ABCDEF";
      const std::string name = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
      if (byte_fallback_)
        if (const auto id = model_token_id(name)) byte_fallback_ids_[size_t(b)] = *id;
    }
    if (!byte_level_) {
      char_ids_.assign(0x10000, -1);
      std::string ch;
      for (uint32_t cp = 0; cp < 0x10000; ++cp) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        ch.clear();
        hf_detail::append_utf8(ch, cp);
        if (const int64_t* v = vocab_.find(ch)) char_ids_[cp] = int32_t(*v);
      }
    }

    // Merges, in batches: the keys of a batch are hashed and their slots prefetched first, so
    // that the lookups (three per merge, at random places of a table of several megabytes) wait
    // on memory together rather than one after another.
    if (!parts.has_merges)
      r.fail(r.find(m, "merges", where) ? "model.merges must be an array"
                                        : "model.merges is missing");
    merges_.reserve(parts.merges.size());
    left_partners_.assign(id_to_token_.size() * 4, 0);
    in_merge_.assign(id_to_token_.size(), 0);
    segmentable_ = prefix_.empty() && suffix_.empty();  // symbols do not depend on position
    partners_known_ = true;
    struct Item {
      size_t index;
      uint32_t rank;
      std::string_view a, b;  // as tokenizer.json writes them
      std::string a_bytes, b_bytes, joined;
      std::string_view a_key, b_key;  // in the model's space
      bool mapped;
      uint64_t ha, hb, hj;
      int64_t a_id, b_id;
    };
    constexpr size_t kBatch = 64;
    std::vector<Item> batch(kBatch);
    uint32_t rank = 0;
    const auto at = [](size_t i) { return "model.merges[" + std::to_string(i) + "] "; };
    for (size_t i = 0; i < parts.merges.size();) {
      size_t count = 0;
      std::optional<size_t> bad_line;
      for (; i < parts.merges.size() && count < kBatch; ++i) {
        const hf_detail::TokenizerJsonParts::Merge& e = parts.merges[i];
        Item& it = batch[count];
        if (e.line) {
          if (e.a.compare(0, 8, "#version") == 0) continue;
          const size_t space = e.a.find(' ');
          if (space == std::string::npos || e.a.find(' ', space + 1) != std::string::npos) {
            bad_line = i;
            break;
          }
          it.a = std::string_view(e.a).substr(0, space);
          it.b = std::string_view(e.a).substr(space + 1);
        } else {
          it.a = e.a;
          it.b = e.b;
        }
        it.index = i;
        it.rank = rank++;
        it.a_key = it.a;
        it.b_key = it.b;
        it.mapped = true;
        if (byte_level_) {
          it.mapped = hf_detail::byte_level_to_bytes(it.a, it.a_bytes) &&
                      hf_detail::byte_level_to_bytes(it.b, it.b_bytes);
          it.a_key = it.a_bytes;
          it.b_key = it.b_bytes;
        }
        std::string_view b_rest = it.b_key;  // Hugging Face drops prefix_len bytes of b
        b_rest.remove_prefix(std::min(prefix_.size(), b_rest.size()));
        it.joined.assign(it.a_key);
        it.joined.append(b_rest);
        it.ha = hf_detail::hash_bytes(it.a_key);
        it.hb = hf_detail::hash_bytes(it.b_key);
        it.hj = hf_detail::hash_bytes(it.joined);
        vocab_.prefetch(it.ha);
        vocab_.prefetch(it.hb);
        vocab_.prefetch(it.hj);
        ++count;
      }
      size_t kept = 0;
      for (size_t k = 0; k < count; ++k) {
        Item& it = batch[k];
        const int64_t* a_id = it.mapped ? vocab_.find(it.a_key, it.ha) : nullptr;
        const int64_t* b_id = it.mapped ? vocab_.find(it.b_key, it.hb) : nullptr;
        if (!a_id || !b_id) {
          const bool a_known = a_id || model_token_id(std::string(it.a));
          const bool b_known = b_id || model_token_id(std::string(it.b));
          if (!a_known || !b_known)
            r.fail(at(it.index) + hf_detail::quote(std::string(it.a) + " " + std::string(it.b)) +
                   " names " + hf_detail::quote(a_known ? it.b : it.a) +
                   ", which is not in model.vocab");
          continue;  // a token no bytes produce: this merge never applies
        }
        const int64_t* merged = vocab_.find(it.joined, it.hj);
        if (!merged)
          r.fail(at(it.index) + hf_detail::quote(std::string(it.a) + " " + std::string(it.b)) +
                 " makes " +
                 hf_detail::quote(byte_level_ ? std::string(it.a) + std::string(it.b) : it.joined) +
                 ", which is not in model.vocab");
        it.a_id = *a_id;
        it.b_id = *b_id;
        it.ha = uint64_t(*merged);  // (reused: the merged id)
        merges_.prefetch(int32_t(it.a_id), int32_t(it.b_id));
        if (kept != k) std::swap(batch[kept], batch[k]);
        ++kept;
      }
      for (size_t k = 0; k < kept; ++k) {
        const Item& it = batch[k];
        merges_.assign(int32_t(it.a_id), int32_t(it.b_id), {it.rank, int32_t(it.ha)});
        in_merge_[size_t(it.a_id)] = in_merge_[size_t(it.b_id)] = 1;
        note_partners(it.a_key, it.b_key);
      }
      if (bad_line)
        r.fail(at(*bad_line) + hf_detail::quote(parts.merges[*bad_line].a) +
               " is not two tokens separated by one space");
    }
  }

  /// Records that a merge can join a symbol ending with the last unit of `a` to one starting
  /// with the first unit of `b` (left_partners_ of that first unit: up to three, or "many").
  void note_partners(std::string_view a, std::string_view b) {
    if (!partners_known_) return;
    if (a.empty() || b.empty()) {
      partners_known_ = false;
      return;
    }
    const size_t a_last = byte_level_ ? a.size() - 1 : previous_unit(a, a.size());
    const size_t b_len = byte_level_ ? 1 : hf_detail::unit_length(b, 0);
    const int32_t l = unit_id(a.substr(a_last)), f = unit_id(b.substr(0, b_len));
    if (l < 0 || f < 0) {  // a unit that is no token of its own: cut only next to unmerged symbols
      partners_known_ = false;
      return;
    }
    int32_t* p = &left_partners_[size_t(f) * 4];
    if (p[0] < 0) return;
    for (int32_t k = 0; k < p[0]; ++k)
      if (p[1 + k] == l) return;
    if (p[0] == 3) {
      p[0] = -1;
      return;
    }
    p[1 + p[0]++] = l;
  }

  /// The id of the one-unit token `unit` (a byte for byte-level BPE, else a character), or -1.
  int32_t unit_id(std::string_view unit) const {
    const auto* p = reinterpret_cast<const unsigned char*>(unit.data());
    if (byte_level_) return unit.size() == 1 ? byte_ids_[p[0]] : -1;
    const size_t n = hf_detail::utf8_length(p, unit.size());
    if (n == unit.size() && n > 0) {
      const uint32_t cp = hf_detail::code_point(p, n);
      if (cp < char_ids_.size()) return char_ids_[cp];
    }
    const int64_t* v = vocab_.find(unit);
    return v ? int32_t(*v) : -1;
  }

  /// Id of a model token given as tokenizer.json writes it.
  std::optional<int32_t> model_token_id(const std::string& token) const {
    if (byte_level_) {
      if (const auto bytes = hf_detail::byte_level_to_bytes(token)) {
        const int64_t* v = vocab_.find(*bytes);
        return v ? std::optional<int32_t>(int32_t(*v)) : std::nullopt;
      }
      const auto it = unmapped_.find(token);
      return it == unmapped_.end() ? std::nullopt : std::optional<int32_t>(it->second);
    }
    const int64_t* v = vocab_.find(token);
    return v ? std::optional<int32_t>(int32_t(*v)) : std::nullopt;
  }

  void parse_added_tokens(const JsonReader& r, const Json& root) {
    const Json* list = r.find(root, "added_tokens", "tokenizer");
    if (list && !list->is_array()) r.fail("added_tokens must be an array");
    special_.assign(id_to_token_.size(), 0);
    if (!list) return;
    // Ids as Hugging Face gives them (AddedVocabulary::add_tokens): a content that is in the
    // model's vocabulary keeps that id, others are numbered from the vocabulary's size on.
    // tokenizer.json's "id" fields only produce a warning there when they differ.
    int64_t next_id = int64_t(vocab_count_);
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      const Json& t = (*list)[i];
      hf_detail::AddedToken token;
      token.content = r.string(t, "content", where);
      token.special = r.boolean(t, "special", where, false);
      token.single_word = r.boolean(t, "single_word", where, false);
      token.lstrip = r.boolean(t, "lstrip", where, false);
      token.rstrip = r.boolean(t, "rstrip", where, false);
      token.normalized = r.boolean(t, "normalized", where, !token.special);
      if (const Json* id = r.find(t, "id", where)) r.integer(*id, where + ".id", 0, INT32_MAX);
      if (token.content.empty()) continue;
      if (const auto it = added_by_content_.find(token.content); it != added_by_content_.end()) {
        token.id = it->second;  // a repeated content updates the earlier entry
      } else if (const auto id = model_token_id(token.content)) {
        token.id = *id;
      } else {
        token.id = int32_t(next_id++);
      }
      const size_t id = size_t(token.id);
      if (id >= id_to_token_.size()) {
        id_to_token_.resize(id + 1);
        has_token_.resize(id + 1, 0);
        special_.resize(id + 1, 0);
      }
      id_to_token_[id] = token.content;
      has_token_[id] = 1;
      special_[id] = special_[id] || token.special;  // Hugging Face: special by content
      added_by_content_[token.content] = token.id;
      const auto same =
          std::find_if(added_.begin(), added_.end(),
                       [&](const hf_detail::AddedToken& a) { return a.content == token.content; });
      if (same != added_.end())
        *same = token;
      else
        added_.push_back(token);
    }
    // Matching sets: normalized tokens are searched in normalized text, in normalized form.
    for (size_t i = 0; i < added_.size(); ++i) {
      const hf_detail::AddedToken& a = added_[i];
      if (!a.normalized) {
        raw_trie_.add(a.content, int32_t(i));
      } else {
        const std::string form = normalizers_.empty() ? a.content : normalize(a.content, true);
        normalized_trie_.add(form, int32_t(i));
      }
    }
  }

  void parse_post_processor(const JsonReader& r, const Json& root) {
    if (const Json* p = r.find(root, "post_processor", "tokenizer"))
      add_post_processor(r, *p, "post_processor");
  }

  void add_post_processor(const JsonReader& r, const Json& p, const std::string& where) {
    const std::string type = r.type(p, where);
    if (type == "Sequence") {
      const Json& list = r.array(p, "processors", where);
      for (size_t i = 0; i < list.size(); ++i)
        add_post_processor(r, list[i], where + ".processors[" + std::to_string(i) + "]");
    } else if (type == "ByteLevel") {
      // Only adjusts offsets: nothing to do for ids.
    } else if (type == "TemplateProcessing") {
      const Json& single = r.array(p, "single", where);
      const Json* specials = r.find(p, "special_tokens", where);
      std::vector<int32_t> before, after;
      bool seen_a = false;
      for (size_t i = 0; i < single.size(); ++i) {
        const std::string at = where + ".single[" + std::to_string(i) + "]";
        const Json& item = single[i];
        if (const Json* s = r.find(item, "SpecialToken", at)) {
          const std::string name = r.string(*s, "id", at + ".SpecialToken");
          const Json* entry =
              specials ? r.find(*specials, name.c_str(), where + ".special_tokens") : nullptr;
          if (!entry)
            r.fail(at + " names special token " + hf_detail::quote(name) + ", which " + where +
                   ".special_tokens does not define");
          const Json& ids = r.array(*entry, "ids", where + ".special_tokens." + name);
          for (size_t k = 0; k < ids.size(); ++k)
            (seen_a ? after : before)
                .push_back(int32_t(
                    r.integer(ids[k], where + ".special_tokens." + name + ".ids", 0, INT32_MAX)));
        } else if (const Json* s = r.find(item, "Sequence", at)) {
          const std::string id = r.string(*s, "id", at + ".Sequence");
          if (id != "A" || seen_a) r.fail(at + ": the single-sequence template must hold $A once");
          seen_a = true;
        } else {
          r.fail(at + " must be a SpecialToken or a Sequence");
        }
      }
      if (!seen_a) r.fail(where + ".single has no $A");
      prefix_ids_.insert(prefix_ids_.begin(), before.begin(), before.end());
      suffix_ids_.insert(suffix_ids_.end(), after.begin(), after.end());
    } else {
      r.fail(where + ": post-processor type '" + type +
             "' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
    }
  }

  void parse_decoder(const JsonReader& r, const Json& root) {
    if (const Json* d = r.find(root, "decoder", "tokenizer")) {
      has_decoder_ = true;
      add_decoder(r, *d, "decoder");
    }
  }

  void add_decoder(const JsonReader& r, const Json& d, const std::string& where) {
    using Step = hf_detail::DecoderStep;
    const std::string type = r.type(d, where);
    Step step;
    if (type == "Sequence") {
      const Json& list = r.array(d, "decoders", where);
      for (size_t i = 0; i < list.size(); ++i)
        add_decoder(r, list[i], where + ".decoders[" + std::to_string(i) + "]");
      return;
    } else if (type == "Replace") {
      step.kind = Step::Kind::kReplace;
      step.pattern = parse_pattern(r, r.require(d, "pattern", where), where + ".pattern");
      step.content = r.string(d, "content", where);
    } else if (type == "ByteFallback") {
      step.kind = Step::Kind::kByteFallback;
    } else if (type == "Fuse") {
      step.kind = Step::Kind::kFuse;
    } else if (type == "Strip") {
      step.kind = Step::Kind::kStrip;
      step.content = r.string(d, "content", where);
      if (step.content.empty() || hf_detail::unit_length(step.content, 0) != step.content.size())
        r.fail(where + ".content must be one character");
      step.start = size_t(r.integer(r.require(d, "start", where), where + ".start", 0, 1 << 20));
      step.stop = size_t(r.integer(r.require(d, "stop", where), where + ".stop", 0, 1 << 20));
    } else if (type == "Metaspace") {
      step.kind = Step::Kind::kMetaspace;
      parse_metaspace(r, d, where, step.replacement, step.prepend);
    } else if (type == "ByteLevel") {
      step.kind = Step::Kind::kByteLevel;
    } else {
      r.fail(where + ": decoder type '" + type +
             "' is not supported (supported: Replace, ByteFallback, Fuse, Strip, Metaspace, "
             "ByteLevel, Sequence)");
    }
    decoders_.push_back(std::move(step));
  }

  void parse_truncation_padding(const JsonReader& r, const Json& root) {
    if (const Json* t = r.find(root, "truncation", "tokenizer")) {
      Truncation tr;
      tr.max_length = size_t(r.integer(r.require(*t, "max_length", "truncation"),
                                       "truncation.max_length", 0, INT32_MAX));
      const std::string direction =
          r.optional_string(*t, "direction", "truncation").value_or("Right");
      if (direction != "Right" && direction != "Left")
        r.fail("truncation.direction must be Right or Left");
      tr.left = direction == "Left";
      truncation_ = tr;
    }
    if (const Json* p = r.find(root, "padding", "tokenizer")) {
      Padding pd;
      const Json& strategy = r.require(*p, "strategy", "padding");
      if (strategy.is_object()) {
        pd.fixed = size_t(r.integer(r.require(strategy, "Fixed", "padding.strategy"),
                                    "padding.strategy.Fixed", 0, kMaxPadding));
      } else if (!strategy.is_string() || strategy.get<std::string>() != "BatchLongest") {
        r.fail("padding.strategy must be \"BatchLongest\" or {\"Fixed\": n}");
      }
      const std::string direction = r.optional_string(*p, "direction", "padding").value_or("Right");
      if (direction != "Right" && direction != "Left")
        r.fail("padding.direction must be Right or Left");
      pd.left = direction == "Left";
      if (const Json* m = r.find(*p, "pad_to_multiple_of", "padding"))
        pd.multiple = size_t(r.integer(*m, "padding.pad_to_multiple_of", 0, kMaxPadding));
      pd.id =
          int32_t(r.integer(r.require(*p, "pad_id", "padding"), "padding.pad_id", 0, INT32_MAX));
      padding_ = pd;
    }
  }

  /// tokenizer_config.json, special_tokens_map.json, generation_config.json: BOS, EOS, and
  /// add_bos_token / add_eos_token. Then every id encode can produce is checked.
  void read_companions(const HfTokenizerFiles& files, const std::string& dir) {
    namespace fs = std::filesystem;
    const auto name = [&](const char* file) {
      return dir.empty() ? std::string(file) : (fs::path(dir) / file).string();
    };
    std::optional<Json> config, map, generation;
    if (files.tokenizer_config)
      config = hf_detail::parse_json(*files.tokenizer_config, name("tokenizer_config.json"));
    if (files.special_tokens_map)
      map = hf_detail::parse_json(*files.special_tokens_map, name("special_tokens_map.json"));
    if (files.generation_config)
      generation = hf_detail::parse_json(*files.generation_config, name("generation_config.json"));
    try {
      // A named token: "text", {"content": "text", ...}, or null.
      const auto named = [&](const std::optional<Json>& file, const char* file_name,
                             const char* key) -> std::optional<int32_t> {
        if (!file) return std::nullopt;
        const JsonReader r(name(file_name));
        const Json* v = r.find(*file, key, "the file");
        if (!v) return std::nullopt;
        const std::string token = v->is_object() ? r.string(*v, "content", key) : r.string(*v, key);
        const auto id = token_to_id(token);
        if (!id)
          r.fail(std::string(key) + " " + hf_detail::quote(token) +
                 " is not a token of tokenizer.json");
        return id;
      };
      // Precedence (as transformers loads them): special_tokens_map.json over
      // tokenizer_config.json; generation_config.json's ids after both for BOS, and first for
      // EOS, which is what generation stops on.
      const auto token_bos = map && r_has(*map, "bos_token")
                                 ? named(map, "special_tokens_map.json", "bos_token")
                                 : named(config, "tokenizer_config.json", "bos_token");
      const auto token_eos = map && r_has(*map, "eos_token")
                                 ? named(map, "special_tokens_map.json", "eos_token")
                                 : named(config, "tokenizer_config.json", "eos_token");
      std::optional<int32_t> gen_bos;
      std::vector<int32_t> gen_eos;
      if (generation) {
        const JsonReader r(name("generation_config.json"));
        if (!generation->is_object()) r.fail("the top level must be an object");
        const auto check = [&](int64_t id, const std::string& what) {
          if (id >= vocab_size() || !has_token_[size_t(id)])
            r.fail(what + " " + std::to_string(id) + " is not a token of tokenizer.json");
          return int32_t(id);
        };
        if (const Json* b = r.find(*generation, "bos_token_id", "the file"))
          gen_bos = check(r.integer(*b, "bos_token_id", 0, INT32_MAX), "bos_token_id");
        if (const Json* e = r.find(*generation, "eos_token_id", "the file")) {
          if (e->is_array()) {
            for (size_t i = 0; i < e->size(); ++i)
              gen_eos.push_back(
                  check(r.integer((*e)[i], "eos_token_id[" + std::to_string(i) + "]", 0, INT32_MAX),
                        "eos_token_id"));
          } else {
            gen_eos.push_back(check(r.integer(*e, "eos_token_id", 0, INT32_MAX), "eos_token_id"));
          }
        }
      }
      bos_id_ = token_bos ? token_bos : gen_bos;
      eos_ids_ = !gen_eos.empty() ? gen_eos
                 : token_eos      ? std::vector<int32_t>{*token_eos}
                                  : std::vector<int32_t>{};

      // add_bos_token / add_eos_token rebuild the template as transformers' Llama-style
      // tokenizers do: [BOS] $A [EOS]; a flag that is absent keeps what tokenizer.json does.
      if (config) {
        const JsonReader r(name("tokenizer_config.json"));
        if (!config->is_object()) r.fail("the top level must be an object");
        const Json* add_bos = r.find(*config, "add_bos_token", "the file");
        const Json* add_eos = r.find(*config, "add_eos_token", "the file");
        if (add_bos || add_eos) {
          const std::optional<int32_t> eos = token_eos ? token_eos : eos_id();
          bool bos_on = bos_id_ && prefix_ids_.size() == 1 && prefix_ids_[0] == *bos_id_;
          bool eos_on = eos && suffix_ids_.size() == 1 && suffix_ids_[0] == *eos;
          if (add_bos) bos_on = r.boolean(*config, "add_bos_token", "the file", false);
          if (add_eos) eos_on = r.boolean(*config, "add_eos_token", "the file", false);
          if (bos_on && !bos_id_) r.fail("add_bos_token is true but no BOS token is named");
          if (eos_on && !eos) r.fail("add_eos_token is true but no EOS token is named");
          prefix_ids_ = bos_on ? std::vector<int32_t>{*bos_id_} : std::vector<int32_t>{};
          suffix_ids_ = eos_on ? std::vector<int32_t>{*eos} : std::vector<int32_t>{};
        }
      }
    } catch (const Json::exception& e) {
      throw FormatError(name("tokenizer_config.json") +
                        " or its companions: unexpected content: " + e.what());
    }
    // Every id encode can produce must be a token: the template's and padding's too.
    const JsonReader r(dir.empty() ? std::string("tokenizer.json") : name("tokenizer.json"));
    for (const std::vector<int32_t>* list : {&prefix_ids_, &suffix_ids_})
      for (int32_t id : *list)
        if (id < 0 || id >= vocab_size() || !has_token_[size_t(id)])
          r.fail("post_processor adds id " + std::to_string(id) + ", which is not a token");
    if (padding_ && (padding_->id >= vocab_size() || !has_token_[size_t(padding_->id)]))
      r.fail("padding.pad_id " + std::to_string(padding_->id) + " is not a token");
  }
  static bool r_has(const Json& j, const char* key) {
    return j.is_object() && j.contains(key) && !j[key].is_null();
  }

  // ---- State ----

  struct Truncation {
    size_t max_length = 0;
    bool left = false;
  };
  struct Padding {
    std::optional<size_t> fixed;  // BatchLongest otherwise (no-op for one sequence)
    size_t multiple = 0;
    bool left = false;
    int32_t id = 0;
  };

  // Vocabulary: tokenizer.json's strings by id; the model's lookup table in the model's space.
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_token_, special_;
  hf_detail::StringTable vocab_;
  std::unordered_map<std::string, int32_t> unmapped_;  // byte-level tokens no bytes produce
  size_t vocab_count_ = 0;
  hf_detail::MergeTable merges_;
  std::array<int32_t, 256> byte_ids_{}, byte_fallback_ids_{};
  std::vector<int32_t> char_ids_;       // code point < 0x10000 -> one-character token
  std::vector<int32_t> left_partners_;  // per id: [count or -1 for many, up to 3 ids]
  std::vector<uint8_t> in_merge_;       // per id: named by some merge
  bool segmentable_ = true, partners_known_ = true;
  std::optional<int32_t> unk_id_;
  std::string prefix_, suffix_;
  bool byte_level_ = false, byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  bool accepts_invalid_utf8_ = false;

  std::vector<hf_detail::AddedToken> added_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  hf_detail::TokenTrie raw_trie_, normalized_trie_;
  std::shared_ptr<hf_detail::Regex> word_char_, space_char_;

  std::vector<hf_detail::NormalizerStep> normalizers_;
  std::vector<hf_detail::PreTokenizerStep> pre_tokenizers_;
  std::vector<hf_detail::DecoderStep> decoders_;
  bool has_decoder_ = false;
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  std::optional<Truncation> truncation_;
  std::optional<Padding> padding_;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
};

/// The tokenizer of the folder `dir`: its tokenizer.json (with the companion files) when it
/// has one, else the byte tokenizer. Needs no model: for a folder holding only tokenizer files.
inline std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  std::error_code ec;  // an unreadable folder counts as "no tokenizer.json"
  if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json", ec))
    return std::make_unique<HfTokenizer>(HfTokenizer::load(dir));
  return std::make_unique<ByteTokenizer>();
}

/// The tokenizer of the model in `model_dir`, whose embedding has `vocab_size` rows. Every id
/// the tokenizer can produce must be a row: its vocab_size() (largest id + 1, added tokens and
/// template included; generation_config's ids are tokens too) may not exceed the model's.
/// Larger model vocabularies are fine (padded embeddings).
inline std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir, int64_t vocab_size) {
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(model_dir);
  if (tokenizer->vocab_size() > vocab_size) {
    if (dynamic_cast<const ByteTokenizer*>(tokenizer.get()))
      throw FormatError(model_dir + ": model vocab_size " + std::to_string(vocab_size) +
                        " is smaller than the " + std::to_string(ByteTokenizer::kVocabSize) +
                        " ids of the byte-level tokenizer");
    throw FormatError(model_dir + ": tokenizer.json has ids up to " +
                      std::to_string(tokenizer->vocab_size() - 1) +
                      " (added tokens included) but the model's vocab_size is " +
                      std::to_string(vocab_size));
  }
  return tokenizer;
}

}  // namespace retnet
