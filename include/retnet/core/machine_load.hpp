// How many threads the machine is running at this moment, so that the pool (core/thread_pool.hpp)
// can leave the cores that other programs hold instead of fighting them for a share. Linux says
// it in /proc/loadavg (its fourth field, "runnable/total"); elsewhere it is unknown and the pool
// uses every thread it was given.
#pragma once

#include <algorithm>
#include <cstdlib>

#ifdef __linux__
#include <fcntl.h>
#include <unistd.h>
#endif

namespace retnet {
namespace detail {

/// The runnable count of a /proc/loadavg line ("0.52 0.58 0.59 3/467 12345" gives 3), or -1 if
/// the text is not such a line.
inline int parse_runnable_threads(const char* line) {
  const char* p = line;
  for (int field = 0; field < 3; ++field) {  // the three load averages
    char* end = nullptr;
    std::strtod(p, &end);
    if (end == p) return -1;
    p = end;
  }
  char* end = nullptr;
  const long runnable = std::strtol(p, &end, 10);
  if (end == p || *end != '/' || runnable < 0 || runnable > 1 << 24) return -1;
  return int(runnable);
}

/// Threads running or waiting for a core on the whole machine now (the caller among them), or -1
/// where that is unknown. One read of a kernel-generated line: a few microseconds.
inline int runnable_threads() {
#ifdef __linux__
  static const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char line[128];
  const ssize_t n = ::pread(fd, line, sizeof line - 1, 0);
  if (n <= 0) return -1;
  line[n] = '\0';
  return parse_runnable_threads(line);
#else
  return -1;
#endif
}

/// The machine's online CPUs, the cores /proc/loadavg's count shares (at least 1).
inline int online_cpus() {
#ifdef __linux__
  return int(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
#else
  return 1;
#endif
}

/// How many of a pool's `workers` to wake beside its caller when `runnable` threads are runnable
/// on `cpus` cores and `ours` of them are the pool's (the caller and its awake workers): the
/// cores the other threads leave free, less the caller's own. All of them when `runnable` is
/// unknown (-1).
inline int workers_to_engage(int runnable, int ours, int cpus, int workers) {
  if (runnable < 0) return workers;
  const int others = std::max(0, runnable - ours);
  return std::clamp(cpus - others - 1, 0, workers);
}

}  // namespace detail
}  // namespace retnet
