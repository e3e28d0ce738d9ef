// Parsing untrusted JSON (config.json, model.safetensors.index.json, safetensors headers).
//
// parse_json() builds the document through nlohmann's SAX interface, so that three things the
// DOM parser allows are refused while the text is read: nesting deeper than a small bound (a
// value nested 100 000 deep parses, but destroying or dumping it recurses once per level and
// overflows the stack), an object key given twice (the DOM parser keeps the last one silently:
// a second tensor entry would replace the first), and a document whose parsed form would take
// more memory than a budget proportional to the text (a DOM costs up to 30 times its text:
// "[[],[],...]" spends 56 bytes on every 3). Its messages, like json_excerpt(), quote at most a
// bounded, escaped part of the text.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"

namespace retnet {

/// Deepest nesting of arrays and objects parse_json() accepts by default. The files it reads
/// need 3 (a safetensors header: object / entry / shape); 64 leaves room and keeps every
/// recursive walk of the document (dump, destruction) shallow.
constexpr size_t kMaxJsonDepth = 64;

/// The memory budget of a parsed document, in bytes as estimated by JsonMemoryEstimate: a
/// constant plus a multiple of the text's size, so that text and document together take at most
/// three times the text plus 64 MiB. Real files stay well inside: a safetensors header of
/// 100 000 tensors (10 MB of text) is estimated at 61 MB, the index of a checkpoint of 100 000
/// tensors in 1 000 shards (8 MB) at 29 MB, everything of Llama 3's tokenizer.json (9 MB) with
/// its streamed vocabulary and merges at 37 MB.
constexpr uint64_t kJsonMemoryBaseBytes = uint64_t{64} << 20;
constexpr uint64_t kJsonMemoryBytesPerTextByte = 2;

/// The default budget of parse_json() for a text of `text_bytes`.
constexpr uint64_t json_memory_budget(uint64_t text_bytes) {
  return kJsonMemoryBaseBytes + kJsonMemoryBytesPerTextByte * text_bytes;
}

/// What a parsed value costs in memory, as nlohmann::json on a 64-bit libstdc++ lays it out
/// (measured: within 10 % for arrays, objects and strings), so that a budget can be checked
/// while the text is read, before the memory is taken.
struct JsonMemoryEstimate {
  static constexpr uint64_t kValue = 24;   // the 16-byte value, with the slack of a growing array
  static constexpr uint64_t kString = 48;  // plus text(length)
  static constexpr uint64_t kArray = 32;
  static constexpr uint64_t kObject = 64;
  static constexpr uint64_t kKey = 80;  // an object member's node, plus text(key length)
  /// The heap block of a string's characters: none up to 15 bytes (kept in the string itself).
  static constexpr uint64_t text(uint64_t length) { return length > 15 ? length + 32 : 0; }
};

namespace detail {

// SAX handler that builds an nlohmann::json document, refusing deep nesting, duplicate keys and
// a document whose estimated memory (JsonMemoryEstimate) exceeds `max_bytes`.
// The pointers on `stack_` stay valid: a container only grows while none of its children is open.
class BoundedJsonBuilder {
 public:
  using json = nlohmann::json;
  using Cost = JsonMemoryEstimate;

  BoundedJsonBuilder(size_t max_depth, uint64_t max_bytes)
      : max_depth_(max_depth), max_bytes_(max_bytes) {}

  bool null() { return charge(Cost::kValue) && add(json(nullptr)) != nullptr; }
  bool boolean(bool v) { return charge(Cost::kValue) && add(json(v)) != nullptr; }
  bool number_integer(json::number_integer_t v) {
    return charge(Cost::kValue) && add(json(v)) != nullptr;
  }
  bool number_unsigned(json::number_unsigned_t v) {
    return charge(Cost::kValue) && add(json(v)) != nullptr;
  }
  bool number_float(json::number_float_t v, const json::string_t&) {
    return charge(Cost::kValue) && add(json(v)) != nullptr;
  }
  bool string(json::string_t& v) {
    return charge(Cost::kValue + Cost::kString + Cost::text(v.size())) &&
           add(json(std::move(v))) != nullptr;
  }
  bool binary(json::binary_t& v) {
    return charge(Cost::kValue + Cost::kString + Cost::text(v.size())) &&
           add(json::binary(std::move(v))) != nullptr;
  }

