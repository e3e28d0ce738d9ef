// Decoders (Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel, Sequence of them): how
// token strings become text again.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "retnet/core/json.hpp"
#include "retnet/text/hf/byte_level.hpp"
#include "retnet/text/hf/metaspace.hpp"
#include "retnet/text/hf/pattern.hpp"
#include "retnet/text/hf/tokenizer_json.hpp"
#include "retnet/text/hf/utf8.hpp"

namespace retnet::detail::hf {

class Decoder {
 public:
  /// Reads tokenizer.json's "decoder" (absent or null: tokens joined with spaces).
  void parse(const JsonObject& root) {
    steps_.clear();
    present_ = false;
    if (const auto d = root.optional_object("decoder")) {
      present_ = true;
      add(*d);
    }
  }

  /// Hugging Face's decoder chain over token strings, joined. `stream`: the tokens follow
  /// earlier text (no start-of-text rules). `lossy`: bytes that do not form UTF-8 become
  /// U+FFFD, as in Hugging Face's result (a Rust String).
  std::string run(std::vector<std::string> tokens, bool stream, bool lossy) const {
    if (!present_) {  // Hugging Face joins with spaces when there is no decoder
      std::string joined;
      for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
      return joined;
    }
    for (const Step& d : steps_) {
      switch (d.kind) {
        case Step::Kind::kReplace:
          for (std::string& t : tokens) t = d.pattern.replace_all(t, d.content, is_valid_utf8(t));
          break;
        case Step::Kind::kByteFallback:
          tokens = byte_fallback(std::move(tokens), lossy);
          break;
        case Step::Kind::kFuse:
          tokens.assign(1, join(tokens));
          break;
        case Step::Kind::kStrip:
          if (!stream)  // a token of a stream follows earlier text, and its end is not known
            for (std::string& t : tokens) t = strip(t, d);
          break;
        case Step::Kind::kMetaspace:
          for (size_t i = 0; i < tokens.size(); ++i)
            tokens[i] = metaspace(tokens[i], d, i == 0 && !stream);
          break;
        case Step::Kind::kByteLevel:
          tokens.assign(1, byte_level(tokens, lossy));
          break;
      }
    }
    return join(tokens);
  }

 private:
  struct Step {
    enum class Kind {
      kReplace,
      kByteFallback,
      kFuse,
      kStrip,
      kMetaspace,
      kByteLevel
    } kind = Kind::kFuse;
    Pattern pattern;      // Replace
    std::string content;  // Replace's content; Strip's character (UTF-8)
    size_t start = 0;     // Strip
    size_t stop = 0;      // Strip
    Metaspace metaspace;  // Metaspace
  };

  void add(const JsonObject& d) {
    const std::string type = d.string("type");
    Step step;
    if (type == "Sequence") {
      const nlohmann::json& list = d.array("decoders");
      for (size_t i = 0; i < list.size(); ++i) add(d.element("decoders", list, i));
      return;
    }
    if (type == "Replace") {
      step.kind = Step::Kind::kReplace;
      step.pattern = parse_pattern(d, "pattern");
      step.content = d.string("content");
    } else if (type == "ByteFallback") {
      step.kind = Step::Kind::kByteFallback;
    } else if (type == "Fuse") {
      step.kind = Step::Kind::kFuse;
    } else if (type == "Strip") {
      step.kind = Step::Kind::kStrip;
      step.content = d.string("content");
      if (step.content.empty() || unit_length(step.content, 0) != step.content.size())
        d.fail("content", "must be one character");
      step.start = size_t(d.integer("start", 0, 1 << 20));
      step.stop = size_t(d.integer("stop", 0, 1 << 20));
    } else if (type == "Metaspace") {
      step.kind = Step::Kind::kMetaspace;
      step.metaspace = parse_metaspace(d);
    } else if (type == "ByteLevel") {
      step.kind = Step::Kind::kByteLevel;
    } else {
      fail_unsupported(d, type,
                       "Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel, Sequence");
    }
    steps_.push_back(std::move(step));
  }

  static std::string join(const std::vector<std::string>& tokens) {
    std::string all;
    for (const std::string& t : tokens) all += t;
    return all;
  }

  /// Runs of "<0xNN>" tokens become the bytes they stand for; with `lossy`, a run that is not
  /// UTF-8 becomes one U+FFFD per byte, as in Hugging Face.
  static std::vector<std::string> byte_fallback(std::vector<std::string> tokens, bool lossy) {
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
      if (in_bytes) {
        merged.push_back(std::move(bytes));
        bytes.clear();
        in_bytes = false;
      }
      merged.push_back(std::move(t));
    }
    if (in_bytes) merged.push_back(std::move(bytes));
    if (lossy)
      for (std::string& t : merged)
        if (!is_valid_utf8(t)) {
          const size_t n = t.size();
          t.clear();
          for (size_t k = 0; k < n; ++k) t += "\xEF\xBF\xBD";
        }
    return merged;
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

  /// `t` without up to d.start copies of d.content at its start and d.stop at its end.
  static std::string strip(const std::string& t, const Step& d) {
    const size_t n = d.content.size();
    size_t begin = 0;
    size_t end = t.size();
    for (size_t k = 0; k < d.start && t.compare(begin, n, d.content) == 0; ++k) begin += n;
    for (size_t k = 0; k < d.stop && end >= begin + n && t.compare(end - n, n, d.content) == 0; ++k)
      end -= n;
    return t.substr(begin, end - begin);
  }

  /// `t` with the replacement character read as a space (dropped in the text's first token,
  /// unless the prepend scheme is "never").
  static std::string metaspace(const std::string& t, const Step& d, bool first) {
    const std::string& replacement = d.metaspace.replacement;
    const bool drop = first && d.metaspace.prepend != PrependScheme::kNever;
    std::string r;
    for (size_t p = 0; p < t.size();) {
      if (t.compare(p, replacement.size(), replacement) == 0) {
        if (!drop) r.push_back(' ');
        p += replacement.size();
      } else {
        r.push_back(t[p++]);
      }
    }
    return r;
  }

  /// The tokens joined, each byte-level token turned into its bytes.
  static std::string byte_level(const std::vector<std::string>& tokens, bool lossy) {
    std::string all;
    for (const std::string& t : tokens) {
      if (const auto bytes = byte_level_to_bytes(t))
        all += *bytes;
      else
        all += t;
    }
    return lossy ? utf8_lossy(all) : all;
  }

  std::vector<Step> steps_;
  bool present_ = false;
};

}  // namespace retnet::detail::hf
