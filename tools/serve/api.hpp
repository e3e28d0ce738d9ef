// The OpenAI-style surface of `retnet serve`: request bodies read with retnet::JsonObject (every
// field's type and range checked; a wrong one is a 400 naming the field), errors as OpenAI's
// JSON, and the objects the routes answer with. No HTTP here: the routes hand these to
// serve/http.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <retnet/core/json.hpp>
#include <retnet/retnet.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "serve/engine.hpp"
#include "serve/session_store.hpp"

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
      case 415:
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

// ---------------------------------------------------------------- reading requests

/// A field read wrong, as the 400 that names it.
inline ApiError field_error(const JsonFieldError& e) {
  using Problem = JsonFieldError::Problem;
  const char* code = e.problem() == Problem::kMissing     ? "missing"
                     : e.problem() == Problem::kWrongType ? "invalid_type"
                                                          : "out_of_range";
  return ApiError(400, e.what(), e.field(), code);
}

/// A number beyond a double's range ("max_tokens": 1e999) as the 400 that names its field when
/// it is an object member, else the request.
inline ApiError number_overflow(const JsonNumberOverflow& e) {
  const std::string what = e.key().empty() ? std::string("a number in the request")
                                           : "'" + detail::escape_bounded(e.key(), 60) + "'";
  return ApiError(400, what + " overflows a double (at most about 1.8e308)", e.key(),
                  "out_of_range");
}

/// Reads a request body with `read(const JsonObject&)`. The body is parsed with the bounds of
/// retnet::parse_json (nesting depth, no duplicate keys) and must be an object.
template <class Read>
auto read_body(const std::string& body, Read&& read) {
  json j;
  try {
    j = parse_json(body, "request", "the body");
  } catch (const JsonNumberOverflow& e) {
    throw number_overflow(e);
  } catch (const FormatError& e) {
    throw ApiError(400, e.what(), "", "invalid_json");
  }
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object", "", "invalid_json");
  try {
    return read(JsonObject(j, ""));
  } catch (const JsonFieldError& e) {
    throw field_error(e);
  }
}

/// The array `ids` (the value of `key` in `o`) as token ids in [0, vocab).
inline std::vector<int32_t> token_ids(const JsonObject& o, const std::string& key, const json& ids,
                                      int64_t vocab) {
  if (!ids.is_array())
    o.fail(key, "must be an array of integer token ids, found " + json_excerpt(ids),
           JsonFieldError::Problem::kWrongType);
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (const auto& t : ids) {
    if (!t.is_number_integer())
      o.fail(key, "must be an array of integer token ids, found " + json_excerpt(t),
             JsonFieldError::Problem::kWrongType);
    const bool in_range = t.is_number_unsigned()
                              ? t.get<uint64_t>() < uint64_t(vocab)
                              : t.get<int64_t>() >= 0 && t.get<int64_t>() < vocab;
    if (!in_range)
      throw ApiError(400,
                     "'" + key + "' holds token id " + t.dump() + ", outside [0, " +
                         std::to_string(vocab) + ")",
                     key, "invalid_token");
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return out;
}

/// What a request may ask for at most.
struct Limits {
  int64_t max_tokens = 4096;
  size_t max_stop = 4, max_stop_bytes = 256;
};

/// The most choices one request may ask for ("n"): each is a job of its own in the batch.
constexpr int64_t kMaxChoices = 8;

struct CompletionRequest {
  std::optional<std::string> text;  // the prompt as text, or
  std::vector<int32_t> ids;         // as token ids
  int64_t max_tokens = 16;
  SamplerParams sampler;  // choice i samples with seed + i
  int64_t seed = 0;       // as given, or drawn: the answer reports it
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  int logprobs = -1;
  std::string session;
  int n = 1;          // choices
  bool echo = false;  // each choice's text starts with the prompt's
};

/// "prompt": text, token ids, or a batch of one of either.
inline void read_prompt(const JsonObject& o, CompletionRequest& r, int64_t vocab) {
  const json* p = &o.require("prompt");
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
    p = &(*p)[0];  // a batch of one prompt
  if (p->is_string()) {
    r.text = p->get<std::string>();
  } else if (p->is_array() && (p->empty() || (*p)[0].is_number_integer())) {
    r.ids = token_ids(o, "prompt", *p, vocab);
  } else if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    throw ApiError(400, "one prompt per request: 'prompt' holds " + std::to_string(p->size()),
                   "prompt", "unsupported");
  } else {
    o.fail("prompt", "must be a string or an array of token ids, found " + json_excerpt(*p),
           JsonFieldError::Problem::kWrongType);
  }
}

