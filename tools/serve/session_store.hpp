// What the routes of `retnet serve` ask of a session store, whichever it is: one server's memory
// and folder (serve/local_session_store.hpp) or Redis, shared by replicas
// (serve/redis_session_store.hpp). A conversation's whole history is one fixed-size state; a
// request leases its session (busy to every other request), and commits the state it ended in
// or releases the session unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <retnet/retnet.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "serve/session_file.hpp"

namespace retnet::serve {

/// Ids are [A-Za-z0-9_-]{1,64}: safe as a file name as they are, never a path.
inline bool valid_session_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  return true;
}

/// Why the store refused to create, save or read a session; the routes answer each with its
/// status (serve/routes_sessions.hpp). The message names the session and the cause.
class SessionRefused : public Error {
 public:
  enum class Why {
    kTooMany,    // --sessions-max sessions exist, or the memory of a store without a folder is full
    kDiskQuota,  // the session files would take more than --sessions-disk
    kFolderFull,   // the file system refused the bytes (ENOSPC, EDQUOT, EFBIG)
    kNotSaved,     // any other write failure (a read-only folder, ...)
    kDamaged,      // the session's file is not a whole session of this model
    kUnreadable,   // the session's file cannot be opened
    kConflict,     // another request or replica changed the session, or the lease expired
    kUnavailable,  // the store (Redis) cannot be reached
  };
  SessionRefused(Why why, const std::string& message) : Error(message), why_(why) {}
  Why why() const { return why_; }

 private:
  Why why_;
};

/// What the store may hold: sessions in all (in memory and on disk) and bytes of session files.
struct SessionQuota {
  size_t max_sessions = 1024;                  // --sessions-max
  uint64_t disk_bytes = uint64_t(2048) << 20;  // --sessions-disk
};

/// Sessions by id. A session used by a request is "busy" until the request ends: a second
/// request for it is refused rather than queued behind it, and so is deleting it. Thread-safe.
class SessionStore {
 public:
  enum class Result { kOk, kNotFound, kBusy, kExists };

  struct Stats {
    size_t in_memory = 0, memory_bytes = 0, busy = 0, on_disk = 0;
    uint64_t disk_bytes = 0;  // of the session files
    uint64_t evicted = 0;     // out of memory, kept on disk
    uint64_t dropped = 0;     // out of memory and gone: stays 0, the store drops no session
  };

  struct Info {
    int64_t tokens = 0;
    size_t state_bytes = 0;
    bool in_memory = false, busy = false;
  };
  virtual ~SessionStore() = default;

  /// Where the sessions are kept, for the startup line ("in memory and DIR", "redis://...").
  virtual std::string describe() const = 0;

  /// Whether the sessions outlive this process.
  virtual bool persistent() const = 0;

  /// A new empty session; `id` empty: the store picks one. Sets `id` to the session's id.
  /// Throws SessionRefused beyond the quota or when it cannot be stored.
  virtual Result create(std::string& id) = 0;

  /// Marks the session busy and hands it to `out` (the same state, which nothing changes).
  /// Throws SessionRefused when it cannot be read.
  virtual Result acquire(const std::string& id, Session& out) = 0;

  /// Stores what a request left and releases the session; when storing fails (SessionRefused)
  /// the session stays as it was.
  virtual void commit(const std::string& id, Session s) = 0;

  /// Releases a session unchanged (its request failed or was cancelled).
  virtual void release(const std::string& id) = 0;

  virtual Result remove(const std::string& id) = 0;

  /// Throws SessionRefused when the session cannot be read.
  virtual std::optional<Info> info(const std::string& id) = 0;

  virtual Stats stats() const = 0;
};

/// A session held by one request (acquired from the store): released unchanged unless the
/// request commits the state it ended in.
class SessionLease {
 public:
  SessionLease(SessionStore& store, std::string id) : store_(&store), id_(std::move(id)) {}
  SessionLease(const SessionLease&) = delete;
  SessionLease& operator=(const SessionLease&) = delete;
  ~SessionLease() { release(); }

  const std::string& id() const { return id_; }

  void release() {
    if (!store_) return;
    store_->release(id_);
    store_ = nullptr;
  }

  /// Stores `state` (none: the session stays as it was created, empty) and releases the
  /// session; throws, with the session released, when the folder cannot be written.
  void commit(std::optional<State> state) {
    if (!store_) return;
    Session s;
    if (state) s.state = std::make_shared<const State>(std::move(*state));
    SessionStore* store = store_;
    store_ = nullptr;
    store->commit(id_, std::move(s));
  }

 private:
  SessionStore* store_;
  std::string id_;
};

}  // namespace retnet::serve
