// Writing a file of a model folder without following what already lies at its name.
//
// A ReplacingFile is written under a fresh temporary name in the destination's folder, then
// renamed over the destination. rename() acts on the name itself: a symbolic link at the
// destination (dangling or not) is replaced by the file, never written through, so a prepared
// link cannot make the writer create or overwrite a file elsewhere. The temporary file is created
// with exclusive creation (fopen mode "x": O_CREAT | O_EXCL, which refuses any existing entry,
// link included). A write that fails midway leaves the destination as it was, not truncated.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "retnet/core/error.hpp"

namespace retnet {

class ReplacingFile {
 public:
  /// Creates the temporary file beside `path`; throws Error when it cannot be created.
  explicit ReplacingFile(std::string path) : path_(std::move(path)) {
    std::random_device random;
    int error = EEXIST;
    for (int attempt = 0; attempt < 16 && !file_ && error == EEXIST; ++attempt) {
      temporary_ = path_ + ".partial-" + std::to_string(random());
      errno = 0;
      file_ = std::fopen(temporary_.c_str(), "wbx");
      error = errno;
    }
    if (!file_)
      throw Error(path_ + ": cannot create a file beside it to write (" +
                  std::string(std::strerror(error ? error : EEXIST)) + ")");
  }
  ReplacingFile(const ReplacingFile&) = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;

  /// Removes the temporary file unless commit() succeeded.
  ~ReplacingFile() {
    if (file_) std::fclose(file_);
    if (!committed_) std::remove(temporary_.c_str());
  }

  void write(const void* data, size_t bytes) {
    if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes)
      throw Error(path_ + ": write failed (" + std::string(std::strerror(errno)) + ")");
  }

  /// Closes the temporary file and renames it to the destination, replacing what was there.
  void commit() {
    std::FILE* file = file_;
    file_ = nullptr;
    if (std::fclose(file) != 0)
      throw Error(path_ + ": write failed (" + std::string(std::strerror(errno)) + ")");
    if (std::rename(temporary_.c_str(), path_.c_str()) != 0)
      throw Error(path_ + ": cannot rename " + temporary_ + " to it (" +
                  std::string(std::strerror(errno)) + ")");
    committed_ = true;
  }

 private:
  std::string path_, temporary_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

}  // namespace retnet
