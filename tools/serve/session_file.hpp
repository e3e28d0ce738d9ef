// How one session of `retnet serve` lies on disk: what a session holds (Session), the file that
// stores it (SessionFile) and the writer that puts a new version of that file in place
// (SessionFileWriter) without ever leaving a half-written file or a temporary one behind.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <memory>
#include <ostream>
#include <retnet/retnet.hpp>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

namespace retnet::serve {

using State = GenerationState<float>;

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

/// The session as a store of `precision` gives it back: with bfloat16 the values are rounded in
/// memory too, so that a continuation is the same whether the session comes from memory or from
/// its stored bytes.
inline Session at_precision(Session s, StatePrecision precision) {
  if (precision == StatePrecision::kNative || !s.state) return s;
  State rounded = *s.state;
  rounded.model.fold();  // in place: `rounded` is already a copy
  rounded.model.pending.clear();
  for (auto& layer : rounded.model.layers)
    for (Index i = 0; i < layer.size(); ++i)
      layer.data()[i] = bf16_to_float(float_to_bf16(layer.data()[i]));
  s.state = std::make_shared<const State>(std::move(rounded));
  return s;
}

/// A session file that could not be written: `error_number` is the errno of the call that
/// failed, so that a full folder (ENOSPC, EDQUOT, EFBIG: over a file-size limit) can be told from
/// any other failure.
class SessionFileError : public Error {
 public:
  SessionFileError(const std::string& what, int error_number)
      : Error(what + " (" + std::strerror(error_number) + ")"), error_number_(error_number) {}
  int error_number() const { return error_number_; }
  bool folder_full() const {
    return error_number_ == ENOSPC || error_number_ == EDQUOT || error_number_ == EFBIG;
  }

 private:
  int error_number_;
};

/// The file of one session: "RNSESSN1", a u8 (1: a state follows), then save_generation_state
/// (its header carries the model's fingerprint and shapes, checked when read back, and its
/// checksums cover every byte after the u8). A file without a state ends after the u8. A change
/// of any byte is refused on reading: the magic and the u8 are checked by value (a u8 changed
/// from 1 to 0 leaves trailing bytes, from 0 to 1 a missing state), the rest by the checksums.
struct SessionFile {
  static constexpr char kMagic[8] = {'R', 'N', 'S', 'E', 'S', 'S', 'N', '1'};
  /// What the names of temporary files contain (a crash can leave them; the store removes them
  /// when it opens the folder).
  static constexpr const char* kTemporaryMark = ".session.tmp";

  /// Throws FormatError naming what is wrong when the file is not a whole session of `model`,
  /// Error when it cannot be opened.
  static Session read(const std::filesystem::path& path, const RetNetModel<float>& model) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot open session file " + path.string());
    return read(in, model, path.string());
  }

  /// A session's bytes from `in` (a file, or a value from Redis); `name` names them in errors.
  static Session read(std::istream& in, const RetNetModel<float>& model, const std::string& name) {
    char magic[sizeof kMagic] = {};
    in.read(magic, sizeof magic);
    if (!in || !std::equal(magic, magic + sizeof magic, kMagic))
      throw FormatError(name + ": not a retnet session file");
    const int has_state = in.get();
    if (has_state != 0 && has_state != 1) throw FormatError(name + ": malformed session file");
    Session s;
    if (has_state)
      s.state = std::make_shared<const State>(load_generation_state(in, model, name));
    else
      expect_end_of_state(in, name);  // a state whose flag byte was damaged
    return s;
  }

  /// Writes the bytes `read` takes back, the state's values as floats or rounded to bfloat16
  /// (--session-precision). Throws Error when `out` fails.
  static void write(std::ostream& out, const Session& s, const RetNetModel<float>& model,
                    StatePrecision precision) {
    out.write(kMagic, sizeof kMagic);
    out.put(s.state ? 1 : 0);
    if (s.state) save_generation_state(out, *s.state, model.fingerprint(), precision);
    out.flush();
  }
};

/// An output buffer over a file descriptor that keeps the errno of the first write that failed
/// and counts the bytes written.
class DescriptorBuffer : public std::streambuf {
 public:
  explicit DescriptorBuffer(int fd) : fd_(fd), buffer_(1 << 16) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }
  int error() const { return error_; }
  uint64_t written() const { return written_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    const char* p = pbase();
    size_t left = size_t(pptr() - pbase());
    while (left > 0 && error_ == 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = n < 0 ? errno : EIO;
        break;
      }
      p += n;
      left -= size_t(n);
      written_ += uint64_t(n);
    }
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return error_ == 0;
  }

  int fd_;
  std::vector<char> buffer_;
  int error_ = 0;
  uint64_t written_ = 0;
};

/// The next version of one session's file: written under a temporary name beside it and synced
/// (write), then renamed over the file (replace) and the rename synced (sync_folder), so that a
/// crash leaves the old file or the new, never a part. Whatever fails, the temporary file is
/// removed: by the call that failed, or at the latest by the destructor.
class SessionFileWriter {
 public:
  /// Creates the temporary file (exclusively: nothing that lies at its name is followed).
  explicit SessionFileWriter(std::filesystem::path path) : path_(std::move(path)) {
    static std::atomic<uint64_t> counter{0};
    temporary_ = path_.string() + ".tmp" + std::to_string(::getpid()) + "_" +
                 std::to_string(counter.fetch_add(1));
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0) throw SessionFileError("cannot create " + temporary_, errno);
  }
  SessionFileWriter(const SessionFileWriter&) = delete;
  SessionFileWriter& operator=(const SessionFileWriter&) = delete;
  ~SessionFileWriter() { discard(); }

  /// Writes `s` to the temporary file and syncs it to the disk.
  void write(const Session& s, const RetNetModel<float>& model, StatePrecision precision) {
    DescriptorBuffer buffer(fd_);
    std::ostream out(&buffer);
    try {
      SessionFile::write(out, s, model, precision);
    } catch (const Error&) {
      out.setstate(std::ios::badbit);  // save_generation_state saw the stream fail
    }
    if (!out || buffer.error() != 0)
      fail("cannot write " + temporary_, buffer.error() ? buffer.error() : EIO);
    if (::fsync(fd_) != 0) fail("cannot sync " + temporary_, errno);
    const int closed = ::close(fd_);
    fd_ = -1;
    if (closed != 0) fail("cannot write " + temporary_, errno);
    bytes_ = buffer.written();
  }

  /// The size of the written file.
  uint64_t bytes() const { return bytes_; }

  /// Renames the written file over the session's file.
  void replace() {
    if (::rename(temporary_.c_str(), path_.c_str()) != 0)
      fail("cannot rename " + temporary_ + " to " + path_.string(), errno);
    temporary_gone_ = true;
  }

  /// Syncs the folder, so that the rename outlives a crash; false when that failed (the new file
  /// is in place either way).
  bool sync_folder() const {
    const int dir = ::open(path_.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return false;
    const bool synced = ::fsync(dir) == 0;
    ::close(dir);
    return synced;
  }

  /// Closes and removes the temporary file unless it was renamed.
  void discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!temporary_gone_) ::unlink(temporary_.c_str());
    temporary_gone_ = true;
  }

 private:
  [[noreturn]] void fail(const std::string& what, int error_number) {
    discard();
    throw SessionFileError(what, error_number);
  }

  std::filesystem::path path_;
  std::string temporary_;
  int fd_ = -1;
  bool temporary_gone_ = false;  // renamed or removed
  uint64_t bytes_ = 0;
};

}  // namespace retnet::serve
