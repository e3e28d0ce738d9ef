// Test helper: a redis-server of its own on a free loopback port, with its files in a folder the
// test owns (append-only persistence on, so that a restart keeps the data), stopped with the test.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace retnet::testing {

class RedisServer {
 public:
  /// Starts redis-server with its files in `dir`; throws when it does not answer within 10 s.
  explicit RedisServer(std::string dir) : dir_(std::move(dir)), port_(free_port()) { start(); }
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  /// Stops the server (SIGTERM: it writes its append-only file and exits).
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  /// Starts it again on the same port and folder.
  void start() {
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_), log = dir_ + "/redis.log";
      ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
               "--dir", dir_.c_str(), "--appendonly", "yes", "--save", "", "--daemonize", "no",
               "--loglevel", "warning", "--logfile", log.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      if (answers()) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("redis-server did not start (apt-get install redis-server)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("redis-server did not answer on port " + std::to_string(port_));
  }

 private:
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size);
    ::close(fd);
    return ntohs(a.sin_port);
  }

  bool answers() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (ok) {
      const char ping[] = "PING\r\n";
      char reply[8] = {};
      ok = ::write(fd, ping, sizeof ping - 1) == sizeof ping - 1 && ::read(fd, reply, 5) == 5 &&
           std::string(reply, 5) == "+PONG";
    }
    ::close(fd);
    return ok;
  }

  std::string dir_;
  int port_;
  pid_t pid_ = -1;
};

}  // namespace retnet::testing
