// A request as the engine sees it: its sampling parameters, and the queue of updates
// (text, log-probabilities, the finish) that the engine thread publishes and the answer to the
// request takes, woken by the job's listener.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <retnet/retnet.hpp>
#include <string>
#include <utility>
#include <vector>

namespace retnet::serve {

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// The log-probability of one generated token and of the most likely alternatives.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  size_t offset = 0;                           // byte offset of its text in the completion
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

/// What one completion asks of the engine.
struct JobParams {
  std::vector<int32_t> prompt;  // new tokens (may be empty when a state is continued)
  // A session's state to continue (read, not changed); empty: a fresh sequence.
  std::shared_ptr<const GenerationState<float>> start;
  int64_t max_tokens = 16;
  SamplerParams sampler;
  std::vector<std::string> stop;
  int logprobs = -1;        // < 0: none; n >= 0: the chosen token's and the n most likely
  bool keep_state = false;  // hand the final state back (for a session)
};

/// What the engine produced for a job since its reader last looked.
struct Update {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  // Where each published piece (a step's text and log-probabilities) ends in text and logprobs,
  // so that a stream sends one event per piece however many a reader takes at once.
  std::vector<std::pair<size_t, size_t>> piece_ends;
  bool done = false;
  std::string finish_reason;  // "stop" or "length" when done without error
  std::string error;          // set when the job failed

  bool empty() const { return text.empty() && logprobs.empty() && !done; }
};

/// Counts and times of a finished job (read by its reader once an update says done).
struct JobResult {
  std::optional<GenerationState<float>> state;  // with keep_state
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double queued_ms = 0, prompt_ms = 0, first_token_ms = 0, total_ms = 0;
  // The turns of the engine's loop (numbered from 1) that took the job from the queue and that
  // sampled its first token (0 without a token): how long it waited, counted in work, not time.
  uint64_t taken_turn = 0, first_token_turn = 0;
};

/// A completion inside the engine: submitted by an HTTP thread, which then reads its updates.
class Job {
 public:
  explicit Job(JobParams p) : params_(std::move(p)) {}

  /// The request leaves the batch before the engine's next step.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  /// Everything produced since the last call, waiting up to `timeout` for something.
  Update take(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return !out_.empty(); });
    Update u = std::move(out_);
    out_ = Update{};
    return u;
  }

  /// Called (on the engine's thread, briefly) after each update is published: the reader's
  /// cue to take() it.
  void set_listener(std::function<void()> listener) {
    auto shared = std::make_shared<const std::function<void()>>(std::move(listener));
    std::lock_guard<std::mutex> lock(mutex_);
    listener_ = std::move(shared);
  }

  /// Valid once take() has returned an update with done set.
  JobResult& result() { return result_; }

 private:
  friend class Engine;

  void publish(std::string text, std::vector<TokenLogprob> logprobs) {
    if (text.empty() && logprobs.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      out_.text += text;
      for (auto& l : logprobs) out_.logprobs.push_back(std::move(l));
      out_.piece_ends.emplace_back(out_.text.size(), out_.logprobs.size());
    }
    notify();
  }
  void finish(std::string reason, std::string error = {}) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      out_.done = true;
      out_.finish_reason = std::move(reason);
      out_.error = std::move(error);
    }
    notify();
  }
  void notify() {
    cv_.notify_all();
    std::shared_ptr<const std::function<void()>> listener;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      listener = listener_;
    }
    if (listener) (*listener)();
  }

  JobParams params_;
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  Update out_;
  std::shared_ptr<const std::function<void()>> listener_;  // shared: a copy per update is free
  JobResult result_;
  Clock::time_point submitted_ = Clock::now();
  uint64_t taken_turn_ = 0;  // the engine turn that took it from the queue
};

}  // namespace retnet::serve
