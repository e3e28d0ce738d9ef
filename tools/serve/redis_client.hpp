// Connections to Redis (through hiredis) for the session store: an address read from
// `redis://HOST:PORT[/DB]`, commands with binary-safe arguments, and a small pool so that the
// HTTP threads do not queue behind one another's state transfers. A connection that fails is
// dropped and the next command makes a new one, so the store recovers when Redis returns.
#pragma once

#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <retnet/retnet.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace retnet::serve {

/// Redis cannot be reached, or a connection to it failed during a command: the store answers
/// 503 until it is back.
class RedisUnavailable : public Error {
 public:
  using Error::Error;
};

/// `redis://HOST:PORT[/DB]` (PORT 6379 and DB 0 when absent).
struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;

  std::string url() const {
    return "redis://" + host + ":" + std::to_string(port) + "/" + std::to_string(db);
  }

  /// Throws InvalidArgument naming the part of `url` that is wrong.
  static RedisAddress parse(const std::string& url) {
    const std::string scheme = "redis://";
    if (url.compare(0, scheme.size(), scheme) != 0)
      throw InvalidArgument("'" + url + "' is not a redis://HOST:PORT[/DB] address");
    std::string rest = url.substr(scheme.size());
    RedisAddress a;
    if (const size_t slash = rest.find('/'); slash != std::string::npos) {
      a.db = static_cast<int>(number(rest.substr(slash + 1), 0, 1 << 16, url, "database"));
      rest.resize(slash);
    }
    if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
      a.port = static_cast<int>(number(rest.substr(colon + 1), 1, 65535, url, "port"));
      rest.resize(colon);
    }
    if (rest.empty()) throw InvalidArgument("'" + url + "' names no host");
    a.host = rest;
    return a;
  }

 private:
  static long number(const std::string& text, long min, long max, const std::string& url,
                     const char* what) {
    char* end = nullptr;
    errno = 0;
    const long x = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE || x < min || x > max)
      throw InvalidArgument("'" + url + "': the " + what + " must be an integer in [" +
                            std::to_string(min) + ", " + std::to_string(max) + "], got '" + text +
                            "'");
    return x;
  }
};

/// One reply, freed with it.
using RedisReply = std::unique_ptr<redisReply, void (*)(void*)>;

/// Reads a reply's string (bulk or status) as bytes.
inline std::string reply_string(const redisReply& r) {
  return std::string(r.str, r.len);
}

/// How long a connection to Redis may take to open, and a command to be answered.
struct RedisTimeouts {
  std::chrono::milliseconds connect{1000};
  std::chrono::milliseconds command{10000};  // a 1.3B model's state is ~100 MB
};

/// A pool of connections to one Redis server. Thread-safe: each command takes a connection of
/// its own for its duration.
class RedisClient {
 public:
  explicit RedisClient(RedisAddress address, RedisTimeouts timeouts = RedisTimeouts())
      : address_(std::move(address)), timeouts_(timeouts) {}

  const RedisAddress& address() const { return address_; }

  /// Runs one command; its arguments are bytes (no quoting, no formatting). An error reply
  /// throws Error with Redis's message; a connection that cannot be made or breaks throws
  /// RedisUnavailable (and the connection is not reused).
  RedisReply command(const std::vector<std::string_view>& args) {
    Connection c = take();
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    void* raw =
        redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lengths.data());
    if (raw == nullptr) throw RedisUnavailable(lost(c.get()));
    RedisReply reply(static_cast<redisReply*>(raw), freeReplyObject);
    give_back(std::move(c));
    if (reply->type == REDIS_REPLY_ERROR)
      throw Error(address_.url() + " answered: " + reply_string(*reply));
    return reply;
  }

 private:
  using Connection = std::unique_ptr<redisContext, void (*)(redisContext*)>;

  Connection take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (!idle_.empty()) {
        Connection c = std::move(idle_.back());
        idle_.pop_back();
        if (!closed_by_peer(*c)) return c;
      }
    }
    return connect();
  }

  /// An idle connection has nothing to read: readable means Redis closed it (it restarted, or
  /// dropped an idle client), so the first command after a restart gets a fresh connection
  /// instead of a 503.
  static bool closed_by_peer(const redisContext& c) {
    pollfd p{c.fd, POLLIN, 0};
    return ::poll(&p, 1, 0) != 0;
  }

  void give_back(Connection c) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (idle_.size() < kMostIdle) idle_.push_back(std::move(c));
  }

  static timeval to_timeval(std::chrono::milliseconds ms) {
    return {static_cast<time_t>(ms.count() / 1000),
            static_cast<suseconds_t>(ms.count() % 1000 * 1000)};
  }

  Connection connect() {
    const timeval connect_timeout = to_timeval(timeouts_.connect);
    Connection c(redisConnectWithTimeout(address_.host.c_str(), address_.port, connect_timeout),
                 redisFree);
    if (!c) throw RedisUnavailable("cannot reach " + address_.url() + ": out of memory");
    if (c->err) throw RedisUnavailable("cannot reach " + address_.url() + ": " + c->errstr);
    const timeval command_timeout = to_timeval(timeouts_.command);
    if (redisSetTimeout(c.get(), command_timeout) != REDIS_OK)
      throw RedisUnavailable("cannot set a timeout on the connection to " + address_.url());
    if (address_.db != 0) {
      const std::string db = std::to_string(address_.db);
      const char* argv[] = {"SELECT", db.c_str()};
      void* raw = redisCommandArgv(c.get(), 2, argv, nullptr);
      if (raw == nullptr) throw RedisUnavailable(lost(c.get()));
      RedisReply reply(static_cast<redisReply*>(raw), freeReplyObject);
      if (reply->type == REDIS_REPLY_ERROR)
        throw Error(address_.url() + " refused the database: " + reply_string(*reply));
    }
    return c;
  }

  std::string lost(const redisContext* c) const {
    return "lost the connection to " + address_.url() + ": " +
           (c->err ? std::string(c->errstr) : std::string("no reply"));
  }

  static constexpr size_t kMostIdle = 16;
  const RedisAddress address_;
  const RedisTimeouts timeouts_;
  std::mutex mutex_;
  std::vector<Connection> idle_;
};

}  // namespace retnet::serve
