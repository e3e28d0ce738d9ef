// HfTokenizer: a Hugging Face tokenizer.json with a BPE model, as the `tokenizers` library
// (Rust, 0.22) encodes and decodes it: byte-level BPE (GPT-2, GPT-NeoX without NFC, Llama 3)
// and SentencePiece-style BPE with byte fallback (Llama 2, Mistral). docs/TOKENIZERS.md lists
// the supported components, what is refused, and the choices made. This header assembles the
// pipeline from the components of this folder, one file each.
//
// Pipeline of encode(text), as in Hugging Face's TokenizerImpl::encode:
//   1. added tokens with normalized=false are cut out of the raw text (added_vocabulary.hpp);
//   2. every other piece is normalized (normalizers.hpp), then added tokens with
//      normalized=true are cut out of it;
//   3. the remaining pieces are pre-tokenized into words (pre_tokenizers.hpp);
//   4. each word goes through the BPE model (bpe_model.hpp, bpe_word.hpp);
//   5. the post-processor adds its special tokens, then truncation and padding apply when
//      tokenizer.json asks for them (post_processor.hpp).
// decode runs the decoders (decoders.hpp). BOS and EOS come from the companion files
// (special_tokens.hpp).
//
// Needs PCRE2 (8-bit library, UTF + Unicode properties): link RetNet::tokenizers, or include
// retnet/tokenizers.hpp. The core library (retnet/retnet.hpp) does not include this header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"
#include "retnet/core/json.hpp"
#include "retnet/text/hf/added_vocabulary.hpp"
#include "retnet/text/hf/bpe_model.hpp"
#include "retnet/text/hf/bpe_word.hpp"
#include "retnet/text/hf/byte_level.hpp"
#include "retnet/text/hf/decoders.hpp"
#include "retnet/text/hf/normalizers.hpp"
#include "retnet/text/hf/post_processor.hpp"
#include "retnet/text/hf/pre_tokenizers.hpp"
#include "retnet/text/hf/special_tokens.hpp"
#include "retnet/text/hf/token_index.hpp"
#include "retnet/text/hf/tokenizer_json.hpp"
#include "retnet/text/hf/utf8.hpp"
#include "retnet/text/tokenizer.hpp"

namespace retnet {

/// A Hugging Face tokenizer.json with a BPE model. encode() gives the ids of Hugging Face's
/// `tokenizer.encode(text)` (default special tokens added); decode() those of
/// `decode(ids, skip_special_tokens=True)` without clean-up of tokenization spaces, except that
/// bytes which do not form UTF-8 are returned as they are rather than as U+FFFD. Immutable
/// after loading: encode and decode may run on several threads at once.
class HfTokenizer : public Tokenizer {
 public:
  /// Reads `dir`/tokenizer.json and, where present, tokenizer_config.json,
  /// special_tokens_map.json and generation_config.json beside it: regular files inside the
  /// folder (a FIFO or a directory of that name, a link leading out of the folder and a link
  /// that resolves nowhere are FormatErrors).
  static HfTokenizer load(const std::string& dir) {
    namespace hf = detail::hf;
    HfTokenizerFiles files;
    files.tokenizer_config =
        hf::read_optional_file(dir, "tokenizer_config.json", hf::kMaxCompanionBytes);
    files.special_tokens_map =
        hf::read_optional_file(dir, "special_tokens_map.json", hf::kMaxCompanionBytes);
    files.generation_config =
        hf::read_optional_file(dir, "generation_config.json", hf::kMaxCompanionBytes);
    const std::string json = read_regular_file(path_in_folder(dir, "tokenizer.json"),
                                               hf::kMaxTokenizerJsonBytes, "tokenizer.json");
    return from_json(json, files, hf::file_label(dir, "tokenizer.json"), dir);
  }

