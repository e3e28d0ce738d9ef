// The scheduler of `retnet serve`: continuous batching on one thread that owns the model's
// workspaces. Each turn of its loop
//   1. takes new requests and drops cancelled ones (a cancelled request leaves the batch here,
//      before the next step);
//   2. reads waiting prompts, each into a state of its own, within a budget of prefill_chunk
//      tokens for the whole turn (so running streams wait at most one chunk). The prompts take
//      turns at leading: the leader reads its next piece, then the others, in order, read theirs
//      while they fit in what is left, and the leader goes to the back of the line. So with n
//      prompts being read each leads at least once in n turns, and a short prompt that arrives
//      while a long one is read is read within n turns instead of after the whole long prompt.
//      A piece is always the one that prompt would read alone (min(prefill_chunk, tokens left)),
//      so a prompt is read in the same segments, and gets the same bits, whatever else waits;
//      many short prompts that arrive together join in one turn instead of one per turn. A
//      prompt read to its end joins the batch as one more row;
//   3. advances every decoding request by one token in one batched step of exactly as many rows
//      as there are decoding requests, samples each row with the request's own seeded Sampler
//      and hands the text to the request's reader.
// A finished request leaves the batch in the same turn. HTTP threads only submit jobs and read
// their updates; they never touch the model.
//
// Same seed, same output, alone or beside others: nothing a row of the batched step computes
// depends on the other rows. Sampling, the norms, the rotation and the retention state are per
// row, and every row of `linear()` (ops/linear.hpp) is one chain of multiply-adds in the same
// order whatever the number of rows. So the batch is stepped with its active rows and no more,
// in any number up to --max-batch, and a request's text does not depend on what else runs.
// tests/test_serve_engine.cpp checks it bit for bit (each sequence alone against batches of 1
// to more than 16 rows, and through the engine).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <retnet/retnet.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "serve/job.hpp"
#include "serve/metrics.hpp"

namespace retnet::serve {

/// The decoding batch's state: sequence i in row i for i < size(). Adding a sequence copies its
/// state into a spare row when there is one, else reallocates with one more row; removing one
/// moves the last row into its place and leaves a spare row at the end. state() drops the spare
/// rows (one reallocation however many left in a turn), so a step runs exactly size() rows, and
/// a request that leaves while another joins costs no reallocation.
class DecodeBatch {
 public:
  Index size() const { return count_; }

  /// The state of the size() sequences, for a step.
  ModelState<float>& state() {
    if (state_.batch() != count_) resize(count_);
    return state_;
  }

  /// Appends a sequence (a state of batch 1); returns its row.
  Index add(ModelState<float> one) {
    RETNET_REQUIRE(one.batch() == 1, "DecodeBatch::add: a state of batch 1 is expected");
    if (count_ == 0) {
      state_ = std::move(one);
    } else {
      if (state_.batch() == count_) resize(count_ + 1);
      ModelState<float>::copy_entry(one, 0, state_, count_);
    }
    return count_++;
  }

  /// Removes row r: the last sequence moves into it. Returns the row it came from (r itself
  /// when r was the last).
  Index remove(Index r) {
    const Index last = count_ - 1;
    if (r != last) ModelState<float>::copy_entry(state_, last, state_, r);
    if (--count_ == 0) state_ = ModelState<float>{};  // an idle server holds no batch state
    return last;
  }

  ModelState<float> extract(Index r) const { return state_.select(r); }

 private:
  /// `rows` rows, the first min(size(), rows) kept; rows beyond them are left unset (add()
  /// writes them).
  void resize(Index rows) {
    ModelState<float> next = state_.empty_like(rows);
    for (Index r = 0; r < std::min(count_, rows); ++r)
      ModelState<float>::copy_entry(state_, r, next, r);
    state_ = std::move(next);
  }

