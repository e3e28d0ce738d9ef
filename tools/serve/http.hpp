// The HTTP layer of `retnet serve`: this file (what routes see: Request, Response, StreamSink,
// the Server's route table and options) and serve/http_connection.hpp (one client connection)
// are the only code that knows the HTTP library (Boost.Beast over Boost.Asio).
//
// Connections are asynchronous on an io_context run by a few threads (ServerOptions::io_threads),
// so an idle or slow client costs a socket and a timer, not a thread. Each connection reads a
// request's header under a deadline (header_timeout_s, also the keep-alive idle time) and a size
// limit (header_limit → 431), checks it (Content-Encoding other than identity → 415; a
// Transfer-Encoding other than chunked → 501; two Content-Lengths → 400; with
// `Expect: 100-continue` a declared body over the limit → 413 before any 100), then reads the body
// under a deadline (body_timeout_s → 408) and the limit max_body, which Beast's parser applies to
// chunked bodies as well (→ 413). Malformed requests, and Content-Length together with chunked,
// are refused by Beast's strict parser (→ 400). Every refusal closes the connection, so an unread
// body is never taken for the next request. Pipelined requests are answered in order. Range is
// not handled; HEAD is answered as GET without the body. Beyond max_connections open
// connections, a new one is answered 503 with Retry-After and closed.
//
// Handlers run on a separate pool of `threads` threads, never on the io threads, and should not
// wait for long: an answer that takes time (a completion waiting for the engine) is deferred
// (Response::defer) or streamed (Response::stream). Both are polled on the pool, without
// blocking, whenever their producer wakes them (Wake) and every second, so a thousand waiting or
// streaming answers hold no thread. While an answer is pending its connection watches the socket:
// a client that closes it is seen at once and the answer's poll is told (client_gone), so the
// work for it stops.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace retnet::serve::http {

namespace detail {
namespace net = boost::asio;
namespace bh = boost::beast::http;
using tcp = net::ip::tcp;
using RawRequest = bh::request<bh::string_body>;

/// The path of a request target: before '?', percent-decoded.
inline std::string decoded_path(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::string out;
  for (size_t i = 0; i < target.size(); ++i) {
    const auto hex = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    if (target[i] == '%' && i + 2 < target.size() && hex(target[i + 1]) >= 0 &&
        hex(target[i + 2]) >= 0) {
      out += char(hex(target[i + 1]) * 16 + hex(target[i + 2]));
      i += 2;
    } else {
      out += target[i];
    }
  }
  return out;
}

inline bool iequals(boost::beast::string_view a, boost::beast::string_view b) {
  return boost::beast::iequals(a, b);
}
}  // namespace detail

/// A request, valid while its handler runs.
class Request {
 public:
  const std::string& method() const { return method_; }
  const std::string& path() const { return path_; }
  const std::string& body() const { return r_.body(); }
  /// Group `i` (from 1) of the route's pattern in the path.
  std::string param(size_t i) const { return i < params_.size() ? params_[i] : std::string(); }
  bool has_header(const char* name) const { return r_.find(name) != r_.end(); }
  /// The header's value; empty when absent.
  std::string header(const char* name) const {
    const auto it = r_.find(name);
    return it == r_.end() ? std::string() : std::string(it->value());
  }

 private:
  friend class Server;
  explicit Request(detail::RawRequest r)
      : r_(std::move(r)),
        method_(r_.method_string()),
        path_(detail::decoded_path(std::string_view(r_.target().data(), r_.target().size()))) {}
  detail::RawRequest r_;
  std::string method_, path_;
  std::vector<std::string> params_;
};

/// Asks for a pending answer to be polled again soon. Callable from any thread, any number of
/// times, also after its connection has ended (it then does nothing).
using Wake = std::function<void()>;

/// Where a streamed answer writes, during one call of its `next`.
class StreamSink {
 public:
  /// Queues bytes to send when `next` returns; false when the client is gone (the stream then
  /// ends).
  bool write(std::string_view bytes) {
    if (!client_gone_) out_.append(bytes);
    return !client_gone_;
  }
  /// The answer is complete after what was written.
  void done() { done_ = true; }
  /// Wakes the stream: its producer calls it when it has something new.
  const Wake& wake() const { return *wake_; }

 private:
  friend class Server;
  std::string out_;
  bool done_ = false, client_gone_ = false;
  std::shared_ptr<const Wake> wake_;
};

/// What a deferred answer's poll is given.
struct PollContext {
  const Wake& wake;  // the producer calls it when it has something new
  bool client_gone;  // the client has closed the connection: clean up, the answer is dropped
};

/// The answer to a request: a whole body now, later (defer), or a stream written piece by piece.
class Response {
 public:
  void send(int status, std::string body, const char* content_type) {
    status_ = status;
    body_ = std::move(body);
    content_type_ = content_type;
  }
  void set_header(const char* name, const std::string& value) {
    headers_.emplace_back(name, value);
  }

  /// Answers after the handler returns: `poll` is called on a pool thread, once at first, then
  /// whenever the Wake it is given is called and at least every second, and must not block. It
  /// returns true once it has called send() on the response it gets (or, with client_gone,
  /// when it has cleaned up).
  void defer(std::function<bool(Response&, const PollContext&)> poll) { poll_ = std::move(poll); }

  /// Streams with status 200 (chunked) after the handler returns: `next` is called like a
  /// deferred poll, must not block, writes what it has (nothing is fine) and returns false to
  /// give up or calls sink.done() after the last bytes. `ended` is called once when the stream
  /// ends, whichever way.
  void stream(const char* content_type, std::function<bool(StreamSink&)> next,
              std::function<void()> ended) {
    status_ = 200;
    content_type_ = content_type;
    next_ = std::move(next);
    ended_ = std::move(ended);
  }

