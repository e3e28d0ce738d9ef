// The smallest training run: a tiny byte-level RetNet learns a short repeated sentence, and the
// loss (nats per byte) falls from about log(256) = 5.5 towards 0. See docs/TRAINING.md.
#include <cstdio>
#include <retnet/training.hpp>
#include <string>
#include <vector>

int main() {
  retnet::ModelConfig config;  // 1 layer, d = 32, 2 heads, bytes as tokens
  config.vocab_size = 256;
  config.embed_dim = config.value_embed_dim = 32;
  config.heads = 2;
  config.ffn_dim = 64;
  config.layers = 1;
  config.activation = retnet::Activation::kSwish;

  std::string text;
  while (text.size() < 600) text += "RetNets retain what they read. ";
  const std::vector<int32_t> tokens(text.begin(), text.end());

  retnet::TrainOptions options;
  options.batch = 4;
  options.seq_len = 32;
  options.schedule = {1e-2, 1e-3, /*warmup=*/10, /*steps=*/200};
  retnet::Trainer<float> trainer(config, retnet::initial_weights<float>(config, 1), tokens,
                                 options);
  for (int step = 0; step < 200; ++step) {
    const retnet::StepReport r = trainer.step();
    if (r.step % 20 == 0) std::printf("step %3ld  loss %.4f\n", long(r.step), r.loss);
  }
}
