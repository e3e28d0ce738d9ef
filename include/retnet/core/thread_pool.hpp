// The library's worker threads. A job is a number of pieces; the calling thread and the workers
// claim them one at a time from one atomic word, so a thread the operating system has not run
// yet (a busy machine) finds the work done when it arrives instead of holding the others up.
// The caller waits only for pieces another thread has claimed and is running: there is no
// barrier that waits for every thread to turn up. A worker the operating system takes off its
// core in the middle of a piece still makes the caller wait; when that wait is long (the cores
// are taken by other work), the pool runs the jobs that follow on their callers alone for a
// while, a window that doubles while it keeps happening (serial_window_). And every 10 ms the
// caller counts the machine's runnable threads (core/machine_load.hpp): only as many workers as
// there are cores the other programs leave free take pieces, so that a busy machine's cores are
// not shared three ways between a competitor, the caller and a worker.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "retnet/core/machine_load.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace retnet {
namespace detail {

/// True on a pool's workers, and on a caller while it runs its job's pieces: work started there
/// runs on that thread alone (a piece that itself calls parallel_for, an Eigen product).
inline thread_local bool t_inside_pool_job = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Eigen (and an OpenMP BLAS) read the calling thread's OpenMP thread count; inside a piece
/// it is 1, so that a product there does not start a team of its own beside the pool's threads.
class SerialOpenMpScope {
 public:
  SerialOpenMpScope() {
#ifdef _OPENMP
    saved_ = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
  }
  ~SerialOpenMpScope() {
#ifdef _OPENMP
    omp_set_num_threads(saved_);
#endif
  }
  SerialOpenMpScope(const SerialOpenMpScope&) = delete;
  SerialOpenMpScope& operator=(const SerialOpenMpScope&) = delete;

 private:
  int saved_ = 1;
};

struct InsideJob {
  InsideJob() { t_inside_pool_job = true; }
  ~InsideJob() { t_inside_pool_job = false; }
  InsideJob(const InsideJob&) = delete;
  InsideJob& operator=(const InsideJob&) = delete;
};

class ThreadPool {
 public:
  using PieceFn = void (*)(void* context, uint32_t piece);
  /// The machine's runnable threads now, or -1 where unknown (runnable_threads; tests give
  /// their own).
  using LoadProbe = int (*)();
  static constexpr uint32_t kMaxPieces = 0xFFFF;

  explicit ThreadPool(LoadProbe load_probe = &runnable_threads) : load_probe_(load_probe) {}
  ~ThreadPool() { resize(0); }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int workers() const { return worker_count_.load(std::memory_order_acquire); }

  /// Stops the workers and starts `workers` new ones; waits for a job in progress to end.
  void resize(int workers) {
    std::lock_guard<std::mutex> busy(busy_);
    if (workers == int(threads_.size())) return;
    {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      stop_.store(true, std::memory_order_seq_cst);
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    stop_.store(false, std::memory_order_seq_cst);
    engaged_.store(workers, std::memory_order_relaxed);
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { work(i); });
    worker_count_.store(workers, std::memory_order_release);
  }

  /// Counts the machine's load with `load_probe` from the next job on (a test's pool that must
  /// spread whatever else the machine runs gives one that answers -1).
  void set_load_probe(LoadProbe load_probe) {
    std::lock_guard<std::mutex> busy(busy_);
    load_probe_ = load_probe;
    next_load_check_ = Clock::time_point{};
  }

  /// fn(context, p) for every p in [0, pieces), pieces <= kMaxPieces, on the calling thread and
  /// whichever engaged workers arrive while pieces are left; returns when all have run,
  /// rethrowing the first exception a piece threw. A caller inside another job, or one that
  /// finds the pool running another thread's job, runs every piece itself.
  void run(PieceFn fn, void* context, uint32_t pieces) {
    const auto run_here = [&] {
      for (uint32_t p = 0; p < pieces; ++p) fn(context, p);
    };
    if (t_inside_pool_job) return run_here();  // before the lock: this thread may hold it
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock() || threads_.empty() || pieces < 2) return run_here();
    const Clock::time_point start = Clock::now();
    if (start >= next_load_check_) engage_free_cores(start);
    if (start < serial_until_ || engaged_.load(std::memory_order_relaxed) == 0) {
      busy.unlock();
      SerialOpenMpScope serial;  // as on the pool: no OpenMP team to wait for either
      InsideJob inside;
      return run_here();
    }
    fn_ = fn;
    context_ = context;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    const uint64_t generation = (claim_.load(std::memory_order_relaxed) >> 32) + 1;
    claim_.store(generation << 32 | uint64_t(pieces) << 16, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      wake_.notify_all();
    }
    {
      SerialOpenMpScope serial;
      InsideJob inside;
      run_claimed_pieces();
    }
    // Only pieces a worker claimed and is running are left: wait for those, giving the CPU
    // away after a while in case that worker is waiting for it.
    const Clock::time_point own_end = Clock::now();
    for (int spin = 0; done_.load(std::memory_order_acquire) < pieces; ++spin) {
      if (spin < kSpinsBeforeYield)
        cpu_relax();
      else
        std::this_thread::yield();
    }
    const Clock::time_point end = Clock::now();
    if (end - own_end > std::max<Clock::duration>(kLateWorker, own_end - start))
      note_late_worker(end);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr int kSpinsBeforeYield = 2000;
  // A wait this long for a claimed piece, and longer than the caller's own share took, means a
  // worker was scheduled out: far above a decoding job's pieces (microseconds), far below the
  // slice another process gets when it takes that core (milliseconds).
  static constexpr std::chrono::microseconds kLateWorker{200};
  static constexpr std::chrono::milliseconds kMinSerialWindow{5}, kMaxSerialWindow{320};
  static constexpr int kRecentlyLate = 4;  // a late worker within 4 windows of the last one
  // How long an idle worker watches for the next job before it sleeps: decoding publishes one
  // every few microseconds, and a sleeping worker costs the caller a system call to wake.
  static constexpr std::chrono::microseconds kWatchBeforeSleep{100};
  // How often the caller counts the machine's runnable threads: a read of /proc/loadavg costs a
  // few microseconds, 0.05 % of this interval, and a competitor that starts is left its core
  // within 10 ms.
  static constexpr std::chrono::milliseconds kLoadCheckInterval{10};

