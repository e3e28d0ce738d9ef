// The HTTP layer of `retnet serve`: the only file that knows the HTTP library (Boost.Beast over
// Boost.Asio). Routes see Request, Response and StreamSink, which name nothing of the library.
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
// Handlers may block (a completion waits for the engine), so they run on a separate pool of
// `threads` threads, never on the io threads. A streamed answer (Response::stream) is pulled by
// its `next` callback, which blocks up to a second waiting for tokens: the pull loop runs on that
// pool too, and each StreamSink::write sends its chunk on the socket from that thread (no other
// operation uses the socket meanwhile; a client that stops reading is dropped after
// write_timeout_s). So a stream holds a pool thread while it runs; making the engine's jobs push
// updates, and the writes asynchronous, would free it.
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

/// Where a streamed answer writes.
class StreamSink {
 public:
  /// False when the client is gone (the stream then ends).
  bool write(std::string_view bytes) { return write_(bytes); }
  /// The answer is complete.
  void done() { done_ = true; }

 private:
  friend class Server;
  explicit StreamSink(std::function<bool(std::string_view)> write) : write_(std::move(write)) {}
  std::function<bool(std::string_view)> write_;
  bool done_ = false;
};

/// The answer to a request: a whole body, or a stream written piece by piece.
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

  /// Streams with status 200 after the handler returns: `next` is called on a pool thread until
  /// it returns false (the client is gone, or it gave up) or calls sink.done(); `ended` once
  /// when the stream ends, whichever way.
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
  size_t threads = 64;                // handlers and streams running at once (a stream holds one)
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

  /// Binds to host:port (port 0: any free port) with SO_REUSEADDR but not SO_REUSEPORT, so a
  /// busy port is an error; returns the port, or -1 with errno set.
  int bind(const std::string& host, int port) {
    boost::system::error_code ec;
    detail::tcp::resolver resolver(io_);
    const auto found = resolver.resolve(host, std::to_string(port), ec);
    if (!ec && found.empty()) ec = boost::asio::error::host_not_found;
    if (!ec) {
      const detail::tcp::endpoint at = found.begin()->endpoint();
      acceptor_.open(at.protocol(), ec);
      if (!ec) acceptor_.set_option(detail::net::socket_base::reuse_address(true), ec);
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

/// One client connection, on its own strand: reads requests one after another, hands each to
/// the pool, writes the answer, and enforces the deadlines with one timer.
class Server::Connection : public std::enable_shared_from_this<Server::Connection> {
 public:
  Connection(Server& server, detail::tcp::socket socket, bool refused)
      : server_(server),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        buffer_(server.options_.header_limit + kReadAhead),
        refused_(refused) {
    if (!refused_) ++server_.open_;
  }
  ~Connection() {
    if (!refused_) --server_.open_;
  }

  void start() {
    if (!refused_) return read_header();
    Response res = server_.error_response(503, "too many connections; retry later");
    res.set_header("Retry-After", std::to_string(server_.options_.retry_after_s));
    write(std::move(res), false, false, "-", "-");
  }

 private:
  using Error = boost::system::error_code;
  using Seconds = std::chrono::seconds;

  /// The deadline of the next operations: when it passes, they are cancelled and timed_out_ set.
  void arm(int seconds) {
    timed_out_ = false;
    timer_.expires_after(Seconds(seconds));
    timer_.async_wait([self = shared_from_this()](Error ec) {
      if (ec) return;
      self->timed_out_ = true;
      Error ignored;
      self->socket_.cancel(ignored);
    });
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(std::uint32_t(server_.options_.header_limit));
    parser_->body_limit(std::uint64_t(server_.options_.max_body));
    arm(server_.options_.header_timeout_s);
    detail::bh::async_read_header(socket_, buffer_, *parser_,
                                  [self = shared_from_this()](Error ec, size_t) {
                                    self->timer_.cancel();
                                    if (ec) return self->read_failed(ec);
                                    self->check_header();
                                  });
  }

  /// Refuses what this server does not take before reading the body.
  void check_header() {
    const auto& h = parser_->get();
    size_t lengths = 0, bytes = h.method_string().size() + h.target().size() + 12;
    for (const auto& f : h) {
      if (f.name() == detail::bh::field::content_length) ++lengths;
      bytes += f.name_string().size() + f.value().size() + 4;
    }
    // Beast 1.74 lets some headers past its own limit (many repeated lines); the buffer's
    // bound keeps their memory in check, this the answer.
    if (bytes > server_.options_.header_limit)
      return refuse(431, "the request header is larger than the limit");
    const auto encoding = h[detail::bh::field::content_encoding];
    const auto transfer = h[detail::bh::field::transfer_encoding];
    const auto expect = h[detail::bh::field::expect];
    const auto length = parser_->content_length();
    if (lengths > 1 || h[detail::bh::field::content_length].find(',') != boost::string_view::npos)
      return refuse(400, "more than one Content-Length");
    if (!encoding.empty() && !detail::iequals(encoding, "identity"))
      return refuse(415, "Content-Encoding is not supported; send the body uncompressed");
    if (!transfer.empty() && !detail::iequals(transfer, "chunked"))
      return refuse(501, "Transfer-Encoding other than chunked is not supported");
    if (length && *length > server_.options_.max_body)
      return refuse(413, "the request body is larger than this server's limit");
    if (!expect.empty() && !detail::iequals(expect, "100-continue"))
      return refuse(417, "only 'Expect: 100-continue' is understood");
    if (parser_->is_done()) return dispatch();
    if (expect.empty()) return read_body();
    static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    arm(server_.options_.write_timeout_s);
    boost::asio::async_write(socket_, boost::asio::buffer(kContinue, sizeof kContinue - 1),
                             [self = shared_from_this()](Error ec, size_t) {
                               self->timer_.cancel();
                               if (!ec) self->read_body();
                             });
  }

  void read_body() {
    arm(server_.options_.body_timeout_s);
    detail::bh::async_read(socket_, buffer_, *parser_,
                           [self = shared_from_this()](Error ec, size_t) {
                             self->timer_.cancel();
                             if (ec) return self->read_failed(ec);
                             self->dispatch();
                           });
  }

  /// A read that ended without a request: answered when something was sent, else closed.
  void read_failed(Error ec) {
    using e = detail::bh::error;
    const bool started = parser_ && parser_->got_some();
    if (ec == e::end_of_stream || ec == boost::asio::error::eof ||
        ec == boost::asio::error::connection_reset || (timed_out_ && !started))
      return close();
    if (timed_out_) return refuse(408, "the request was not received in time");
    if (ec == e::header_limit || (ec == e::buffer_overflow && !parser_->is_header_done()))
      return refuse(431, "the request header is larger than the limit");
    if (ec == e::body_limit)
      return refuse(413, "the request body is larger than this server's limit");
    if (ec == boost::asio::error::operation_aborted) return close();
    refuse(400, "malformed HTTP request: " + ec.message());
  }

  /// Answers an error and closes the connection (what follows in it is not read).
  void refuse(int status, const std::string& message) {
    const std::string method = parser_ ? std::string(parser_->get().method_string()) : "-";
    const std::string target = parser_ ? std::string(parser_->get().target()) : "-";
    write(server_.error_response(status, message), false, method == "HEAD", method, target);
  }

  /// Hands the request to the pool; the answer comes back to this connection's strand.
  void dispatch() {
    ++requests_;
    const bool keep =
        parser_->get().keep_alive() && requests_ < server_.options_.keep_alive_requests;
    auto req = std::shared_ptr<Request>(new Request(parser_->release()));
    parser_.reset();
    boost::asio::post(server_.work_, [self = shared_from_this(), req, keep] {
      auto res = std::make_shared<Response>();
      self->server_.route(*req, *res);
      const bool head = req->method() == "HEAD";
      boost::asio::post(self->socket_.get_executor(), [self, req, res, keep, head] {
        if (res->next_ && !head) return self->start_stream(std::move(*res), keep, req->path());
        if (res->ended_) res->ended_();
        self->write(std::move(*res), keep, head, req->method(), req->path());
      });
    });
  }

  static void add_headers(detail::bh::fields& to, const Response& res) {
    to.set(detail::bh::field::content_type, res.content_type_);
    to.set("X-Content-Type-Options", "nosniff");
    for (const auto& [name, value] : res.headers_) to.set(name, value);
  }

  /// Writes a whole answer; then reads the next request when `keep`, else closes.
  void write(Response res, bool keep, bool head, const std::string& method,
             const std::string& path) {
    std::fprintf(stderr, "%s %s %d\n", method.c_str(), path.c_str(), res.status_);
    if (server_.observer_) server_.observer_(res.status_);
    auto out = std::make_shared<detail::bh::response<detail::bh::string_body>>();
    out->result(unsigned(res.status_));
    out->version(11);
    add_headers(*out, res);
    out->keep_alive(keep);
    out->body() = std::move(res.body_);
    out->prepare_payload();
    if (head) out->body().clear();  // Content-Length stays that of GET's body
    arm(server_.options_.write_timeout_s);
    detail::bh::async_write(socket_, *out,
                            [self = shared_from_this(), out, keep](Error ec, size_t) {
                              self->timer_.cancel();
                              if (!ec && keep) return self->read_header();
                              if (ec) return self->close();
                              self->linger();
                            });
  }

  /// Closes after an answer the client may still be sending to: stops writing, then reads and
  /// drops what comes for a few seconds, so that closing with unread data (which resets the
  /// connection) does not destroy the answer before the client has read it.
  void linger() {
    Error ignored;
    socket_.shutdown(detail::tcp::socket::shutdown_send, ignored);
    arm(kLingerSeconds);
    drain();
  }

  void drain() {
    socket_.async_read_some(boost::asio::buffer(discard_),
                            [self = shared_from_this()](Error ec, size_t) {
                              if (!ec) return self->drain();
                              self->close();
                            });
  }

  /// Writes the header of a chunked answer, then runs the pull loop on the pool.
  void start_stream(Response res, bool keep, const std::string& path) {
    std::fprintf(stderr, "POST %s 200 (stream)\n", path.c_str());
    if (server_.observer_) server_.observer_(200);
    stream_head_.emplace();
    stream_head_->result(200);
    stream_head_->version(11);
    add_headers(*stream_head_, res);
    stream_head_->keep_alive(keep);
    stream_head_->chunked(true);
    serializer_.emplace(*stream_head_);
    auto body = std::make_shared<Response>(std::move(res));
    arm(server_.options_.write_timeout_s);
    detail::bh::async_write_header(
        socket_, *serializer_, [self = shared_from_this(), body, keep](Error ec, size_t) {
          self->timer_.cancel();
          if (ec) {
            body->ended_();
            return self->close();
          }
          boost::asio::post(self->server_.work_, [self, body, keep] { self->pull(*body, keep); });
        });
  }

  /// The pull loop of a stream (on a pool thread): `next` until it stops, then the last chunk.
  void pull(Response& res, bool keep) {
    StreamSink sink([this](std::string_view bytes) { return write_chunk(bytes, false); });
    while (!sink.done_ && res.next_(sink)) {
    }
    const bool clean = sink.done_ && write_chunk({}, true);
    res.ended_();
    boost::asio::post(socket_.get_executor(), [self = shared_from_this(), clean, keep] {
      if (clean && keep) return self->read_header();
      self->close();
    });
  }

  /// Writes one chunk from the pull loop's thread, directly on the socket (nothing else uses it
  /// while the stream runs): a send per chunk as the client's reads expect, without waiting on
  /// the io threads. False when the client is gone or took more than write_timeout_s.
  bool write_chunk(std::string_view bytes, bool last) {
    if (failed_ || (!last && bytes.empty())) return !failed_;
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
    std::string data = last ? "0\r\n\r\n" : size;
    if (!last) data.append(bytes).append("\r\n");
    const int fd = socket_.native_handle();
    const auto deadline =
        std::chrono::steady_clock::now() + Seconds(server_.options_.write_timeout_s);
    for (size_t sent = 0; sent < data.size();) {
      const ssize_t n =
          ::send(fd, data.data() + sent, data.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        sent += size_t(n);
        continue;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLOUT, 0};
      if ((n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
          left.count() <= 0 || ::poll(&p, 1, int(left.count())) < 0 ||
          (p.revents & (POLLERR | POLLHUP)))
        return !(failed_ = true);
    }
    return true;
  }

  void close() {
    Error ignored;
    timer_.cancel();
    socket_.shutdown(detail::tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
  }

  Server& server_;
  detail::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  boost::beast::flat_buffer buffer_;
  std::optional<detail::bh::request_parser<detail::bh::string_body>> parser_;
  std::optional<detail::bh::response<detail::bh::empty_body>> stream_head_;
  std::optional<detail::bh::response_serializer<detail::bh::empty_body>> serializer_;
  static constexpr int kLingerSeconds = 3;
  static constexpr size_t kReadAhead = 64 << 10;  // bytes read beyond a header's limit
  char discard_[16 << 10];
  std::mutex mutex_;                 // guards the stream's queue: pending_, writing_, failed_
  std::condition_variable written_;  // signalled as the queue drains or a write fails
  std::string pending_, out_;        // queued by the pull loop; being written
  bool writing_ = false, failed_ = false;
  bool refused_ = false, timed_out_ = false;
  size_t requests_ = 0;
};

inline void Server::accept() {
  acceptor_.async_accept(detail::net::make_strand(io_), [this](auto ec, detail::tcp::socket s) {
    if (ec == boost::asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      boost::system::error_code ignored;
      s.set_option(detail::tcp::no_delay(true), ignored);  // a token per write
      const bool full = open_.load() >= options_.max_connections;
      std::make_shared<Connection>(*this, std::move(s), full)->start();
    }
    accept();
  });
}

}  // namespace retnet::serve::http