/// "logit_bias": OpenAI's object from token ids (decimal strings such as "50256") to numbers in
/// [-100, 100], added to those tokens' logits; ids in [0, vocab). Sorted by id.
inline std::vector<std::pair<int32_t, float>> read_logit_bias(const JsonObject& o, int64_t vocab) {
  const json* b = o.find("logit_bias");
  if (!b) return {};
  if (!b->is_object())
    o.fail("logit_bias",
           "must be an object from token ids to numbers in [-100, 100], found " + json_excerpt(*b),
           JsonFieldError::Problem::kWrongType);
  const JsonObject bias(*b, o.label(), o.path("logit_bias"));
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& item : b->items()) {
    const std::string& key = item.key();
    // Digits only, no leading zero: "65" and "065" would otherwise name one id twice.
    const bool decimal =
        !key.empty() && key.size() <= 10 && (key == "0" || key[0] != '0') &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!decimal)
      throw ApiError(400,
                     "'logit_bias' has the key '" + detail::escape_bounded(key, 40) +
                         "': its keys are token ids written as decimal integers, such as \"50256\"",
                     "logit_bias", "invalid_type");
    const int64_t id = std::stoll(key);
    if (id >= vocab)
      throw ApiError(
          400,
          "'logit_bias' holds token id " + key + ", outside [0, " + std::to_string(vocab) + ")",
          "logit_bias", "invalid_token");
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias.number(key, -100, 100)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// A seed for a request that gives none (or -1): below 2^53, so that a JavaScript client reads
/// back exactly the seed the answer reports.
inline int64_t random_seed() {
  std::random_device device;
  const uint64_t bits = (uint64_t(device()) << 32) ^ device();
  return static_cast<int64_t>(bits & ((uint64_t(1) << 53) - 1));
}

/// The sampler's fields. When absent, each takes its value from SamplerParams::shared_defaults(),
/// the default sampler of `retnet generate`, `retnet serve` and the page (GET /props shows it).
/// Without a seed, or with -1, the request draws one.
inline void read_sampler(const JsonObject& o, CompletionRequest& r, int64_t vocab) {
  SamplerParams& s = r.sampler;
  s = SamplerParams::shared_defaults();
  s.temperature =
      static_cast<float>(o.optional_number("temperature", 0, 2).value_or(s.temperature));
  const double top_p = o.optional_number("top_p", 0, 1).value_or(s.top_p);
  if (top_p <= 0) o.fail("top_p", "= " + json_excerpt(o.require("top_p")) + " is outside (0, 1]");
  // A top_p below the smallest float (1e-300) means the same as the smallest: the most likely
  // token only. Rounded to float it would be 0, which the sampler refuses.
  s.top_p = std::max(static_cast<float>(top_p), std::numeric_limits<float>::denorm_min());
  s.top_k = static_cast<int>(o.optional_integer("top_k", 0, vocab).value_or(s.top_k));
  s.min_p = static_cast<float>(o.optional_number("min_p", 0, 1).value_or(s.min_p));
  s.repeat_penalty =
      static_cast<float>(o.optional_number("repetition_penalty", SamplerParams::kMinRepeatPenalty,
                                           SamplerParams::kMaxRepeatPenalty)
                             .value_or(s.repeat_penalty));
  s.repeat_last_n =
      static_cast<int>(o.optional_integer("repeat_last_n", 0, 256).value_or(s.repeat_last_n));
  s.presence_penalty =
      static_cast<float>(o.optional_number("presence_penalty", -2, 2).value_or(s.presence_penalty));
  s.frequency_penalty = static_cast<float>(
      o.optional_number("frequency_penalty", -2, 2).value_or(s.frequency_penalty));
  s.logit_bias = read_logit_bias(o, vocab);
  r.seed = o.optional_integer("seed").value_or(-1);
  if (r.seed == -1) r.seed = random_seed();
  s.seed = static_cast<uint64_t>(r.seed);
}

/// "stop": a string or an array of strings, within the limits.
inline void read_stop(const JsonObject& o, std::vector<std::string>& stop, const Limits& limits) {
  const json* s = o.find("stop");
  if (!s) return;
  const auto wrong = [&](const json& v) {
    o.fail("stop", "must be a string or an array of strings, found " + json_excerpt(v),
           JsonFieldError::Problem::kWrongType);
  };
  if (s->is_string()) {
    stop.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    for (const auto& x : *s) {
      if (!x.is_string()) wrong(x);
      stop.push_back(x.get<std::string>());
    }
  } else {
    wrong(*s);
  }
  if (stop.size() > limits.max_stop)
    throw ApiError(400,
                   "'stop' holds " + std::to_string(stop.size()) + " strings; at most " +
                       std::to_string(limits.max_stop),
                   "stop", "out_of_range");
  for (const auto& x : stop)
    if (x.size() > limits.max_stop_bytes)
      throw ApiError(
          400, "a 'stop' string is longer than " + std::to_string(limits.max_stop_bytes) + " bytes",
          "stop", "out_of_range");
}

