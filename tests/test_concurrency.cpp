// One const model shared by several threads, each with its own Generator (and so its own
// workspace): every thread's output equals the same prompt decoded alone, whether the library
// runs on one thread or on its pool (core/thread_pool.hpp). And the pool itself: every index
// once across many short jobs, concurrent callers, nested loops, exceptions, resizing; and the
// cores it leaves to other programs. CI runs this under ThreadSanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pool_ignores_load.hpp"
#include "retnet/retnet.hpp"

using namespace retnet;

namespace {

int machine_full_of_other_work() {
  return 1000;
}

/// Runs `body` with the library's thread count set to `threads`, then puts it back.
template <typename Body>
void with_threads(int threads, Body&& body) {
  const int before = num_threads();
  set_num_threads(threads);
  body();
  set_num_threads(before);
}

/// embed_dim 256 makes q, k, v and the gate a 1 MB product, which the pool splits (a piece is
/// at least kMinBytesPerPiece); at 32 only the prompts' retention kernels reach it.
void expect_decoding_together_equals_alone(int library_threads, Index embed_dim) {
  const int before = num_threads();
  set_num_threads(library_threads);
  ModelConfig c;
  c.vocab_size = 256, c.embed_dim = embed_dim, c.value_embed_dim = embed_dim, c.heads = 2;
  c.ffn_dim = 40;
  c.layers = 2, c.chunk_size = 8;
  const auto model =
      std::make_shared<const RetNetModel<float>>(c, ModelWeights<float>::random(c, 3));
  const ByteTokenizer tokenizer;
  const std::vector<std::string> prompts = {"ROMEO:", "To be, or not to be", "a", "KING HENRY V:\n",
                                            "Once more unto the breach, dear friends"};
  GenerationParams params;
  params.max_new_tokens = 40;
  params.sampler.temperature = 0.9f;
  params.chunk_size = 5;

  std::vector<std::vector<int32_t>> alone(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Generator<float> generator(*model, tokenizer);
    params.sampler.seed = i;
    alone[i] = generator.generate(prompts[i], params).tokens;
    ASSERT_EQ(alone[i].size(), 40u);
  }

  std::vector<std::vector<int32_t>> together(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      Generator<float> generator(*model, tokenizer);
      GenerationParams p = params;
      p.sampler.seed = i;
      for (int round = 0; round < 3; ++round)
        together[i] = generator.generate(prompts[i], p).tokens;
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i], alone[i]) << prompts[i];
  set_num_threads(before);
}

}  // namespace

TEST(Concurrency, ThreadsDecodingOnOneConstModelEqualEachAlone) {
  expect_decoding_together_equals_alone(1, 32);
}

// Each caller that finds the pool busy runs its pieces itself; results may not depend on which.
TEST(Concurrency, ThreadsDecodingOnTheLibrarysPoolEqualEachAlone) {
  expect_decoding_together_equals_alone(2, 256);
}

TEST(ThreadPool, ManyShortJobsRunEveryIndexExactlyOnce) {
  with_threads(3, [] {
    std::vector<std::atomic<int>> hits(37);
    for (int job = 0; job < 2000; ++job) {
      const Index n = 1 + job % 37;
      parallel_for(n, [&](Index i) { hits[size_t(i)].fetch_add(1, std::memory_order_relaxed); });
    }
    for (size_t i = 0; i < hits.size(); ++i) {
      int expected = 0;  // jobs whose n exceeds i
      for (int job = 0; job < 2000; ++job) expected += Index(i) < 1 + job % 37;
      EXPECT_EQ(hits[i].load(), expected) << "index " << i;
    }
  });
}

TEST(ThreadPool, ConcurrentCallersEachRunTheirOwnIndicesOnce) {
  with_threads(2, [] {
    constexpr int kCallers = 4, kJobs = 300, kN = 50;
    std::vector<std::vector<int>> hits(kCallers, std::vector<int>(kN, 0));
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; ++c)
      callers.emplace_back([&, c] {
        for (int job = 0; job < kJobs; ++job)
          parallel_for(kN, [&](Index i) { hits[size_t(c)][size_t(i)] += 1; });
      });
    for (std::thread& t : callers) t.join();
    for (int c = 0; c < kCallers; ++c)
      EXPECT_EQ(std::count(hits[size_t(c)].begin(), hits[size_t(c)].end(), kJobs), kN) << c;
  });
}

