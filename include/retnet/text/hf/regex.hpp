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

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"
#include "retnet/text/hf/utf8.hpp"

namespace retnet::detail::hf {

/// Translates a pattern from Oniguruma's syntax (which Hugging Face compiles tokenizer.json's
/// patterns with) to PCRE2's. Escapes whose meaning differs are spelled out as Oniguruma reads
/// them: \s and \S are Unicode White_Space (PCRE2's \s also takes U+180E), \w and \W are
/// letters, marks, numbers and connector punctuation (PCRE2's lack marks), \h and \H are
/// hexadecimal digits (horizontal space in PCRE2), and {,n} is {0,n} (a literal in PCRE2).
/// Constructs that PCRE2 would read as something else are refused with a FormatError naming
/// them: class intersection (&&), a class nested in a class, \W or \H inside a class (a negated
/// set cannot be listed there), the absent operator (?~...), the option (?m) (dot-all in
/// Oniguruma, multi-line in PCRE2), and an interval followed by + (a repeat of the interval in
/// Oniguruma, possessive in PCRE2).
class OnigurumaTranslator {
 public:
  OnigurumaTranslator(std::string_view pattern, const std::string& what)
      : p_(pattern), what_(what) {
    out_.reserve(p_.size() + 16);
  }

  std::string run() {
    for (i_ = 0; i_ < p_.size(); ++i_) {
      const char c = p_[i_];
      if (c == '\\' && i_ + 1 < p_.size()) {
        escape();
      } else if (c == '[') {
        open_class();
      } else if (c == ']' && depth_ > 0) {
        --depth_;
        out_.push_back(c);
      } else if (c == '&' && depth_ > 0 && i_ + 1 < p_.size() && p_[i_ + 1] == '&') {
        refuse("class intersection \"&&\"");
      } else if (c == '(' && depth_ == 0 && p_.compare(i_, 2, "(?") == 0) {
        group();
      } else if (c == '{' && depth_ == 0) {
        interval();
      } else {
        out_.push_back(c);
      }
    }
    return std::move(out_);
  }

 private:
  [[noreturn]] void refuse(const std::string& construct) const {
    throw FormatError(what_ + ": pattern " + excerpt(p_, 60) + " uses " + construct +
                      " at offset " + std::to_string(i_) +
                      ", which PCRE2 reads differently from Oniguruma: not supported");
  }

  void escape() {
    static const std::string word = R"(\p{L}\p{M}\p{N}\p{Pc})";
    const char e = p_[++i_];
    switch (e) {
      case 'Q': {  // \Q...\E is literal
        const size_t end = p_.find("\\E", i_ + 1);
        const size_t stop = end == std::string_view::npos ? p_.size() : end + 2;
        out_.append(p_.substr(i_ - 1, stop - (i_ - 1)));
        i_ = stop - 1;
        return;
      }
      case 's':
        out_ += R"(\p{White_Space})";
        return;
      case 'S':
        out_ += R"(\P{White_Space})";
        return;
      case 'w':
        out_ += depth_ ? word : "[" + word + "]";
        return;
      case 'W':
        if (depth_) refuse("\\W inside a character class");
        out_ += "[^" + word + "]";
        return;
      case 'h':
        out_ += depth_ ? "0-9a-fA-F" : "[0-9a-fA-F]";
        return;
      case 'H':
        if (depth_) refuse("\\H inside a character class");
        out_ += "[^0-9a-fA-F]";
        return;
      default:
        out_.push_back('\\');
        out_.push_back(e);
    }
  }

  void open_class() {
    if (depth_ > 0) {
      // [:alpha:] inside a class: the two libraries give POSIX classes different Unicode sets
      // ([:punct:] and symbols, [:space:] and U+180E).
      if (i_ + 1 < p_.size() && p_[i_ + 1] == ':')
        refuse("a POSIX class such as \"[:space:]\" (its Unicode set differs in PCRE2)");
      refuse("a character class inside a character class");
    }
    ++depth_;
    out_.push_back('[');
    if (i_ + 1 < p_.size() && p_[i_ + 1] == '^') out_.push_back(p_[++i_]);
    if (i_ + 1 < p_.size() && p_[i_ + 1] == ']')
      out_.push_back(p_[++i_]);  // a leading ] is literal
  }

  /// "(?": the absent operator and option letters are checked; the rest is copied.
  void group() {
    if (p_.compare(i_, 3, "(?~") == 0) refuse("the absent operator \"(?~\"");
    size_t k = i_ + 2;
    if (k < p_.size() && (p_[k] == 'i' || p_[k] == 'x' || p_[k] == 'm' || p_[k] == '-')) {
      for (; k < p_.size() && (std::isalpha(static_cast<unsigned char>(p_[k])) || p_[k] == '-');
           ++k)
        if (p_[k] == 'm') refuse("the option \"m\" (dot-all in Oniguruma)");
    }
    out_.push_back('(');
  }

