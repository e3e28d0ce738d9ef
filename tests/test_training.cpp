// Training (include/retnet/train/): AdamW against a hand-written reference, the schedule at
// chosen steps, clipping, the batches, accumulation, a tiny model overfitting a short text,
// an exact resume, and the saved folder as load_model reads it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <retnet/retnet.hpp>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "pool_ignores_load.hpp"
#include "retnet/train/training_checkpoint.hpp"
#include "retnet/train/weight_init.hpp"
#include "temp_dir.hpp"

namespace retnet {
namespace {

ModelConfig tiny_config(int64_t layers = 1, int64_t d = 16) {
  ModelConfig c;
  c.vocab_size = 256;
  c.embed_dim = d;
  c.value_embed_dim = d;
  c.heads = 2;
  c.ffn_dim = 2 * d;
  c.layers = layers;
  c.activation = Activation::kSwish;
  c.chunk_size = 8;
  return c;
}

std::vector<int32_t> bytes_of(const std::string& text) {
  return std::vector<int32_t>(text.begin(), text.end());
}

std::vector<int32_t> repeated_text(size_t n, const std::string& unit = "the cat sat on the mat. ") {
  std::string text;
  while (text.size() < n) text += unit;
  text.resize(n);
  return bytes_of(text);
}

TrainOptions small_options(int64_t steps) {
  TrainOptions o;
  o.batch = 2;
  o.seq_len = 16;
  o.schedule = {3e-3, 3e-4, 2, steps};
  o.seed = 7;
  return o;
}

// The update written out for one value, as torch.optim.AdamW documents it.
TEST(AdamW, OneValueMatchesTheWrittenOutUpdate) {
  const AdamWOptions o{0.9, 0.95, 1e-8, 0.1};
  const double lr = 0.01;
  double w_ref = 0.5, m_ref = 0, v_ref = 0;
  float w = 0.5f, m = 0, v = 0;
  const double grads[] = {0.2, -0.3, 0.05};
  for (int t = 1; t <= 3; ++t) {
    const float g = static_cast<float>(grads[t - 1]);
    w_ref *= 1 - lr * o.weight_decay;
    m_ref = 0.9 * m_ref + 0.1 * g;
    v_ref = 0.95 * v_ref + 0.05 * double(g) * g;
    const double m_hat = m_ref / (1 - std::pow(0.9, t)), v_hat = v_ref / (1 - std::pow(0.95, t));
    w_ref -= lr * m_hat / (std::sqrt(v_hat) + 1e-8);
    adamw_update(&w, &g, &m, &v, 1, lr, o.weight_decay, o, t);
    EXPECT_NEAR(w, w_ref, 1e-6) << "step " << t;
    EXPECT_NEAR(m, m_ref, 1e-7);
    EXPECT_NEAR(v, v_ref, 1e-8);
  }
  // The first step moves by lr (m̂ / sqrt(v̂) = sign(g)), plus the decay.
  float w1 = 1, g1 = 3, m1 = 0, v1 = 0;
  adamw_update(&w1, &g1, &m1, &v1, 1, 0.1, 0.0, o, 1);
  EXPECT_NEAR(w1, 0.9, 1e-6);
}

TEST(AdamW, DecaysTheMatricesOnlyNotNormsBiasesOrEmbedding) {
  ModelConfig c = tiny_config();
  c.norm = NormKind::kLayerNorm;
  DenseModelWeights<float> w = initial_weights<float>(c, 1), grads;
  grads.allocate(c);  // zero gradients: only the decay moves anything
  const DenseModelWeights<float> before = w;
  AdamW<float> opt(c, {0.9, 0.95, 1e-8, 0.5});
  opt.update(c, w, grads, 0.1);
  EXPECT_EQ(opt.step, 1);
  EXPECT_TRUE(w.embed.isApprox(before.embed, 0));                            // the embedding
  EXPECT_EQ(w.final_norm.weight, before.final_norm.weight);                  // a norm
  EXPECT_EQ(w.layers[0].final_norm.bias, before.layers[0].final_norm.bias);  // a bias
  EXPECT_NEAR((w.output - 0.95f * before.output).cwiseAbs().maxCoeff(), 0, 1e-7);
  EXPECT_NEAR((w.layers[0].retention.q_proj - 0.95f * before.layers[0].retention.q_proj)
                  .cwiseAbs()
                  .maxCoeff(),
              0, 1e-7);
}

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  const LrSchedule s{1.0, 0.1, 10, 111};  // 10 warmup steps, then steps 10..110 decay
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(4), 0.5);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // half way: (1 + cos(pi/2)) / 2
  EXPECT_NEAR(s.at(35), 0.1 + 0.45 * (1 + std::cos(3.14159265358979 / 4)), 1e-12);
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  EXPECT_NEAR(s.at(500), 0.1, 1e-12);
  const LrSchedule flat{2.0, 2.0, 0, 5};
  for (int t = 0; t < 5; ++t) EXPECT_DOUBLE_EQ(flat.at(t), 2.0);
}