  ModelState<float> state_;
  Index count_ = 0;
};

struct EngineOptions {
  Index max_batch = 8;       // sequences decoded together
  Index prefill_chunk = 64;  // prompt tokens read between two steps
  int threads = 0;           // OpenMP threads of the model; 0: the default
  size_t max_queue = 256;    // requests waiting beyond this are refused
};

struct EngineStats {
  size_t queued = 0, prefilling = 0, decoding = 0;
  size_t largest_step = 0;            // the most rows one step has run
  size_t largest_prefill = 0;         // the most prompts one turn has read from
  size_t largest_prefill_tokens = 0;  // the most prompt tokens one turn has read
  uint64_t completed = 0, cancelled = 0, failed = 0, tokens = 0, steps = 0;
  // Prompt tokens read, counted piece by piece: once a request's prompt is read, it has added
  // its usage.prompt_tokens.
  uint64_t prompt_tokens = 0;
  Histogram first_token_seconds = first_token_histogram();  // from submit() to the first token
};

class Engine {
 public:
  Engine(const RetNetModel<float>& model, const Tokenizer& tokenizer, EngineOptions options)
      : model_(model), tokenizer_(tokenizer), options_(options) {
    RETNET_REQUIRE(options_.max_batch >= 1, "max_batch must be >= 1");
    RETNET_REQUIRE(options_.prefill_chunk >= 1, "prefill_chunk must be >= 1");
    sample_vocab_ = std::min<int64_t>(model_.config().vocab_size, tokenizer_.vocab_size());
    sampleable_ = sampleable_ids(tokenizer_);
    end_token_ = tokenizer_.eos_id();
    thread_ = std::thread([this] { run(); });
  }
  ~Engine() { stop(); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues a job; false when the queue is full or the engine has stopped.
  bool submit(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ || inbox_.size() + waiting_count_ >= options_.max_queue) return false;
      job->submitted_ = Clock::now();
      inbox_.push_back(job);
    }
    cv_.notify_one();
    return true;
  }

