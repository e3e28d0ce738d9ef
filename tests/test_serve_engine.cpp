// The scheduler and session store of `retnet serve` (tools/serve/), without HTTP: every sequence
// gets the same bits alone and in batches of any size (and the check would see one bit of
// influence between rows); a request's output is the same alone or beside others; a short prompt
// is read while a long one is; a continued state equals one longer request; cancelled requests
// leave; sessions spill to disk, come back after a restart and are never named by a path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <retnet/retnet.hpp>

#include "serve/engine.hpp"
#include "serve/local_session_store.hpp"
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
/// (the ServeBatch tests check the arithmetic with the default threads).
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

// ---------------------------------------------------------------- a row of the batched step

/// `n` sequences that have read prompts of different lengths and contents: their states, and so
/// their logits, differ from one another.
std::vector<ModelState<float>> read_sequences(Index n) {
  const auto& model = fixture().model;
  std::mt19937 rng(3);
  std::vector<ModelState<float>> states;
  Workspace<float> ws;
  for (Index i = 0; i < n; ++i) {
    TokenMatrix t(1, 3 + (i * 5) % 41);
    for (Index j = 0; j < t.cols(); ++j) t(0, j) = int32_t(32 + rng() % 90);
    auto s = model.new_state(1);
    model.forward_segments(
        t, Form::kChunkwise, 16, s, ws, [](Index, Index, const Matrix<float>&) {},
        LogitsMode::kNone);
    states.push_back(std::move(s));
  }
  return states;
}

/// The token sequence `i` reads at step `s` (each sequence its own).
int32_t feed(size_t i, int s) {
  return int32_t(32 + (i * 7 + size_t(s) * 13) % 90);
}

/// What stepping did to each sequence, indexed by sequence (not by row): its logits after each
/// step and its state after the last.
struct Trace {
  std::vector<std::vector<Matrix<float>>> logits;  // [sequence][step]: 1 x vocab
  std::vector<ModelState<float>> states;
};

/// One batched decoding step: (tokens, state, logits). The model's own, or a test's variant.
using StepFn = std::function<void(const std::vector<int32_t>&, ModelState<float>&, Matrix<float>&)>;