TEST(GradientClipping, ScalesToTheBoundKeepingTheDirection) {
  const ModelConfig c = tiny_config();
  DenseModelWeights<float> g = initial_weights<float>(c, 3);
  double sum = 0;
  for (const auto& t : parameter_views(c, g))
    for (Index i = 0; i < t.size; ++i) sum += double(t.data[i]) * t.data[i];
  const DenseModelWeights<float> before = g;
  EXPECT_NEAR(clip_gradient_norm(c, g, 1e9), std::sqrt(sum), 1e-9 * std::sqrt(sum));
  EXPECT_TRUE(g.output == before.output);  // below the bound: untouched
  const double norm = clip_gradient_norm(c, g, 0.5);
  EXPECT_NEAR(norm, std::sqrt(sum), 1e-9 * norm);
  EXPECT_NEAR(gradient_norm(c, g), 0.5, 1e-6);
  const float scale = static_cast<float>(0.5 / norm);
  EXPECT_LT((g.output - scale * before.output).cwiseAbs().maxCoeff(), 1e-7);
}

TEST(TokenBatcher, TargetsFollowInputsAndStreamsReadOn) {
  std::vector<int32_t> tokens(100);
  for (int i = 0; i < 100; ++i) tokens[i] = i;
  TokenBatcher a(tokens, 3, 8, 42), b(tokens, 3, 8, 42);
  TokenMatrix in, target, in2, target2;
  a.next(in, target);
  for (Index r = 0; r < 3; ++r)
    for (Index t = 0; t < 8; ++t) {
      EXPECT_EQ(target(r, t), in(r, t) + 1);
      if (t) {
        EXPECT_EQ(in(r, t), in(r, t - 1) + 1);
      }
    }
  a.next(in2, target2);
  for (Index r = 0; r < 3; ++r)  // a stream continues unless it ran out
    if (in(r, 0) + 16 + 1 <= 100) {
      EXPECT_EQ(in2(r, 0), in(r, 0) + 8);
    }
  b.next(in, target);  // the same seed: the same batches
  b.next(in, target);
  EXPECT_EQ(in, in2);
  testing::expect_error<Error>([&] { TokenBatcher(tokens, 1, 100, 0); },
                               {"fewer than one sequence"});
  const TokenSplit s = split_heldout(tokens, 0.1);
  EXPECT_EQ(s.train.size(), 90u);
  EXPECT_EQ(s.heldout.front(), 90);
}

TEST(Trainer, TwoMicroBatchesEqualOneBatchOfBoth) {
  const ModelConfig c = tiny_config(2);
  const std::vector<int32_t> data = repeated_text(200);
  TokenMatrix a(1, 12), b(1, 12), ta(1, 12), tb(1, 12), both(2, 12), tboth(2, 12);
  for (Index t = 0; t < 12; ++t) {
    a(0, t) = data[t], ta(0, t) = data[t + 1], b(0, t) = data[50 + t], tb(0, t) = data[51 + t];
    both(0, t) = a(0, t), both(1, t) = b(0, t), tboth(0, t) = ta(0, t), tboth(1, t) = tb(0, t);
  }
  Trainer<float> one(c, initial_weights<float>(c, 5), data, small_options(10));
  Trainer<float> two(c, initial_weights<float>(c, 5), data, small_options(10));
  const LossSum l1 = one.compute_gradients({both}, {tboth});
  const LossSum l2 = two.compute_gradients({a, b}, {ta, tb});
  EXPECT_EQ(l1.count, 24);
  EXPECT_EQ(l2.count, 24);
  EXPECT_NEAR(l1.sum, l2.sum, 1e-4);
  auto g1 = parameter_views(c, const_cast<DenseModelWeights<float>&>(one.gradients()));
  auto g2 = parameter_views(c, const_cast<DenseModelWeights<float>&>(two.gradients()));
  double max_error = 0, max_value = 0;
  for (size_t i = 0; i < g1.size(); ++i)
    for (Index j = 0; j < g1[i].size; ++j) {
      max_error = std::max(max_error, double(std::fabs(g1[i].data[j] - g2[i].data[j])));
      max_value = std::max(max_value, double(std::fabs(g1[i].data[j])));
    }
  EXPECT_LT(max_error, 1e-5 * std::max(1.0, max_value));
}

