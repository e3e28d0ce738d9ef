// Sessions of `retnet serve`: a conversation's whole history is one fixed-size state, kept in
// memory up to a budget (least recently used out first), written to a folder so that it
// outlives the process, and read back when a request names it.
//
// SessionFile is the only code that knows how a session is stored on disk; SessionStore is the
// only code that touches the folder.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <retnet/retnet.hpp>
#include <string>
#include <string_view>
#include <utility>

namespace retnet::serve {

using State = GenerationState<float>;

/// Ids are [A-Za-z0-9_-]{1,64}: safe as a file name as they are, never a path.
inline bool valid_session_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  return true;
}

/// What a session remembers: nothing yet (just created), or where its last request left off
/// (the model state after every token read, the token still to read, the recent tokens for the
/// repetition penalty). The state is never changed in place: a request reads it (the engine
/// copies it into a state of its own) and a commit replaces it, so handing it to a request
/// copies only a pointer.
struct Session {
  std::shared_ptr<const State> state;

  int64_t tokens() const { return state ? state->model.positions.at(0) + 1 : 0; }
  size_t bytes() const {
    return sizeof(Session) +
           (state ? state->model.size_bytes() + state->recent.size() * sizeof(int32_t) : 0);
  }
};

/// The file of one session: "RNSESSN1", a u8 (1: a state follows), then save_generation_state
/// (its header carries the model's fingerprint and shapes, checked when read back, and its
/// checksums cover every byte after the u8). A file without a state ends after the u8.
struct SessionFile {
  static constexpr char kMagic[8] = {'R', 'N', 'S', 'E', 'S', 'S', 'N', '1'};

  /// Written to a temporary name and renamed, so that a crash leaves the old file or the new.
  static void write(const std::filesystem::path& path, const Session& s,
                    const RetNetModel<float>& model) {
    static std::atomic<uint64_t> counter{0};
    const auto tmp = path.string() + ".tmp" + std::to_string(::getpid()) + "_" +
                     std::to_string(counter.fetch_add(1));
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw Error("cannot write session file " + tmp);
      out.write(kMagic, sizeof kMagic);
      const char has_state = s.state ? 1 : 0;
      out.put(has_state);
      if (s.state) save_generation_state(out, *s.state, model.fingerprint());
      out.flush();
      if (!out) {
        std::error_code ec;
        std::filesystem::remove(tmp, ec);
        throw Error("cannot write session file " + tmp);
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
      std::filesystem::remove(tmp, ec);
      throw Error("cannot rename session file to " + path.string());
    }
  }

  static Session read(const std::filesystem::path& path, const RetNetModel<float>& model) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot open session file " + path.string());
    char magic[sizeof kMagic] = {};
    in.read(magic, sizeof magic);
    if (!in || !std::equal(magic, magic + sizeof magic, kMagic))
      throw FormatError(path.string() + ": not a retnet session file");
    const int has_state = in.get();
    if (has_state != 0 && has_state != 1)
      throw FormatError(path.string() + ": malformed session file");
    Session s;
    if (has_state)
      s.state = std::make_shared<const State>(load_generation_state(in, model, path.string()));
    else
      expect_end_of_state(in, path.string());  // a state whose flag byte was damaged
    return s;
  }
};

/// Sessions by id. A session used by a request is "busy" until the request ends: a second
/// request for it is refused rather than queued behind it, and so is deleting it.
class SessionStore {
 public:
  enum class Result { kOk, kNotFound, kBusy, kExists };

  struct Stats {
    size_t in_memory = 0, memory_bytes = 0, busy = 0, on_disk = 0;
    uint64_t evicted = 0, dropped = 0;  // out of memory to disk; out of memory and gone
  };

