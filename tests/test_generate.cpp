// Generation: the prompt's form does not change the output, a saved state resumes exactly,
// stop conditions, batches of prompts of different lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <tuple>

#include "expect_error.hpp"
#include "retnet/retnet.hpp"
#include "temp_dir.hpp"
#include "utf8_check.hpp"

using namespace retnet;
using retnet::testing::expect_error;

namespace {

ModelConfig byte_config() {
  ModelConfig c;
  c.vocab_size = 256, c.embed_dim = 32, c.value_embed_dim = 48, c.heads = 2, c.ffn_dim = 40;
  c.layers = 2, c.chunk_size = 8, c.activation = Activation::kSwish;
  return c;
}

struct Fixture {
  RetNetModel<double> model{byte_config(), ModelWeights<double>::random(byte_config(), 21)};
  ByteTokenizer tokenizer;
  Generator<double> generator{model, tokenizer};
};

GenerationParams greedy(int64_t n) {
  GenerationParams p;
  p.max_new_tokens = n;
  p.sampler.temperature = 0;
  return p;
}

const std::string kPrompt = "To be, or not to be, that is the question: whether 'tis nobler";

}  // namespace

TEST(Generation, GreedyOutputDoesNotDependOnThePromptForm) {
  Fixture f;
  std::vector<std::vector<int32_t>> outputs;
  for (Form form : {Form::kParallel, Form::kChunkwise, Form::kRecurrent}) {
    auto params = greedy(40);
    params.prompt_form = form;
    params.chunk_size = 5;
    const auto r = f.generator.generate(kPrompt, params);
    EXPECT_EQ(r.tokens.size(), 40u);
    EXPECT_EQ(r.reason, StopReason::kTokenBudget);
    EXPECT_EQ(r.prompt_tokens, int64_t(kPrompt.size()));
    outputs.push_back(r.tokens);
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(outputs[0], outputs[2]);
}

TEST(Generation, SavedStateResumesExactly) {
  Fixture f;
  auto params = greedy(30);
  params.sampler.temperature = 0.9f;  // sampling too: the seed stream restarts identically
  params.sampler.seed = 5;
  params.sampler.repeat_penalty = 1.3f;
  const auto uninterrupted = f.generator.generate(kPrompt, params);

  const retnet::testing::TempDir dir;
  const auto path = dir.file("generation.state");
  {
    auto g = f.generator.prefill(f.tokenizer.encode(kPrompt), params);
    std::ofstream out(path, std::ios::binary);
    retnet::save_generation_state(out, g, f.model.fingerprint());
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<GenerationState<double>> states{retnet::load_generation_state(in, f.model)};
  const auto resumed = f.generator.decode(states, params);
  EXPECT_EQ(resumed.front().tokens, uninterrupted.tokens);
  EXPECT_EQ(resumed.front().text, uninterrupted.text);
}

TEST(Generation, ExtendingAStateEqualsOneLongPrompt) {
  Fixture f;
  const auto params = greedy(20);
  const auto whole = f.generator.generate(kPrompt, params);
  const auto ids = f.tokenizer.encode(kPrompt);
  auto g = f.generator.prefill({ids.begin(), ids.begin() + 10}, params);
  f.generator.extend(g, {ids.begin() + 10, ids.end()}, params);
  std::vector<GenerationState<double>> states{g};
  EXPECT_EQ(f.generator.decode(states, params).front().tokens, whole.tokens);
}

TEST(Generation, StreamsExactlyTheResultText) {
  Fixture f;
  std::string streamed;
  const auto r =
      f.generator.generate(kPrompt, greedy(25), [&](Index b, int32_t, const std::string& s) {
        EXPECT_EQ(b, 0);
        streamed += s;
      });
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.text, f.tokenizer.decode(r.tokens));
}

// Byte tokens spell a multi-byte character one byte at a time; a streamed piece never stops
// inside one (the bytes wait for the rest), and the pieces still add up to the text.
TEST(Generation, StreamedPiecesNeverEndInsideAUtf8Character) {
  Fixture f;
  auto params = greedy(300);
  params.sampler.temperature = 2.0f;  // a random byte model: about half the bytes are >= 0x80
  std::vector<std::string> pieces;
  const auto r = f.generator.generate(
      kPrompt, params, [&](Index, int32_t, const std::string& piece) { pieces.push_back(piece); });
  std::string streamed;
  int held = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    streamed += pieces[i];
    if (i + 1 < pieces.size()) {
      EXPECT_FALSE(retnet::testing::splits_a_character(r.text, streamed.size()))
          << "after piece " << i;
    }
  }
  for (size_t n = 1; n < r.text.size(); ++n) held += retnet::testing::splits_a_character(r.text, n);
  EXPECT_GT(held, 10) << "the text should give the stream characters to hold back";
  EXPECT_LT(pieces.size(), r.tokens.size());
  EXPECT_EQ(streamed, r.text);
}