TEST(ThreadPool, NestedLoopRunsOnTheThreadThatReachedIt) {
  with_threads(2, [] {
    std::vector<int> hits(16 * 16, 0);
    std::vector<std::thread::id> outer_thread(16);
    std::atomic<int> inner_elsewhere{0};
    parallel_for(16, [&](Index i) {
      outer_thread[size_t(i)] = std::this_thread::get_id();
      parallel_for(16, [&](Index j) {
        hits[size_t(i * 16 + j)] += 1;
        if (std::this_thread::get_id() != outer_thread[size_t(i)]) inner_elsewhere += 1;
      });
    });
    EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 256);
    EXPECT_EQ(inner_elsewhere.load(), 0);
  });
}

TEST(ThreadPool, AnExceptionInAnyPieceIsRethrownAndThePoolGoesOn) {
  with_threads(2, [] {
    for (Index thrower : {Index(0), Index(63)}) {  // the caller's first piece; likely a worker's
      std::atomic<int> ran{0};
      EXPECT_THROW(parallel_for(64,
                                [&](Index i) {
                                  ran += 1;
                                  if (i == thrower) throw std::runtime_error("piece failed");
                                }),
                   std::runtime_error);
      EXPECT_GE(ran.load(), 1);
      std::vector<int> hits(64, 0);
      parallel_for(64, [&](Index i) { hits[size_t(i)] += 1; });
      EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 64);
    }
  });
}

TEST(ThreadPool, ChangingTheThreadCountBetweenLoopsKeepsEveryIndex) {
  const int before = num_threads();
  std::vector<int> hits(100, 0);
  for (int threads : {2, 4, 1, 3, 2}) {
    set_num_threads(threads);
    parallel_for(100, [&](Index i) { hits[size_t(i)] += 1; });
  }
  set_num_threads(before);
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 5), 100);
}

namespace {

/// A job for a pool of its own: which thread ran each piece; a piece a worker runs can be made
/// to take `worker_piece_sleep` (a worker the operating system took off its core).
struct RecordedJob {
  std::thread::id caller = std::this_thread::get_id();
  std::chrono::microseconds worker_piece_sleep{0};
  std::atomic<int> pieces_on_workers{0};
  std::atomic<bool> worker_started{false};

  static void piece(void* context, uint32_t) {
    RecordedJob& job = *static_cast<RecordedJob*>(context);
    if (std::this_thread::get_id() == job.caller) {
      // Leave a piece for the worker, and wait (a bounded while) until it has one.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      while (job.worker_piece_sleep.count() > 0 && !job.worker_started &&
             std::chrono::steady_clock::now() < give_up)
        std::this_thread::yield();
      return;
    }
    job.worker_started = true;
    job.pieces_on_workers += 1;
    std::this_thread::sleep_for(job.worker_piece_sleep);
  }
};

/// Whether a worker takes a piece of one of up to 100 two-piece jobs (the caller waits a while
/// for it in each).
bool workers_take_pieces(detail::ThreadPool& pool) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    RecordedJob job;
    job.worker_piece_sleep = std::chrono::microseconds(10);
    pool.run(&RecordedJob::piece, &job, 2);
    if (job.pieces_on_workers > 0) return true;
  }
  return false;
}

}  // namespace

