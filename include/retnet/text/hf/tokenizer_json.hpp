// Reading tokenizer.json and its companion files: from a regular file of bounded size
// (core/file.hpp), through the library's bounded JSON builder (core/json.hpp: nesting depth
// bounded, duplicate keys refused), except that model.vocab and model.merges are streamed into
// flat arrays instead of a DOM (a DOM of Llama 3's 128000-entry vocabulary object and
// 280000-entry merges array would cost more than all the rest of loading).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"
#include "retnet/core/json.hpp"

namespace retnet::detail::hf {

/// Largest tokenizer.json read (the largest published ones hold a few tens of megabytes).
constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{1} << 30;
/// Largest companion file read (tokenizer_config.json with its chat template, and the like).
constexpr uint64_t kMaxCompanionBytes = uint64_t{64} << 20;

/// tokenizer.json read in one pass: a DOM of everything but model.vocab and model.merges,
/// whose entries are kept in file order.
struct TokenizerJsonParts {
  struct Merge {
    std::string a, b;  // b unused for a merge given as one "a b" string
    bool line = false;
  };
  nlohmann::json root;
  bool has_vocab = false;
  bool has_merges = false;
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<Merge> merges;
};

/// nlohmann's SAX interface: model.vocab and model.merges into TokenizerJsonParts, every other
/// event to BoundedJsonBuilder, which builds the DOM with the rules of parse_json().
class TokenizerJsonSax {
 public:
  using json = nlohmann::json;

  /// `max_bytes`: the memory budget of the DOM and the streamed entries together.
  TokenizerJsonSax(TokenizerJsonParts& out, uint64_t max_bytes)
      : out_(out), dom_(kMaxJsonDepth, max_bytes) {}

  /// Why parsing stopped, once it has: "the file is not valid JSON ...", "key ... must be ...".
  std::string error() const {
    if (!own_error_.empty()) return own_error_;
    return "the file " + (dom_.error().empty() ? std::string("is not valid JSON") : dom_.error());
  }
  json& root() { return dom_.root(); }

  bool null() { return streamed() ? bad_value() : dom_.null(); }
  bool boolean(bool v) { return streamed() ? bad_value() : dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) {
    if (in(Kind::kVocab)) return vocab_entry(v);
    return streamed() ? bad_value() : dom_.number_integer(v);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (in(Kind::kVocab)) return vocab_entry(int64_t(std::min<uint64_t>(v, uint64_t(INT64_MAX))));
    return streamed() ? bad_value() : dom_.number_unsigned(v);
  }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return streamed() ? bad_value() : dom_.number_float(v, s);
  }
  bool binary(json::binary_t& v) { return streamed() ? bad_value() : dom_.binary(v); }

  bool string(json::string_t& v) {
    if (streamed() && !dom_.charge(JsonMemoryEstimate::text(v.size()))) return false;
    if (in(Kind::kMerges)) {
      if (!dom_.charge(kMergeBytes)) return false;
      out_.merges.push_back({std::move(v), std::string(), true});
      return true;
    }
    if (in(Kind::kMergePair)) {
      Frame& pair = frames_.back();
      if (pair.strings >= 2) return bad_merge();
      std::string& part = pair.strings++ == 0 ? out_.merges.back().a : out_.merges.back().b;
      part = std::move(v);
      return true;
    }
    return streamed() ? bad_value() : dom_.string(v);
  }

  bool key(json::string_t& k) {
    if (in(Kind::kVocab)) {
      if (!dom_.charge(kVocabEntryBytes + JsonMemoryEstimate::text(k.size()))) return false;
      key_ = std::move(k);
      return true;
    }
    const bool top = frames_.size() == 1 && frames_.back().kind == Kind::kDom;
    next_ = Kind::kDom;
    if (top && k == "model") next_ = Kind::kModel;
    if (in(Kind::kModel) && k == "vocab") next_ = Kind::kVocab;
    if (in(Kind::kModel) && k == "merges") next_ = Kind::kMerges;
    return dom_.key(k);
  }