/// Refuses every member of `o` that is not in `known`: a field this server does not read would
/// otherwise be ignored, and the answer differ from what was asked. A member set to null counts
/// as absent, as in every other read.
inline void refuse_unknown_fields(const JsonObject& o, const std::vector<std::string>& known,
                                  const std::string& where) {
  for (const auto& item : o.value().items()) {
    if (item.value().is_null()) continue;
    if (std::find(known.begin(), known.end(), item.key()) != known.end()) continue;
    const std::string field = o.path(detail::escape_bounded(item.key(), 60));
    throw ApiError(400,
                   "'" + field + "' is not supported by " + where +
                       " (docs/SERVER.md lists the fields it reads)",
                   field, "unsupported");
  }
}

/// "n", "stream" and "stream_options", read alike by both completion routes. Several choices
/// and a session exclude each other: the session would have several continuations.
inline void read_choices_and_stream(const JsonObject& o, CompletionRequest& r) {
  r.n = static_cast<int>(o.optional_integer("n", 1, kMaxChoices).value_or(1));
  if (r.n > 1 && !r.session.empty())
    throw ApiError(400, "'n' must be 1 with a session: one session keeps one continuation", "n",
                   "unsupported");
  r.stream = o.boolean("stream", false);
  if (auto options = o.optional_object("stream_options")) {
    refuse_unknown_fields(*options, {"include_usage"}, "this server");
    r.include_usage = options->boolean("include_usage", false);
  }
}

/// "session": the id of a session to continue.
inline void read_session(const JsonObject& o, CompletionRequest& r) {
  if (auto id = o.optional_string("session")) {
    if (!valid_session_id(*id))
      throw ApiError(400, "'session' must match [A-Za-z0-9_-]{1,64}", "session",
                     "invalid_session_id");
    r.session = *id;
  }
}

/// "max_tokens" (or `key`) within the server's limit.
inline std::optional<int64_t> read_max_tokens(const JsonObject& o, const Limits& limits,
                                              const std::string& key = "max_tokens") {
  const auto n = o.optional_integer(key, 0);
  if (n && *n > limits.max_tokens)
    throw ApiError(400,
                   "'" + key + "' is " + std::to_string(*n) + "; this server allows at most " +
                       std::to_string(limits.max_tokens),
                   key, "max_tokens_too_large");
  return n;
}

/// The fields both completion routes read, and then `more`.
inline std::vector<std::string> shared_fields(std::initializer_list<const char*> more) {
  std::vector<std::string> known = {"model",
                                    "user",
                                    "temperature",
                                    "top_p",
                                    "top_k",
                                    "min_p",
                                    "repetition_penalty",
                                    "repeat_last_n",
                                    "presence_penalty",
                                    "frequency_penalty",
                                    "logit_bias",
                                    "seed",
                                    "stop",
                                    "stream",
                                    "stream_options",
                                    "n"};
  known.insert(known.end(), more.begin(), more.end());
  return known;
}

/// Reads a /v1/completions body (max_tokens 16 when absent, as OpenAI's).
inline CompletionRequest parse_completion(const std::string& body, const Limits& limits,
                                          int64_t vocab) {
  return read_body(body, [&](const JsonObject& o) {
    refuse_unknown_fields(
        o,
        shared_fields({"prompt", "max_tokens", "logprobs", "echo", "session", "best_of", "suffix"}),
        "/v1/completions");
    CompletionRequest r;
    read_prompt(o, r, vocab);
    o.optional_string("model");  // any name: the server has one model
    o.optional_string("user");   // OpenAI's end-user id: nothing here depends on it
    r.max_tokens = read_max_tokens(o, limits).value_or(16);
    read_sampler(o, r, vocab);
    read_stop(o, r.stop, limits);
    read_session(o, r);
    read_choices_and_stream(o, r);
    r.logprobs = static_cast<int>(o.optional_integer("logprobs", 0, 5).value_or(-1));
    r.echo = o.boolean("echo", false);
    if (r.echo && r.logprobs >= 0)
      throw ApiError(400,
                     "'echo' with 'logprobs' is not supported: the prompt's log-probabilities are "
                     "not computed",
                     "echo", "unsupported");
    if (o.optional_integer("best_of").value_or(r.n) != r.n)
      throw ApiError(400, "'best_of' must equal 'n' (no ranking of choices)", "best_of",
                     "unsupported");
    if (!o.string("suffix", "").empty())
      throw ApiError(400, "'suffix' is not supported (no insertion)", "suffix", "unsupported");
    return r;
  });
}

