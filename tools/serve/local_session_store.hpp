// The session store of one server: states kept in memory up to a budget (least recently used out
// first), written to a folder so that they outlive the process, and read back when a request
// names them.
//
// SessionFile (serve/session_file.hpp) is the only code that knows how a session is stored on
// disk; LocalSessionStore is the only code that touches the folder.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
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

#include "serve/session_file.hpp"
#include "serve/session_store.hpp"

namespace retnet::serve {

/// Sessions by id. A session used by a request is "busy" until the request ends: a second
/// request for it is refused rather than queued behind it, and so is deleting it.
///
/// What a client is told is what the store holds: with a folder, a session's memory changes only
/// after its file was written (a save that fails leaves both as they were), and a session leaves
/// memory only when its file holds it. Without a folder no session is ever pushed out: the memory
/// budget decides how many sessions may exist, each counted at its largest size, and creating one
/// more is refused.
class LocalSessionStore : public SessionStore {
 public:
  /// `dir` empty: memory only. Throws Error when the folder cannot be made, or when a store
  /// without one could not hold a single session in `memory_budget`.
  LocalSessionStore(const RetNetModel<float>& model, size_t memory_budget, std::string dir,
                    SessionQuota quota = {}, StatePrecision precision = StatePrecision::kNative)
      : model_(model),
        precision_(precision),
        budget_(memory_budget),
        dir_(std::move(dir)),
        quota_(quota),
        largest_session_(sizeof(Session) + model.new_state(1).size_bytes() +
                         kMostRecentTokens * sizeof(int32_t)) {
    if (!persistent()) {
      if (memory_budget < largest_session_)
        throw Error("--sessions-memory of " + megabytes(memory_budget) +
                    " MB holds no session of this model (" + megabytes(largest_session_) +
                    " MB each) and there is no --sessions-dir: give more, or a folder");
      return;
    }
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (!std::filesystem::is_directory(dir_))
      throw Error("--sessions-dir " + dir_ + " is not a folder and cannot be created");
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      const std::string name = e.path().filename().string();
      if (name.find(SessionFile::kTemporaryMark) != std::string::npos) {
        std::filesystem::remove(e.path(), ec);  // of a write that a crash interrupted
      } else if (e.path().extension() == ".session" && e.is_regular_file(ec) &&
                 valid_session_id(e.path().stem().string())) {
        const uint64_t size = e.file_size(ec);
        files_[e.path().stem().string()] = ec ? 0 : size;
        disk_bytes_ += ec ? 0 : size;
      }
    }
  }

  bool persistent() const override { return !dir_.empty(); }

  std::string describe() const override {
    return persistent() ? "in memory and " + dir_ : "in memory only";
  }