  /// Builds the tokenizer from the text of a tokenizer.json (and of its companion files).
  /// `source` names the file in error messages; `dir` names the folder for the companions.
  static HfTokenizer from_json(std::string_view tokenizer_json, const HfTokenizerFiles& files = {},
                               const std::string& source = "tokenizer.json",
                               const std::string& dir = "") {
    HfTokenizer t;
    t.parse(tokenizer_json, source);
    const auto token_to_id = [&t](const std::string& token) { return t.token_to_id(token); };
    const detail::hf::SpecialTokens special =
        detail::hf::read_special_tokens(files, dir, token_to_id, t.tokens_, t.post_);
    t.bos_id_ = special.bos;
    t.eos_ids_ = special.eos;
    t.check_added_ids(dir.empty() ? std::string("tokenizer.json")
                                  : detail::hf::file_label(dir, "tokenizer.json"));
    return t;
  }

  std::vector<int32_t> encode(std::string_view text) const override { return encode(text, true); }

  /// encode with or without the post-processor's special tokens (add_special_tokens).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const {
    const size_t bad = detail::hf::first_invalid_utf8(text);
    const bool valid_utf8 = bad == std::string_view::npos;
    if (!valid_utf8 && !accepts_invalid_utf8_)
      throw InvalidArgument("tokenizer: the text is not valid UTF-8 (byte " + std::to_string(bad) +
                            "), and this tokenizer has neither byte-level BPE nor byte fallback");
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 8);
    encode_text(text, valid_utf8, ids);
    const std::vector<int32_t>& prefix = post_.prefix_ids;
    const std::vector<int32_t>& suffix = post_.suffix_ids;
    if (truncation_)
      truncation_->apply(ids, add_special_tokens ? prefix.size() + suffix.size() : 0);
    if (add_special_tokens) {
      ids.insert(ids.begin(), prefix.begin(), prefix.end());
      ids.insert(ids.end(), suffix.begin(), suffix.end());
    }
    if (padding_) padding_->apply(ids);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    return decoder_.run(token_strings(ids), false, false);
  }

  /// decode as Hugging Face returns it, a Rust String: bytes that do not form UTF-8 become
  /// U+FFFD (ByteFallback: one per byte of the run; ByteLevel: one per ill-formed part). The
  /// same as decode whenever that gives valid UTF-8.
  std::string decode_lossy(const std::vector<int32_t>& ids) const {
    return decoder_.run(token_strings(ids), false, true);
  }

  /// The token's bytes as they read after earlier text: the decoder without the steps that
  /// only apply at the start of a text (Strip's start, Metaspace's first-token rule).
  std::string decode_token(int32_t id) const override {
    check_id(id);
    if (tokens_.special[size_t(id)]) return "";
    return decoder_.run({tokens_.text[size_t(id)]}, true, false);
  }

  int64_t vocab_size() const override { return int64_t(tokens_.size()); }
  bool has_id(int32_t id) const override { return tokens_.has(id); }
  std::optional<int32_t> eos_id() const override {
    return eos_ids_.empty() ? std::nullopt : std::optional<int32_t>(eos_ids_.front());
  }
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  bool is_special(int32_t id) const override { return tokens_.is_special(id); }

  /// The id of a token given as tokenizer.json writes it (added tokens first).
  std::optional<int32_t> token_to_id(std::string_view token) const {
    const std::string text(token);
    if (const auto id = added_.id(text)) return id;
    return model_.token_id(text);
  }

  /// The token string tokenizer.json gives for `id` (throws InvalidArgument if there is none).
  const std::string& id_to_token(int32_t id) const {
    check_id(id);
    return tokens_.text[size_t(id)];
  }

  /// The ids encode adds around the text (from the post-processor and tokenizer_config.json).
  const std::vector<int32_t>& prefix_ids() const { return post_.prefix_ids; }
  const std::vector<int32_t>& suffix_ids() const { return post_.suffix_ids; }
  /// Byte-level BPE (ByteLevel pre-tokenizer) and byte fallback: either lets encode take any
  /// bytes, valid UTF-8 or not.
  bool byte_level() const { return model_.byte_level; }
  bool byte_fallback() const { return model_.byte_fallback; }

 private:
  HfTokenizer() = default;

  void parse(std::string_view text, const std::string& source) {
    namespace hf = detail::hf;
    hf::TokenizerJsonParts parts = hf::parse_tokenizer_json(text, source);
    hf::require_object(parts.root, source);
    const JsonObject root(parts.root, source);
    if (const auto version = root.optional_string("version"); version && *version != "1.0")
      root.fail("version", "= " + excerpt(*version) + " is not supported (expected \"1.0\")");
    pre_tokenizer_.parse(root);  // first: the model needs to know whether it is byte-level
    model_ = hf::BpeModel::load(root.object("model"), parts, pre_tokenizer_.byte_level(), tokens_);
    normalizer_.parse(root);
    added_.parse(root, model_, normalizer_, tokens_);
    post_.parse(root);
    decoder_.parse(root);
    truncation_ = hf::Truncation::parse(root);
    padding_ = hf::Padding::parse(root);
    accepts_invalid_utf8_ = model_.byte_level || model_.byte_fallback;
  }

  /// Every id encode can produce must be a token: the template's and padding's too.
  void check_added_ids(const std::string& label) const {
    for (const std::vector<int32_t>* list : {&post_.prefix_ids, &post_.suffix_ids})
      for (int32_t id : *list)
        if (!tokens_.has(id))
          throw FormatError(label + ": post_processor adds id " + std::to_string(id) +
                            ", which is not a token");
    if (padding_ && !tokens_.has(padding_->id))
      throw FormatError(label + ": key \"padding.pad_id\" = " + std::to_string(padding_->id) +
                        " is not a token");
  }

  void encode_text(std::string_view text, bool valid_utf8, std::vector<int32_t>& out) const {
    detail::hf::WordEncoder words(model_);
    detail::hf::MatchBudget budget(text.size());  // for every pattern match of this text
    const auto encode_piece = [&](std::string_view piece, bool at_start) {
      pre_tokenizer_.run(piece, at_start, valid_utf8, budget,
                         [&](std::string_view word) { words.encode(word, out); });
    };
    added_.split(text, false, true, valid_utf8, out, [&](std::string_view piece, bool at_start) {
      if (normalizer_.empty()) {
        added_.split(piece, true, at_start, valid_utf8, out, encode_piece);
      } else {
        const std::string normalized = normalizer_.normalize(piece, valid_utf8, budget);
        if (normalized.size() > piece.size()) budget.grant(normalized.size() - piece.size());
        added_.split(normalized, true, at_start, valid_utf8, out, encode_piece);
      }
    });
  }

  /// The token strings of `ids`, special tokens left out.
  std::vector<std::string> token_strings(const std::vector<int32_t>& ids) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      check_id(id);
      if (!tokens_.special[size_t(id)]) tokens.push_back(tokens_.text[size_t(id)]);
    }
    return tokens;
  }

  void check_id(int32_t id) const {
    if (tokens_.has(id)) return;
    const bool in_range = id >= 0 && size_t(id) < tokens_.size();
    throw InvalidArgument(
        "tokenizer: token id " + std::to_string(id) + " is not in the vocabulary" +
        (in_range ? std::string() : " (ids are below " + std::to_string(tokens_.size()) + ")"));
  }

  detail::hf::TokenIndex tokens_;
  detail::hf::BpeModel model_;
  detail::hf::AddedVocabulary added_;
  detail::hf::Normalizer normalizer_;
  detail::hf::PreTokenizer pre_tokenizer_;
  detail::hf::Decoder decoder_;
  detail::hf::PostProcessor post_;
  std::optional<detail::hf::Truncation> truncation_;
  std::optional<detail::hf::Padding> padding_;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
  bool accepts_invalid_utf8_ = false;
};

/// The tokenizer of the folder `dir`: its tokenizer.json (with the companion files) when it
/// has one, else the byte tokenizer. Needs no model: for a folder holding only tokenizer files.
/// Bytes only when the folder exists and has no entry named tokenizer.json: a folder that does
/// not exist (or is a file), one that cannot be examined, and a tokenizer.json link that leads
/// nowhere are FormatErrors, since running on bytes instead would silently give other ids.
inline std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  require_folder(dir);
  if (entry_exists(detail::hf::file_label(dir, "tokenizer.json")))
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
