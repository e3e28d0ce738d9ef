// The number of threads the library uses, and parallel_for, which spreads a loop over them:
// the kernels' loops over batch entries and heads, the linear maps' shares of their weights.
// They run on the library's pool (core/thread_pool.hpp); Eigen's own matrix products outside
// those loops use OpenMP when it is enabled, with the same count.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <string>
#include <thread>

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/core/thread_pool.hpp"

namespace retnet {
namespace detail {

/// The count until set_num_threads: OpenMP's (OMP_NUM_THREADS, else the cores), else the
/// hardware's threads.
inline int default_thread_count() {
#ifdef _OPENMP
  return std::max(1, omp_get_max_threads());
#else
  return std::max(1, int(std::thread::hardware_concurrency()));
#endif
}

inline std::atomic<int>& thread_count() {
  static std::atomic<int> count{default_thread_count()};
  return count;
}

inline ThreadPool& thread_pool() {
  static ThreadPool pool;  // its workers start at the first parallel_for that has use for them
  return pool;
}

}  // namespace detail

/// Sets the threads for everything that follows (n >= 1), on every thread that calls the
/// library.
inline void set_num_threads(int n) {
  RETNET_REQUIRE(n >= 1, "set_num_threads: threads must be >= 1, found " + std::to_string(n));
  detail::thread_count().store(n, std::memory_order_relaxed);
#ifdef _OPENMP
  omp_set_num_threads(n);  // this thread's Eigen products; others take it at their next loop
#endif
}

inline int num_threads() {
  return detail::thread_count().load(std::memory_order_relaxed);
}

/// The least work worth a piece of its own, in bytes one piece reads and writes: handing work
/// to another core and back costs about a microsecond (the claim, the data's cache lines moving
/// over), in which a core streams some 50 KB; below a few times that, the split loses what it
/// gains. Measured on decoding (docs/THREADS.md): 32 KB made the demo model slower at 2 threads
/// than at 1, 128 KB to 512 KB kept it level and sped up the base config.
inline constexpr size_t kMinBytesPerPiece = size_t(256) << 10;

/// An item whose size is not given: worth a piece of its own.
inline constexpr size_t kLargeItem = size_t(-1);

/// The pieces a loop of n items of `bytes_per_item` each is cut into for `threads` threads: a
/// few per thread, so that a thread that starts late or is interrupted leaves its share to the
/// others, and none smaller than kMinBytesPerPiece.
inline Index parallel_pieces(Index n, int threads, size_t bytes_per_item = kLargeItem) {
  Index pieces = std::min<Index>({n, Index(4) * threads, Index(detail::ThreadPool::kMaxPieces)});
  if (bytes_per_item != kLargeItem) {
    const double worth = double(n) * double(bytes_per_item) / double(kMinBytesPerPiece);
    pieces = std::min(pieces, Index(std::max(1.0, worth)));
  }
  return pieces;
}

/// body(i) for every i in [0, n), in contiguous runs of i claimed by the calling thread and the
/// pool's workers (parallel_pieces of them; give bytes_per_item, what one body(i) reads and
/// writes, where items can be small). Inside another parallel_for it runs on the calling
/// thread. The first exception a body throws (std::bad_alloc for a form too large for memory,
/// say) is rethrown here once every claimed run has ended.
template <typename Body>
void parallel_for(Index n, Body&& body, size_t bytes_per_item = kLargeItem) {
  const int threads = num_threads();
  const Index pieces = threads == 1 ? 1 : parallel_pieces(n, threads, bytes_per_item);
  if (pieces <= 1 || detail::t_inside_pool_job) {
    for (Index i = 0; i < n; ++i) body(i);
    return;
  }
  detail::ThreadPool& pool = detail::thread_pool();
  if (pool.workers() != threads - 1) pool.resize(threads - 1);
#ifdef _OPENMP
  // A thread that did not call set_num_threads takes the count for its Eigen products here.
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
#endif
  struct Loop {
    Body& body;
    Index n, pieces;
  } loop{body, n, pieces};
  pool.run(
      [](void* context, uint32_t piece) {
        Loop& l = *static_cast<Loop*>(context);
        for (Index i = l.n * piece / l.pieces, end = l.n * (piece + 1) / l.pieces; i < end; ++i)
          l.body(i);
      },
      &loop, uint32_t(loop.pieces));
}

}  // namespace retnet
