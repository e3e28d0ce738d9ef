// The gate of `retnet serve`: what every request passes before its route. It answers CORS
// preflights for the origins of --cors, checks the API key when one is set, and without a key
// keeps other web sites out: the Host must name this server (DNS rebinding), a cross-origin
// POST or DELETE is refused (CSRF), and a POST body must be declared application/json (an HTML
// form or a "simple" cross-site fetch cannot send that type). A request with the right key
// skips the last three checks: a browser page on another site cannot send the key, since the
// Authorization header needs a preflight that only --cors origins pass.
// docs/SERVER.md, "Security", describes the rules and their answers.
#pragma once

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "serve/api.hpp"
#include "serve/context.hpp"
#include "serve/http.hpp"

namespace retnet::serve {

/// Compares without stopping at the first difference (the key is a secret).
inline bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

inline std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return text;
}

/// Whether --host names the loopback interface only: 127.0.0.0/8, ::1 or localhost.
inline bool is_loopback_host(const std::string& host) {
  const std::string h = lower(host);
  if (h == "localhost" || h == "::1" || h == "[::1]") return true;
  in_addr v4{};
  return inet_pton(AF_INET, h.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

/// Whether `origin` has the form an Origin header takes: http:// or https://, a host and an
/// optional port, nothing after (no path, no trailing slash).
inline bool is_origin(const std::string& origin) {
  const size_t scheme = origin.rfind("https://", 0) == 0  ? 8
                        : origin.rfind("http://", 0) == 0 ? 7
                                                          : 0;
  if (scheme == 0 || origin.size() == scheme) return false;
  for (size_t i = scheme; i < origin.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(origin[i]);
    if (c <= ' ' || c >= 127 || c == '/' || c == '?' || c == '#' || c == '@') return false;
  }
  return true;
}

/// The host name of a Host header, lower case, without the port ("[::1]:8080" → "[::1]");
/// empty when the header is not a host with an optional numeric port.
inline std::string host_name(const std::string& header) {
  const std::string h = lower(header);
  const size_t end = h.rfind(']');
  const size_t colon = h.rfind(':');
  const bool bracketed = !h.empty() && h[0] == '[';
  if (bracketed && end == std::string::npos) return {};
  const bool has_port = colon != std::string::npos && (!bracketed || colon > end);
  if (!bracketed && has_port && h.find(':') != colon) return {};  // an IPv6 address needs []
  const std::string name = has_port ? h.substr(0, colon) : h;
  const std::string port = has_port ? h.substr(colon + 1) : "1";
  if (name.empty() || port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c); }))
    return {};
  return name;
}

/// The checks of the file comment, as the http::Server's gate.
class Gate {
 public:
  Gate(std::string api_key, const std::string& bound_host, std::vector<std::string> cors)
      : key_(std::move(api_key)), cors_(std::move(cors)) {
    const std::string bound = lower(bound_host);
    names_ = {"localhost", "127.0.0.1", "[::1]"};
    names_.push_back(bound.find(':') != std::string::npos && bound[0] != '[' ? "[" + bound + "]"
                                                                             : bound);
  }

  /// True when the request is answered here (refused, or a preflight).
  bool operator()(const http::Request& req, http::Response& res) const {
    const std::string origin = req.header("Origin");
    const bool cors =
        !origin.empty() && std::find(cors_.begin(), cors_.end(), origin) != cors_.end();
    if (cors) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
      if (req.method() == "OPTIONS" && req.has_header("Access-Control-Request-Method")) {
        res.set_header("Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "600");
        res.send(204, "", "text/plain");
        return true;
      }
    }
    const bool reads = req.method() == "GET" || req.method() == "HEAD";
    if (!key_.empty()) {
      if (reads && (req.path() == "/" || req.path() == "/health")) return false;
      if (same_secret(req.header("Authorization"), "Bearer " + key_)) return false;
      return refuse(res, ApiError(401,
                                  req.has_header("Authorization")
                                      ? "incorrect API key"
                                      : "an API key is required: 'Authorization: Bearer KEY'",
                                  "", "invalid_api_key"));
    }
    if (!served_host(req.header("Host")))
      return refuse(res, ApiError(403,
                                  "Host " + shown(req.header("Host")) +
                                      " is not this server's address: without an API key only " +
                                      "localhost, 127.0.0.1, [::1] and " + names_.back() +
                                      " are served (set --api-key to serve other names)",
                                  "", "host_not_allowed"));
    if (!reads && !origin.empty() && !cors && !same_origin(origin, req.header("Host")))
      return refuse(res, ApiError(403,
                                  "Origin " + shown(origin) +
                                      " is not allowed: a page of another origin needs --cors " +
                                      "ORIGIN (or an API key)",
                                  "", "origin_not_allowed"));
    if (req.method() == "POST") return refused_content_type(req, res);
    return false;
  }

 private:
  /// Without a key, a POST body must be declared application/json (parameters such as charset
  /// allowed); a POST without a body may leave the type out.
  static bool refused_content_type(const http::Request& req, http::Response& res) {
    const std::string type = req.header("Content-Type");
    std::string media = lower(type.substr(0, type.find(';')));
    media.erase(media.find_last_not_of(" \t") + 1);
    if (media == "application/json" || (type.empty() && req.body().empty())) return false;
    return refuse(res, ApiError(415,
                                (type.empty() ? std::string("the body has no Content-Type")
                                              : "the body's Content-Type is " + shown(type)) +
                                    ": send JSON with -H 'Content-Type: application/json'",
                                "", "unsupported_media_type"));
  }

  bool served_host(const std::string& header) const {
    const std::string name = host_name(header);
    return !name.empty() && std::find(names_.begin(), names_.end(), name) != names_.end();
  }

  static bool same_origin(const std::string& origin, const std::string& host) {
    const std::string o = lower(origin), h = lower(host);
    return o == "http://" + h || o == "https://" + h;
  }

  /// A header's value quoted for a message: bounded and escaped.
  static std::string shown(const std::string& value) {
    return value.empty() ? "(none)" : "'" + retnet::detail::escape_bounded(value, 80) + "'";
  }

  static bool refuse(http::Response& res, const ApiError& e) {
    reply_error(res, e);
    return true;
  }

  std::string key_;
  std::vector<std::string> cors_;   // origins whose pages may call the API (--cors)
  std::vector<std::string> names_;  // the Host names served without a key
};

}  // namespace retnet::serve
