// The text of one generation as it grows token by token, cut into pieces that are final: a
// piece never ends inside a UTF-8 character that the next token may complete, and never hands
// out text that may still turn out to be the start of a stop string. Generator streams with
// it; so does anything that drives decoding itself (a server stepping many requests at once).
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace retnet {

class TextStream {
 public:
  TextStream() = default;
  explicit TextStream(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {}

  /// Appends the bytes of one token. `piece` receives the text that became final (possibly
  /// none). Returns true when a stop string has appeared: the text is then cut before it, and
  /// what remains to hand out comes from finish().
  bool push(const std::string& bytes, std::string& piece) {
    piece.clear();
    text_ += bytes;
    size_t cut = std::string::npos;
    for (const auto& stop : stops_) {
      if (stop.empty()) continue;
      const size_t from = emitted_ > stop.size() ? emitted_ - stop.size() : 0;
      const size_t at = text_.find(stop, from);
      if (at != std::string::npos && at < cut) cut = at;
    }
    if (cut != std::string::npos) {
      text_.resize(cut);
      stopped_ = true;
      return true;
    }
    size_t hold = 0;  // longest suffix of the text that starts some stop string
    for (const auto& stop : stops_)
      for (size_t k = std::min(stop.size() - (stop.empty() ? 0 : 1), text_.size()); k > hold; --k)
        if (text_.compare(text_.size() - k, k, stop, 0, k) == 0) {
          hold = k;
          break;
        }
    const size_t ready = complete_utf8_prefix(text_, text_.size() - hold);
    if (ready > emitted_) piece = text_.substr(emitted_, ready - emitted_);
    emitted_ = std::max(emitted_, ready);
    return false;
  }

  /// At the end of the generation: the text not handed out yet (held back for a stop string or
  /// an unfinished character), which is now final.
  std::string finish() {
    std::string rest = emitted_ < text_.size() ? text_.substr(emitted_) : std::string();
    emitted_ = text_.size();
    return rest;
  }

  /// All the text so far, cut before a stop string once one has appeared.
  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }

  /// The largest n <= end such that text[0, n) does not end inside a UTF-8 character that the
  /// next tokens may complete. Bytes that cannot start or continue a valid sequence are passed
  /// through as they are.
  static size_t complete_utf8_prefix(const std::string& text, size_t end) {
    // Look back at most 3 bytes for the lead byte of the last character.
    for (size_t back = 1; back <= 3 && back <= end; ++back) {
      const auto c = static_cast<unsigned char>(text[end - back]);
      if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
      const size_t length = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 1;
      return c >= 0xC2 && c <= 0xF4 && length > back ? end - back : end;
    }
    return end;
  }

 private:
  std::vector<std::string> stops_;
  std::string text_;    // decoded so far (may end in a partial stop string)
  size_t emitted_ = 0;  // bytes of text_ handed out
  bool stopped_ = false;
};

}  // namespace retnet