  /// "{": {,n} becomes {0,n}; an interval followed by + is refused; anything else is copied.
  void interval() {
    size_t k = i_ + 1;
    const auto digits = [&] {
      const size_t from = k;
      while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') ++k;
      return k > from;
    };
    const bool low = digits();
    bool high = false;
    const bool comma = k < p_.size() && p_[k] == ',';
    if (comma) {
      ++k;
      high = digits();
    }
    if (k >= p_.size() || p_[k] != '}' || (!low && !high)) {  // not an interval: a literal {
      out_.push_back('{');
      return;
    }
    const size_t close = k;
    if (close + 1 < p_.size() && p_[close + 1] == '+') {
      i_ = close + 1;
      refuse("an interval followed by \"+\"");
    }
    out_ += low ? std::string(p_.substr(i_, close + 1 - i_))
                : "{0" + std::string(p_.substr(i_ + 1, close - i_));
    i_ = close;
  }

  std::string_view p_;
  const std::string& what_;
  std::string out_;
  size_t i_ = 0;
  int depth_ = 0;  // inside how many character classes
};

/// `pattern` in PCRE2's syntax (see OnigurumaTranslator); `what` names it in errors.
inline std::string oniguruma_to_pcre2(std::string_view pattern,
                                      const std::string& what = "tokenizer") {
  return OnigurumaTranslator(pattern, what).run();
}

/// The PCRE2 match steps (its match limit's unit: backtracking points) that the matches of one
/// encode call may take together, so that a pattern which backtracks heavily is refused rather
/// than left running: kBaseSteps plus kStepsPerByte for each byte of text. Each match call is
/// charged the limit it ran under (first kFirstCallSteps, doubled on each retry), so a text of n
/// bytes cut by patterns whose matches need at most kFirstCallSteps steps each costs at most
/// kFirstCallSteps per match call, however many patterns run over it.
class MatchBudget {
 public:
  static constexpr uint64_t kBaseSteps = 1'000'000;
  static constexpr uint64_t kStepsPerByte = 256;
  static constexpr uint32_t kFirstCallSteps = 16;
  static constexpr uint32_t kMaxCallSteps = 10'000'000;    // one match call (PCRE2's default)
  static constexpr uint32_t kMaxCallDepth = 1'000'000;     // interpreter only; JIT has no depth
  static constexpr uint32_t kMaxCallHeapKib = 256 * 1024;  // interpreter's backtracking frames

  explicit MatchBudget(size_t text_bytes) { grant(text_bytes); }

  /// More text to match in (a normalizer made the text longer).
  void grant(size_t bytes) {
    const uint64_t more = kBaseSteps * !granted_ + kStepsPerByte * uint64_t(bytes);
    granted_ += more;
    left_ += more;
  }
  uint64_t left() const { return left_; }
  uint64_t granted() const { return granted_; }
  void charge(uint64_t steps) { left_ -= std::min(steps, left_); }

 private:
  uint64_t granted_ = 0;
  uint64_t left_ = 0;
};

/// A compiled pattern (UTF, Unicode properties, JIT when available), matched the way
/// Oniguruma's find_iter does in Hugging Face's tokenizers: successive non-overlapping matches,
/// an empty match right after a non-empty one skipped, one character skipped after an empty
/// match. Immutable after construction, so one Regex may be used by several threads at once.
class Regex {
 public:
  /// `literal`: the pattern is a plain string. `invalid_utf8`: also compile a variant that
  /// matches in text that is not valid UTF-8 (invalid bytes then match nothing).
  Regex(std::string_view pattern, bool literal, bool invalid_utf8, const std::string& what) {
    pattern_ = std::string(pattern.substr(0, 200));
    label_ = what;
    valid_ = compile(pattern, literal, false, what);
    if (invalid_utf8) invalid_ = compile(pattern, literal, true, what);
  }

