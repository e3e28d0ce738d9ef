// The sampler's fields beyond temperature, top-k and top-p (min_p, presence and frequency
// penalties, logit_bias) and the one default sampler, against a reference of the documented
// order (docs/NUMERICS.md#sampling) written independently of the library.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "retnet/text/sampler.hpp"
#include "sampler_reference.hpp"

namespace {

using retnet::testing::expect_error;

const std::vector<int32_t> kNoRecent;

// The documented order (docs/NUMERICS.md#sampling), written independently of the library with
// maps and a stable sort: logit bias (-100 bans), repetition penalty, presence and frequency
// penalties over the last repeat_last_n of `recent`, top-k, softmax at the temperature, top-p,
// min-p. Temperature > 0.
std::vector<double> ReferenceProbabilities(std::vector<float> l, const std::vector<int32_t>& recent,
                                           const SamplerParams& p) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& [id, bias] : p.logit_bias) l[id] = bias <= -100.0f ? -inf : l[id] + bias;
  std::map<int32_t, int> counts;
  const size_t window = std::min(recent.size(), static_cast<size_t>(p.repeat_last_n));
  for (size_t i = recent.size() - window; i < recent.size(); ++i) ++counts[recent[i]];
  for (const auto& [id, count] : counts) {
    if (p.repeat_penalty != 1.0f)
      l[id] = l[id] > 0 ? l[id] / p.repeat_penalty : l[id] * p.repeat_penalty;
    l[id] -= p.presence_penalty + static_cast<float>(count) * p.frequency_penalty;
  }
  std::vector<size_t> order(l.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
  size_t keep = p.top_k > 0 ? std::min(order.size(), static_cast<size_t>(p.top_k)) : order.size();
  std::vector<double> q(keep);
  double sum = 0.0;
  for (size_t r = 0; r < keep; ++r) {
    q[r] = std::exp((static_cast<double>(l[order[r]]) - l[order[0]]) / p.temperature);
    sum += q[r];
  }
  if (p.top_p < 1.0f) {
    double cumulative = 0.0;
    for (size_t r = 0; r < keep; ++r) {
      cumulative += q[r] / sum;
      if (cumulative >= p.top_p - 1e-6) {
        keep = r + 1;
        break;
      }
    }
  }
  std::vector<double> out(l.size(), 0.0);
  double kept = 0.0;
  for (size_t r = 0; r < keep; ++r) {
    if (q[r] < static_cast<double>(p.min_p) * q[0]) continue;
    out[order[r]] = q[r];
    kept += q[r];
  }
  for (double& x : out) x /= kept;
  return out;
}

TEST(SamplerFields, MinPKeepsTokensAtLeastMinPTimesTheMostLikely) {
  // kEightLogits at temperature 1: token 0 (logit 2) is the most likely; token 6 (1.5) has
  // e^-0.5 = 0.61 of its probability, token 1 (1.0) e^-1 = 0.37, token 2 (0.5) e^-1.5 = 0.22.
  struct Case {
    float min_p;
    std::vector<int32_t> kept;
  };
  for (const Case& c : {Case{0.7f, {0}}, Case{0.5f, {0, 6}}, Case{0.3f, {0, 1, 6}},
                        Case{0.2f, {0, 1, 2, 6}}, Case{1.0f, {0}}}) {
    SCOPED_TRACE("min_p " + std::to_string(c.min_p));
    SamplerParams params = Params(1.0f, 0, 1.0f, /*seed=*/4);
    params.min_p = c.min_p;
    Sampler sampler(params);
    std::vector<double> expected(8, 0.0);
    double sum = 0.0;
    for (int32_t id : c.kept) sum += std::exp(kEightLogits[id] - 2.0);
    for (int32_t id : c.kept) expected[id] = std::exp(kEightLogits[id] - 2.0) / sum;
    ExpectProbabilitiesNear(sampler, kEightLogits, kNoRecent, expected);
    if (c.kept.size() > 1) ExpectMatchesDistribution(sampler, kEightLogits, kNoRecent, expected);
  }
  // The threshold is on the probabilities at the temperature: at 0.5, token 6 has e^-1 = 0.37
  // of token 0's, so min_p 0.5 keeps token 0 alone.
  SamplerParams cold = Params(0.5f);
  cold.min_p = 0.5f;
  Sampler sampler(cold);
  ExpectProbabilitiesNear(sampler, kEightLogits, kNoRecent, {1, 0, 0, 0, 0, 0, 0, 0});
}

