// The HTTP layer of `retnet serve`: the only file that knows the HTTP library (cpp-httplib).
// Routes see Request, Response and StreamSink, which name nothing of the library, so replacing
// it changes this file alone. What it adds to the library: a listen backlog set at run time, a
// thread pool of a chosen size, one line on stderr per request, and the answers the library
// gives itself (no route, body too large, malformed request, a handler that threw) handed to
// the server's ErrorReply so that they have its JSON shape.
#pragma once

#include <httplib.h>
// httplib.h includes <resolv.h>, whose macro `_res` would rename a parameter in Eigen's products.
#undef _res

#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace retnet::serve::http {

/// A request, valid while its handler runs.
class Request {
 public:
  const std::string& method() const { return r_.method; }
  const std::string& path() const { return r_.path; }
  const std::string& body() const { return r_.body; }
  /// Group `i` (from 1) of the route's pattern in the path.
  std::string param(size_t i) const { return r_.matches[i]; }
  bool has_header(const char* name) const { return r_.has_header(name); }
  /// The header's value; empty when absent.
  std::string header(const char* name) const { return r_.get_header_value(name); }

 private:
  friend class Server;
  explicit Request(const httplib::Request& r) : r_(r) {}
  const httplib::Request& r_;
};

/// Where a streamed answer writes.
class StreamSink {
 public:
  /// False when the client is gone (the stream then ends).
  bool write(std::string_view bytes) { return sink_.write(bytes.data(), bytes.size()); }
  /// The answer is complete.
  void done() { sink_.done(); }

 private:
  friend class Response;
  explicit StreamSink(httplib::DataSink& sink) : sink_(sink) {}
  httplib::DataSink& sink_;
};

/// The answer to a request: a whole body, or a stream written piece by piece.
class Response {
 public:
  void send(int status, std::string body, const char* content_type) {
    r_.status = status;
    r_.set_content(std::move(body), content_type);
  }
  void set_header(const char* name, const std::string& value) { r_.set_header(name, value); }

  /// Streams with status 200 after the handler returns: `next` is called on an HTTP thread until
  /// it returns false (the client is gone, or it gave up) or calls sink.done(); `ended` once
  /// when the stream ends, whichever way.
  void stream(const char* content_type, std::function<bool(StreamSink&)> next,
              std::function<void()> ended) {
    r_.set_chunked_content_provider(
        content_type,
        [next = std::move(next)](size_t, httplib::DataSink& sink) {
          StreamSink out(sink);
          return next(out);
        },
        [ended = std::move(ended)](bool) { ended(); });
  }

 private:
  friend class Server;
  explicit Response(httplib::Response& r) : r_(r) {}
  httplib::Response& r_;
};

using Handler = std::function<void(const Request&, Response&)>;
/// Runs before routing; true when it has answered (the request goes no further).
using Gate = std::function<bool(const Request&, Response&)>;
/// Writes the answer for an HTTP-level error the library met itself.
using ErrorReply = std::function<void(Response&, int status, const std::string& message)>;

struct ServerOptions {
  size_t threads = 64;                // connections served at once (a stream holds one)
  size_t max_body = 1 << 20;          // larger request bodies are answered 413
  size_t keep_alive_requests = 1000;  // requests on one connection before it is closed
  int backlog = 512;                  // connections waiting to be accepted
};

/// Routes are regular expressions matched against the whole path; their groups are
/// Request::param(1), param(2), ...
class Server {
 public:
  Server(const ServerOptions& options, ErrorReply error_reply)
      : options_(options), error_reply_(std::move(error_reply)) {
    const size_t threads = options_.threads;
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http_.set_tcp_nodelay(true);  // a token per write: no waiting for the previous one's ACK
    http_.set_payload_max_length(options_.max_body);
    http_.set_keep_alive_max_count(options_.keep_alive_requests);
    http_.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });
    http_.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          Response out(res);
          error_reply_(out, res.status, error_message(req, res.status));
          return httplib::Server::HandlerResponse::Handled;
        }));
    http_.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          Response out(res);
          error_reply_(out, 500, "internal error");
        });
  }

  void get(const std::string& pattern, Handler handler) { http_.Get(pattern, wrap(handler)); }
  void post(const std::string& pattern, Handler handler) { http_.Post(pattern, wrap(handler)); }
  void del(const std::string& pattern, Handler handler) { http_.Delete(pattern, wrap(handler)); }

  void set_gate(Gate gate) {
    http_.set_pre_routing_handler(
        [gate = std::move(gate)](const httplib::Request& req, httplib::Response& res) {
          Response out(res);
          return gate(Request(req), out) ? httplib::Server::HandlerResponse::Handled
                                         : httplib::Server::HandlerResponse::Unhandled;
        });
  }

  /// Binds to host:port (port 0: any free port); returns the port, or -1 with errno set.
  int bind(const std::string& host, int port) {
    if (port == 0)
      port = http_.bind_to_any_port(host);
    else if (!http_.bind_to_port(host, port))
      port = -1;
    // httplib's backlog is fixed at build time (5 in Debian's library): a burst of clients would
    // have their connections retried a second later. listen() on a listening socket only changes
    // its backlog.
    if (port >= 0) ::listen(http_.svr_sock_, options_.backlog);
    return port;
  }

  /// Serves until stop(); false when listening failed.
  bool listen() { return http_.listen_after_bind(); }
  void stop() { http_.stop(); }

 private:
  /// httplib::Server with its listening socket in reach, for bind()'s backlog.
  class Library : public httplib::Server {
    friend class http::Server;
  };

  static httplib::Server::Handler wrap(Handler handler) {
    return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
      Response out(res);
      handler(Request(req), out);
    };
  }

  static std::string error_message(const httplib::Request& req, int status) {
    if (status == 404) return "no route for " + req.method + " " + req.path;
    if (status == 413) return "the request body is larger than this server's limit";
    if (status == 400) return "malformed HTTP request";
    return "HTTP status " + std::to_string(status);
  }

  ServerOptions options_;
  ErrorReply error_reply_;
  Library http_;
};

}  // namespace retnet::serve::http
