// The Transformer baseline of the benchmarks (benchmarks/transformer_baseline.hpp): decoding one
// token at a time through the KV cache must give the logits of a full causal-attention
// recomputation, here a plain double-precision reading of the model written out in loops.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compare.hpp"
#include "transformer_baseline.hpp"

namespace {

using retnet::Index;
using retnet::LogitsMode;
using retnet::Matrix;
using retnet::testing::relative_error;
using retnet_baseline::KVCache;
using retnet_baseline::TransformerConfig;
using retnet_baseline::TransformerModel;
using retnet_baseline::TransformerWeights;
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

TransformerConfig tiny_config() {
  TransformerConfig c;
  c.vocab_size = 37;
  c.embed_dim = 24;
  c.heads = 3;  // head size 8: four rotation pairs
  c.ffn_dim = 40;
  c.layers = 2;
  c.eps = 1e-6;
  return c;
}

std::vector<int32_t> random_tokens(Index n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = pick(rng);
  return t;
}

MatrixD rms_norm(const MatrixD& x, const retnet::Vector<float>& weight, double eps) {
  MatrixD y = x;
  for (Index r = 0; r < x.rows(); ++r) {
    const double ms = x.row(r).squaredNorm() / double(x.cols());
    for (Index c = 0; c < x.cols(); ++c) y(r, c) = x(r, c) / std::sqrt(ms + eps) * weight[c];
  }
  return y;
}

MatrixD times_transpose(const MatrixD& x, const retnet::LinearWeight<float>& w) {
  return x * w.to_matrix().cast<double>().transpose();
}

/// Logits of every position [time, vocab], recomputing full causal attention over the sequence.
MatrixD reference_logits(const TransformerConfig& c, const TransformerWeights<float>& w,
                         const std::vector<int32_t>& tokens) {
  const Index time = static_cast<Index>(tokens.size()), d = c.embed_dim, dh = c.head_dim();
  MatrixD x(time, d);
  for (Index t = 0; t < time; ++t) x.row(t) = w.embed.row(tokens[t]).cast<double>();
  for (const auto& l : w.layers) {
    const MatrixD h = rms_norm(x, l.attn_norm.weight, c.eps);
    MatrixD q = times_transpose(h, l.q_proj), k = times_transpose(h, l.k_proj);
    const MatrixD v = times_transpose(h, l.v_proj);
    // Rotation: pair (2i, 2i+1) of each head turns by n / 10000^(i / (dh/2 - 1)).
    for (Index t = 0; t < time; ++t)
      for (Index hd = 0; hd < c.heads; ++hd)
        for (Index i = 0; i < dh / 2; ++i) {
          const double angle = double(t) / std::pow(10000.0, double(i) / double(dh / 2 - 1));
          for (MatrixD* m : {&q, &k}) {
            const Index j = hd * dh + 2 * i;
            const double a = (*m)(t, j), b = (*m)(t, j + 1);
            (*m)(t, j) = a * std::cos(angle) - b * std::sin(angle);
            (*m)(t, j + 1) = b * std::cos(angle) + a * std::sin(angle);
          }
        }
    MatrixD attn = MatrixD::Zero(time, d);
    for (Index hd = 0; hd < c.heads; ++hd)
      for (Index n = 0; n < time; ++n) {
        std::vector<double> p(static_cast<size_t>(n + 1));
        double top = -1e300, total = 0;
        for (Index m = 0; m <= n; ++m) {
          double dot = 0;
          for (Index e = 0; e < dh; ++e) dot += q(n, hd * dh + e) * k(m, hd * dh + e);
          p[m] = dot / std::sqrt(double(dh));
          top = std::max(top, p[m]);
        }
        for (auto& e : p) total += (e = std::exp(e - top));
        for (Index m = 0; m <= n; ++m)
          for (Index e = 0; e < dh; ++e) attn(n, hd * dh + e) += p[m] / total * v(m, hd * dh + e);
      }
    x += times_transpose(attn, l.out_proj);
    const MatrixD f = rms_norm(x, l.ffn_norm.weight, c.eps);
    MatrixD a = times_transpose(f, l.ffn.fc1);
    const MatrixD g = times_transpose(f, l.ffn.gate);
    for (Index i = 0; i < a.size(); ++i)
      a.data()[i] = a.data()[i] / (1 + std::exp(-a.data()[i])) * g.data()[i];
    x += times_transpose(a, l.ffn.fc2);
  }
  return times_transpose(rms_norm(x, w.final_norm.weight, c.eps), w.output);
}

class TransformerBaseline : public ::testing::Test {
 protected:
  TransformerConfig config = tiny_config();
  TransformerModel<float> model{config, TransformerWeights<float>::random(config, 7)};
  std::vector<int32_t> tokens = random_tokens(19, int32_t(config.vocab_size), 3);
  MatrixD expected = reference_logits(config, model.weights(), tokens);

