// The route table of `retnet serve`: which handler answers which path, the API key checked
// before any route but the page and /health, and every handler's exceptions turned into
// OpenAI-style error answers.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "serve/api.hpp"
#include "serve/context.hpp"
#include "serve/engine.hpp"
#include "serve/http.hpp"
#include "serve/page.hpp"
#include "serve/routes_completions.hpp"
#include "serve/routes_info.hpp"
#include "serve/routes_sessions.hpp"
#include "serve/sessions.hpp"

namespace retnet::serve {

/// Compares without stopping at the first difference (the key is a secret).
inline bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

/// The routes over one model; `model`, `tokenizer`, `engine` and `sessions` outlive it.
class Server {
 public:
  Server(const Model& model, const Tokenizer& tokenizer, Engine& engine, SessionStore& sessions,
         ServerOptions options)
      : ctx_{model, tokenizer, engine, sessions, std::move(options), metrics_},
        completions_(ctx_),
        sessions_(ctx_),
        info_(ctx_) {}
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// An answer in this server's error shape, for errors the HTTP layer meets itself.
  static void reply_http_error(http::Response& res, int status, const std::string& message) {
    reply_error(res, ApiError(status, message));
  }

  void add_routes(http::Server& http) {
    http.get("/", [](const http::Request&, http::Response& res) {
      res.send(200, kPage, "text/html; charset=utf-8");
    });
    http.get("/health", handle([this](auto& req, auto& res) { info_.health(req, res); }));
    http.get("/metrics", handle([this](auto& req, auto& res) { info_.metrics(req, res); }));
    http.get("/v1/models", handle([this](auto& req, auto& res) { info_.models(req, res); }));
    http.get("/v1/models/(.+)", handle([this](auto& req, auto& res) { info_.model(req, res); }));
    http.post("/v1/completions", handle([this](auto& req, auto& res) { completions_(req, res); }));
    http.post("/tokenize", handle([this](auto& req, auto& res) { info_.tokenize(req, res); }));
    http.post("/detokenize", handle([this](auto& req, auto& res) { info_.detokenize(req, res); }));
    http.post("/v1/sessions", handle([this](auto& req, auto& res) { sessions_.create(req, res); }));
    http.get("/v1/sessions/(.*)",
             handle([this](auto& req, auto& res) { sessions_.get(req, res); }));
    http.del("/v1/sessions/(.*)",
             handle([this](auto& req, auto& res) { sessions_.remove(req, res); }));
    http.set_gate([this](const http::Request& req, http::Response& res) {
      return refused_without_key(req, res);
    });
    http.set_observer([this](int status) { metrics_.answered(status); });
  }

 private:
  /// Everything but the page and /health needs the key when one is set. True when refused
  /// (the answer is written).
  bool refused_without_key(const http::Request& req, http::Response& res) const {
    const std::string& key = ctx_.options.api_key;
    if (key.empty() || ((req.method() == "GET" || req.method() == "HEAD") &&
                        (req.path() == "/" || req.path() == "/health")))
      return false;
    if (same_secret(req.header("Authorization"), "Bearer " + key)) return false;
    reply_error(res, ApiError(401,
                              req.has_header("Authorization")
                                  ? "incorrect API key"
                                  : "an API key is required: 'Authorization: Bearer KEY'",
                              "", "invalid_api_key"));
    return true;
  }

  /// A handler whose ApiError and library errors become OpenAI-style answers.
  template <class Route>
  static http::Handler handle(Route route) {
    return [route](const http::Request& req, http::Response& res) {
      try {
        route(req, res);
      } catch (const ApiError& e) {
        reply_error(res, e);
      } catch (const InvalidArgument& e) {
        reply_error(res, ApiError(400, e.what()));
      } catch (const std::exception& e) {
        reply_error(res, ApiError(500, std::string("internal error: ") + e.what()));
      }
    };
  }

  ServerMetrics metrics_;  // before ctx_, which refers to it
  ServerContext ctx_;
  CompletionsRoute completions_;
  SessionsRoutes sessions_;
  InfoRoutes info_;
};

}  // namespace retnet::serve