/// Puts sequences `order[0]`, `order[1]`, ... into rows 0, 1, ... of a DecodeBatch and steps it
/// `steps` times, each sequence reading its own tokens.
Trace run_batch(const std::vector<ModelState<float>>& sequences, const std::vector<size_t>& order,
                int steps, const StepFn& step) {
  DecodeBatch batch;
  for (size_t i : order) batch.add(sequences[i]);
  Trace t;
  t.logits.resize(sequences.size());
  t.states.resize(sequences.size());
  Matrix<float> logits;
  std::vector<int32_t> tokens(order.size());
  for (int s = 0; s < steps; ++s) {
    for (size_t r = 0; r < order.size(); ++r) tokens[r] = feed(order[r], s);
    step(tokens, batch.state(), logits);
    EXPECT_EQ(logits.rows(), Index(order.size()));  // exactly the active rows, no padding
    for (size_t r = 0; r < order.size(); ++r) t.logits[order[r]].push_back(logits.row(Index(r)));
  }
  for (size_t r = 0; r < order.size(); ++r) t.states[order[r]] = batch.extract(Index(r));
  return t;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

/// Empty when sequence `i` went through the same bits in `got` as in `want`; else where not.
std::string difference(const Trace& want, const Trace& got, size_t i) {
  for (size_t s = 0; s < want.logits[i].size(); ++s) {
    const auto& a = want.logits[i][s];
    const auto& b = got.logits[i][s];
    if (a.size() != b.size() || !same_bits(a.data(), b.data(), size_t(a.size())))
      return "logits of step " + std::to_string(s);
  }
  const auto& a = want.states[i];
  const auto& b = got.states[i];
  if (a.positions != b.positions) return "positions";
  for (size_t l = 0; l < a.layers.size(); ++l)
    if (!same_bits(a.layers[l].data(), b.layers[l].data(), size_t(a.layers[l].size())))
      return "state of layer " + std::to_string(l);
  return "";
}

constexpr int kSteps = 4;
// Odd sizes; both sides of the kernels' register blocks of rows (PanelKernel::kRows: 8 with
// AVX-512, 2 with AVX2; the AVX512-VNNI kernel's 7) and of the end of the few-rows path (2 blocks:
// 16 and 4 rows); and beyond 16 rows (the many-rows path on every build).
const std::vector<size_t> kBatchSizes = {2, 3, 4, 5, 7, 8, 9, 13, 14, 15, 16, 17, 24, 33};

/// Each sequence stepped alone: what every batch must reproduce.
const Trace& alone_traces() {
  static const Trace t = [] {
    const auto& model = fixture().model;
    const auto sequences = read_sequences(Index(kBatchSizes.back()));
    Trace all;
    all.logits.resize(sequences.size());
    all.states.resize(sequences.size());
    Workspace<float> ws;
    for (size_t i = 0; i < sequences.size(); ++i) {
      Trace one = run_batch(sequences, {i}, kSteps, [&](const auto& tokens, auto& state, auto& lg) {
        model.step(tokens, state, ws, lg);
      });
      all.logits[i] = std::move(one.logits[i]);
      all.states[i] = std::move(one.states[i]);
    }
    return all;
  }();
  return t;
}

/// The first `size` sequences in a shuffled order: each lands in other rows in other batches.
std::vector<size_t> shuffled(size_t size, std::mt19937& rng) {
  std::vector<size_t> order(size);
  for (size_t i = 0; i < size; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

/// Jobs make(0) ... make(n - 1) on one engine: run one after another (`alone`), each finished
/// before the next is submitted, or all submitted at once (`together`). Their outputs go to
/// `outputs`, and the engine's counts once it has nothing left to do to `stats`.
template <typename Make>
void run_jobs(const EngineOptions& options, size_t n, Make make, bool together,
              std::vector<std::string>& outputs, EngineStats& stats) {
  auto& f = fixture();
  Engine engine(f.model, f.tokenizer, options);
  std::vector<std::shared_ptr<Job>> jobs;
  outputs.clear();
  for (size_t i = 0; i < n; ++i) {
    jobs.push_back(make(i));
    ASSERT_TRUE(engine.submit(jobs.back()));
    if (together) continue;
    outputs.push_back(drain(*jobs.back()));
    ASSERT_EQ(outputs.back().rfind("ERROR", 0), std::string::npos) << outputs.back();
  }
  if (together)
    for (const auto& job : jobs) outputs.push_back(drain(*job));
  stats = settled(engine);
}

TEST(ServeBatch, EverySequenceGetsTheSameBitsAloneAndInBatchesOfAnySize) {
  const auto& model = fixture().model;
  const auto sequences = read_sequences(Index(kBatchSizes.back()));
  const Trace& alone = alone_traces();
  // The sequences differ from one another at every step, so a row that took anything from
  // another row would change.
  for (size_t i = 1; i < sequences.size(); ++i)
    for (int s = 0; s < kSteps; ++s)
      ASSERT_FALSE(same_bits(alone.logits[0][s].data(), alone.logits[i][s].data(),
                             size_t(alone.logits[0][s].size())))
          << "sequences 0 and " << i << " have the same logits at step " << s;
  Workspace<float> ws;  // one workspace for every size, as the engine's
  const StepFn step = [&](const auto& tokens, auto& state, auto& logits) {
    model.step(tokens, state, ws, logits);
  };
  std::mt19937 rng(11);
  for (size_t size : kBatchSizes) {
    const auto order = shuffled(size, rng);
    const Trace together = run_batch(sequences, order, kSteps, step);
    for (size_t r = 0; r < size; ++r) {
      const size_t i = order[r];
      EXPECT_EQ(difference(alone, together, i), "")
          << "sequence " << i << " in row " << r << " of a batch of " << size;
    }
  }
}

TEST(ServeBatch, TheCheckSeesOneBitOfInfluenceFromAnotherRow) {
  // The check above would fail if rows influenced each other: a step that lets another row
  // change one logit of a row by one unit in the last place, or one value of its state, is
  // caught in every batch of more than one row.
  const auto& model = fixture().model;
  const auto sequences = read_sequences(Index(kBatchSizes.back()));
  const Trace& alone = alone_traces();
  Workspace<float> ws;
  // One unit in the last place, up or down as another row's first logit says.
  const auto leak = [](float v, float other) {
    return std::nextafter(v, other > 0 ? INFINITY : -INFINITY);
  };
  const StepFn leaky_logits = [&](const auto& tokens, auto& state, auto& logits) {
    model.step(tokens, state, ws, logits);
    for (Index r = 0; r < logits.rows() && logits.rows() > 1; ++r) {
      logits(r, 5) = leak(logits(r, 5), logits((r + 1) % logits.rows(), 0));
    }
  };
  const StepFn leaky_state = [&](const auto& tokens, auto& state, auto& logits) {
    model.step(tokens, state, ws, logits);
    const Index rows = state.batch(), block = state.layers[0].size() / rows;
    for (Index r = 0; r < rows && rows > 1; ++r) {
      float& v = state.layers[0].data()[r * block + 7];
      v = leak(v, logits((r + 1) % rows, 0));
    }
  };
  std::mt19937 rng(11);
  for (const StepFn* step : {&leaky_logits, &leaky_state}) {
    for (size_t size : {size_t(3), size_t(17)}) {
      const auto order = shuffled(size, rng);
      const Trace together = run_batch(sequences, order, kSteps, *step);
      for (size_t r = 0; r < size; ++r)
        EXPECT_NE(difference(alone, together, order[r]), "")
            << (step == &leaky_logits ? "logits" : "state") << " leak not seen in row " << r
            << " of " << size;
    }
  }
  // Alone, the leaky steps change nothing: the differences above come from the other rows.
  const Trace one = run_batch(sequences, {0}, kSteps, leaky_state);
  EXPECT_EQ(difference(alone, one, 0), "");
}

TEST(ServeBatch, RowsLeaveAndJoinWithoutPadding) {
  auto& f = fixture();
  DecodeBatch batch;
  std::vector<ModelState<float>> states;
  for (int i = 0; i < 6; ++i) {
    auto s = f.model.new_state(1);
    s.positions[0] = 10 + i;
    s.layers[0].data()[0] = float(i);
    states.push_back(s);
    EXPECT_EQ(batch.add(s), i);
    EXPECT_EQ(batch.state().batch(), i + 1);  // exactly the sequences, whatever their number
  }
  EXPECT_EQ(batch.remove(1), 5);  // row 5 moves into row 1
  EXPECT_EQ(batch.extract(1).positions[0], 15);
  EXPECT_EQ(batch.remove(4), 4);
  EXPECT_EQ(batch.size(), 4);
  EXPECT_EQ(batch.state().batch(), 4);  // the rows that left are gone before a step
  EXPECT_EQ(batch.extract(1).layers[0].data()[0], 5.0f);
  EXPECT_EQ(batch.extract(3).positions[0], 13);
  // One leaves and one joins between two steps: the new one takes the row that was freed,
  // without a reallocation.
  const float* before = batch.state().layers[0].data();
  EXPECT_EQ(batch.remove(0), 3);
  EXPECT_EQ(batch.add(states[4]), 3);
  EXPECT_EQ(batch.state().layers[0].data(), before);
  EXPECT_EQ(batch.extract(0).positions[0], 13);
  EXPECT_EQ(batch.extract(3).positions[0], 14);
  for (int i = 3; i >= 0; --i) batch.remove(i);
  EXPECT_EQ(batch.size(), 0);
  EXPECT_EQ(batch.state().batch(), 0);
}

TEST(ServeEngine, OutputsAreTheSameAloneAndTogether) {
  std::vector<std::string> prompts = {"ROMEO:",
                                      "JULIET:\nO Romeo",
                                      "a",
                                      "KING RICHARD II:\n",
                                      "First Citizen:\nBefore we proceed any further",
                                      "\n",
                                      "To be",
                                      "MENENIUS:",
                                      "What, ho!",
                                      "Z"};
  for (int i = 0; i < 14; ++i) prompts.push_back("Speaker " + std::to_string(i) + ":");
  const auto make = [&](size_t i) {
    // Lengths that make requests leave one by one while others are still joining.
    return make_job(prompts[i], 60 + int64_t(i) * 3, 100 + i);
  };
  EngineOptions options = one_thread();
  options.max_batch = 32;
  options.prefill_chunk = 8;  // prompts take one to six turns, interleaved with steps
  std::vector<std::string> alone, batched;
  EngineStats stats;
  ASSERT_NO_FATAL_FAILURE(run_jobs(options, prompts.size(), make, false, alone, stats));
  EXPECT_EQ(stats.largest_step, 1u);
  ASSERT_NO_FATAL_FAILURE(run_jobs(options, prompts.size(), make, true, batched, stats));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(batched[i], alone[i]) << prompts[i];
  EXPECT_EQ(stats.completed, prompts.size());
  EXPECT_EQ(stats.decoding, 0u);
  // The batch grew one request per turn past 16 rows and shrank one by one: it was stepped with
  // every number of rows from 1 to its largest.
  EXPECT_GT(stats.largest_step, 16u);
}

TEST(ServeEngine, ShortPromptsWaitingTogetherAreReadInOneTurn) {
  // A long prompt is read one whole chunk a turn (64 tokens, the turn's budget); when the others
  // lead, six short ones (50 tokens to read; "Z" has none and joins at once) are read in one
  // turn, and the last (40 tokens) does not fit in what is left of that chunk and waits.
  std::string history;
  while (history.size() < 64 * 150 + 1) history += "ROMEO:\nWhat light through yonder window? ";
  history.resize(64 * 150 + 1);  // all but its last token: exactly 150 chunks
  const std::vector<std::string> prompts = {
      history,     "ROMEO:", "JULIET:",   "KING HENRY:",       "First Citizen:",
      "MENENIUS:", "Z",      "What, ho!", std::string(41, 'x')};
  EngineOptions options = one_thread();
  options.max_batch = 16;
  options.prefill_chunk = 64;
  const auto make = [&](size_t i) { return make_job(prompts[i], 20, 7 + i); };
  std::vector<std::string> alone, batched;
  EngineStats stats;
  ASSERT_NO_FATAL_FAILURE(run_jobs(options, prompts.size(), make, false, alone, stats));
  EXPECT_EQ(stats.largest_prefill, 1u);
  ASSERT_NO_FATAL_FAILURE(run_jobs(options, prompts.size(), make, true, batched, stats));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(batched[i], alone[i]) << i;
  EXPECT_EQ(stats.completed, prompts.size());
  EXPECT_EQ(stats.largest_prefill, 6u);          // the short prompts, in one turn
  EXPECT_EQ(stats.largest_prefill_tokens, 64u);  // never more than one chunk in a turn
}

TEST(ServeEngine, AShortPromptIsReadWhileALongOneIs) {
  // A long prompt (50 chunks) is in line first; a short one that arrives behind it leads the
  // second turn it waits, so it gets its first token within 3 turns of the engine taking it, not
  // after the 50 turns of the long prompt. Turns are counted by the engine, not timed.
  std::string history;
  while (history.size() < 64 * 50 + 1) history += "ROMEO:\nWhat light through yonder window? ";
  history.resize(64 * 50 + 1);  // all but its last token: exactly 50 chunks
  EngineOptions options = one_thread();
  options.prefill_chunk = 64;
  auto& f = fixture();
  const auto solo = [&](const std::string& prompt, uint64_t seed) {
    Engine engine(f.model, f.tokenizer, options);
    auto job = make_job(prompt, 8, seed);
    EXPECT_TRUE(engine.submit(job));
    return drain(*job);
  };
  const std::string long_alone = solo(history, 3), short_alone = solo("JULIET:", 4);
  Engine engine(f.model, f.tokenizer, options);
  auto long_job = make_job(history, 8, 3), short_job = make_job("JULIET:", 8, 4);
  ASSERT_TRUE(engine.submit(long_job));
  ASSERT_TRUE(engine.submit(short_job));
  EXPECT_EQ(drain(*short_job), short_alone);
  EXPECT_EQ(drain(*long_job), long_alone);
  const JobResult& s = short_job->result();
  const JobResult& l = long_job->result();
  EXPECT_GE(l.first_token_turn - l.taken_turn + 1, 50u);  // the long prompt took its 50 turns
  EXPECT_LE(s.first_token_turn - s.taken_turn + 1, 3u);
  EXPECT_LT(s.first_token_turn, l.first_token_turn);       // while the long prompt was being read
  EXPECT_EQ(settled(engine).largest_prefill_tokens, 64u);  // never more than one chunk a turn
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
  const auto start = std::make_shared<const State>(*first->result().state);
  const State before = *start;
  p2.start = start;
  auto second = make_job(std::move(p2));
  ASSERT_TRUE(engine.submit(second));
  text += drain(*second);
  EXPECT_EQ(text, expected);
  // The engine read the state it was given into a copy of its own: a session's stored state is
  // never changed by the request that continues it.
  EXPECT_EQ(start->pending, before.pending);
  EXPECT_EQ(start->recent, before.recent);
  EXPECT_EQ(start->model.positions, before.model.positions);
  ASSERT_EQ(start->model.layers.size(), before.model.layers.size());
  for (size_t l = 0; l < before.model.layers.size(); ++l)
    EXPECT_EQ(std::memcmp(start->model.layers[l].data(), before.model.layers[l].data(),
                          sizeof(float) * size_t(before.model.layers[l].size())),
              0);
  EXPECT_EQ(second->result().prompt_tokens, 0);
  EXPECT_EQ(second->result().completion_tokens, 25);
  // /metrics's counts: every prompt token once (the continued state's pending token is not a
  // prompt token), and a first token for each of the three requests.
  const auto stats = settled(engine);
  EXPECT_EQ(stats.prompt_tokens, 6u + 6u + 0u);
  EXPECT_EQ(stats.tokens, 40u + 15u + 25u);
  EXPECT_EQ(stats.first_token_seconds.count(), 3u);
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
  const size_t one =
      Session{std::make_shared<const State>(State{f.model.new_state(1), 7, {1, 2, 3}})}.bytes();
  std::string a = "a", b = "b", c;
  {
    LocalSessionStore store(f.model, 2 * one + one / 2, dir.str());
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
      State next{f.model.new_state(1), int32_t(id->size()), {1, 2, 3}};
      next.model.positions[0] = 41;
      s.state = std::make_shared<const State>(std::move(next));
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
  LocalSessionStore store(f.model, 100 * one, dir.str());  // a restart
  Session s;
  ASSERT_EQ(store.acquire(a, s), SessionStore::Result::kOk);
  ASSERT_TRUE(s.state);
  EXPECT_EQ(s.state->model.positions[0], 41);
  EXPECT_EQ(s.state->recent, (std::vector<int32_t>{1, 2, 3}));
  store.release(a);
  EXPECT_EQ(store.acquire(b, s), SessionStore::Result::kNotFound);
  EXPECT_EQ(store.stats().on_disk, 2u);
}

}  // namespace