  // Max difference relative to max(1, max |expected|): +infinity (a failure) on a NaN or an
  // infinity on either side or a size mismatch (compare.hpp).
  void expect_close(const Matrix<float>& got, Index row, Index expected_row) {
    ASSERT_LT(row, got.rows());
    EXPECT_LE(relative_error(got.row(row), expected.row(expected_row), 1.0), 1e-5)
        << "position " << expected_row;
  }
};

TEST_F(TransformerBaseline, WholeSequenceMatchesReference) {
  auto cache = model.new_cache(32);
  Matrix<float> logits;
  model.forward(tokens, cache, logits, LogitsMode::kAll);
  ASSERT_EQ(logits.rows(), Index(tokens.size()));
  ASSERT_EQ(logits.cols(), config.vocab_size);
  for (Index t = 0; t < logits.rows(); ++t) expect_close(logits, t, t);
  EXPECT_EQ(cache.length, Index(tokens.size()));
}

TEST_F(TransformerBaseline, CachedDecodingMatchesFullRecomputation) {
  auto cache = model.new_cache(Index(tokens.size()));
  const float* k0 = cache.k[0].data();
  Matrix<float> logits;
  for (size_t t = 0; t < tokens.size(); ++t) {
    model.step(tokens[t], cache, logits);
    ASSERT_EQ(logits.rows(), 1);
    expect_close(logits, 0, Index(t));
  }
  EXPECT_EQ(cache.k[0].data(), k0) << "the cache must not reallocate while decoding";
}

TEST_F(TransformerBaseline, PrefillThenDecodeMatchesReference) {
  const size_t prompt = 8;
  auto cache = model.new_cache(Index(tokens.size()));
  Matrix<float> logits;
  model.forward(std::vector<int32_t>(tokens.begin(), tokens.begin() + prompt), cache, logits,
                LogitsMode::kLast);
  ASSERT_EQ(logits.rows(), 1);
  expect_close(logits, 0, Index(prompt - 1));
  // A second segment of several tokens attends over the cached prefix too.
  model.forward(std::vector<int32_t>(tokens.begin() + prompt, tokens.begin() + prompt + 5), cache,
                logits, LogitsMode::kAll);
  for (Index t = 0; t < 5; ++t) expect_close(logits, t, Index(prompt) + t);
  for (size_t t = prompt + 5; t < tokens.size(); ++t) {
    model.step(tokens[t], cache, logits);
    expect_close(logits, 0, Index(t));
  }
}

TEST_F(TransformerBaseline, TruncateRewindsTheCache) {
  auto cache = model.new_cache(Index(tokens.size()));
  Matrix<float> logits;
  model.forward(std::vector<int32_t>(tokens.begin(), tokens.begin() + 10), cache, logits,
                LogitsMode::kNone);
  model.step(5, cache, logits);  // a token that is then taken back
  cache.truncate(10);
  model.step(tokens[10], cache, logits);
  expect_close(logits, 0, 10);
  EXPECT_EQ(cache.length, 11);
  EXPECT_EQ(cache.bytes_used(), size_t(2 * config.layers * 11 * config.embed_dim) * sizeof(float));
}

TEST_F(TransformerBaseline, RejectsOverflowAndBadTokens) {
  auto cache = model.new_cache(4);
  Matrix<float> logits;
  EXPECT_THROW(model.forward(random_tokens(5, 10, 1), cache, logits), retnet::InvalidArgument);
  EXPECT_THROW(model.step(int32_t(config.vocab_size), cache, logits), retnet::InvalidArgument);
  EXPECT_THROW(model.step(-1, cache, logits), retnet::InvalidArgument);
  EXPECT_EQ(cache.length, 0);
}

TEST(TransformerBaselineConfig, MatchedToBaseHasParameterParity) {
  const auto retnet_config =
      retnet::load_config_json(RETNET_SOURCE_DIR "/benchmarks/configs/base.json");
  const auto t = TransformerConfig::matched(retnet_config, 2);
  EXPECT_EQ(t.embed_dim, 512);
  EXPECT_EQ(t.head_dim(), 256);
  EXPECT_EQ(t.ffn_dim, 1392);
  retnet::ModelWeights<float> w;
  w.allocate(retnet_config);
  const double retnet_params = double(w.size_bytes(retnet_config) / sizeof(float));
  EXPECT_NEAR(double(t.parameter_count()) / retnet_params, 1.0, 0.01);
  // The config's count agrees with the stored tensors (small config, cheap to build).
  const auto c = tiny_config();
  EXPECT_EQ(TransformerWeights<float>::random(c, 1).parameter_count(), c.parameter_count());
}

}  // namespace
