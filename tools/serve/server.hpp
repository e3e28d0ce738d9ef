// The route table of `retnet serve`: which handler answers which path, the gate (serve/gate.hpp:
// the API key, Host, Origin and Content-Type checks) run before any route, and every handler's
// exceptions turned into OpenAI-style error answers.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "serve/answer_shape.hpp"
#include "serve/api.hpp"
#include "serve/context.hpp"
#include "serve/engine.hpp"
#include "serve/gate.hpp"
#include "serve/http.hpp"
#include "serve/page.hpp"
#include "serve/routes_chat.hpp"
#include "serve/routes_completions.hpp"
#include "serve/routes_info.hpp"
#include "serve/routes_sessions.hpp"
#include "serve/session_store.hpp"

namespace retnet::serve {

/// The routes over one model; `model`, `tokenizer`, `engine` and `sessions` outlive it.
class Server {
 public:
  Server(const Model& model, const Tokenizer& tokenizer, Engine& engine, SessionStore& sessions,
         ServerOptions options)
      : ctx_{model, tokenizer, engine, sessions, std::move(options), metrics_},
        completions_(ctx_, std::make_unique<TextShape>()),
        chat_(ctx_, std::make_unique<ChatShape>(ctx_.options.chat_template)),
        sessions_(ctx_),
        info_(ctx_),
        gate_(ctx_.options.api_key, ctx_.options.host, ctx_.options.cors_origins) {}
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// An answer in this server's error shape, for errors the HTTP layer meets itself.
  static void reply_http_error(http::Response& res, int status, const std::string& message) {
    reply_error(res, ApiError(status, message));
  }

  void add_routes(http::Server& http) {
    http.get("/", [](const http::Request&, http::Response& res) {
      res.send(200, kPage, "text/html; charset=utf-8");
      res.set_header("Content-Security-Policy", kPageSecurityPolicy);
      res.set_header("X-Frame-Options", "DENY");
      res.set_header("Referrer-Policy", "no-referrer");
    });
    http.get("/health", handle([this](auto& req, auto& res) { info_.health(req, res); }));
    http.get("/metrics", handle([this](auto& req, auto& res) { info_.metrics(req, res); }));
    http.get("/props", handle([this](auto& req, auto& res) { info_.props(req, res); }));
    http.get("/v1/models", handle([this](auto& req, auto& res) { info_.models(req, res); }));
    http.get("/v1/models/(.+)", handle([this](auto& req, auto& res) { info_.model(req, res); }));
    http.post("/v1/completions", handle([this](auto& req, auto& res) { completions_(req, res); }));
    http.post("/v1/chat/completions", handle([this](auto& req, auto& res) { chat_(req, res); }));
    http.post("/tokenize", handle([this](auto& req, auto& res) { info_.tokenize(req, res); }));
    http.post("/detokenize", handle([this](auto& req, auto& res) { info_.detokenize(req, res); }));
    http.post("/v1/sessions", handle([this](auto& req, auto& res) { sessions_.create(req, res); }));
    http.get("/v1/sessions/(.*)",
             handle([this](auto& req, auto& res) { sessions_.get(req, res); }));
    http.del("/v1/sessions/(.*)",
             handle([this](auto& req, auto& res) { sessions_.remove(req, res); }));
    http.set_gate(
        [this](const http::Request& req, http::Response& res) { return gate_(req, res); });
    http.set_observer([this](int status) { metrics_.answered(status); });
  }

 private:
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
  CompletionsRoute completions_, chat_;
  SessionsRoutes sessions_;
  InfoRoutes info_;
  Gate gate_;
};

}  // namespace retnet::serve
