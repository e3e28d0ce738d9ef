// Test helper: a FIFO (named pipe) standing in for a model file, and a watchdog so that a
// reader which does open it fails the test instead of hanging.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace retnet::testing {

// Creates a FIFO at `path`; while this object lives, a thread opens it for writing whenever a
// reader has it open and closes it at once, so a reader blocked in open() sees an empty file.
class Fifo {
 public:
  explicit Fifo(const std::string& path) : path_(path) {
    ok_ = mkfifo(path.c_str(), 0600) == 0;
    if (ok_) unblocker_ = std::thread([this] { unblock(); });
  }
  ~Fifo() {
    done_ = true;
    if (unblocker_.joinable()) unblocker_.join();
  }
  Fifo(const Fifo&) = delete;
  Fifo& operator=(const Fifo&) = delete;

  bool ok() const { return ok_; }

 private:
  void unblock() {
    while (!done_) {
      // Non-blocking open for writing succeeds only while a reader has the FIFO open.
      const int fd = open(path_.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::string path_;
  bool ok_ = false;
  std::atomic<bool> done_{false};
  std::thread unblocker_;
};

}  // namespace retnet::testing