  /// `dir` empty: memory only (a session pushed out of memory is then lost).
  SessionStore(const RetNetModel<float>& model, size_t memory_budget, std::string dir)
      : model_(model), budget_(memory_budget), dir_(std::move(dir)) {
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(dir_, ec);
      if (!std::filesystem::is_directory(dir_))
        throw Error("--sessions-dir " + dir_ + " is not a folder and cannot be created");
      // Temporary files of writes that a crash interrupted.
      for (const auto& e : std::filesystem::directory_iterator(dir_, ec))
        if (e.path().string().find(".session.tmp") != std::string::npos)
          std::filesystem::remove(e.path(), ec);
    }
  }

  bool persistent() const { return !dir_.empty(); }

  /// A new empty session; `id` empty: the store picks one. Sets `id` to the session's id.
  Result create(std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id.empty()) {
      do id = random_id();
      while (known(id));
    } else if (known(id)) {
      return Result::kExists;
    }
    Session s;
    if (persistent()) SessionFile::write(file(id), s, model_);
    insert(id, std::move(s));
    evict();
    return Result::kOk;
  }

  /// Marks the session busy and hands it to `out`: the same state, which nothing changes, so a
  /// request that fails or is cancelled leaves its session untouched. No copy is made here: the
  /// engine copies the state into the request's own on its thread (engine.hpp, start_prefill),
  /// which keeps the copying off the HTTP threads and out of requests that never start.
  Result acquire(const std::string& id, Session& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      if (!persistent() || !std::filesystem::exists(file(id))) return Result::kNotFound;
      it = insert(id, SessionFile::read(file(id), model_));
    }
    Entry& e = it->second;
    if (e.busy) return Result::kBusy;
    e.busy = true;
    lru_.erase(e.lru);
    ++busy_;
    out = e.session;
    return Result::kOk;
  }

  /// Stores what a request left (written to the folder first) and releases the session.
  void commit(const std::string& id, Session s) {
    std::optional<Error> failed;
    if (persistent()) try {
        SessionFile::write(file(id), s, model_);  // outside the lock: the session is busy, so ours
      } catch (const Error& e) {
        failed = e;
      }
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entries_.at(id);
    memory_bytes_ -= e.bytes;
    e.session = std::move(s);
    e.bytes = e.session.bytes();
    memory_bytes_ += e.bytes;
    release_locked(e, id);
    if (failed) throw *failed;
  }

  /// Releases a session unchanged (its request failed or was cancelled).
  void release(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it != entries_.end() && it->second.busy) release_locked(it->second, id);
  }

  Result remove(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    bool found = false;
    if (it != entries_.end()) {
      if (it->second.busy) return Result::kBusy;
      erase(it);
      found = true;
    }
    if (persistent()) {
      std::error_code ec;
      found = std::filesystem::remove(file(id), ec) || found;
    }
    return found ? Result::kOk : Result::kNotFound;
  }

  struct Info {
    int64_t tokens = 0;
    size_t state_bytes = 0;
    bool in_memory = false, busy = false;
  };
  std::optional<Info> info(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it != entries_.end())
      return Info{it->second.session.tokens(), it->second.bytes, true, it->second.busy};
    if (!persistent() || !std::filesystem::exists(file(id))) return std::nullopt;
    const Session s = SessionFile::read(file(id), model_);
    return Info{s.tokens(), s.bytes(), false, false};
  }

  Stats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    Stats s;
    s.in_memory = entries_.size();
    s.memory_bytes = memory_bytes_;
    s.busy = busy_;
    s.evicted = evicted_;
    s.dropped = dropped_;
    if (persistent()) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(dir_, ec))
        if (e.path().extension() == ".session") ++s.on_disk;
    }
    return s;
  }

 private:
  struct Entry {
    Session session;
    size_t bytes = 0;
    bool busy = false;
    std::list<std::string>::iterator lru;  // valid while not busy
  };
  using Entries = std::map<std::string, Entry>;

  std::filesystem::path file(const std::string& id) const {
    return std::filesystem::path(dir_) / (id + ".session");
  }
  bool known(const std::string& id) const {
    return entries_.count(id) || (persistent() && std::filesystem::exists(file(id)));
  }

  Entries::iterator insert(const std::string& id, Session s) {
    Entry e;
    e.bytes = s.bytes();
    e.session = std::move(s);
    lru_.push_front(id);
    e.lru = lru_.begin();
    memory_bytes_ += e.bytes;
    return entries_.emplace(id, std::move(e)).first;
  }

  void erase(Entries::iterator it) {
    if (!it->second.busy) lru_.erase(it->second.lru);
    memory_bytes_ -= it->second.bytes;
    entries_.erase(it);
  }

  void release_locked(Entry& e, const std::string& id) {
    e.busy = false;
    --busy_;
    lru_.push_front(id);
    e.lru = lru_.begin();
    evict();
  }

  /// Least recently used out first until the budget holds; busy sessions stay.
  void evict() {
    while (memory_bytes_ > budget_ && !lru_.empty()) {
      auto it = entries_.find(lru_.back());
      persistent() ? ++evicted_ : ++dropped_;
      erase(it);
    }
  }

  static std::string random_id() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    std::string id = "s-";
    for (int i = 0; i < 20; ++i) id += digits[rng() % 36];
    return id;
  }

  const RetNetModel<float>& model_;
  const size_t budget_;
  const std::string dir_;
  mutable std::mutex mutex_;
  Entries entries_;
  std::list<std::string> lru_;  // most recent first; busy sessions are not in it
  size_t memory_bytes_ = 0, busy_ = 0;
  uint64_t evicted_ = 0, dropped_ = 0;
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
