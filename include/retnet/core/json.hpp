// Parsing untrusted JSON (config.json, model.safetensors.index.json, safetensors headers).
//
// parse_json() builds the document through nlohmann's SAX interface, so that two things the DOM
// parser allows are refused while the text is read: nesting deeper than a small bound (a value
// nested 100 000 deep parses, but destroying or dumping it recurses once per level and
// overflows the stack) and an object key given twice (the DOM parser keeps the last one
// silently: a second tensor entry would replace the first). Its messages, like json_excerpt(),
// quote at most a bounded, escaped part of the text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
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

namespace detail {

// SAX handler that builds an nlohmann::json document, refusing deep nesting and duplicate keys.
// The pointers on `stack_` stay valid: a container only grows while none of its children is open.
class BoundedJsonBuilder {
 public:
  using json = nlohmann::json;

  explicit BoundedJsonBuilder(size_t max_depth) : max_depth_(max_depth) {}

  bool null() { return add(json(nullptr)) != nullptr; }
  bool boolean(bool v) { return add(json(v)) != nullptr; }
  bool number_integer(json::number_integer_t v) { return add(json(v)) != nullptr; }
  bool number_unsigned(json::number_unsigned_t v) { return add(json(v)) != nullptr; }
  bool number_float(json::number_float_t v, const json::string_t&) {
    return add(json(v)) != nullptr;
  }
  bool string(json::string_t& v) { return add(json(std::move(v))) != nullptr; }
  bool binary(json::binary_t& v) { return add(json::binary(std::move(v))) != nullptr; }

  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    if (stack_.back()->contains(k)) {
      error_ =
          "has the key " + name_excerpt(k) + " twice in one object: duplicate keys are refused";
      return false;
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
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

  size_t max_depth_;
  json root_;
  std::vector<json*> stack_;
  std::string key_;
  std::string error_;
};

}  // namespace detail

/// Parses untrusted JSON `text`. Throws FormatError "LABEL: WHAT ..." when it is not valid JSON
/// (strict: one value, trailing whitespace only), nests deeper than `max_depth`, or has an object
/// with a duplicate key. `what` names the part of the file parsed ("header").
inline nlohmann::json parse_json(std::string_view text, const std::string& label,
                                 const std::string& what = "the file",
                                 size_t max_depth = kMaxJsonDepth) {
  detail::BoundedJsonBuilder builder(max_depth);
  const char* begin = text.data();
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(begin, begin + text.size(), &builder);
  } catch (const nlohmann::json::exception& e) {  // not expected from a SAX parse; be safe
    throw FormatError(label + ": " + what + " is not valid JSON (" +
                      detail::escape_bounded(e.what(), 160) + ")");
  }
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

}  // namespace retnet