  bool start_object(std::size_t) {
    return charge(Cost::kValue + Cost::kObject) && open(json::object());
  }
  bool start_array(std::size_t) {
    return charge(Cost::kValue + Cost::kArray) && open(json::array());
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  /// Adds `bytes` to the estimate; false, with the error set, once it exceeds the budget. The
  /// tokenizer.json reader charges the entries it streams past the DOM here too.
  bool charge(uint64_t bytes) {
    bytes_ += bytes;
    if (bytes_ <= max_bytes_) return true;
    error_ = "would take more than " + mib(max_bytes_) +
             " of memory once parsed (the limit for a text of this size: " +
             std::to_string(kJsonMemoryBaseBytes >> 20) + " MiB + " +
             std::to_string(kJsonMemoryBytesPerTextByte) +
             " bytes per byte of text, values counted as in FORMATS.md, \"JSON limits\")";
    return false;
  }
  /// The memory estimated so far, in bytes.
  uint64_t bytes() const { return bytes_; }

  bool key(json::string_t& k) {
    if (!charge(Cost::kKey + Cost::text(k.size()))) return false;
    if (stack_.back()->contains(k)) {
      error_ =
          "has the key " + name_excerpt(k) + " twice in one object: duplicate keys are refused";
      return false;
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) {
    if (e.id == 406) {  // a number beyond a double's range ("1e999"): name where it stands
      overflow_key_ = !stack_.empty() && stack_.back()->is_object() ? key_ : "";
      overflow_ = true;
      error_ = "has a number too large for a double (" + detail::escape_bounded(token, 40) + ")" +
               (overflow_key_.empty() ? "" : " as the value of key " + name_excerpt(overflow_key_));
      return false;
    }
    // e.what() may quote the token read so far, of any length: keep a bounded excerpt.
    std::string what = e.what();
    const size_t tag = what.find("] ");
    if (what.rfind("[json.exception.", 0) == 0 && tag != std::string::npos) what.erase(0, tag + 2);
    error_ = "is not valid JSON (at byte " + std::to_string(position) + ": " +
             detail::escape_bounded(what, 160) + ")";
    return false;
  }

  json& root() { return root_; }
  const std::string& error() const { return error_; }
  /// Whether the parse stopped at a number too large for a double, and the object key whose
  /// value it is (empty inside an array or at the top).
  bool overflow() const { return overflow_; }
  const std::string& overflow_key() const { return overflow_key_; }

 private:
  json* add(json&& value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(value);
    return &slot;
  }

  bool open(json&& container) {
    if (stack_.size() >= max_depth_) {
      error_ = "nests arrays and objects deeper than " + std::to_string(max_depth_) +
               " levels: expected at most " + std::to_string(max_depth_);
      return false;
    }
    stack_.push_back(add(std::move(container)));
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  static std::string mib(uint64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return text;
  }

  size_t max_depth_;
  uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  json root_;
  std::vector<json*> stack_;
  std::string key_;
  std::string error_;
  bool overflow_ = false;
  std::string overflow_key_;
};

}  // namespace detail

/// parse_json() met a number too large for a double ("1e999"); key() is the object key whose
/// value it is (empty inside an array or at the top), so that a server can name the field.
class JsonNumberOverflow : public FormatError {
 public:
  JsonNumberOverflow(std::string key, const std::string& message)
      : FormatError(message), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

/// Parses untrusted JSON `text`. Throws FormatError "LABEL: WHAT ..." when it is not valid JSON
/// (strict: one value, trailing whitespace only; JsonNumberOverflow for a number too large for
/// a double), nests deeper than `max_depth`, has an object with a duplicate key, or would take more
/// than json_memory_budget(text.size()) bytes once parsed ("LABEL: WHAT would take more than 95.4
/// MiB of memory once parsed ..."), refused while it is read. `what` names the part of the file
/// parsed ("header").
inline nlohmann::json parse_json(std::string_view text, const std::string& label,
                                 const std::string& what = "the file",
                                 size_t max_depth = kMaxJsonDepth) {
  detail::BoundedJsonBuilder builder(max_depth, json_memory_budget(text.size()));
  const char* begin = text.data();
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(begin, begin + text.size(), &builder);
  } catch (const nlohmann::json::exception& e) {  // not expected from a SAX parse; be safe
    throw FormatError(label + ": " + what + " is not valid JSON (" +
                      detail::escape_bounded(e.what(), 160) + ")");
  }
  if (!ok && builder.overflow())
    throw JsonNumberOverflow(builder.overflow_key(), label + ": " + what + " " + builder.error());
  if (!ok) {
    const std::string error = builder.error().empty() ? "is not valid JSON" : builder.error();
    throw FormatError(label + ": " + what + " " + error);
  }
  return std::move(builder.root());
}

namespace detail {

// Compact JSON of `value`, stopping soon after `out` reaches `budget` bytes; strings escaped by
// escape_bounded. Recursion is as deep as the document, which parse_json() bounds.
inline void write_json_bounded(const nlohmann::json& value, std::string& out, size_t budget) {
  if (out.size() > budget) return;
  if (value.is_array() || value.is_object()) {
    const bool object = value.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (out.size() > budget) return;
      if (!first) out += ',';
      first = false;
      if (object) out += "\"" + escape_bounded(it.key(), budget) + "\":";
      write_json_bounded(it.value(), out, budget);
    }
    out += object ? '}' : ']';
  } else if (value.is_string()) {
    out += "\"" + escape_bounded(value.get_ref<const std::string&>(), budget) + "\"";
  } else {
    out += value.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  }
}

}  // namespace detail

/// A JSON value from an untrusted document, for an error message: compact, escaped, cut after
/// `max_bytes` bytes with "...". The work is bounded by `max_bytes`, not by the value's size.
inline std::string json_excerpt(const nlohmann::json& value, size_t max_bytes = 40) {
  std::string out;
  detail::write_json_bounded(value, out, max_bytes);
  if (out.size() > max_bytes) out = out.substr(0, max_bytes) + "...";
  return out;
}

/// A field of an untrusted JSON document is missing, has the wrong type or is out of range.
/// field() is its path in the document ("pre_tokenizer.pretokenizers[2].pattern"), so that the
/// server can name it in a 400 reply and a loader in its FormatError.
class JsonFieldError : public FormatError {
 public:
  /// What is wrong with the field, for callers that answer each differently (the server's
  /// error codes): it is absent, its value has the wrong JSON type, or the value is refused.
  enum class Problem { kMissing, kWrongType, kInvalidValue };