  /// Engages as many workers as the cores the machine's other runnable threads leave free.
  void engage_free_cores(Clock::time_point now) {
    next_load_check_ = now + kLoadCheckInterval;
    const int workers = int(threads_.size());
    const int awake = workers - sleepers_.load(std::memory_order_relaxed);
    engaged_.store(workers_to_engage(load_probe_(), 1 + awake, cpus_, workers),
                   std::memory_order_relaxed);
  }

  /// Whether worker `index` has pieces to claim: the job's claim first, so that the engaged
  /// count its caller set before publishing it is the one read.
  bool has_work_for(int index) const {
    return claimable(claim_.load(std::memory_order_acquire)) &&
           index < engaged_.load(std::memory_order_relaxed);
  }

  /// A worker finished its piece long after the caller finished its own: it was off its core.
  /// Runs the next jobs serially for a window, twice the last one if the last ended recently.
  void note_late_worker(Clock::time_point now) {
    const bool again = now - serial_until_ < kRecentlyLate * serial_window_;
    serial_window_ = again ? std::min<Clock::duration>(2 * serial_window_, kMaxSerialWindow)
                           : Clock::duration(kMinSerialWindow);
    serial_until_ = now + serial_window_;
  }

  static bool claimable(uint64_t claim) { return (claim & 0xFFFF) < ((claim >> 16) & 0xFFFF); }

  /// Claims and runs pieces until none is left; true if it ran any.
  bool run_claimed_pieces() {
    bool ran = false;
    uint64_t claim = claim_.load(std::memory_order_acquire);
    while (claimable(claim)) {
      if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire))
        continue;
      // The job cannot end before this piece is counted done, so fn_ and context_ are its.
      try {
        fn_(context_, uint32_t(claim & 0xFFFF));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      done_.fetch_add(1, std::memory_order_acq_rel);
      ran = true;
      claim = claim_.load(std::memory_order_acquire);
    }
    return ran;
  }

  bool watch_for_work(int index) const {
    const Clock::time_point until = Clock::now() + kWatchBeforeSleep;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (has_work_for(index) || stop_.load(std::memory_order_relaxed)) return true;
        cpu_relax();
      }
      if (Clock::now() > until) return false;
    }
  }

  /// Worker `index`: it claims pieces while the caller engages it (index < engaged_).
  void work(int index) {
    t_inside_pool_job = true;
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    while (!stop_.load(std::memory_order_acquire)) {
      const bool engaged = index < engaged_.load(std::memory_order_relaxed);
      if (engaged && (run_claimed_pieces() || watch_for_work(index))) continue;
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [this, index] {
        return stop_.load(std::memory_order_seq_cst) || has_work_for(index);
      });
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // generation (bits 32-63) | pieces (16-31) | next unclaimed piece (0-15)
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> done_{0};
  PieceFn fn_ = nullptr;
  void* context_ = nullptr;
  std::exception_ptr error_;
  std::mutex error_mutex_;

  std::mutex busy_;  // held by the thread whose job the workers serve, and by resize
  // Guarded by busy_: until when jobs run on their callers alone, and how long that last was;
  // when the machine's runnable threads are counted next.
  Clock::time_point serial_until_{};
  Clock::duration serial_window_ = kMinSerialWindow;
  Clock::time_point next_load_check_{};
  LoadProbe load_probe_;
  const int cpus_ = online_cpus();
  std::atomic<int> engaged_{0};  // workers 0 .. engaged_ - 1 take pieces; set by the caller
  std::vector<std::thread> threads_;
  std::atomic<int> worker_count_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
};

}  // namespace detail
}  // namespace retnet