  /// Ends the loop; jobs still queued or running fail with "server shutting down".
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  EngineStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    EngineStats s = stats_;
    s.queued = inbox_.size() + waiting_count_;
    return s;
  }

  const EngineOptions& options() const { return options_; }

 private:
  /// A job inside the engine thread.
  struct Running {
    std::shared_ptr<Job> job;
    ModelState<float> state;       // batch 1, while its prompt is read
    std::vector<int32_t> to_read;  // tokens before `pending`
    size_t read = 0;               // of to_read
    int32_t pending = 0;           // the next token the model reads
    std::vector<int32_t> recent;   // for the repetition penalty
    std::optional<Sampler> sampler;
    TextStream text;
    int64_t produced = 0;
    size_t text_bytes = 0;  // bytes of the generated tokens so far (logprob offsets)
    Clock::time_point started, prompt_done, first_token;
    uint64_t first_token_turn = 0;
  };
  using RunningPtr = std::unique_ptr<Running>;

  // -------------------------------------------------------------- the loop

  void run() {
    if (options_.threads > 0)
      set_num_threads(options_.threads);  // also this thread's OpenMP count for Eigen
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !inbox_.empty() || has_work(); });
        if (stopping_) break;
        ++turn_;
        for (auto& j : inbox_) {
          j->taken_turn_ = turn_;
          waiting_.push_back(std::move(j));
        }
        inbox_.clear();
        waiting_count_ = waiting_.size();
      }
      try {
        drop_cancelled();
        while (!waiting_.empty() && fits_another()) start_prefill();
        if (!prefilling_.empty()) prefill_turn();
        if (batch_.size() > 0) decode_step();
      } catch (const std::exception& e) {
        fail_all(std::string("internal error: ") + e.what());
      }
      publish_stats();
    }
    fail_all("server shutting down");
    for (auto& j : waiting_) j->finish("", "server shutting down");
    waiting_.clear();
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& j : inbox_) j->finish("", "server shutting down");
    inbox_.clear();
  }

  bool has_work() const {
    return !prefilling_.empty() || batch_.size() > 0 || (!waiting_.empty() && fits_another());
  }
  bool fits_another() const {
    return batch_.size() + Index(prefilling_.size()) < options_.max_batch;
  }

  void publish_stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_count_ = waiting_.size();
    stats_.prefilling = prefilling_.size();
    stats_.decoding = static_cast<size_t>(batch_.size());
  }

  void count(uint64_t EngineStats::*field, uint64_t n = 1) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.*field += n;
  }

  void drop_cancelled() {
    for (auto it = waiting_.begin(); it != waiting_.end();)
      if ((*it)->cancelled()) {
        count(&EngineStats::cancelled);
        (*it)->finish("", "cancelled");
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    for (auto it = prefilling_.begin(); it != prefilling_.end();)
      if ((*it)->job->cancelled()) {
        count(&EngineStats::cancelled);
        (*it)->job->finish("", "cancelled");
        it = prefilling_.erase(it);
      } else {
        ++it;
      }
    for (Index r = 0; r < batch_.size();) {
      if (decoding_[r]->job->cancelled()) {
        count(&EngineStats::cancelled);
        decoding_[r]->job->finish("", "cancelled");
        leave_batch(r);
      } else {
        ++r;
      }
    }
  }

  void fail_all(const std::string& message) {
    for (auto& r : prefilling_)
      if (r) r->job->finish("", message);  // (a slot left empty by a throw in prefill_turn)
    prefilling_.clear();
    for (auto& r : decoding_) r->job->finish("", message);
    count(&EngineStats::failed, decoding_.size());
    decoding_.clear();
    while (batch_.size() > 0) batch_.remove(batch_.size() - 1);
  }

  // -------------------------------------------------------------- prompts

  void start_prefill() {
    auto r = std::make_unique<Running>();
    r->job = std::move(waiting_.front());
    waiting_.pop_front();
    r->started = Clock::now();
    JobParams& p = r->job->params_;
    try {
      r->sampler.emplace(p.sampler, sampleable_);
      r->text = TextStream(p.stop);
      // The state has read everything before `pending`. A fresh sequence reads all but the last
      // prompt token; a continued one first reads the token its last request left pending.
      if (p.start) {
        // The request's own copy, made here rather than by the session store on an HTTP
        // thread; the session's stored state stays as it was, whatever becomes of this request.
        r->state = p.start->model;
        r->recent = p.start->recent;
        r->pending = p.start->pending;
        p.start.reset();
        if (!p.prompt.empty()) r->to_read.push_back(r->pending);
      } else {
        RETNET_REQUIRE(!p.prompt.empty(), "the prompt is empty");
        r->state = model_.new_state(1);
      }
      if (!p.prompt.empty()) {
        r->to_read.insert(r->to_read.end(), p.prompt.begin(), p.prompt.end() - 1);
        r->pending = p.prompt.back();
      }
      r->recent.insert(r->recent.end(), p.prompt.begin(), p.prompt.end());
      constexpr size_t kKeepRecent = 256;  // the penalty looks at repeat_last_n <= this
      if (r->recent.size() > kKeepRecent)
        r->recent.erase(r->recent.begin(), r->recent.end() - kKeepRecent);
    } catch (const std::exception& e) {
      r->job->finish("", e.what());
      count(&EngineStats::failed);
      return;
    }
    prefilling_.push_back(std::move(r));
  }

  /// The prompt tokens of this turn: the leading prompt's next piece, then, in line order,
  /// each other prompt's next piece that fits in the rest of one chunk; the leader then goes to
  /// the back of the line. Prompts read to their end join the batch (or finish, with
  /// max_tokens 0).
  void prefill_turn() {
    Index budget = options_.prefill_chunk;
    size_t prompts = 0;
    for (size_t i = 0; i < prefilling_.size(); ++i) {
      Running& r = *prefilling_[i];
      const Index len = std::min<Index>(options_.prefill_chunk, Index(r.to_read.size() - r.read));
      if (i > 0 && len > budget) continue;
      if (len > 0) {
        try {
          const Eigen::Map<const TokenMatrix> tokens(r.to_read.data() + r.read, 1, len);
          model_.forward_segments(
              TokenMatrix(tokens), Form::kChunkwise, options_.prefill_chunk, r.state, ws_prefill_,
              [](Index, Index, const Matrix<float>&) {}, LogitsMode::kNone);
        } catch (const std::exception& e) {
          r.job->finish("", e.what());
          count(&EngineStats::failed);
          prefilling_[i].reset();
          continue;
        }
        r.read += static_cast<size_t>(len);
        budget -= std::min(budget, len);
        ++prompts;
      }
      if (r.read == r.to_read.size()) prompt_read(prefilling_[i]);
    }
    if (prefilling_.size() > 1 && prefilling_.front())  // the leader to the back of the line
      std::rotate(prefilling_.begin(), prefilling_.begin() + 1, prefilling_.end());
    prefilling_.erase(std::remove(prefilling_.begin(), prefilling_.end(), nullptr),
                      prefilling_.end());
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.prompt_tokens += uint64_t(options_.prefill_chunk - budget);
    stats_.largest_prefill = std::max(stats_.largest_prefill, prompts);
    stats_.largest_prefill_tokens =
        std::max(stats_.largest_prefill_tokens, size_t(options_.prefill_chunk - budget));
  }

  /// A prompt read to its end joins the batch (or, asking for no tokens, completes); `slot` is
  /// left empty.
  void prompt_read(RunningPtr& slot) {
    Running& r = *slot;
    r.prompt_done = Clock::now();
    // The prompt's last token is read by the first step (a continued state's pending token took
    // its place among the pieces).
    const size_t prompt = r.job->params_.prompt.size();
    if (prompt > r.read) count(&EngineStats::prompt_tokens, prompt - r.read);
    r.to_read = {};
    if (r.job->params_.max_tokens == 0) {
      complete(r, "length", &r.state);
      slot.reset();
      return;
    }
    batch_.add(std::move(r.state));
    r.state = ModelState<float>{};
    decoding_.push_back(std::move(slot));
  }

  // -------------------------------------------------------------- decoding

  enum class Outcome { kGoing, kLength, kStop, kFailed };

  void decode_step() {
    const Index n = batch_.size();
    step_tokens_.resize(static_cast<size_t>(n));
    for (Index r = 0; r < n; ++r) step_tokens_[r] = decoding_[r]->pending;
    model_.step(step_tokens_, batch_.state(), ws_step_, logits_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.steps;
      stats_.largest_step = std::max(stats_.largest_step, static_cast<size_t>(n));
    }

    outcomes_.assign(static_cast<size_t>(n), Outcome::kGoing);
    errors_.assign(static_cast<size_t>(n), std::string());
    const auto sample_one = [&](Index r) {
      try {
        outcomes_[r] = advance(*decoding_[r], logits_.row(r).data());
      } catch (const std::exception& e) {
        outcomes_[r] = Outcome::kFailed;
        errors_[r] = e.what();
      }
    };
    // Sampling a large vocabulary (sorts for top-p) is worth the threads; a small one is not.
    if (n > 1 && sample_vocab_ * n >= (int64_t(1) << 16)) {
      parallel_for(n, sample_one);
    } else {
      for (Index r = 0; r < n; ++r) sample_one(r);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.tokens += static_cast<uint64_t>(n);
      for (Index r = 0; r < n; ++r)
        if (decoding_[r]->produced == 1)
          stats_.first_token_seconds.observe(
              ms_between(decoding_[r]->job->submitted_, decoding_[r]->first_token) / 1000);
    }
    // Finished requests leave now, last rows first so that the rows still to visit stay put.
    for (Index r = n - 1; r >= 0; --r) {
      if (outcomes_[r] == Outcome::kGoing) continue;
      Running& run = *decoding_[r];
      if (outcomes_[r] == Outcome::kFailed) {
        run.job->finish("", errors_[r]);
        count(&EngineStats::failed);
      } else {
        std::optional<ModelState<float>> state;
        if (run.job->params_.keep_state) state = batch_.extract(r);
        complete(run, outcomes_[r] == Outcome::kStop ? "stop" : "length",
                 state ? &*state : nullptr);
      }
      leave_batch(r);
    }
  }

  /// Samples one sequence's next token from its logits and hands on its text.
  Outcome advance(Running& r, const float* logits) {
    // The whole row: a prompt's ids may lie beyond the tokenizer's (its repeat penalty reads
    // them); the sampler draws only ids the tokenizer can decode.
    const int32_t token = r.sampler->sample(logits, model_.config().vocab_size, r.recent);
    if (r.produced == 0) {
      r.first_token = Clock::now();
      r.first_token_turn = turn_;
    }
    ++r.produced;
    r.recent.push_back(token);
    if (r.recent.size() > 512) r.recent.erase(r.recent.begin(), r.recent.end() - 256);
    r.pending = token;
    std::vector<TokenLogprob> lp;
    const int want = r.job->params_.logprobs;
    const bool end = end_token_ && token == *end_token_;
    std::string piece;
    bool stopped = false;
    if (!end) {
      const std::string bytes = tokenizer_.decode_token(token);
      if (want >= 0) lp.push_back(logprob(logits, token, want, r.text_bytes));
      r.text_bytes += bytes.size();
      stopped = r.text.push(bytes, piece);
    }
    r.job->publish(std::move(piece), std::move(lp));
    if (end || stopped) return Outcome::kStop;
    if (r.produced >= r.job->params_.max_tokens) return Outcome::kLength;
    return Outcome::kGoing;
  }

  TokenLogprob logprob(const float* logits, int32_t token, int top, size_t offset) const {
    double max = logits[0];
    for (int64_t i = 1; i < sample_vocab_; ++i) max = std::max(max, double(logits[i]));
    double sum = 0;
    for (int64_t i = 0; i < sample_vocab_; ++i) sum += std::exp(double(logits[i]) - max);
    const double lse = max + std::log(sum);
    TokenLogprob out;
    out.token = token;
    out.offset = offset;
    out.logprob = static_cast<float>(logits[token] - lse);
    for (int64_t i = 0; i < sample_vocab_ && top > 0; ++i) {  // insertion into a short list
      const float lp = static_cast<float>(logits[i] - lse);
      if (Index(out.top.size()) == top && lp <= out.top.back().second) continue;
      auto at = std::find_if(out.top.begin(), out.top.end(),
                             [&](const auto& e) { return lp > e.second; });
      out.top.insert(at, {int32_t(i), lp});
      if (Index(out.top.size()) > top) out.top.pop_back();
    }
    return out;
  }

  /// Hands a job its last text, counts and (with keep_state) the state it ends in.
  void complete(Running& r, const char* reason, ModelState<float>* state) {
    r.job->publish(r.text.finish(), {});
    JobResult& res = r.job->result_;
    const auto now = Clock::now();
    if (r.job->params_.keep_state && state) {
      GenerationState<float> s;
      s.model = std::move(*state);
      s.pending = r.pending;
      s.recent = r.recent;
      res.state = std::move(s);
    }
    res.prompt_tokens = static_cast<int64_t>(r.job->params_.prompt.size());
    res.completion_tokens = r.produced;
    res.queued_ms = ms_between(r.job->submitted_, r.started);
    res.prompt_ms = ms_between(r.started, r.prompt_done);
    res.first_token_ms = r.produced ? ms_between(r.job->submitted_, r.first_token) : 0;
    res.taken_turn = r.job->taken_turn_;
    res.first_token_turn = r.first_token_turn;
    res.total_ms = ms_between(r.job->submitted_, now);
    count(&EngineStats::completed);
    r.job->finish(reason);
  }

  void leave_batch(Index r) {
    const Index moved = batch_.remove(r);
    if (moved != r) decoding_[r] = std::move(decoding_[moved]);
    decoding_.pop_back();
  }

  const RetNetModel<float>& model_;
  const Tokenizer& tokenizer_;
  const EngineOptions options_;
  int64_t sample_vocab_ = 0;
  SampleableIds sampleable_;  // the ids the tokenizer can decode: the only ones sampled
  std::optional<int32_t> end_token_;

  // Shared with submitting threads.
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> inbox_;
  size_t waiting_count_ = 0;
  bool stopping_ = false;
  EngineStats stats_;

  // The engine thread's own.
  uint64_t turn_ = 0;  // turns of the loop so far
  std::deque<std::shared_ptr<Job>> waiting_;
  std::vector<RunningPtr> prefilling_;  // prompts being read, the next leader first
  std::vector<RunningPtr> decoding_;    // decoding_[r] is in row r of batch_
  DecodeBatch batch_;
  Workspace<float> ws_prefill_, ws_step_;
  Matrix<float> logits_;
  std::vector<int32_t> step_tokens_;
  std::vector<Outcome> outcomes_;
  std::vector<std::string> errors_;
  std::thread thread_;
};

}  // namespace retnet::serve