  JsonFieldError(std::string field, const std::string& message,
                 Problem problem = Problem::kInvalidValue)
      : FormatError(message), field_(std::move(field)), problem_(problem) {}
  const std::string& field() const { return field_; }
  Problem problem() const { return problem_; }

 private:
  std::string field_;
  Problem problem_;
};

/// The one typed reader of untrusted JSON objects (config.json, tokenizer.json, request bodies).
/// Every read checks the type and, for numbers, the range, and fails with a JsonFieldError whose
/// message is "LABEL: key "PATH" PROBLEM", LABEL being the file (empty for a request body) and
/// PATH the field's place in the document. An absent key and a null value read the same.
class JsonObject {
 public:
  using json = nlohmann::json;
  using Problem = JsonFieldError::Problem;

  /// `value` must be an object; `label` prefixes every message, `path` is where `value` sits.
  JsonObject(const json& value, std::string label, std::string path = "")
      : object_(value), label_(std::move(label)), path_(std::move(path)) {
    if (!object_.is_object())
      fail_at(path_.empty() ? "the document" : path_, "must be an object, found " + kind(object_),
              Problem::kWrongType);
  }

  const json& value() const { return object_; }
  const std::string& label() const { return label_; }
  /// The path of `key` inside this object ("decoder.type").
  std::string path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  /// The value of `key`, or nullptr when it is absent or null.
  const json* find(const std::string& key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  const json& require(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail_missing(path(key));
    return *v;
  }

  JsonObject object(const std::string& key) const { return {require(key), label_, path(key)}; }
  std::optional<JsonObject> optional_object(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    return JsonObject(*v, label_, path(key));
  }
  /// Element `index` of the array `array` (read from this object) as an object.
  JsonObject element(const std::string& key, const json& array, size_t index) const {
    return {array.at(index), label_, path(key) + "[" + std::to_string(index) + "]"};
  }
  const json& array(const std::string& key) const {
    const json& v = require(key);
    if (!v.is_array()) fail(key, "must be an array, found " + kind(v), Problem::kWrongType);
    return v;
  }

  std::string string(const std::string& key) const { return string_value(require(key), key); }
  std::string string(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    return v ? string_value(*v, key) : fallback;
  }
  std::optional<std::string> optional_string(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    return string_value(*v, key);
  }

  bool boolean(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean())
      fail(key, "must be true or false, found " + json_excerpt(*v), Problem::kWrongType);
    return v->get<bool>();
  }

