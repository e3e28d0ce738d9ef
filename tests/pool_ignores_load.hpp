// Included by the tests that compare results at several thread counts: the library's pool then
// spreads its jobs whatever else the machine runs (ctest runs tests side by side, and the pool
// otherwise leaves the cores other processes hold), so that the parallel paths are the ones
// these tests exercise.
#pragma once

#include "retnet/core/threads.hpp"

namespace retnet_test {

inline int load_unknown() {
  return -1;
}

[[maybe_unused]] inline const bool kPoolIgnoresTheMachinesLoad =
    (retnet::detail::thread_pool().set_load_probe(&load_unknown), true);

}  // namespace retnet_test
