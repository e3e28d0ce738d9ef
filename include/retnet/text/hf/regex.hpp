// Regular expressions of tokenizer.json through PCRE2. Hugging Face compiles them with
// Oniguruma: oniguruma_to_pcre2() spells out the escapes whose meaning differs, and Regex walks
// the matches the way Oniguruma's find_iter does there.
//
// Needs PCRE2's 8-bit library (UTF + Unicode properties): link RetNet::tokenizers.
#pragma once

#if defined(PCRE2_CODE_UNIT_WIDTH) && PCRE2_CODE_UNIT_WIDTH != 8 && PCRE2_CODE_UNIT_WIDTH != 0
#error "retnet/text/hf/regex.hpp uses PCRE2's 8-bit library (PCRE2_CODE_UNIT_WIDTH 8 or 0)"
#endif
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"
#include "retnet/text/hf/utf8.hpp"

namespace retnet::detail::hf {

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
      const size_t begin = ov[0];
      const size_t end = ov[1];
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
      throw FormatError(what + ": pattern " + excerpt(original, 60) + " does not compile: " +
                        message(error) + " (at offset " + std::to_string(offset) + ")");
    Compiled c;
    c.code.reset(code, CodeDeleter());
    c.jit = pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE) == 0;
    return c;
  }

  Compiled valid_, invalid_;
};

}  // namespace retnet::detail::hf
