// Generation through a Hugging Face tokenizer.json: a model folder with one is read with it,
// the prompt's ids are the tokenizer's, generation stops on its EOS, and streamed pieces never
// end inside a UTF-8 character even where byte-fallback tokens spell one byte at a time.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "retnet/retnet.hpp"
#include "retnet/tokenizers.hpp"
#include "temp_dir.hpp"
#include "utf8_check.hpp"

using namespace retnet;

namespace {

const std::string kLlama2 = std::string(RETNET_TEST_DATA_DIR) + "/tokenizers/llama2";

// A folder with a random 32000-id model and the Llama-2-style tokenizer.json.
struct Folder {
  retnet::testing::TempDir dir;
  ModelConfig config;
  Folder() {
    config.vocab_size = 32000, config.embed_dim = 16, config.value_embed_dim = 16;
    config.heads = 2, config.ffn_dim = 16, config.layers = 1;
    save_model(dir.str(), config, ModelWeights<float>::random(config, 4));
    for (const auto& entry : std::filesystem::directory_iterator(kLlama2))
      if (entry.path().filename() != "expected.json")
        std::filesystem::copy_file(entry.path(), dir.file(entry.path().filename().string()));
  }
};

}  // namespace

TEST(HfGeneration, ReadsThePromptWithTheFoldersTokenizerAndStreamsWholeCharacters) {
  Folder f;
  const auto model = load_model<float>(f.dir.str());
  const auto tokenizer = load_tokenizer(f.dir.str(), model.config().vocab_size);
  ASSERT_TRUE(tokenizer->bos_id().has_value());
  Generator<float> generator(model, *tokenizer);
  GenerationParams params;
  params.max_new_tokens = 200;
  params.sampler.temperature = 1.5f;  // a random model: many byte-fallback tokens
  params.sampler.top_k = 0, params.sampler.top_p = 1.0f, params.sampler.repeat_penalty = 1.0f;
  const std::string prompt = "Héllo wörld, ça va? 🙂";
  auto state = generator.read_prompt(prompt, params);
  EXPECT_EQ(state.recent, tokenizer->encode(prompt));  // BOS and all
  EXPECT_EQ(state.prompt_tokens, int64_t(tokenizer->encode(prompt).size()));
  std::vector<std::string> pieces;
  const auto r = generator.decode(
      state, params, [&](Index, int32_t, const std::string& piece) { pieces.push_back(piece); });
  std::string streamed;
  for (size_t i = 0; i < pieces.size(); ++i) {
    streamed += pieces[i];
    if (i + 1 < pieces.size()) {
      EXPECT_FALSE(retnet::testing::splits_a_character(r.text, streamed.size())) << "piece " << i;
    }
  }
  EXPECT_EQ(streamed, r.text);
  std::string concatenated;
  for (int32_t t : r.tokens) concatenated += tokenizer->decode_token(t);
  EXPECT_EQ(r.text, concatenated);
}

TEST(HfGeneration, StopsOnTheTokenizersEndOfSequence) {
  Folder f;
  const auto model = load_model<float>(f.dir.str());
  const auto tokenizer = load_tokenizer(f.dir.str(), model.config().vocab_size);
  Generator<float> generator(model, *tokenizer);
  GenerationParams params;
  params.max_new_tokens = 40;
  params.sampler.temperature = 0;
  const auto free_run = generator.generate("Once upon a time", params);
  ASSERT_GE(free_run.tokens.size(), 10u);
  // Make the 6th greedy token the end of sequence, as a tokenizer's eos_ids() would.
  params.end_tokens = tokenizer->eos_ids();
  params.end_tokens.push_back(free_run.tokens[5]);
  const auto r = generator.generate("Once upon a time", params);
  EXPECT_EQ(r.reason, StopReason::kEndToken);
  EXPECT_LE(r.tokens.size(), 5u);
}
