// The OpenAI-style surface of `retnet serve`: request bodies read with every field's type and
// range checked (a wrong one is a 400 naming the field), errors as OpenAI's JSON, and the
// completion objects and stream chunks. No HTTP library here: serve.cpp wires it to one.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <retnet/retnet.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/engine.hpp"
#include "serve/sessions.hpp"

namespace retnet::serve {

using json = nlohmann::json;

/// An error answered as {"error": {"message", "type", "param", "code"}} with `status`.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status_, std::string message, std::string param_ = {}, std::string code_ = {})
      : std::runtime_error(std::move(message)),
        status(status_),
        type(type_for(status_)),
        param(std::move(param_)),
        code(std::move(code_)) {}

  static std::string type_for(int status) {
    switch (status) {
      case 400:
      case 413:
        return "invalid_request_error";
      case 401:
        return "authentication_error";
      case 403:
        return "permission_error";
      case 404:
        return "not_found_error";
      case 409:
        return "conflict_error";
      case 429:
      case 503:
        return "server_busy_error";
      default:
        return "server_error";
    }
  }
};

inline json error_json(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return {{"error", err}};
}

/// JSON text; bytes that are not UTF-8 (a byte-level model may produce them) become U+FFFD.
inline std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

inline json parse_body(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object", "", "invalid_json");
  return j;
}

// ---------------------------------------------------------------- typed fields

