// One const model shared by several threads, each with its own Generator (and so its own
// workspace): every thread's output equals the same prompt decoded alone. CI runs this under
// ThreadSanitizer.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "retnet/retnet.hpp"

using namespace retnet;

TEST(Concurrency, ThreadsDecodingOnOneConstModelEqualEachAlone) {
  set_num_threads(1);  // threads of our own here; the kernels' OpenMP threads are not the point
  ModelConfig c;
  c.vocab_size = 256, c.embed_dim = 32, c.value_embed_dim = 48, c.heads = 2, c.ffn_dim = 40;
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
}