TEST(SamplerFields, PresenceAndFrequencyPenaltiesSubtractPerDistinctTokenAndPerOccurrence) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 0.0f, 1.0f, 3.0f};
  // Token 1 three times, token 3 once, token 5 twice; token 4 only outside the window of 6.
  const std::vector<int32_t> recent = {4, 1, 5, 1, 3, 5, 1};
  SamplerParams params = Params(1.0f, 0, 1.0f, /*seed=*/6);
  params.repeat_last_n = 6;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  {
    Sampler sampler(params);
    // logit - 0.5 - 0.25 x count: token 1: -1 - 0.5 - 0.75, token 3: 0 - 0.75, token 5: 3 - 1.
    const auto expected = Softmax({2.0f, -2.25f, 0.5f, -0.75f, 1.0f, 2.0f}, 1.0);
    ExpectProbabilitiesNear(sampler, logits, recent, expected);
    ExpectMatchesDistribution(sampler, logits, recent, expected);
  }
  {  // Negative values reward repetition; the repetition penalty applies first.
    SamplerParams both = params;
    both.presence_penalty = -1.0f;
    both.frequency_penalty = -0.5f;
    both.repeat_penalty = 2.0f;
    Sampler sampler(both);
    // token 1: -1 x 2 + 1 + 1.5, token 3: 0 x 2 + 1 + 0.5, token 5: 3 / 2 + 1 + 1.
    ExpectProbabilitiesNear(sampler, logits, recent,
                            Softmax({2.0f, 0.5f, 0.5f, 1.5f, 1.0f, 3.5f}, 1.0));
  }
  {  // An empty window turns them off, as it does the repetition penalty.
    SamplerParams off = params;
    off.repeat_last_n = 0;
    Sampler sampler(off);
    ExpectProbabilitiesNear(sampler, logits, recent, Softmax(logits, 1.0));
  }
  {  // They apply to greedy decoding too: token 5 (3) drops below token 0 (2) after 2 x 0.75.
    SamplerParams greedy = params;
    greedy.temperature = 0.0f;
    greedy.frequency_penalty = 0.75f;
    greedy.presence_penalty = 0.0f;
    Sampler sampler(greedy);
    EXPECT_EQ(sampler.sample(logits.data(), 6, kNoRecent), 5);
    EXPECT_EQ(sampler.sample(logits.data(), 6, {5, 5}), 0);
  }
}

TEST(SamplerFields, LogitBiasIsAddedFirstAndMinus100Bans) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 0.0f, 1.0f, 3.0f};
  SamplerParams params = Params(1.0f, 0, 1.0f, /*seed=*/8);
  params.logit_bias = {{1, 4.0f}, {5, -100.0f}, {2, -0.5f}};
  {
    Sampler sampler(params);
    const auto expected = Softmax({2.0f, 3.0f, 0.0f, 0.0f, 1.0f, -1e30f}, 1.0);
    ASSERT_EQ(expected[5], 0.0);
    ExpectProbabilitiesNear(sampler, logits, kNoRecent, expected);
    ExpectMatchesDistribution(sampler, logits, kNoRecent, expected);
  }
  {  // Before the repetition penalty: token 1's -1 + 4 = 3 is positive, so it is divided.
    SamplerParams penalised = params;
    penalised.repeat_penalty = 2.0f;
    Sampler sampler(penalised);
    ExpectProbabilitiesNear(sampler, logits, {1},
                            Softmax({2.0f, 1.5f, 0.0f, 0.0f, 1.0f, -1e30f}, 1.0));
  }
  {  // A banned id is never chosen, greedy included; a bias can make greedy pick another.
    SamplerParams greedy = params;
    greedy.temperature = 0.0f;
    Sampler sampler(greedy);
    EXPECT_EQ(sampler.sample(logits.data(), 6, kNoRecent), 1);
  }
  {  // Every id banned: one clear error, not a draw.
    SamplerParams all = params;
    all.logit_bias.clear();
    for (int32_t id = 0; id < 6; ++id) all.logit_bias.push_back({id, -100.0f});
    Sampler sampler(all);
    expect_error<retnet::InvalidArgument>([&] { sampler.sample(logits.data(), 6, kNoRecent); },
                                          {"logit_bias"});
  }
  {  // An id beyond the vocabulary is refused when sampling, naming it and the vocabulary.
    SamplerParams beyond = params;
    beyond.logit_bias = {{6, 1.0f}};
    Sampler sampler(beyond);
    expect_error<retnet::InvalidArgument>([&] { sampler.sample(logits.data(), 6, kNoRecent); },
                                          {"logit_bias id 6", "[0, 6)"});
    std::vector<float> seven = logits;
    seven.push_back(0.0f);
    EXPECT_NO_THROW(sampler.sample(seven.data(), 7, kNoRecent));
  }
}