namespace fields {

inline std::string kind(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

[[noreturn]] inline void wrong(const std::string& name, const std::string& want, const json& v) {
  throw ApiError(400, "'" + name + "' must be " + want + ", got " + kind(v), name, "invalid_type");
}

/// A field that is absent or null reads as nullopt.
inline const json* find(const json& o, const char* name) {
  auto it = o.find(name);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

inline std::optional<int64_t> integer(const json& o, const char* name, int64_t min, int64_t max) {
  const json* v = find(o, name);
  if (!v) return std::nullopt;
  const std::string range =
      "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (!v->is_number_integer()) wrong(name, range, *v);
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw ApiError(400, "'" + std::string(name) + "' must be " + range, name, "out_of_range");
  const int64_t x = v->get<int64_t>();
  if (x < min || x > max)
    throw ApiError(400,
                   "'" + std::string(name) + "' must be " + range + ", got " + std::to_string(x),
                   name, "out_of_range");
  return x;
}

inline std::optional<double> number(const json& o, const char* name, double min, double max,
                                    bool min_open = false) {
  const json* v = find(o, name);
  if (!v) return std::nullopt;
  std::ostringstream range;
  range << "a number in " << (min_open ? "(" : "[") << min << ", " << max << "]";
  if (!v->is_number()) wrong(name, range.str(), *v);
  const double x = v->get<double>();
  if (!(min_open ? x > min : x >= min) || !(x <= max))
    throw ApiError(400, "'" + std::string(name) + "' must be " + range.str() + ", got " + v->dump(),
                   name, "out_of_range");
  return x;
}

inline std::optional<bool> boolean(const json& o, const char* name) {
  const json* v = find(o, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong(name, "a boolean", *v);
  return v->get<bool>();
}

inline std::optional<std::string> string(const json& o, const char* name) {
  const json* v = find(o, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong(name, "a string", *v);
  return v->get<std::string>();
}

/// Token ids in [0, vocab).
inline std::vector<int32_t> token_ids(const json& v, const std::string& name, int64_t vocab) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const auto& t : v) {
    if (!t.is_number_integer()) wrong(name, "an array of integer token ids", t);
    const bool in_range = t.is_number_unsigned()
                              ? t.get<uint64_t>() < uint64_t(vocab)
                              : t.get<int64_t>() >= 0 && t.get<int64_t>() < vocab;
    if (!in_range)
      throw ApiError(400,
                     "'" + name + "' holds token id " + t.dump() + ", outside [0, " +
                         std::to_string(vocab) + ")",
                     name, "invalid_token");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

}  // namespace fields

// ---------------------------------------------------------------- completions

struct Limits {
  int64_t max_tokens = 4096;  // the most a request may ask for
  size_t max_stop = 4, max_stop_bytes = 256;
};

struct CompletionRequest {
  std::optional<std::string> text;  // the prompt as text, or
  std::vector<int32_t> ids;         // as token ids
  int64_t max_tokens = 16;
  SamplerParams sampler;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  int logprobs = -1;
  std::string session;
};

/// Reads a /v1/completions body. Defaults follow OpenAI: temperature 1, top_p 1, max_tokens 16;
/// the extensions top_k, repetition_penalty (1 = off), repeat_last_n and session are off when
/// absent. Without a seed the request draws one.
inline CompletionRequest parse_completion(const json& body, const Limits& limits, int64_t vocab) {
  using namespace fields;
  CompletionRequest r;
  const json* prompt = find(body, "prompt");
  if (!prompt) throw ApiError(400, "'prompt' is required (text or token ids)", "prompt", "missing");
  const json* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
    p = &(*p)[0];  // a batch of one prompt
  if (p->is_string()) {
    r.text = p->get<std::string>();
  } else if (p->is_array() && (p->empty() || (*p)[0].is_number_integer())) {
    r.ids = token_ids(*p, "prompt", vocab);
  } else if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    throw ApiError(400, "one prompt per request: 'prompt' holds " + std::to_string(p->size()),
                   "prompt", "unsupported");
  } else {
    wrong("prompt", "a string or an array of token ids", *p);
  }
  if (const json* m = find(body, "model"); m && !m->is_string()) wrong("model", "a string", *m);
  if (auto n = integer(body, "max_tokens", 0, std::numeric_limits<int64_t>::max())) {
    if (*n > limits.max_tokens)
      throw ApiError(400,
                     "'max_tokens' is " + std::to_string(*n) + "; this server allows at most " +
                         std::to_string(limits.max_tokens),
                     "max_tokens", "max_tokens_too_large");
    r.max_tokens = *n;
  }
  r.sampler.temperature = static_cast<float>(number(body, "temperature", 0, 2).value_or(1.0));
  r.sampler.top_p = static_cast<float>(number(body, "top_p", 0, 1, true).value_or(1.0));
  r.sampler.top_k = static_cast<int>(integer(body, "top_k", 0, vocab).value_or(0));
  r.sampler.repeat_penalty =
      static_cast<float>(number(body, "repetition_penalty", SamplerParams::kMinRepeatPenalty,
                                SamplerParams::kMaxRepeatPenalty)
                             .value_or(1.0));
  r.sampler.repeat_last_n = static_cast<int>(integer(body, "repeat_last_n", 0, 256).value_or(64));
  if (auto seed = integer(body, "seed", std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max()))
    r.sampler.seed = static_cast<uint64_t>(*seed);
  else
    r.sampler.seed = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();

  if (const json* s = find(body, "stop")) {
    if (s->is_string()) {
      r.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (const auto& x : *s) {
        if (!x.is_string()) wrong("stop", "a string or an array of strings", x);
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      wrong("stop", "a string or an array of strings", *s);
    }
    if (r.stop.size() > limits.max_stop)
      throw ApiError(400,
                     "'stop' holds " + std::to_string(r.stop.size()) + " strings; at most " +
                         std::to_string(limits.max_stop),
                     "stop", "out_of_range");
    for (const auto& x : r.stop)
      if (x.size() > limits.max_stop_bytes)
        throw ApiError(
            400,
            "a 'stop' string is longer than " + std::to_string(limits.max_stop_bytes) + " bytes",
            "stop", "out_of_range");
  }
  r.stream = boolean(body, "stream").value_or(false);
  if (const json* so = find(body, "stream_options")) {
    if (!so->is_object()) wrong("stream_options", "an object", *so);
    r.include_usage = boolean(*so, "include_usage").value_or(false);
  }
  r.logprobs = static_cast<int>(integer(body, "logprobs", 0, 5).value_or(-1));
  if (auto id = string(body, "session")) {
    if (!valid_session_id(*id))
      throw ApiError(400, "'session' must match [A-Za-z0-9_-]{1,64}", "session",
                     "invalid_session_id");
    r.session = *id;
  }
  // Fields of the OpenAI API this server does not implement: refused unless neutral.
  if (integer(body, "n", 1, std::numeric_limits<int64_t>::max()).value_or(1) != 1)
    throw ApiError(400, "'n' must be 1: one completion per request", "n", "unsupported");
  if (integer(body, "best_of", 1, std::numeric_limits<int64_t>::max()).value_or(1) != 1)
    throw ApiError(400, "'best_of' must be 1", "best_of", "unsupported");
  if (boolean(body, "echo").value_or(false))
    throw ApiError(400, "'echo' is not supported", "echo", "unsupported");
  if (!string(body, "suffix").value_or("").empty())
    throw ApiError(400, "'suffix' is not supported", "suffix", "unsupported");
  for (const char* penalty : {"presence_penalty", "frequency_penalty"})
    if (number(body, penalty, -2, 2).value_or(0) != 0)
      throw ApiError(400,
                     std::string("'") + penalty + "' is not supported (use repetition_penalty)",
                     penalty, "unsupported");
  if (const json* bias = find(body, "logit_bias"); bias && !(bias->is_object() && bias->empty()))
    throw ApiError(400, "'logit_bias' is not supported", "logit_bias", "unsupported");
  return r;
}

// ---------------------------------------------------------------- responses

/// OpenAI's legacy completions logprobs: tokens, token_logprobs, top_logprobs, text_offset.
inline json logprobs_json(const std::vector<TokenLogprob>& entries, const Tokenizer& tokenizer,
                          int top) {
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  for (const auto& e : entries) {
    tokens.push_back(tokenizer.decode_token(e.token));
    values.push_back(e.logprob);
    offsets.push_back(e.offset);
    if (top > 0) {
      json t = json::object();
      for (const auto& [id, lp] : e.top) t[tokenizer.decode_token(id)] = lp;
      tops.push_back(t);
    }
  }
  return {{"tokens", tokens},
          {"token_logprobs", values},
          {"top_logprobs", top > 0 ? tops : json(nullptr)},
          {"text_offset", offsets}};
}

inline json usage_json(const JobResult& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens}};
}

inline json timings_json(const JobResult& r) {
  const double decode_ms = r.total_ms - r.first_token_ms;
  return {{"queued_ms", r.queued_ms},
          {"prompt_ms", r.prompt_ms},
          {"first_token_ms", r.first_token_ms},
          {"total_ms", r.total_ms},
          {"decode_tokens_per_s", r.completion_tokens > 1 && decode_ms > 0
                                      ? (r.completion_tokens - 1) / decode_ms * 1e3
                                      : 0.0}};
}

}  // namespace retnet::serve
