// Text <-> token id conversion. The generation loop only needs the small Tokenizer
// interface below; ByteTokenizer is the identity over bytes, used by byte-level models
// and by every model folder that ships no tokenizer.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "retnet/core/error.hpp"

namespace retnet {

/// Maps text to token ids and back. Virtual dispatch is fine here: it runs once per
/// prompt or generated token, far from the kernels.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  /// Concatenation of decode_token over `ids`; throws InvalidArgument on an unknown id.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  /// The bytes of one token. A multi-byte UTF-8 character may span several tokens, so
  /// the result need not be valid UTF-8 on its own.
  virtual std::string decode_token(int32_t id) const = 0;
  /// Number of ids the tokenizer can produce; the model's vocabulary may be larger.
  virtual int64_t vocab_size() const = 0;
  /// Id that ends generation, if the tokenizer has one.
  virtual std::optional<int32_t> eos_id() const { return std::nullopt; }
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

/// The tokenizer of the model in `model_dir`, whose embedding has `vocab_size` rows.
/// Only byte-level models are supported so far: a folder with a tokenizer.json throws
/// FormatError rather than silently decoding its ids as bytes.
inline std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir, int64_t vocab_size) {
  const std::filesystem::path json = std::filesystem::path(model_dir) / "tokenizer.json";
  std::error_code ec;  // an unreadable folder counts as "no tokenizer.json"
  if (std::filesystem::exists(json, ec))
    throw FormatError(json.string() +
                      ": tokenizer.json is not supported yet; only byte-level models are");
  // Larger vocabularies are fine (padded embeddings); smaller ones could not embed every
  // byte the tokenizer emits.
  if (vocab_size < ByteTokenizer::kVocabSize)
    throw FormatError(model_dir + ": model vocab_size " + std::to_string(vocab_size) +
                      " is smaller than the " + std::to_string(ByteTokenizer::kVocabSize) +
                      " ids of the byte-level tokenizer");
  return std::make_unique<ByteTokenizer>();
}

}  // namespace retnet