 private:
  friend class Server;
  int status_ = 404;
  std::string body_, content_type_ = "text/plain";
  std::vector<std::pair<std::string, std::string>> headers_;
  std::function<bool(Response&, const PollContext&)> poll_;
  std::function<bool(StreamSink&)> next_;
  std::function<void()> ended_;
};

using Handler = std::function<void(const Request&, Response&)>;
/// Runs before routing; true when it has answered (the request goes no further).
using Gate = std::function<bool(const Request&, Response&)>;
/// Writes the answer for an HTTP-level error the layer met itself.
using ErrorReply = std::function<void(Response&, int status, const std::string& message)>;
/// Told the status of every answer as it is sent, the layer's own refusals included (a stream
/// is told 200 when its header goes out).
using AnswerObserver = std::function<void(int status)>;

struct ServerOptions {
  size_t threads = 64;                // handlers (and polls of pending answers) running at once
  size_t io_threads = 2;              // threads running the connections' asynchronous I/O
  size_t max_body = 1 << 20;          // larger request bodies (chunked too) are answered 413
  size_t header_limit = 16 << 10;     // larger request headers are answered 431
  size_t max_connections = 512;       // beyond: 503 with Retry-After, connection closed
  size_t keep_alive_requests = 1000;  // requests on one connection before it is closed
  int header_timeout_s = 10;          // to receive a header (and keep-alive idle time) → 408
  int body_timeout_s = 60;            // to receive a body → 408
  int write_timeout_s = 30;           // for the client to take one write, else it is dropped
  int retry_after_s = 1;              // Retry-After of the 503 when connections are full
  int backlog = 512;                  // connections waiting to be accepted
  bool reuse_port = false;            // SO_REUSEPORT: share the port with other processes
};

/// Routes are regular expressions matched against the whole path; their groups are
/// Request::param(1), param(2), ...
class Server {
 public:
  Server(const ServerOptions& options, ErrorReply error_reply)
      : options_(options), error_reply_(std::move(error_reply)), work_(options.threads) {}
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server() {
    stop();
    work_.join();
  }

  void get(const std::string& pattern, Handler handler) { add("GET", pattern, handler); }
  void post(const std::string& pattern, Handler handler) { add("POST", pattern, handler); }
  void del(const std::string& pattern, Handler handler) { add("DELETE", pattern, handler); }
  void set_gate(Gate gate) { gate_ = std::move(gate); }
  void set_observer(AnswerObserver observer) { observer_ = std::move(observer); }

  /// Binds to host:port (port 0: any free port) with SO_REUSEADDR, and SO_REUSEPORT only with
  /// options.reuse_port, so a busy port is an error unless asked for; returns the port, or -1
  /// with errno set.
  int bind(const std::string& host, int port) {
    boost::system::error_code ec;
    detail::tcp::resolver resolver(io_);
    const auto found = resolver.resolve(host, std::to_string(port), ec);
    if (!ec && found.empty()) ec = boost::asio::error::host_not_found;
    if (!ec) {
      const detail::tcp::endpoint at = found.begin()->endpoint();
      acceptor_.open(at.protocol(), ec);
      if (!ec) acceptor_.set_option(detail::net::socket_base::reuse_address(true), ec);
      if (!ec && options_.reuse_port) {
        const int on = 1;
        if (::setsockopt(acceptor_.native_handle(), SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0)
          ec.assign(errno, boost::system::system_category());
      }
      if (!ec) acceptor_.bind(at, ec);
      if (!ec) acceptor_.listen(options_.backlog, ec);
    }
    if (ec) {
      errno = ec.category() == boost::system::system_category() ? ec.value() : EADDRNOTAVAIL;
      return -1;
    }
    return acceptor_.local_endpoint().port();
  }

  /// Serves until stop(); false when not bound.
  bool listen() {
    if (!acceptor_.is_open()) return false;
    accept();
    std::vector<std::thread> threads;
    for (size_t i = 1; i < std::max<size_t>(options_.io_threads, 1); ++i)
      threads.emplace_back([this] { io_.run(); });
    io_.run();
    for (auto& t : threads) t.join();
    return true;
  }

  /// Ends listen(); callable from any thread.
  void stop() {
    boost::asio::post(io_, [this] {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
    });
    io_.stop();
  }

 private:
  class Connection;
  struct Route {
    std::string method;
    std::regex pattern;
    Handler handler;
  };

  void add(const char* method, const std::string& pattern, Handler handler) {
    routes_.push_back(Route{method, std::regex(pattern), std::move(handler)});
  }

  void accept();

  /// Runs the gate and the route for `req` (on a pool thread); the answer is in `res`.
  void route(Request& req, Response& res) {
    const std::string method = req.method() == "HEAD" ? "GET" : req.method();
    try {
      if (gate_ && gate_(req, res)) return;
      for (const Route& r : routes_) {
        std::smatch m;
        if (r.method != method || !std::regex_match(req.path(), m, r.pattern)) continue;
        for (const auto& group : m) req.params_.push_back(group.str());
        r.handler(req, res);
        return;
      }
      error_reply_(res, 404, "no route for " + req.method() + " " + req.path());
    } catch (...) {
      res = Response();
      error_reply_(res, 500, "internal error");
    }
  }

  Response error_response(int status, const std::string& message) const {
    Response res;
    error_reply_(res, status, message);
    return res;
  }

  ServerOptions options_;
  ErrorReply error_reply_;
  Gate gate_;
  AnswerObserver observer_;
  std::vector<Route> routes_;
  boost::asio::io_context io_;
  detail::tcp::acceptor acceptor_{io_};
  boost::asio::thread_pool work_;
  std::atomic<size_t> open_{0};
};

}  // namespace retnet::serve::http

#include "serve/http_connection.hpp"
