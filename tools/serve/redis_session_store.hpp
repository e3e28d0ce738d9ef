// The session store of replicas of `retnet serve` that share their sessions: every session's
// state lives in Redis (the bytes of a session file), with a version, and this process keeps the
// most recently used ones in memory as a cache. Any replica continues any conversation, and a
// replica that dies loses nothing that was committed.
//
// Keys, for a model whose fingerprint is F (replicas of different models never meet):
//   retnet:F:s:ID      a hash {state, version, tokens, bytes}
//   retnet:F:lease:ID  the token of the request that holds the session, expiring after --lease
//   retnet:F:ids       a sorted set of the session ids, scored by when they expire (+inf: never)
// Each step that reads and writes several keys is one Lua script, so it is atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <retnet/retnet.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "serve/redis_client.hpp"
#include "serve/session_file.hpp"
#include "serve/session_store.hpp"

namespace retnet::serve {

namespace redis_scripts {

/// KEYS: session, ids. ARGV: state, tokens, bytes, max sessions, now (ms), expiry score, ttl (ms),
/// id. Returns 1 (created), 0 (exists) or -1 (the quota is full).
inline const char* const kCreate = R"LUA(
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[5])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return -1 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'version', 1, 'tokens', ARGV[2], 'bytes', ARGV[3])
if tonumber(ARGV[7]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[7]) end
redis.call('ZADD', KEYS[2], ARGV[6], ARGV[8])
return 1
)LUA";

/// KEYS: session, lease. ARGV: token, lease (ms). Returns the version, -1 (no such session) or
/// -2 (held by another request).
inline const char* const kAcquire = R"LUA(
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return -2 end
return tonumber(redis.call('HGET', KEYS[1], 'version'))
)LUA";

/// KEYS: session, lease, ids. ARGV: token, version read, state, tokens, bytes, ttl (ms), expiry
/// score, id. Returns the new version, -1 (the lease was lost), -2 (the session is gone) or -3
/// (another request changed it).
inline const char* const kCommit = R"LUA(
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[2])
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
if tonumber(redis.call('HGET', KEYS[1], 'version')) ~= tonumber(ARGV[2]) then return -3 end
local v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'tokens', ARGV[4], 'bytes', ARGV[5])
if tonumber(ARGV[6]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
redis.call('ZADD', KEYS[3], ARGV[7], ARGV[8])
return v
)LUA";

/// KEYS: lease. ARGV: token. Deletes the lease if it is still this token's.
inline const char* const kRelease = R"LUA(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
)LUA";

/// KEYS: lease. ARGV: token, lease (ms). Extends the lease if it is still this token's.
inline const char* const kRenew = R"LUA(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
)LUA";

/// KEYS: session, lease, ids. ARGV: id. Returns 1 (deleted), 0 (no such session), -1 (busy).
inline const char* const kRemove = R"LUA(
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
redis.call('ZREM', KEYS[3], ARGV[1])
return redis.call('DEL', KEYS[1])
)LUA";

}  // namespace redis_scripts

/// What a Redis store may hold and how long a request's lease lasts.
struct RedisStoreOptions {
  size_t memory_budget = size_t(512) << 20;  // --sessions-memory: the cache in this process
  size_t max_sessions = 1024;                // --sessions-max, over every replica
  std::chrono::milliseconds lease{10000};    // renewed while the request runs
  std::chrono::seconds ttl{0};               // --session-ttl: 0 = sessions never expire
  StatePrecision precision = StatePrecision::kNative;  // --session-precision
};

class RedisSessionStore : public SessionStore {
 public:
  /// Asks Redis once whether it answers: when it does not, says so on stderr and starts anyway
  /// (requests with a session are answered 503 until it is back).
  RedisSessionStore(const RetNetModel<float>& model, RedisAddress address,
                    RedisStoreOptions options = {})
      : model_(model),
        redis_(std::move(address)),
        options_(options),
        prefix_("retnet:" + hex(model.fingerprint()) + ":"),
        token_prefix_(random_token() + "-") {
    try {
      redis_.command({"PING"});
    } catch (const Error& e) {
      std::fprintf(stderr,
                   "retnet serve: warning: %s; sessions are unavailable (503) until it "
                   "answers\n",
                   e.what());
    }
    renewer_ = std::thread([this] { renew_leases(); });
  }

