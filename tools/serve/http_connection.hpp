// One client connection of `retnet serve`'s HTTP layer (serve/http.hpp says what the layer
// does): reading and checking requests, writing answers, and the answers that are pending — a
// deferred answer or a stream, polled on the handler pool whenever woken, while the connection
// watches its socket for the client leaving.
#pragma once

#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "serve/http.hpp"

namespace retnet::serve::http {

/// One client connection, on its own strand: reads requests one after another, hands each to
/// the pool, writes the answer (now, or when its pending poll has it), and enforces the
/// deadlines with one timer.
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
      boost::asio::post(self->socket_.get_executor(), [self, req, res, keep] {
        const bool head = req->method() == "HEAD";
        if (res->poll_ || (res->next_ && !head))
          return self->start_pending(res, keep, head, req->method(), req->path());
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

  // ------------------------------------------------------------ pending answers
  // One answer at a time is pending on a connection (requests behind it wait unread). Its state
  // lives on the strand; a poll runs on the pool with the answer's own objects and reports back
  // to the strand, so polls of one answer never overlap, and a wake during a poll or a write
  // polls again after it.

  /// Starts a deferred answer or a stream (after writing its header).
  void start_pending(std::shared_ptr<Response> res, bool keep, bool head, std::string method,
                     std::string path) {
    ++generation_;  // before the wake, which carries it
    pending_.emplace(Pending{std::move(res), std::make_shared<const Wake>(make_wake()), keep, head,
                             std::move(method), std::move(path)});
    watch_client();
    heartbeat();
    if (!pending_->res->next_) return poll_now();
    std::fprintf(stderr, "%s %s 200 (stream)\n", pending_->method.c_str(), pending_->path.c_str());
    if (server_.observer_) server_.observer_(200);
    stream_head_.emplace();
    stream_head_->result(200);
    stream_head_->version(11);
    add_headers(*stream_head_, *pending_->res);
    stream_head_->keep_alive(keep);
    stream_head_->chunked(true);
    serializer_.emplace(*stream_head_);
    pending_->writing = true;
    arm(server_.options_.write_timeout_s);
    detail::bh::async_write_header(socket_, *serializer_,
                                   [self = shared_from_this()](Error ec, size_t) {
                                     self->timer_.cancel();
                                     self->pending_->writing = false;
                                     if (ec) return self->end_pending(false);
                                     self->poll_now();
                                   });
  }

  /// The Wake handed to the answer's producer: holds the connection weakly.
  Wake make_wake() {
    std::weak_ptr<Connection> weak = shared_from_this();
    const uint64_t generation = generation_;
    return [weak, generation] {
      if (auto self = weak.lock())
        boost::asio::post(self->socket_.get_executor(), [self, generation] {
          if (self->generation_ == generation) self->poll_now();
        });
    };
  }

  /// Polls the pending answer on the pool, unless a poll or a write is under way (then once
  /// more after it).
  void poll_now() {
    if (!pending_) return;
    Pending& p = *pending_;
    if (p.polling || p.writing) {
      p.woken = true;
      return;
    }
    p.polling = true;
    p.woken = false;
    auto sink = std::make_shared<StreamSink>();
    sink->client_gone_ = p.client_gone;
    sink->wake_ = p.wake;
    boost::asio::post(
        server_.work_, [self = shared_from_this(), res = p.res, sink, gone = p.client_gone] {
          bool finished = false;
          try {
            if (res->next_) {
              finished = !res->next_(*sink) || sink->done_;
            } else {
              const PollContext context{*sink->wake_, gone};
              finished = res->poll_(*res, context);
            }
          } catch (...) {
            // A failed poll ends its answer: a deferred one with a 500, a stream where it stands.
            if (!res->next_) self->server_.error_reply_(*res, 500, "internal error");
            finished = true;
          }
          boost::asio::post(self->socket_.get_executor(),
                            [self, sink, finished] { self->polled(*sink, finished); });
        });
  }

  /// Back on the strand after a poll: sends what it gave, ends the answer, or waits.
  void polled(StreamSink& sink, bool finished) {
    Pending& p = *pending_;
    p.polling = false;
    if (!p.res->next_) {
      if (!finished) return p.woken ? poll_now() : void();
      if (p.client_gone) return end_pending(false);
      p.res->poll_ = nullptr;
      const Pending done = std::move(p);
      stop_pending();
      return write(std::move(*done.res), done.keep, done.head, done.method, done.path);
    }
    const bool clean = sink.done_;
    if (sink.out_.empty() && !clean) {
      if (finished || p.client_gone) return end_pending(false);
      return p.woken ? poll_now() : void();
    }
    chunk_.clear();
    if (!sink.out_.empty()) {
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", sink.out_.size());
      chunk_.append(size).append(sink.out_).append("\r\n");
    }
    if (clean) chunk_.append("0\r\n\r\n");
    p.writing = true;
    arm(server_.options_.write_timeout_s);
    boost::asio::async_write(socket_, boost::asio::buffer(chunk_),
                             [self = shared_from_this(), clean, finished](Error ec, size_t) {
                               self->timer_.cancel();
                               self->pending_->writing = false;
                               if (ec) return self->end_pending(false);
                               if (clean || finished) return self->end_pending(clean);
                               if (self->pending_->woken) self->poll_now();
                             });
  }

  /// Watches the socket while an answer is pending: the client closing it (a read of 0 bytes,
  /// or an error) is told to the next poll. Bytes of a next request end the watch.
  void watch_client() {
    socket_.async_wait(detail::tcp::socket::wait_read, [self = shared_from_this(),
                                                        generation = generation_](Error ec) {
      if (ec || !self->pending_ || self->generation_ != generation) return;
      char byte;
      const ssize_t n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) return;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return self->watch_client();
      self->pending_->client_gone = true;
      self->poll_now();
    });
  }

  /// Polls the pending answer every second, so that it notices what no wake tells (a stream's
  /// keep-alive, a client gone while nothing was written).
  void heartbeat() {
    heartbeat_.expires_after(Seconds(1));
    heartbeat_.async_wait([self = shared_from_this(), generation = generation_](Error ec) {
      if (ec || !self->pending_ || self->generation_ != generation) return;
      self->poll_now();
      self->heartbeat();
    });
  }

  void stop_pending() {
    pending_.reset();
    ++generation_;
    heartbeat_.cancel();
    Error ignored;
    socket_.cancel(ignored);  // the watch
  }

  /// Ends a stream (clean: its last chunk is out) or an answer whose client has left.
  void end_pending(bool clean) {
    if (!pending_) return;
    const bool keep = pending_->keep;
    if (pending_->res->ended_) pending_->res->ended_();
    stop_pending();
    if (clean && keep) return read_header();
    close();
  }

  void close() {
    Error ignored;
    timer_.cancel();
    socket_.shutdown(detail::tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
  }

  /// The answer pending on this connection, and where its polls and writes stand.
  struct Pending {
    std::shared_ptr<Response> res;
    std::shared_ptr<const Wake> wake;  // made once, handed to every poll
    bool keep = false, head = false;
    std::string method, path;
    bool polling = false, writing = false, woken = false, client_gone = false;
  };

  Server& server_;
  detail::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer heartbeat_{socket_.get_executor()};
  boost::beast::flat_buffer buffer_;
  std::optional<detail::bh::request_parser<detail::bh::string_body>> parser_;
  std::optional<detail::bh::response<detail::bh::empty_body>> stream_head_;
  std::optional<detail::bh::response_serializer<detail::bh::empty_body>> serializer_;
  std::optional<Pending> pending_;
  uint64_t generation_ = 0;  // of the pending answer: wakes and watches of an older one do nothing
  std::string chunk_;        // the chunk being written
  static constexpr int kLingerSeconds = 3;
  static constexpr size_t kReadAhead = 64 << 10;  // bytes read beyond a header's limit
  char discard_[16 << 10];
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