// A worker that finishes its piece milliseconds after the caller finished its own was off its
// core: the jobs right after run on the caller alone, and after the window (at most 320 ms)
// the workers take pieces again.
TEST(ThreadPool, AfterALateWorkerTheNextJobsRunOnTheCallerThenSpreadAgain) {
  using namespace std::chrono_literals;
  detail::ThreadPool pool(
      &retnet_test::load_unknown);  // the machine's other work must not decide this test
  pool.resize(1);
  bool saw_late_worker = false, next_job_on_caller = false;
  for (int attempt = 0; attempt < 20 && !next_job_on_caller; ++attempt) {
    RecordedJob late;
    late.worker_piece_sleep = 3ms;
    pool.run(&RecordedJob::piece, &late, 2);
    if (late.pieces_on_workers == 0) continue;  // the worker never arrived: nothing was late
    saw_late_worker = true;
    RecordedJob next;
    pool.run(&RecordedJob::piece, &next, 64);
    next_job_on_caller = next.pieces_on_workers == 0;
  }
  EXPECT_TRUE(saw_late_worker);
  EXPECT_TRUE(next_job_on_caller);

  std::this_thread::sleep_for(400ms);
  EXPECT_TRUE(workers_take_pieces(pool));
}

TEST(ThreadPool, LoopsOfSmallItemsStayOnTheCallingThread) {
  EXPECT_EQ(parallel_pieces(4, 2, 1024), 1);  // 4 KB in all: not worth a second piece
  EXPECT_EQ(parallel_pieces(10, 2, kMinBytesPerPiece / 4), 2);
  EXPECT_EQ(parallel_pieces(100, 2, kMinBytesPerPiece), 8);  // at most 4 per thread
  EXPECT_EQ(parallel_pieces(100, 2), 8);                     // items of unknown size
  with_threads(2, [] {
    std::vector<std::thread::id> ran_on(6);
    parallel_for(
        6, [&](Index i) { ran_on[size_t(i)] = std::this_thread::get_id(); }, 1024);
    EXPECT_EQ(std::count(ran_on.begin(), ran_on.end(), std::this_thread::get_id()), 6);
  });
}

TEST(MachineLoad, ReadsTheRunnableCountOfALoadavgLine) {
  EXPECT_EQ(detail::parse_runnable_threads("0.52 0.58 0.59 3/467 12345\n"), 3);
  EXPECT_EQ(detail::parse_runnable_threads("12.00 9.5 8 17/2048 1"), 17);
  for (const char* bad : {"", "garbage", "0.5 0.5", "0.5 0.5 0.5 x/4 1", "0.5 0.5 0.5 3 1",
                          "0.5 0.5 0.5 -3/4 1", "0.5 0.5 0.5 99999999999/4 1"})
    EXPECT_EQ(detail::parse_runnable_threads(bad), -1) << bad;
#ifdef __linux__
  EXPECT_GE(detail::runnable_threads(), 1);  // this thread is running
#endif
}

TEST(MachineLoad, WorkersTakeOnlyTheCoresOtherThreadsLeaveFree) {
  using detail::workers_to_engage;
  EXPECT_EQ(workers_to_engage(-1, 1, 2, 1), 1);  // unknown: every worker
  EXPECT_EQ(workers_to_engage(2, 2, 2, 1), 1);   // only ours run
  EXPECT_EQ(workers_to_engage(1, 2, 2, 1), 1);   // a worker counted awake had just slept
  EXPECT_EQ(workers_to_engage(3, 2, 2, 1), 0);   // one competitor on 2 cores: the caller alone
  EXPECT_EQ(workers_to_engage(2, 1, 2, 1), 0);   // the same with our worker asleep
  EXPECT_EQ(workers_to_engage(5, 2, 16, 15), 12);
  EXPECT_EQ(workers_to_engage(40, 1, 16, 15), 0);
}

// When every core is taken by other programs, the jobs run on their callers alone; where the
// load is unknown, the workers take pieces.
TEST(ThreadPool, OnAMachineFullOfOtherWorkJobsRunOnTheCaller) {
  using namespace std::chrono_literals;
  detail::ThreadPool busy(&machine_full_of_other_work);
  busy.resize(1);
  for (int job = 0; job < 20; ++job) {
    RecordedJob recorded;
    recorded.worker_piece_sleep = 10us;
    busy.run(&RecordedJob::piece, &recorded, 2);
    EXPECT_EQ(recorded.pieces_on_workers, 0) << "job " << job;
  }
  detail::ThreadPool unknown(&retnet_test::load_unknown);
  unknown.resize(1);
  EXPECT_TRUE(workers_take_pieces(unknown));
}
