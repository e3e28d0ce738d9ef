// Decoding allocates nothing per token: after a first step has sized the buffers, further
// `step` calls make no heap allocation (counted by allocation_counter.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "allocation_counter.hpp"
#include "retnet/retnet.hpp"

using namespace retnet;

TEST(Decoding, StepsAllocateNothingAfterTheFirst) {
  set_num_threads(1);  // the OpenMP runtime's own bookkeeping is not the library's to count
  ModelConfig c;
  c.vocab_size = 300, c.embed_dim = 32, c.value_embed_dim = 48, c.heads = 2, c.ffn_dim = 40;
  c.layers = 2;
  RetNetModel<float> model(c, ModelWeights<float>::random(c, 1));
  for (Index batch : {1, 3}) {
    auto state = model.new_state(batch);
    Workspace<float> ws;
    Matrix<float> logits;
    std::vector<int32_t> tokens(static_cast<size_t>(batch), 7);
    model.step(tokens, state, ws, logits);  // sizes every buffer
    const long before = g_allocations.load();
    for (int i = 0; i < 20; ++i) {
      model.step(tokens, state, ws, logits);
      for (Index b = 0; b < batch; ++b) {
        Index arg;
        logits.row(b).maxCoeff(&arg);
        tokens[b] = static_cast<int32_t>(arg);
      }
    }
    EXPECT_EQ(g_allocations.load() - before, 0) << "batch " << batch;
  }
}