// Every field at once, random logits and histories, against ReferenceProbabilities.
TEST(SamplerFields, EveryFieldTogetherMatchesTheDocumentedOrder) {
  std::mt19937_64 gen(21);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const size_t vocab = 40;
    const auto logits = RandomLogits(gen, vocab, /*integer_valued=*/trial % 3 == 0);
    std::vector<int32_t> recent;
    for (int i = 0; i < 30; ++i) recent.push_back(static_cast<int32_t>(gen() % 12));  // repeats
    SamplerParams p;
    p.temperature = UniformFloat(gen, 0.2, 2.0);
    p.top_k = static_cast<int>(gen() % 3) * 10;  // 0 (off), 10, 20
    p.top_p = trial % 2 ? UniformFloat(gen, 0.5, 1.0) : 1.0f;
    p.min_p = trial % 4 < 2 ? UniformFloat(gen, 0.0, 0.3) : 0.0f;
    p.repeat_penalty = UniformFloat(gen, 0.8, 1.5);
    p.repeat_last_n = static_cast<int>(gen() % 40);
    p.presence_penalty = UniformFloat(gen, -2.0, 2.0);
    p.frequency_penalty = UniformFloat(gen, -2.0, 2.0);
    for (int32_t id = 0; id < static_cast<int32_t>(vocab);
         id += 1 + static_cast<int32_t>(gen() % 7))
      p.logit_bias.push_back({id, gen() % 5 == 0 ? -100.0f : UniformFloat(gen, -5.0, 5.0)});
    p.seed = trial;
    Sampler sampler(p);
    ExpectProbabilitiesNear(sampler, logits, recent, ReferenceProbabilities(logits, recent, p));
  }
}

TEST(SamplerFields, OutOfRangeValuesAreRefusedNamingTheField) {
  struct Case {
    std::function<void(SamplerParams&)> set;
    std::vector<std::string> words;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {[](SamplerParams& p) { p.min_p = -0.01f; }, {"min_p", "[0, 1]"}},
      {[](SamplerParams& p) { p.min_p = 1.01f; }, {"min_p"}},
      {[&](SamplerParams& p) { p.min_p = nan; }, {"min_p"}},
      {[](SamplerParams& p) { p.presence_penalty = 2.01f; }, {"presence_penalty", "[-2, 2]"}},
      {[](SamplerParams& p) { p.presence_penalty = -2.01f; }, {"presence_penalty"}},
      {[&](SamplerParams& p) { p.presence_penalty = nan; }, {"presence_penalty"}},
      {[](SamplerParams& p) { p.frequency_penalty = 3.0f; }, {"frequency_penalty", "[-2, 2]"}},
      {[&](SamplerParams& p) { p.frequency_penalty = -inf; }, {"frequency_penalty"}},
      {[](SamplerParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       },
       {"logit_bias id", ">= 0"}},
      {[](SamplerParams& p) {
         p.logit_bias = {{3, 100.5f}};
       },
       {"logit_bias of id 3", "[-100, 100]"}},
      {[](SamplerParams& p) {
         p.logit_bias = {{3, -101.0f}};
       },
       {"logit_bias of id 3"}},
      {[&](SamplerParams& p) {
         p.logit_bias = {{3, nan}};
       },
       {"logit_bias of id 3"}},
      {[&](SamplerParams& p) {
         p.logit_bias = {{3, inf}};
       },
       {"logit_bias of id 3"}},
      {[](SamplerParams& p) {
         p.logit_bias = {{3, 1.0f}, {4, 1.0f}, {3, 2.0f}};
       },
       {"id 3 twice"}},
  };
  for (const Case& c : cases) {
    SamplerParams params;
    c.set(params);
    expect_error<retnet::InvalidArgument>([&] { params.validate(); }, c.words);
    expect_error<retnet::InvalidArgument>([&] { (void)Sampler(params); }, c.words);
  }
  SamplerParams edge;
  edge.min_p = 1.0f;
  edge.presence_penalty = -2.0f;
  edge.frequency_penalty = 2.0f;
  edge.logit_bias = {{0, -100.0f}, {1, 100.0f}};
  EXPECT_NO_THROW(edge.validate());
}

TEST(SamplerFields, SharedDefaultsAreTheOneDefaultSampler) {
  const SamplerParams d = SamplerParams::shared_defaults();
  EXPECT_EQ(d.temperature, 0.8f);
  EXPECT_EQ(d.top_k, 40);
  EXPECT_EQ(d.top_p, 0.95f);
  EXPECT_EQ(d.min_p, 0.05f);
  EXPECT_EQ(d.repeat_penalty, 1.1f);
  EXPECT_EQ(d.repeat_last_n, 64);
  EXPECT_EQ(d.presence_penalty, 0.0f);
  EXPECT_EQ(d.frequency_penalty, 0.0f);
  EXPECT_TRUE(d.logit_bias.empty());
  EXPECT_EQ(d.seed, 0u);
  EXPECT_NO_THROW(d.validate());
  // The struct's own defaults stay neutral: no top-k, top-p, min-p or penalties.
  const SamplerParams neutral;
  EXPECT_EQ(neutral.top_k, 0);
  EXPECT_EQ(neutral.top_p, 1.0f);
  EXPECT_EQ(neutral.min_p, 0.0f);
  EXPECT_EQ(neutral.repeat_penalty, 1.0f);
}

}  // namespace
