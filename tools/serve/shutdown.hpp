// How `retnet serve` stops: SIGINT and SIGTERM are taken by one thread of their own, which then
// runs the server's stop (fail what is running so that every handler returns, stop listening).
// The signals are blocked in every other thread, and a write to a client that has left must not
// kill the process (SIGPIPE is ignored), nor a session file beyond the process's file-size
// limit (SIGXFSZ is ignored: the write fails with EFBIG and the save is refused).
#pragma once

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <functional>
#include <thread>
#include <utility>

namespace retnet::serve {

class StopSignals {
 public:
  /// Blocks SIGINT and SIGTERM in the calling thread, so that every thread started from it
  /// afterwards inherits the mask: make this before the threads of the engine and of HTTP.
  StopSignals() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGXFSZ, SIG_IGN);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  ~StopSignals() { finish(); }

  /// Starts the thread that waits for a signal and then calls `stop`.
  void watch(std::function<void()> stop) {
    thread_ = std::thread([this, stop = std::move(stop)] {
      int sig = 0;
      sigwait(&signals_, &sig);
      if (finishing_) return;
      signalled_ = true;
      std::fprintf(stderr, "retnet serve: signal %d, stopping\n", sig);
      stop();
    });
  }

  /// Ends the watch (the server stopped on its own, or after a signal) and joins the thread.
  void finish() {
    if (!thread_.joinable()) return;
    if (!signalled_) {
      finishing_ = true;
      pthread_kill(thread_.native_handle(), SIGTERM);
    }
    thread_.join();
  }

 private:
  sigset_t signals_;
  std::atomic<bool> signalled_{false}, finishing_{false};
  std::thread thread_;
};

}  // namespace retnet::serve
