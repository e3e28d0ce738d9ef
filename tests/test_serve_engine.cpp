// The scheduler and session store of `retnet serve` (tools/serve/), without HTTP: a row of the
// batched step sees the same arithmetic whatever shares the batch; a request's output is the same
// alone or beside others; a continued state equals one longer request; cancelled requests leave;
// sessions spill to disk, come back after a restart and are never named by a path.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <retnet/retnet.hpp>

#include "serve/engine.hpp"
#include "serve/sessions.hpp"
#include "temp_dir.hpp"

namespace {

using namespace retnet;
using namespace retnet::serve;

const std::string kModelDir = std::string(RETNET_SOURCE_DIR) + "/models/shakespeare";

struct Fixture {
  RetNetModel<float> model = load_model<float>(kModelDir);
  ByteTokenizer tokenizer;
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

/// Runs a job to the end; returns its text (or "ERROR: ..." when it failed).
std::string drain(Job& job) {
  std::string text;
  while (true) {
    Update u = job.take(std::chrono::milliseconds(100));
    text += u.text;
    if (u.done) return u.error.empty() ? text : "ERROR: " + u.error;
  }
}

JobParams params(const std::string& prompt, int64_t max_tokens, uint64_t seed,
                 float temperature = 0.9f) {
  JobParams p;
  p.prompt = fixture().tokenizer.encode(prompt);
  p.max_tokens = max_tokens;
  p.sampler.temperature = temperature;
  p.sampler.top_k = 0;
  p.sampler.top_p = 1.0f;
  p.sampler.repeat_penalty = 1.0f;
  p.sampler.seed = seed;
  return p;
}

/// One compute thread: these tests check scheduling, and the machines that run them are shared
/// (ARowSeesTheSameArithmeticInAnyBatch checks the arithmetic with the default threads).
EngineOptions one_thread() {
  EngineOptions o;
  o.threads = 1;
  return o;
}

/// The engine's counts once it has nothing left to do (they are updated at the end of a turn).
EngineStats settled(const Engine& engine) {
  for (int i = 0; i < 200; ++i) {
    const auto s = engine.stats();
    if (s.queued == 0 && s.prefilling == 0 && s.decoding == 0) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return engine.stats();
}

std::shared_ptr<Job> make_job(JobParams p) {
  return std::make_shared<Job>(std::move(p));
}
std::shared_ptr<Job> make_job(const std::string& prompt, int64_t max_tokens, uint64_t seed,
                              float temperature = 0.9f) {
  return make_job(params(prompt, max_tokens, seed, temperature));
}

TEST(ServeBatch, ARowSeesTheSameArithmeticInAnyBatch) {
  auto& f = fixture();
  const auto& model = f.model;
  std::mt19937 rng(3);
  // Sixteen sequences that have read prompts of different lengths.
  const Index n = max_invariant_rows();
  std::vector<ModelState<float>> states;
  Workspace<float> ws;
  for (Index i = 0; i < n; ++i) {
    TokenMatrix t(1, 3 + i * 5);
    for (Index j = 0; j < t.cols(); ++j) t(0, j) = int32_t(32 + rng() % 90);
    auto s = model.new_state(1);
    model.forward_segments(
        t, Form::kChunkwise, 16, s, ws, [](Index, Index, const Matrix<float>&) {},
        LogitsMode::kNone);
    states.push_back(std::move(s));
  }
  // Sequence 0 stepped alone (padded to a row group), three steps, logits kept.
  const std::vector<int32_t> feed = {'a', 'b', 'c'};
  std::vector<Matrix<float>> alone;
  {
    DecodeBatch batch(model);
    batch.add(states[0]);
    Matrix<float> logits;
    for (int32_t t : feed) {
      std::vector<int32_t> tokens(static_cast<size_t>(batch.rows()), 0);
      tokens[0] = t;
      model.step(tokens, batch.state(), ws, logits);
      alone.push_back(logits.row(0));
    }
  }
  // The same sequence in row `row` of batches of every size up to the invariant bound.
  for (Index size = 2; size <= n; ++size) {
    const Index row = (size * 7) % size;  // a different row for different sizes
    DecodeBatch batch(model);
    for (Index i = 0, other = 1; i < size; ++i) batch.add(i == row ? states[0] : states[other++]);
    Matrix<float> logits;
    for (size_t s = 0; s < feed.size(); ++s) {
      std::vector<int32_t> tokens(static_cast<size_t>(batch.rows()), int32_t('x'));
      tokens[row] = feed[s];
      model.step(tokens, batch.state(), ws, logits);
      ASSERT_EQ(std::memcmp(logits.row(row).data(), alone[s].data(),
                            sizeof(float) * size_t(alone[s].size())),
                0)
          << "batch of " << size << ", row " << row << ", step " << s;
    }
  }
}

TEST(ServeBatch, RemovingARowMovesTheLastIntoIt) {
  auto& f = fixture();
  DecodeBatch batch(f.model);
  std::vector<ModelState<float>> states;
  for (int i = 0; i < 6; ++i) {
    auto s = f.model.new_state(1);
    s.positions[0] = 10 + i;
    s.layers[0].data()[0] = float(i);
    states.push_back(s);
    EXPECT_EQ(batch.add(s), i);
  }
  EXPECT_EQ(batch.rows(), 8);
  EXPECT_EQ(batch.remove(1), 5);  // row 5 moves into row 1
  EXPECT_EQ(batch.extract(1).positions[0], 15);
  EXPECT_EQ(batch.remove(4), 4);
  EXPECT_EQ(batch.rows(), 4);  // 4 left: one row group
  EXPECT_EQ(batch.extract(1).layers[0].data()[0], 5.0f);
  for (int i = 3; i >= 0; --i) batch.remove(i);
  EXPECT_EQ(batch.rows(), 0);
}

TEST(ServeEngine, OutputsAreTheSameAloneAndTogether) {
  auto& f = fixture();
  const std::vector<std::string> prompts = {"ROMEO:",
                                            "JULIET:\nO Romeo",
                                            "a",
                                            "KING RICHARD II:\n",
                                            "First Citizen:\nBefore we proceed any further",
                                            "\n",
                                            "To be",
                                            "MENENIUS:",
                                            "What, ho!",
                                            "Z"};
  EngineOptions options = one_thread();
  options.max_batch = 8;
  options.prefill_chunk = 4;  // prompts take several turns, interleaved with steps
  std::vector<std::string> alone;
  {
    Engine engine(f.model, f.tokenizer, options);
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto job = make_job(prompts[i], 30 + int64_t(i) * 3, 100 + i);
      ASSERT_TRUE(engine.submit(job));
      alone.push_back(drain(*job));
      ASSERT_EQ(alone.back().rfind("ERROR", 0), std::string::npos) << alone.back();
    }
  }
  Engine engine(f.model, f.tokenizer, options);
  std::vector<std::shared_ptr<Job>> jobs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    jobs.push_back(make_job(prompts[i], 30 + int64_t(i) * 3, 100 + i));
    ASSERT_TRUE(engine.submit(jobs.back()));
  }
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(drain(*jobs[i]), alone[i]) << prompts[i];
  const auto stats = settled(engine);
  EXPECT_EQ(stats.completed, prompts.size());
  EXPECT_EQ(stats.decoding, 0u);
}

TEST(ServeEngine, AContinuedStateEqualsOneLongerRequest) {
  auto& f = fixture();
  Engine engine(f.model, f.tokenizer, one_thread());
  auto whole = make_job("ROMEO:", 40, 1, 0.0f);
  ASSERT_TRUE(engine.submit(whole));
  const std::string expected = drain(*whole);

  auto p1 = params("ROMEO:", 15, 1, 0.0f);
  p1.keep_state = true;
  auto first = make_job(std::move(p1));
  ASSERT_TRUE(engine.submit(first));
  std::string text = drain(*first);
  ASSERT_TRUE(first->result().state);
  EXPECT_EQ(first->result().state->model.positions[0], 6 + 15 - 1);

  auto p2 = params("", 25, 1, 0.0f);
  p2.start = std::move(first->result().state);
  auto second = make_job(std::move(p2));
  ASSERT_TRUE(engine.submit(second));
  text += drain(*second);
  EXPECT_EQ(text, expected);
  EXPECT_EQ(second->result().prompt_tokens, 0);
  EXPECT_EQ(second->result().completion_tokens, 25);
}

TEST(ServeEngine, StopStringsEndTokensAndZeroTokens) {
  auto& f = fixture();
  Engine engine(f.model, f.tokenizer, one_thread());
  auto free_run = make_job("ROMEO:", 40, 5, 0.0f);
  ASSERT_TRUE(engine.submit(free_run));
  const std::string text = drain(*free_run);
  ASSERT_GE(text.size(), 12u);
  auto ps = params("ROMEO:", 40, 5, 0.0f);
  ps.stop = {text.substr(8, 3)};
  auto stopped = make_job(std::move(ps));
  ASSERT_TRUE(engine.submit(stopped));
  EXPECT_EQ(drain(*stopped), text.substr(0, text.find(text.substr(8, 3))));

  auto pn = params("ROMEO:", 0, 5);
  pn.keep_state = true;
  auto none = make_job(std::move(pn));
  ASSERT_TRUE(engine.submit(none));
  EXPECT_EQ(drain(*none), "");
  EXPECT_EQ(none->result().state->model.positions[0], 5);  // read all but the pending token
}

TEST(ServeEngine, ACancelledRequestLeavesAndTheRestGoOn) {
  auto& f = fixture();
  Engine engine(f.model, f.tokenizer, one_thread());
  auto stay = make_job("ROMEO:", 60, 9);
  auto leave = make_job("JULIET:", 100000, 9);
  ASSERT_TRUE(engine.submit(leave));
  ASSERT_TRUE(engine.submit(stay));
  std::string seen;
  while (seen.size() < 5) seen += leave->take(std::chrono::milliseconds(100)).text;
  leave->cancel();
  EXPECT_EQ(drain(*leave), "ERROR: cancelled");
  const std::string text = drain(*stay);
  EXPECT_EQ(text.rfind("ERROR", 0), std::string::npos);
  auto alone = make_job("ROMEO:", 60, 9);
  ASSERT_TRUE(engine.submit(alone));
  EXPECT_EQ(drain(*alone), text);
  const auto stats = settled(engine);
  EXPECT_EQ(stats.cancelled, 1u);
  EXPECT_EQ(stats.decoding, 0u);
}

TEST(ServeEngine, ABadTokenFailsOnlyItsRequest) {
  auto& f = fixture();
  Engine engine(f.model, f.tokenizer, one_thread());
  auto pb = params("x", 5, 1);
  pb.prompt = {1, 999999, 2};
  auto bad = make_job(std::move(pb));
  auto good = make_job("ROMEO:", 5, 1);
  ASSERT_TRUE(engine.submit(bad));
  ASSERT_TRUE(engine.submit(good));
  EXPECT_EQ(drain(*bad).rfind("ERROR", 0), 0u);
  EXPECT_EQ(drain(*good).rfind("ERROR", 0), std::string::npos);
}

TEST(ServeSessions, IdsAreNeverPaths) {
  for (const char* ok :
       {"a", "chat-1", "A_b-9", "0123456789012345678901234567890123456789012345678901234567890123"})
    EXPECT_TRUE(valid_session_id(ok)) << ok;
  for (const char* bad : {"", "..", "../x", "a/b", "a b", "é", "a.session", "a\n",
                          "01234567890123456789012345678901234567890123456789012345678901234"})
    EXPECT_FALSE(valid_session_id(bad)) << bad;
}

TEST(ServeSessions, LeastRecentlyUsedSpillToDiskAndSurviveARestart) {
  auto& f = fixture();
  retnet::testing::TempDir dir;
  const size_t one = Session{State{f.model.new_state(1), 7, {1, 2, 3}}}.bytes();
  std::string a = "a", b = "b", c;
  {
    SessionStore store(f.model, 2 * one + one / 2, dir.str());
    ASSERT_EQ(store.create(a), SessionStore::Result::kOk);
    ASSERT_EQ(store.create(a), SessionStore::Result::kExists);
    ASSERT_EQ(store.create(b), SessionStore::Result::kOk);
    ASSERT_EQ(store.create(c), SessionStore::Result::kOk);  // the store names it
    EXPECT_TRUE(valid_session_id(c));
    for (const std::string* id : {&a, &b, &c}) {
      Session s;
      ASSERT_EQ(store.acquire(*id, s), SessionStore::Result::kOk);
      EXPECT_FALSE(s.state);
      Session busy;
      EXPECT_EQ(store.acquire(*id, busy), SessionStore::Result::kBusy);
      EXPECT_EQ(store.remove(*id), SessionStore::Result::kBusy);
      s.state = State{f.model.new_state(1), int32_t(id->size()), {1, 2, 3}};
      s.state->model.positions[0] = 41;
      store.commit(*id, std::move(s));
    }
    const auto stats = store.stats();
    EXPECT_EQ(stats.in_memory, 2u);  // a went out first
    EXPECT_EQ(stats.on_disk, 3u);
    EXPECT_EQ(stats.evicted, 1u);
    const auto info = store.info(a);
    ASSERT_TRUE(info);
    EXPECT_FALSE(info->in_memory);
    EXPECT_EQ(info->tokens, 42);
    EXPECT_EQ(store.remove(b), SessionStore::Result::kOk);
    EXPECT_EQ(store.remove(b), SessionStore::Result::kNotFound);
  }
  SessionStore store(f.model, 100 * one, dir.str());  // a restart
  Session s;
  ASSERT_EQ(store.acquire(a, s), SessionStore::Result::kOk);
  ASSERT_TRUE(s.state);
  EXPECT_EQ(s.state->model.positions[0], 41);
  EXPECT_EQ(s.state->recent, (std::vector<int32_t>{1, 2, 3}));
  store.release(a);
  EXPECT_EQ(store.acquire(b, s), SessionStore::Result::kNotFound);
  EXPECT_EQ(store.stats().on_disk, 2u);
}

TEST(ServeSessions, WithoutAFolderSessionsBeyondTheBudgetAreDropped) {
  auto& f = fixture();
  SessionStore store(f.model, 1, "");
  std::string id = "x";
  ASSERT_EQ(store.create(id), SessionStore::Result::kOk);
  Session s;
  EXPECT_EQ(store.acquire(id, s), SessionStore::Result::kNotFound);
  EXPECT_EQ(store.stats().dropped, 1u);
}

}  // namespace