  ~RedisSessionStore() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    renewer_.join();
  }

  std::string describe() const override {
    return "in Redis at " + redis_.address().url() + " (a cache of " +
           std::to_string(options_.memory_budget >> 20) + " MB here)";
  }
  bool persistent() const override { return true; }

  Result create(std::string& id) override {
    const bool named = !id.empty();
    if (!named) id = random_id();
    const std::string bytes = encode(Session{}, id, "not created");
    const int64_t r =
        run(redis_scripts::kCreate, {key(id), ids_key()},
            {bytes, "0", std::to_string(bytes.size()), std::to_string(options_.max_sessions),
             std::to_string(now_ms()), expiry_score(), std::to_string(ttl_ms()), id},
            id, "not created");
    if (r == 0 && !named) return create(id = std::string());  // a random id that exists
    if (r == 0) return Result::kExists;
    if (r < 0)
      throw SessionRefused(SessionRefused::Why::kTooMany,
                           "session not created: --sessions-max " +
                               std::to_string(options_.max_sessions) +
                               " sessions exist; delete one (DELETE /v1/sessions/ID) first");
    return Result::kOk;
  }

  Result acquire(const std::string& id, Session& out) override {
    const std::string token = token_prefix_ + std::to_string(next_token_++);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (held_.count(id)) return Result::kBusy;
      held_[id] = Held{token, 0};  // reserved here while Redis is asked
    }
    int64_t version;
    try {
      version = run(redis_scripts::kAcquire, {key(id), lease_key(id)},
                    {token, std::to_string(options_.lease.count())}, id, "not read");
    } catch (...) {
      forget_hold(id);
      throw;
    }
    if (version < 0) {
      forget_hold(id);
      return version == -1 ? Result::kNotFound : Result::kBusy;
    }
    try {
      out = cached_or_fetched(id, version);
    } catch (...) {
      release(id);
      throw;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    held_[id].version = version;
    return Result::kOk;
  }

  void commit(const std::string& id, Session s) override {
    Held held;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held = held_.at(id);
    }
    std::string bytes;
    int64_t version;
    try {
      s = at_precision(std::move(s), options_.precision);
      bytes = encode(s, id, "not saved");
      version = run(redis_scripts::kCommit, {key(id), lease_key(id), ids_key()},
                    {held.token, std::to_string(held.version), bytes, std::to_string(s.tokens()),
                     std::to_string(bytes.size()), std::to_string(ttl_ms()), expiry_score(), id},
                    id, "not saved");
    } catch (...) {
      release(id);
      throw;
    }
    forget_hold(id);
    if (version < 0) {
      const char* why = version == -1   ? "its lease expired (the request outlasted --lease)"
                        : version == -2 ? "it was deleted or expired meanwhile"
                                        : "another request changed it meanwhile";
      throw SessionRefused(SessionRefused::Why::kConflict,
                           "session '" + id + "' not saved: " + why);
    }
    remember(id, version, std::move(s));
  }

  void release(const std::string& id) override {
    std::string token;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = held_.find(id);
      if (it == held_.end()) return;
      token = it->second.token;
      held_.erase(it);
    }
    try {
      redis_.command({"EVAL", redis_scripts::kRelease, "1", lease_key(id), token});
    } catch (const Error& e) {  // the lease expires by itself
      std::fprintf(stderr, "retnet serve: warning: session '%s' not released in Redis: %s\n",
                   id.c_str(), e.what());
    }
  }

  Result remove(const std::string& id) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (held_.count(id)) return Result::kBusy;
    }
    const int64_t r =
        run(redis_scripts::kRemove, {key(id), lease_key(id), ids_key()}, {id}, id, "not deleted");
    if (r < 0) return Result::kBusy;
    std::lock_guard<std::mutex> lock(mutex_);
    drop_cached(id);
    return r == 1 ? Result::kOk : Result::kNotFound;
  }

  std::optional<Info> info(const std::string& id) override {
    RedisReply reply = guarded(id, "not read", [&] {
      return redis_.command({"HMGET", key(id), "tokens", "bytes"});
    });
    if (reply->elements != 2 || reply->element[0]->type != REDIS_REPLY_STRING) return std::nullopt;
    Info info;
    info.tokens = std::stoll(reply_string(*reply->element[0]));
    info.state_bytes = static_cast<size_t>(std::stoull(reply_string(*reply->element[1])));
    std::lock_guard<std::mutex> lock(mutex_);
    info.in_memory = cache_.count(id) > 0;
    info.busy = held_.count(id) > 0;
    return info;
  }

  Stats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    Stats s;
    s.in_memory = cache_.size();
    s.memory_bytes = memory_bytes_;
    s.busy = held_.size();
    s.evicted = evicted_;
    return s;
  }

 private:
  struct Held {
    std::string token;
    int64_t version = 0;
  };
  struct Cached {
    int64_t version;
    Session session;
    std::list<std::string>::iterator lru;
  };

  std::string key(const std::string& id) const { return prefix_ + "s:" + id; }
  std::string lease_key(const std::string& id) const { return prefix_ + "lease:" + id; }
  std::string ids_key() const { return prefix_ + "ids"; }
  int64_t ttl_ms() const { return int64_t(options_.ttl.count()) * 1000; }
  static int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  std::string expiry_score() const {
    return ttl_ms() > 0 ? std::to_string(now_ms() + ttl_ms()) : "+inf";
  }

  /// Runs `f`, turning Redis's failures into the store's refusals: unreachable is kUnavailable
  /// (503), a command Redis refuses (out of memory, ...) kNotSaved.
  template <class F>
  auto guarded(const std::string& id, const char* failed, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const RedisUnavailable& e) {
      throw SessionRefused(SessionRefused::Why::kUnavailable,
                           "session '" + id + "' " + failed +
                               ": the session store is unavailable (" + e.what() + ")");
    } catch (const SessionRefused&) {
      throw;
    } catch (const Error& e) {
      throw SessionRefused(SessionRefused::Why::kNotSaved,
                           "session '" + id + "' " + failed + ": " + e.what());
    }
  }

  /// Runs a script and reads its integer answer.
  int64_t run(const char* script, const std::vector<std::string>& keys,
              const std::vector<std::string>& args, const std::string& id, const char* failed) {
    return guarded(id, failed, [&] {
      const std::string nkeys = std::to_string(keys.size());
      std::vector<std::string_view> argv = {"EVAL", script, nkeys};
      for (const auto& k : keys) argv.push_back(k);
      for (const auto& a : args) argv.push_back(a);
      RedisReply reply = redis_.command(argv);
      if (reply->type != REDIS_REPLY_INTEGER)
        throw Error(redis_.address().url() + " answered a script with no integer");
      return static_cast<int64_t>(reply->integer);
    });
  }

  std::string encode(const Session& s, const std::string& id, const char* failed) const {
    std::ostringstream out(std::ios::binary);
    try {
      SessionFile::write(out, s, model_, options_.precision);
    } catch (const Error& e) {
      throw SessionRefused(SessionRefused::Why::kNotSaved,
                           "session '" + id + "' " + failed + ": " + e.what());
    }
    return std::move(out).str();
  }

  Session cached_or_fetched(const std::string& id, int64_t version) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = cache_.find(id);
      if (it != cache_.end() && it->second.version == version) {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        return it->second.session;
      }
    }
    RedisReply reply = guarded(id, "not read", [&] {
      return redis_.command({"HGET", key(id), "state"});
    });
    if (reply->type != REDIS_REPLY_STRING)
      throw SessionRefused(SessionRefused::Why::kUnreadable,
                           "session '" + id + "' has no state in " + redis_.address().url());
    std::istringstream in(reply_string(*reply), std::ios::binary);
    Session s;
    try {
      s = SessionFile::read(in, model_, "session '" + id + "' in Redis");
    } catch (const FormatError& e) {
      throw SessionRefused(SessionRefused::Why::kDamaged,
                           "session '" + id + "' is damaged and cannot be continued (" + e.what() +
                               "); delete it (DELETE /v1/sessions/" + id + ")");
    }
    remember(id, version, s);
    return s;
  }

  /// Keeps a session's version in the cache, least recently used out beyond the budget.
  void remember(const std::string& id, int64_t version, Session s) {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_cached(id);
    if (s.bytes() > options_.memory_budget) return;
    lru_.push_front(id);
    memory_bytes_ += s.bytes();
    cache_[id] = Cached{version, std::move(s), lru_.begin()};
    while (memory_bytes_ > options_.memory_budget && !lru_.empty()) {
      drop_cached(lru_.back());
      ++evicted_;
    }
  }

  void drop_cached(const std::string& id) {
    auto it = cache_.find(id);
    if (it == cache_.end()) return;
    memory_bytes_ -= it->second.session.bytes();
    lru_.erase(it->second.lru);
    cache_.erase(it);
  }

  void forget_hold(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    held_.erase(id);
  }

  /// Extends the leases of the sessions this process holds, every third of --lease, so that a
  /// long request keeps its session while a process that died lets go of its own.
  void renew_leases() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, options_.lease / 3, [this] { return stopping_; })) {
      const std::map<std::string, Held> held = held_;
      lock.unlock();
      for (const auto& [id, h] : held) try {
          redis_.command({"EVAL", redis_scripts::kRenew, "1", lease_key(id), h.token,
                          std::to_string(options_.lease.count())});
        } catch (const Error&) {  // Redis away: the commit will say so
        }
      lock.lock();
    }
  }

  static std::string hex(uint64_t x) {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(x));
    return text;
  }
  static std::string random_token() {
    std::random_device device;
    return hex((uint64_t(device()) << 32) ^ device());
  }
  static std::string random_id() { return "s-" + random_token() + random_token().substr(0, 4); }

  const RetNetModel<float>& model_;
  RedisClient redis_;
  const RedisStoreOptions options_;
  const std::string prefix_, token_prefix_;
  std::atomic<uint64_t> next_token_{1};
  mutable std::mutex mutex_;
  std::map<std::string, Held> held_;  // sessions leased by this process's requests
  std::map<std::string, Cached> cache_;
  std::list<std::string> lru_;  // cached ids, most recent first
  size_t memory_bytes_ = 0;
  uint64_t evicted_ = 0;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread renewer_;
};

}  // namespace retnet::serve