TEST(Generation, StopsAtAStopStringWithoutEmittingIt) {
  Fixture f;
  const auto free_run = f.generator.generate(kPrompt, greedy(60));
  ASSERT_GE(free_run.text.size(), 12u);
  // A stop string taken from the middle of the free run: generation must end right before it.
  const std::string stop = free_run.text.substr(8, 3);
  auto params = greedy(60);
  params.stop_strings = {stop};
  std::string streamed;
  const auto r = f.generator.generate(kPrompt, params,
                                      [&](Index, int32_t, const std::string& s) { streamed += s; });
  EXPECT_EQ(r.reason, StopReason::kStopString);
  EXPECT_EQ(r.text, free_run.text.substr(0, free_run.text.find(stop)));
  EXPECT_EQ(streamed, r.text);
}

TEST(Generation, StopsAtTheEndToken) {
  Fixture f;
  const auto free_run = f.generator.generate(kPrompt, greedy(30));
  auto params = greedy(30);
  params.end_tokens = {free_run.tokens.at(5)};
  const auto r = f.generator.generate(kPrompt, params);
  EXPECT_EQ(r.reason, StopReason::kEndToken);
  const auto first =
      std::find(free_run.tokens.begin(), free_run.tokens.end(), params.end_tokens[0]);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(free_run.tokens.begin(), first));
}

TEST(Generation, ABatchOfPromptsOfDifferentLengthsEqualsEachAlone) {
  Fixture f;
  const std::vector<std::string> prompts = {"ROMEO:", kPrompt, "a"};
  auto params = greedy(25);
  std::vector<std::string> streamed(prompts.size());
  const auto batch = f.generator.generate_batch(
      prompts, params, [&](Index b, int32_t, const std::string& s) { streamed[b] += s; });
  ASSERT_EQ(batch.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(prompts[i]);
    EXPECT_EQ(batch[i].tokens, f.generator.generate(prompts[i], params).tokens);
    EXPECT_EQ(streamed[i], batch[i].text);
  }
}

// Sequence b of a batch samples with seed + b: it draws exactly the tokens of a single run
// with that seed, whether the batch comes from generate_batch or from decode over prepared
// states. The same prompt appears twice, so a batch that reused one seed for every sequence
// would give those two identical texts.
TEST(Generation, SequenceBOfABatchDrawsWhatASingleRunWithSeedPlusBDraws) {
  Fixture f;
  const std::vector<std::string> prompts = {kPrompt, "ROMEO:", kPrompt, "a"};
  GenerationParams params = greedy(30);
  params.sampler.temperature = 1.2f;
  params.sampler.top_k = 50;
  params.sampler.repeat_penalty = 1.1f;
  params.sampler.seed = 1000;
  const auto batch = f.generator.generate_batch(prompts, params);
  std::vector<GenerationState<double>> states;
  for (const auto& p : prompts) states.push_back(f.generator.read_prompt(p, params));
  const auto decoded = f.generator.decode(states, params);
  ASSERT_EQ(batch.size(), prompts.size());
  ASSERT_EQ(decoded.size(), prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    GenerationParams single = params;
    single.sampler.seed = params.sampler.seed + b;
    const auto alone = f.generator.generate(prompts[b], single);
    ASSERT_EQ(alone.tokens.size(), 30u);
    EXPECT_EQ(batch[b].tokens, alone.tokens);
    EXPECT_EQ(decoded[b].tokens, alone.tokens);
  }
  EXPECT_NE(batch[0].tokens, batch[2].tokens) << "same prompt, seeds 1000 and 1002";
}

TEST(Generation, SameSeedSameTextDifferentSeedDifferentText) {
  Fixture f;
  auto params = greedy(40);
  params.sampler.temperature = 1.0f;
  params.sampler.seed = 1;
  const auto a = f.generator.generate(kPrompt, params);
  const auto b = f.generator.generate(kPrompt, params);
  params.sampler.seed = 2;
  const auto c = f.generator.generate(kPrompt, params);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(Generation, RejectsAnEmptyPromptAndCorruptStates) {
  Fixture f;
  EXPECT_THROW(f.generator.generate("", greedy(5)), InvalidArgument);
  std::stringstream garbage("RETNETST-but-not-really");
  EXPECT_THROW(retnet::load_generation_state(garbage, f.model), FormatError);
}

// A model's vocabulary may be larger than its tokenizer's (a padded embedding), and a
// tokenizer's ids may have gaps: neither kind of id is ever sampled, whatever its logit.
namespace {

// Bytes below `size` other than `gaps`: a tokenizer smaller than the byte model's 256 ids.
class SmallByteTokenizer : public Tokenizer {
 public:
  SmallByteTokenizer(int64_t size, std::vector<int32_t> gaps) : size_(size), gaps_(gaps) {}
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (const char c : text) ids.push_back(checked(static_cast<unsigned char>(c)));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (const int32_t id : ids) text += decode_token(id);
    return text;
  }
  std::string decode_token(int32_t id) const override {
    return std::string(1, static_cast<char>(checked(id)));
  }
  int64_t vocab_size() const override { return size_; }
  bool has_id(int32_t id) const override {
    return id >= 0 && id < size_ && std::find(gaps_.begin(), gaps_.end(), id) == gaps_.end();
  }

 private:
  int32_t checked(int32_t id) const {
    if (!has_id(id)) throw InvalidArgument("token id " + std::to_string(id) + " is not a token");
    return id;
  }
  int64_t size_;
  std::vector<int32_t> gaps_;
};

std::vector<int32_t> every_seventh_below(int32_t n) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < n; id += 7) ids.push_back(id);
  return ids;
}

}  // namespace

