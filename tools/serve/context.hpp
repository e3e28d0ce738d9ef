// What the routes of `retnet serve` share: the model and its tokenizer, the engine, the session
// store and the server's options, and the two ways every route answers (a JSON body, or an
// ApiError in OpenAI's error shape).
#pragma once

#include <ctime>
#include <retnet/retnet.hpp>
#include <string>
#include <vector>

#include "serve/api.hpp"
#include "serve/engine.hpp"
#include "serve/http.hpp"
#include "serve/metrics.hpp"
#include "serve/session_store.hpp"

namespace retnet::serve {

using Model = RetNetModel<float>;

/// What `retnet serve`'s flags set beyond the engine and the session store.
struct ServerOptions {
  std::string model_id;  // the model's name in /v1/models and in every completion
  Limits limits;         // what one request may ask for
  std::string api_key;   // empty: no key required
  std::string host;      // the address listened on (--host), a Host served without a key
  std::vector<std::string> cors_origins;  // origins whose pages may call the API (--cors)
  ChatTemplate chat_template = ChatTemplate::plain();  // /v1/chat/completions' (--chat-template)
};

/// The parts every route reads; they outlive the server.
struct ServerContext {
  const Model& model;
  const Tokenizer& tokenizer;
  Engine& engine;
  SessionStore& sessions;
  ServerOptions options;
  ServerMetrics& metrics;  // answers by status, streams open
  std::time_t started = std::time(nullptr);
};

/// A JSON answer, ending with a newline as a text file does (so `curl` output ends its line).
inline void reply(http::Response& res, int status, const json& body) {
  res.send(status, dump(body) + "\n", "application/json");
}

/// An error answer; a 503 (busy, full queue, too many connections) says when to retry.
inline void reply_error(http::Response& res, const ApiError& e) {
  reply(res, e.status, error_json(e));
  if (e.status == 503) res.set_header("Retry-After", "1");
}

}  // namespace retnet::serve