TEST(Trainer, TinyModelOverfitsARepeatedText) {
  set_num_threads(1);
  const ModelConfig c = tiny_config(1, 32);
  TrainOptions o;
  o.batch = 4;
  o.seq_len = 24;
  o.schedule = {1e-2, 1e-3, 10, 300};
  o.adamw.weight_decay = 0;
  // Every byte of the unit appears once in it, so each next byte is determined by the current
  // one, even at the start of a window (which reads from a zero state).
  const std::string unit = "abcdefghijklmnopqrstuvwxyz.";
  Trainer<float> trainer(c, initial_weights<float>(c, 1), repeated_text(480, unit), o);
  double first = 0, last = 0;
  for (int s = 0; s < 300; ++s) {
    const StepReport r = trainer.step();
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_GT(first, 4.0);  // about log(256) at the start
  EXPECT_LT(last, 0.05);
}

TEST(Trainer, StopsOnANanLossWithoutTouchingTheWeights) {
  const ModelConfig c = tiny_config();
  DenseModelWeights<float> w = initial_weights<float>(c, 2);
  w.output(3, 3) = std::nanf("");
  Trainer<float> trainer(c, w, repeated_text(100), small_options(5));
  testing::expect_error<Error>([&] { trainer.step(); }, {"step 1: loss is nan"});
  EXPECT_EQ(trainer.steps_done(), 0);
  EXPECT_EQ(trainer.weights().layers[0].retention.q_proj, w.layers[0].retention.q_proj);
}

// Loads `dir` as `retnet train --resume` does: the saved weights, then the optimiser state.
void resume_from(const std::string& dir, std::unique_ptr<Trainer<float>>& trainer,
                 const std::vector<int32_t>& data, const TrainOptions& o) {
  ModelConfig c = load_config_json(dir + "/config.json");
  const ModelWeights<float> w = load_weights<float>(dir, c);
  trainer = std::make_unique<Trainer<float>>(c, dense_weights(c, w), data, o);
  resume_training(dir, *trainer);
}

TEST(TrainingCheckpoint, ResumedRunEqualsAnUnbrokenOneBitForBit) {
  set_num_threads(1);
  const ModelConfig c = tiny_config(2);
  const std::vector<int32_t> data = repeated_text(300);
  TrainOptions o = small_options(6);
  o.accumulate = 2;
  Trainer<float> unbroken(c, initial_weights<float>(c, 9), data, o);
  for (int s = 0; s < 6; ++s) unbroken.step();

  testing::TempDir dir;
  {
    Trainer<float> first(c, initial_weights<float>(c, 9), data, o);
    for (int s = 0; s < 3; ++s) first.step();
    save_training_checkpoint(dir.str(), first);
  }
  std::unique_ptr<Trainer<float>> resumed;
  resume_from(dir.str(), resumed, data, o);
  EXPECT_EQ(resumed->steps_done(), 3);
  for (int s = 0; s < 3; ++s) resumed->step();
  auto a = parameter_views(c, unbroken.weights());
  auto b = parameter_views(c, resumed->weights());
  auto ma = parameter_views(c, unbroken.optimiser().v),
       mb = parameter_views(c, resumed->optimiser().v);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(a[i].data, b[i].data, sizeof(float) * a[i].size), 0) << a[i].name;
    EXPECT_EQ(std::memcmp(ma[i].data, mb[i].data, sizeof(float) * a[i].size), 0) << a[i].name;
  }
  EXPECT_EQ(unbroken.batcher().position().cursors, resumed->batcher().position().cursors);
  // Other batch shapes are refused by name.
  TrainOptions other = o;
  other.batch = 3;
  testing::expect_error<Error>([&] { resume_from(dir.str(), resumed, data, other); },
                               {"--batch 2"});
}

TEST(TrainingCheckpoint, SavedFolderLoadsAndScoresAsTheTrainerEvaluates) {
  const ModelConfig c = tiny_config(2);
  const std::vector<int32_t> data = repeated_text(300);
  Trainer<float> trainer(c, initial_weights<float>(c, 4), data, small_options(4));
  for (int s = 0; s < 4; ++s) trainer.step();
  testing::TempDir dir;
  save_training_checkpoint(dir.str(), trainer);
  EXPECT_FALSE(std::filesystem::exists(dir.file(".checkpoint-partial")));
  const RetNetModel<float> model = load_model<float>(dir.str());
  const std::vector<int32_t> heldout = bytes_of("a held-out sentence, the mat sat on the cat.");
  const LossSum evaluated = trainer.evaluate(heldout, 8);
  const Index time = static_cast<Index>(heldout.size());
  const Eigen::Map<const TokenMatrix> ids(heldout.data(), 1, time);
  const Matrix<float> logits = model.forward(ids, Form::kParallel);
  double nll = 0;
  for (Index t = 0; t + 1 < time; ++t) {
    const double max = logits.row(t).maxCoeff();
    double sum = 0;  // (a plain loop: GCC 12 warns inside Eigen's vectorised exp of doubles)
    for (Index j = 0; j < logits.cols(); ++j) sum += std::exp(double(logits(t, j)) - max);
    nll += std::log(sum) + max - double(logits(t, heldout[t + 1]));
  }
  EXPECT_EQ(evaluated.count, time - 1);
  EXPECT_NEAR(evaluated.mean(), nll / double(time - 1), 1e-5);
}

}  // namespace
}  // namespace retnet