  /// An integer in [lo, hi]; a value that does not fit in int64 is out of range, never wrapped.
  int64_t integer(const std::string& key, int64_t lo = std::numeric_limits<int64_t>::min(),
                  int64_t hi = std::numeric_limits<int64_t>::max()) const {
    return integer_value(require(key), key, lo, hi);
  }
  std::optional<int64_t> optional_integer(const std::string& key,
                                          int64_t lo = std::numeric_limits<int64_t>::min(),
                                          int64_t hi = std::numeric_limits<int64_t>::max()) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    return integer_value(*v, key, lo, hi);
  }

  /// Element `index` of the array `key` as an integer in [lo, hi]; its path is "KEY[INDEX]".
  int64_t integer_element(const std::string& key, size_t index,
                          int64_t lo = std::numeric_limits<int64_t>::min(),
                          int64_t hi = std::numeric_limits<int64_t>::max()) const {
    return integer_value(array(key).at(index), key + "[" + std::to_string(index) + "]", lo, hi);
  }

  /// A finite number in [lo, hi] (integers accepted).
  double number(const std::string& key, double lo = -std::numeric_limits<double>::max(),
                double hi = std::numeric_limits<double>::max()) const {
    return number_value(require(key), key, lo, hi);
  }
  std::optional<double> optional_number(const std::string& key,
                                        double lo = -std::numeric_limits<double>::max(),
                                        double hi = std::numeric_limits<double>::max()) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    return number_value(*v, key, lo, hi);
  }

  /// Fails naming `key` of this object: "LABEL: key "PATH" MESSAGE".
  [[noreturn]] void fail(const std::string& key, const std::string& message,
                         Problem problem = Problem::kInvalidValue) const {
    fail_at(path(key), message, problem);
  }

  /// What a JSON value is, for messages: "a string", "an integer", "null", ...
  static std::string kind(const json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_integer()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
  }

 private:
  [[noreturn]] void fail_at(const std::string& field, const std::string& message,
                            Problem problem) const {
    const std::string prefix = label_.empty() ? "" : label_ + ": ";
    throw JsonFieldError(
        field, prefix + "key \"" + detail::escape_bounded(field, 120) + "\" " + message, problem);
  }
  [[noreturn]] void fail_missing(const std::string& field) const {
    const std::string prefix = label_.empty() ? "" : label_ + ": ";
    throw JsonFieldError(
        field, prefix + "missing required key \"" + detail::escape_bounded(field, 120) + "\"",
        Problem::kMissing);
  }
  std::string string_value(const json& v, const std::string& key) const {
    if (!v.is_string())
      fail(key, "must be a string, found " + json_excerpt(v), Problem::kWrongType);
    return v.get<std::string>();
  }
  int64_t integer_value(const json& v, const std::string& key, int64_t lo, int64_t hi) const {
    const bool bounded =
        lo != std::numeric_limits<int64_t>::min() || hi != std::numeric_limits<int64_t>::max();
    const std::string range =
        bounded ? " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" : "";
    if (!v.is_number_integer())
      fail(key, "must be an integer" + range + ", found " + json_excerpt(v), Problem::kWrongType);
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(key, "= " + json_excerpt(v) + " does not fit in 64-bit signed integers");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) fail(key, "= " + std::to_string(x) + " is outside" + range.substr(3));
    return x;
  }
  double number_value(const json& v, const std::string& key, double lo, double hi) const {
    if (!v.is_number())
      fail(key, "must be a number, found " + json_excerpt(v), Problem::kWrongType);
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      fail(key, "= " + json_excerpt(v) + " is outside [" + json(lo).dump() + ", " +
                    json(hi).dump() + "]");
    return x;
  }

  const json& object_;
  std::string label_;
  std::string path_;
};

}  // namespace retnet