  bool start_object(std::size_t n) {
    if (streamed()) return bad_value();
    if (next_ == Kind::kVocab) {
      out_.has_vocab = true;
      return stream(Kind::kVocab);
    }
    return open(next_ == Kind::kModel ? Kind::kModel : Kind::kDom, dom_.start_object(n));
  }
  bool start_array(std::size_t n) {
    if (in(Kind::kMerges)) {
      if (!dom_.charge(kMergeBytes)) return false;
      out_.merges.emplace_back();
      frames_.push_back({Kind::kMergePair, 0});
      return true;
    }
    if (streamed()) return bad_value();
    if (next_ == Kind::kMerges) {
      out_.has_merges = true;
      return stream(Kind::kMerges);
    }
    return open(Kind::kDom, dom_.start_array(n));
  }
  bool end_object() {
    const bool dom = !streamed();
    frames_.pop_back();
    return !dom || dom_.end_object();
  }
  bool end_array() {
    if (in(Kind::kMergePair) && frames_.back().strings != 2) return bad_merge();
    const bool dom = !streamed();
    frames_.pop_back();
    return !dom || dom_.end_array();
  }

  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) {
    return dom_.parse_error(position, token, e);
  }

 private:
  // What a streamed entry costs, with the slack of its growing vector (a string's length is
  // charged on its own).
  static constexpr uint64_t kVocabEntryBytes = 64;
  static constexpr uint64_t kMergeBytes = 96;

  // kDom: a container of the DOM; kModel: the top-level "model" object; the others streamed.
  enum class Kind { kDom, kModel, kVocab, kMerges, kMergePair };
  struct Frame {
    Kind kind;
    size_t strings;  // of a merge pair, so far
  };

  bool in(Kind k) const { return !frames_.empty() && frames_.back().kind == k; }
  bool streamed() const { return in(Kind::kVocab) || in(Kind::kMerges) || in(Kind::kMergePair); }

  bool open(Kind kind, bool opened) {
    next_ = Kind::kDom;
    if (opened) frames_.push_back({kind, 0});
    return opened;
  }
  /// Starts streaming `kind`; its key holds null in the DOM, so that a second one is refused.
  bool stream(Kind kind) {
    next_ = Kind::kDom;
    if (!dom_.null()) return false;
    frames_.push_back({kind, 0});
    return true;
  }
  bool vocab_entry(int64_t id) {
    out_.vocab.emplace_back(std::move(key_), id);
    return true;
  }
  bool bad_value() {
    if (in(Kind::kVocab))
      return fail("key \"model.vocab\" entry " + excerpt(key_) + " must be an integer token id");
    return bad_merge();
  }
  bool bad_merge() {
    const size_t index = out_.merges.size() - (in(Kind::kMerges) ? 0 : 1);
    return fail("key \"model.merges[" + std::to_string(index) +
                "]\" must be \"a b\" or [\"a\", \"b\"]");
  }
  bool fail(std::string message) {
    own_error_ = std::move(message);
    return false;
  }

  TokenizerJsonParts& out_;
  retnet::detail::BoundedJsonBuilder dom_;
  std::vector<Frame> frames_;
  Kind next_ = Kind::kDom;  // what a container opened after the last DOM key would be
  std::string key_;         // the last key of model.vocab
  std::string own_error_;
};

/// Parses the text of a tokenizer.json; `label` names it in messages ("DIR/tokenizer.json").
/// The DOM and the streamed vocabulary and merges together are bounded by
/// json_memory_budget(text.size()), as parse_json() bounds a document.
inline TokenizerJsonParts parse_tokenizer_json(std::string_view text, const std::string& label) {
  TokenizerJsonParts parts;
  TokenizerJsonSax sax(parts, json_memory_budget(text.size()));
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &sax);
  } catch (const nlohmann::json::exception& e) {  // not expected from a SAX parse; be safe
    throw FormatError(label + ": the file is not valid JSON (" + escape_bounded(e.what(), 160) +
                      ")");
  }
  if (!ok) throw FormatError(label + ": " + sax.error());
  parts.root = std::move(sax.root());
  return parts;
}

/// The file `name` of folder `dir` ("DIR/NAME"), the way the loader names it in messages.
inline std::string file_label(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : (std::filesystem::path(dir) / name).string();
}

/// The text of `name` in folder `dir` (a regular file inside the folder, of at most
/// `max_bytes`), or nullopt when there is nothing of that name. A FIFO, a directory, a link
/// leading out of the folder and a link that resolves nowhere (dangling, a loop) are
/// FormatErrors, not a missing file.
inline std::optional<std::string> read_optional_file(const std::string& dir,
                                                     const std::string& name, uint64_t max_bytes) {
  if (!entry_exists(file_label(dir, name))) return std::nullopt;
  return read_regular_file(path_in_folder(dir, name), max_bytes, name);
}

/// Refuses a document whose top level is not an object.
inline void require_object(const nlohmann::json& document, const std::string& label) {
  if (!document.is_object())
    throw FormatError(label + ": the top level must be an object, found " +
                      JsonObject::kind(document));
}

/// Refuses the component `o` of a type this library does not implement.
[[noreturn]] inline void fail_unsupported(const JsonObject& o, const std::string& type,
                                          const std::string& supported) {
  o.fail("type", "= " + excerpt(type) + " is not supported (supported: " + supported + ")");
}

}  // namespace retnet::detail::hf