/// Reads a /tokenize body: the text in "content".
inline std::string parse_tokenize(const std::string& body) {
  return read_body(body, [](const JsonObject& o) { return o.string("content"); });
}

/// Reads a /detokenize body: the token ids in "tokens", each in [0, vocab).
inline std::vector<int32_t> parse_detokenize(const std::string& body, int64_t vocab) {
  return read_body(body, [&](const JsonObject& o) {
    return token_ids(o, "tokens", o.require("tokens"), vocab);
  });
}

/// Reads a POST /v1/sessions body: the id asked for, or empty (no body, or no "id": the store
/// picks one).
inline std::string parse_new_session(const std::string& body) {
  if (body.empty()) return {};
  return read_body(body, [](const JsonObject& o) {
    const std::string id = o.string("id", "");
    if (o.has("id") && !valid_session_id(id))
      throw ApiError(400, "'id' must match [A-Za-z0-9_-]{1,64}", "id", "invalid_session_id");
    return id;
  });
}

/// A session a request names cannot be used: it is busy (409) or does not exist (404). `param`
/// is the field or path part that named it.
inline ApiError session_error(SessionStore::Result r, const std::string& id, std::string param) {
  if (r == SessionStore::Result::kBusy)
    return ApiError(409, "session '" + id + "' is in use by another request", std::move(param),
                    "session_busy");
  return ApiError(404, "session '" + id + "' does not exist (create it with POST /v1/sessions)",
                  std::move(param), "session_not_found");
}

// ---------------------------------------------------------------- answers

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

/// OpenAI's usage: the prompt counted once, the tokens of every choice.
inline json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
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

/// What names one completion in every object answered for it.
struct CompletionId {
  std::string id;
  std::time_t created = 0;
  std::string model;
};

/// A float as the shortest decimal that reads back as it (0.95f as 0.95, not 0.949999988).
inline double shortest(float x) {
  char text[32];
  for (int digits = 6; digits < 10; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, double(x));
    if (std::strtof(text, nullptr) == x) break;
  }
  return std::strtod(text, nullptr);
}

/// The sampler's settings under the names a request gives them (the seed aside: a request
/// without one draws it).
inline json sampler_json(const SamplerParams& s) {
  json bias = json::object();
  for (const auto& [id, value] : s.logit_bias) bias[std::to_string(id)] = shortest(value);
  return {{"temperature", shortest(s.temperature)},
          {"top_k", s.top_k},
          {"top_p", shortest(s.top_p)},
          {"min_p", shortest(s.min_p)},
          {"repetition_penalty", shortest(s.repeat_penalty)},
          {"repeat_last_n", s.repeat_last_n},
          {"presence_penalty", shortest(s.presence_penalty)},
          {"frequency_penalty", shortest(s.frequency_penalty)},
          {"logit_bias", bias}};
}

inline json session_info_json(const std::string& id, const SessionStore::Info& info) {
  return {{"id", id},
          {"object", "session"},
          {"tokens", info.tokens},
          {"state_bytes", info.state_bytes},
          {"in_memory", info.in_memory},
          {"busy", info.busy}};
}

/// A "model" object, with the model's shapes under "meta" and the sampler a request starts from
/// (also in GET /props), which the page shows in its empty fields.
inline json model_json(const RetNetModel<float>& model, const Tokenizer& tokenizer,
                       const std::string& id, std::time_t created) {
  const auto& c = model.config();
  return {{"id", id},
          {"object", "model"},
          {"created", created},
          {"owned_by", "retnet"},
          {"meta",
           {{"vocab_size", c.vocab_size},
            {"tokenizer_vocab_size", tokenizer.vocab_size()},
            {"embed_dim", c.embed_dim},
            {"layers", c.layers},
            {"heads", c.heads},
            {"state_bytes", model.new_state(1).size_bytes()},
            {"weight_bytes", model.weights().size_bytes(c)},
            {"default_sampler", sampler_json(SamplerParams::shared_defaults())}}}};
}

}  // namespace retnet::serve
