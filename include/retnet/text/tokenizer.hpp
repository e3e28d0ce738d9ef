// Text <-> token id conversion. The generation loop only needs the small Tokenizer
// interface below; ByteTokenizer is the identity over bytes, used by byte-level models
// and by every model folder that ships no tokenizer.json. Hugging Face tokenizer.json files
// are read by HfTokenizer and load_tokenizer (retnet/tokenizers.hpp, text/hf/; target
// RetNet::tokenizers, which needs PCRE2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "retnet/core/error.hpp"

namespace retnet {

/// Maps text to token ids and back. Virtual dispatch is fine here: it runs once per
/// prompt or generated token, far from the kernels.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// The ids of `text`, with the tokenizer's default special tokens (a BOS, say) added.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  /// The text of `ids`, special tokens skipped and nothing added; throws InvalidArgument on an
  /// unknown id. Token by token this is the concatenation of decode_token, except where the
  /// tokenizer's decoder treats the start of a text specially (HfTokenizer: see there).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  /// The bytes of one token as it reads after earlier text, for streaming ("" for a special
  /// token). A multi-byte UTF-8 character may span several tokens, so the result need not be
  /// valid UTF-8 on its own.
  virtual std::string decode_token(int32_t id) const = 0;
  /// Number of ids the tokenizer can produce (ids are below it); the model's vocabulary may
  /// be larger.
  virtual int64_t vocab_size() const = 0;
  /// Whether `id` is a token, which decode and decode_token accept: every id below
  /// vocab_size() unless the vocabulary has gaps (HfTokenizer: ids no token is given).
  virtual bool has_id(int32_t id) const { return id >= 0 && id < vocab_size(); }
  /// Id that ends generation, if the tokenizer has one (the first of eos_ids()).
  virtual std::optional<int32_t> eos_id() const { return std::nullopt; }
  /// Every id that ends generation (some models stop on several, e.g. Llama 3 instruct).
  virtual std::vector<int32_t> eos_ids() const {
    const std::optional<int32_t> eos = eos_id();
    return eos ? std::vector<int32_t>{*eos} : std::vector<int32_t>{};
  }
  /// Id of the beginning-of-sequence token, if the tokenizer has one.
  virtual std::optional<int32_t> bos_id() const { return std::nullopt; }
  /// Whether `id` is a special token (skipped by decode and decode_token).
  virtual bool is_special(int32_t /*id*/) const { return false; }
};

/// Ids 0..255 are the bytes themselves, so any byte string (invalid UTF-8, NUL bytes)
/// round-trips exactly.
class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    // Through unsigned char: plain char is signed on most platforms.
    for (char c : text) ids.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (int32_t id : ids) text.push_back(to_byte(id));
    return text;
  }

  std::string decode_token(int32_t id) const override { return std::string(1, to_byte(id)); }

  int64_t vocab_size() const override { return kVocabSize; }

 private:
  static char to_byte(int32_t id) {
    if (id < 0 || id >= kVocabSize)
      throw InvalidArgument("ByteTokenizer: token id " + std::to_string(id) +
                            " is outside the byte range [0, 256)");
    return static_cast<char>(static_cast<unsigned char>(id));
  }
};

}  // namespace retnet