  /// A new empty session; `id` empty: the store picks one. Sets `id` to the session's id.
  /// Throws SessionRefused beyond the quota or when its file cannot be written.
  Result create(std::string& id) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (id.empty()) {
        do id = random_id();
        while (known(id));
      } else if (known(id)) {
        return Result::kExists;
      }
      check_room_for_one_more();
      insert(id, Session{}, /*busy=*/true);  // the id is taken while its file is written
      ++creating_;
    }
    if (persistent()) try {
        save(id, Session{}, "not created");
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        --creating_;
        erase(entries_.find(id));
        throw;
      }
    std::lock_guard<std::mutex> lock(mutex_);
    --creating_;
    release_locked(entries_.at(id), id);
    return Result::kOk;
  }

  /// Marks the session busy and hands it to `out`: the same state, which nothing changes, so a
  /// request that fails or is cancelled leaves its session untouched. No copy is made here: the
  /// engine copies the state into the request's own on its thread (engine.hpp, start_prefill),
  /// which keeps the copying off the HTTP threads and out of requests that never start. Throws
  /// SessionRefused when the session's file is damaged or cannot be read.
  Result acquire(const std::string& id, Session& out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      if (!on_disk(id)) return Result::kNotFound;
      it = insert(id, read(id), /*busy=*/false);
    }
    Entry& e = it->second;
    if (e.busy) return Result::kBusy;
    e.busy = true;
    lru_.erase(e.lru);
    ++busy_;
    out = e.session;
    return Result::kOk;
  }

  /// Stores what a request left and releases the session. With a folder the file is written
  /// first, and only once it is in place does the session in memory change: when the write
  /// fails (SessionRefused) the session stays as it was, in memory and on disk.
  void commit(const std::string& id, Session s) override {
    s = at_precision(std::move(s), precision_);
    if (persistent()) try {
        save(id, s, "not saved");  // outside the lock: the session is busy, so ours
      } catch (...) {
        release(id);
        throw;
      }
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entries_.at(id);
    memory_bytes_ -= e.bytes;
    e.session = std::move(s);
    e.bytes = e.session.bytes();
    memory_bytes_ += e.bytes;
    release_locked(e, id);
  }

  /// Releases a session unchanged (its request failed or was cancelled).
  void release(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it != entries_.end() && it->second.busy) release_locked(it->second, id);
  }

  Result remove(const std::string& id) override {
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
      forget_file(id);
    }
    return found ? Result::kOk : Result::kNotFound;
  }

  /// Throws SessionRefused when the session's file is damaged or cannot be read.
  std::optional<Info> info(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it != entries_.end())
      return Info{it->second.session.tokens(), it->second.bytes, true, it->second.busy};
    if (!on_disk(id)) return std::nullopt;
    const Session s = read(id);
    return Info{s.tokens(), s.bytes(), false, false};
  }

  Stats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    Stats s;
    s.in_memory = entries_.size();
    s.memory_bytes = memory_bytes_;
    s.busy = busy_;
    s.on_disk = files_.size();
    s.disk_bytes = disk_bytes_;
    s.evicted = evicted_;
    return s;
  }

 private:
  /// The engine keeps at most this many recent tokens in a state (engine.hpp): a session's
  /// largest size counts them.
  static constexpr size_t kMostRecentTokens = 512;

  struct Entry {
    Session session;
    size_t bytes = 0;
    bool busy = false;
    std::list<std::string>::iterator lru;  // valid while not busy
  };
  using Entries = std::map<std::string, Entry>;

  static std::string megabytes(uint64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", double(bytes) / (1 << 20));
    return text;
  }

  std::filesystem::path file(const std::string& id) const {
    return std::filesystem::path(dir_) / (id + ".session");
  }
  /// Whether the folder holds the session's file. One that is missing stays counted (it may be
  /// back: a folder moved away for a while) until the session is deleted or the server restarts.
  bool on_disk(const std::string& id) const {
    std::error_code ec;
    return persistent() && files_.count(id) && std::filesystem::exists(file(id), ec);
  }
  bool known(const std::string& id) const { return entries_.count(id) || files_.count(id); }

  /// Throws SessionRefused kTooMany when one more session would break the quota (sessions in
  /// all) or, without a folder, the memory budget.
  void check_room_for_one_more() const {
    // With a folder every session has a file, but for those whose first file is being written.
    const size_t sessions = persistent() ? files_.size() + creating_ : entries_.size();
    if (sessions >= quota_.max_sessions)
      throw SessionRefused(SessionRefused::Why::kTooMany,
                           "session not created: --sessions-max " +
                               std::to_string(quota_.max_sessions) +
                               " sessions exist; delete one (DELETE /v1/sessions/ID) first");
    if (!persistent() && (entries_.size() + 1) * largest_session_ > budget_)
      throw SessionRefused(
          SessionRefused::Why::kTooMany,
          "session not created: --sessions-memory " + megabytes(budget_) + " MB holds " +
              std::to_string(budget_ / largest_session_) +
              " sessions of this model and there is no --sessions-dir; delete one (DELETE "
              "/v1/sessions/ID) first");
  }
  /// Reads the session's file; a file that is not a whole session of this model is refused,
  /// never continued from and never removed.
  Session read(const std::string& id) {
    try {
      return SessionFile::read(file(id), model_);
    } catch (const FormatError& e) {
      throw SessionRefused(SessionRefused::Why::kDamaged,
                           "session '" + id + "' is damaged and cannot be continued (" + e.what() +
                               "); delete it (DELETE /v1/sessions/" + id + ")");
    } catch (const Error& e) {
      throw SessionRefused(SessionRefused::Why::kUnreadable,
                           "session '" + id + "' cannot be read: " + e.what());
    }
  }

  /// Writes the session's file (called without the lock: the session is busy, so no one else
  /// writes it), within the disk quota. `failed` says what a refusal means ("not saved").
  void save(const std::string& id, const Session& s, const std::string& failed) {
    const std::string what = "session '" + id + "' " + failed + ": ";
    try {
      SessionFileWriter writer(file(id));
      writer.write(s, model_, precision_);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto old = files_.find(id);
        const uint64_t others = disk_bytes_ - (old == files_.end() ? 0 : old->second);
        if (others + writer.bytes() > quota_.disk_bytes)
          throw SessionRefused(
              SessionRefused::Why::kDiskQuota,
              what + "the session files would take " + megabytes(others + writer.bytes()) +
                  " MB, beyond --sessions-disk " + megabytes(quota_.disk_bytes) + " MB");
        writer.replace();
        disk_bytes_ = others + writer.bytes();
        files_[id] = writer.bytes();
      }
      if (!writer.sync_folder())
        std::fprintf(stderr, "retnet serve: warning: cannot sync %s after saving session '%s'\n",
                     dir_.c_str(), id.c_str());
    } catch (const SessionFileError& e) {
      throw SessionRefused(
          e.folder_full() ? SessionRefused::Why::kFolderFull : SessionRefused::Why::kNotSaved,
          what + e.what());
    }
  }

  void forget_file(const std::string& id) {
    auto it = files_.find(id);
    if (it == files_.end()) return;
    disk_bytes_ -= it->second;
    files_.erase(it);
  }

  Entries::iterator insert(const std::string& id, Session s, bool busy) {
    Entry e;
    e.bytes = s.bytes();
    e.session = std::move(s);
    e.busy = busy;
    if (busy) {
      ++busy_;
    } else {
      lru_.push_front(id);
      e.lru = lru_.begin();
    }
    memory_bytes_ += e.bytes;
    return entries_.emplace(id, std::move(e)).first;
  }

  void erase(Entries::iterator it) {
    if (it->second.busy)
      --busy_;
    else
      lru_.erase(it->second.lru);
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

  /// With a folder, least recently used out first until the budget holds (their files hold
  /// them); busy sessions stay. Without one nothing leaves: creation is refused instead.
  void evict() {
    if (!persistent()) return;
    while (memory_bytes_ > budget_ && !lru_.empty()) {
      ++evicted_;
      erase(entries_.find(lru_.back()));
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
  const StatePrecision precision_;  // of the session files
  const size_t budget_;
  const std::string dir_;
  const SessionQuota quota_;
  const size_t largest_session_;  // a state and the most recent tokens it keeps
  mutable std::mutex mutex_;
  Entries entries_;
  std::list<std::string> lru_;             // most recent first; busy sessions are not in it
  std::map<std::string, uint64_t> files_;  // the session files: id -> bytes
  size_t memory_bytes_ = 0, busy_ = 0, creating_ = 0;
  uint64_t disk_bytes_ = 0, evicted_ = 0;
};

}  // namespace retnet::serve