TEST(SampleableIds, TheLargestLogitsBeyondTheLimitOrInAGapAreNeverSampled) {
  // Ids 0..5 are sampleable but 2; 6..9 are padding. The padding and the gap have the largest
  // logits, so every mode would pick them without the limit.
  const std::vector<float> logits = {0.5f, 1.0f, 9.0f, -1.0f, 0.0f, 0.25f, 8.0f, 9.5f, 7.0f, 10.0f};
  const SampleableIds sampleable{6, {2}};
  for (const auto& [temperature, top_k, top_p] : std::vector<std::tuple<float, int, float>>{
           {0.0f, 0, 1.0f}, {1.0f, 0, 1.0f}, {1.0f, 3, 1.0f}, {1.0f, 0, 0.5f}, {5.0f, 8, 0.99f}}) {
    SamplerParams params;
    params.temperature = temperature, params.top_k = top_k, params.top_p = top_p;
    params.repeat_penalty = 1.2f;  // a recent padded id is checked, not penalised or sampled
    Sampler sampler(params, sampleable);
    const std::vector<int32_t> recent = {9, 1};
    for (int i = 0; i < 300; ++i) {
      const int32_t id = sampler.sample(logits.data(), 10, recent);
      EXPECT_TRUE(id >= 0 && id < 6 && id != 2) << id << " at temperature " << temperature;
    }
    const std::vector<float> p = sampler.probabilities(logits.data(), 10, recent);
    ASSERT_EQ(p.size(), 10u);
    for (const int32_t id : {2, 6, 7, 8, 9}) EXPECT_EQ(p[size_t(id)], 0.0f) << id;
  }
  Sampler greedy(SamplerParams{0.0f}, sampleable);
  EXPECT_EQ(greedy.sample(logits.data(), 10, {}), 1);  // the largest sampleable logit
  const float masked = -std::numeric_limits<float>::infinity();
  const std::vector<float> only_padding = {masked, masked, 3.0f, masked, masked, masked, 1.0f};
  expect_error<InvalidArgument>([&] { greedy.sample(only_padding.data(), 7, {}); },
                                {"every logit of a sampleable id is -inf"});
  expect_error<InvalidArgument>(
      [&] {
        (void)Sampler(SamplerParams{}, SampleableIds{0, {}});
      },
      {"limit must be > 0"});
}

TEST(SampleableIds, AreTheIdsTheTokenizerCanDecode) {
  const SampleableIds bytes = sampleable_ids(ByteTokenizer());
  EXPECT_EQ(bytes.limit, 256);
  EXPECT_TRUE(bytes.excluded.empty());
  const SampleableIds small = sampleable_ids(SmallByteTokenizer(100, {3, 50}));
  EXPECT_EQ(small.limit, 100);
  EXPECT_EQ(small.excluded, (std::vector<int32_t>{3, 50}));
}

TEST(Generation, AModelVocabularyLargerThanTheTokenizersGeneratesOnlyItsIds) {
  // The byte model has 256 ids; the tokenizer 100, less every seventh. Without the limit the
  // model's own distribution reaches both kinds of id (checked first, through a 256-id
  // tokenizer), and decoding one of them would throw.
  Fixture f;
  const SmallByteTokenizer small(100, every_seventh_below(100));
  Generator<double> generator(f.model, small);
  const std::string prompt = "HELLO ";  // bytes below 100, none a multiple of 7
  int64_t beyond = 0, in_gaps = 0, sampled = 0;
  for (const uint64_t seed : {1u, 2u, 3u, 4u}) {
    auto params = greedy(50);
    params.sampler.temperature = 1.5f;
    params.sampler.seed = seed;
    for (const int32_t id : f.generator.generate(prompt, params).tokens) {
      beyond += id >= 100;
      in_gaps += id < 100 && !small.has_id(id);
    }
    const GenerationResult r = generator.generate(prompt, params);
    EXPECT_EQ(r.tokens.size(), 50u);
    for (const int32_t id : r.tokens) EXPECT_TRUE(small.has_id(id)) << id;
    EXPECT_EQ(r.text, small.decode(r.tokens));
    sampled += int64_t(r.tokens.size());
  }
  EXPECT_GT(beyond, 0);
  EXPECT_GT(in_gaps, 0);
  EXPECT_EQ(sampled, 200);
  const GenerationResult g = generator.generate(prompt, greedy(50));
  for (const int32_t id : g.tokens) EXPECT_TRUE(small.has_id(id)) << id;
}