  /// Calls on_match(begin, end) for each match in `text`, charging `budget` for the steps.
  /// `valid_utf8` says whether text is well-formed UTF-8; if not, the Regex must have been
  /// built with invalid_utf8.
  template <typename F>
  void for_each_match(std::string_view text, bool valid_utf8, MatchBudget& budget,
                      F&& on_match) const {
    const Compiled& c = valid_utf8 ? valid_ : invalid_;
    if (!c.code) throw InvalidArgument("tokenizer: text is not valid UTF-8");
    std::unique_ptr<pcre2_match_data_8, MatchDataDeleter> md(pcre2_match_data_create_8(1, nullptr));
    std::unique_ptr<pcre2_match_context_8, MatchContextDeleter> context(
        pcre2_match_context_create_8(nullptr));
    if (!md || !context) throw std::bad_alloc();
    pcre2_set_depth_limit_8(context.get(), MatchBudget::kMaxCallDepth);
    pcre2_set_heap_limit_8(context.get(), MatchBudget::kMaxCallHeapKib);
    size_t last_end = 0;
    bool skip_next_empty = false;
    while (last_end <= text.size()) {
      if (!match_once(c, text, last_end, valid_utf8, budget, context.get(), md.get())) return;
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
  struct MatchContextDeleter {
    void operator()(pcre2_match_context_8* m) const { pcre2_match_context_free_8(m); }
  };
  struct Compiled {
    std::shared_ptr<pcre2_code_8> code;
    bool jit = false;
  };

  /// The next match of `c` in `text` from `start` into `md` (false: none). Runs under a match
  /// limit of MatchBudget::kFirstCallSteps, doubled while PCRE2 reports the limit, up to
  /// kMaxCallSteps or what is left of `budget`; each run is charged to `budget`.
  bool match_once(const Compiled& c, std::string_view text, size_t start, bool valid_utf8,
                  MatchBudget& budget, pcre2_match_context_8* context,
                  pcre2_match_data_8* md) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR8>(text.data());
    const uint32_t options = valid_utf8 ? PCRE2_NO_UTF_CHECK : 0;
    uint64_t limit = MatchBudget::kFirstCallSteps;
    for (;;) {
      const uint64_t cap = std::min<uint64_t>(MatchBudget::kMaxCallSteps, budget.left());
      limit = std::max<uint64_t>(1, std::min(limit, cap));
      pcre2_set_match_limit_8(context, uint32_t(limit));
      // JIT honours the match limit but not the depth and heap limits; the interpreter, which
      // runs where JIT is missing or its stack is too small, honours all three.
      int rc =
          c.jit ? pcre2_jit_match_8(c.code.get(), subject, text.size(), start, options, md, context)
                : PCRE2_ERROR_JIT_BADOPTION;
      if (!c.jit || rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match_8(c.code.get(), subject, text.size(), start, options | PCRE2_NO_JIT, md,
                           context);
      budget.charge(limit);
      if (rc == PCRE2_ERROR_NOMATCH) return false;
      if (rc >= 0) return true;
      if (rc != PCRE2_ERROR_MATCHLIMIT) fail_match(rc, start);
      if (limit >= cap) fail_steps(cap == MatchBudget::kMaxCallSteps, start, budget);
      limit *= 2;
    }
  }

  [[noreturn]] void fail_match(int rc, size_t start) const {
    std::string why = message(rc);
    if (rc == PCRE2_ERROR_DEPTHLIMIT)
      why += " (limit " + std::to_string(MatchBudget::kMaxCallDepth) + ")";
    else if (rc == PCRE2_ERROR_HEAPLIMIT)
      why += " (limit " + std::to_string(MatchBudget::kMaxCallHeapKib / 1024) + " MiB)";
    throw InvalidArgument(label_ + ": pattern " + excerpt(pattern_, 60) + " failed at byte " +
                          std::to_string(start) + " of a piece: " + why);
  }

  [[noreturn]] void fail_steps(bool per_call, size_t start, const MatchBudget& budget) const {
    const std::string head = label_ + ": pattern " + excerpt(pattern_, 60);
    if (per_call)
      throw InvalidArgument(head + " needs more than " +
                            std::to_string(MatchBudget::kMaxCallSteps) +
                            " match steps for one match (at byte " + std::to_string(start) +
                            " of a piece): it backtracks too much, refused");
    throw InvalidArgument(head + " used up the match budget of this text (" +
                          std::to_string(budget.granted()) +
                          " steps: " + std::to_string(MatchBudget::kBaseSteps) + " + " +
                          std::to_string(MatchBudget::kStepsPerByte) + " per byte) at byte " +
                          std::to_string(start) + " of a piece: it backtracks too much, refused");
  }

  static std::string message(int code) {
    PCRE2_UCHAR8 buffer[256];
    if (pcre2_get_error_message_8(code, buffer, sizeof(buffer)) < 0)
      return "error " + std::to_string(code);
    return reinterpret_cast<const char*>(buffer);
  }

  static Compiled compile(std::string_view original, bool literal, bool invalid_utf8,
                          const std::string& what) {
    const std::string converted = literal ? std::string() : oniguruma_to_pcre2(original, what);
    const std::string_view pattern = literal ? original : std::string_view(converted);
    // Oniguruma's Ruby syntax, which Hugging Face compiles with, reads ^ and $ at every line:
    // PCRE2's multiline mode.
    uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE);
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
  std::string pattern_;  // (its first 200 bytes, for messages)
  std::string label_;    // where tokenizer.json gives the pattern
};

}  // namespace retnet::detail::hf
