#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocation_counter.hpp"
#include "expect_error.hpp"
#include "retnet/text/sampler.hpp"

namespace {

using retnet::Sampler;
using retnet::SamplerParams;
using retnet::testing::expect_error;

const std::vector<int32_t> kNoRecent;

// Softmax of logits / temperature in double, written independently of the library.
std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  double max = -std::numeric_limits<double>::infinity();
  for (float x : logits) max = std::max(max, static_cast<double>(x));
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((logits[i] - max) / temperature);
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  return p;
}

// Zeroes every entry but the `keep` largest (ties: lower index first) and renormalises.
std::vector<double> KeepLargest(std::vector<double> p, size_t keep) {
  std::vector<size_t> order(p.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  double sum = 0.0;
  for (size_t r = 0; r < order.size(); ++r) {
    if (r < keep)
      sum += p[order[r]];
    else
      p[order[r]] = 0.0;
  }
  for (double& x : p) x /= sum;
  return p;
}

// Size of the smallest most-likely-first prefix whose probability is >= top_p.
size_t TopPCount(const std::vector<double>& p, double top_p) {
  std::vector<double> sorted = p;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  double cumulative = 0.0;
  for (size_t r = 0; r < sorted.size(); ++r) {
    cumulative += sorted[r];
    if (cumulative >= top_p) return r + 1;
  }
  return sorted.size();
}

int32_t Argmax(const std::vector<float>& logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);  // strict: first max wins
  return best;
}

// Uniform in [lo, hi) from mt19937_64's raw output: its sequence is fixed by the standard,
// unlike std::uniform_real_distribution's.
float UniformFloat(std::mt19937_64& gen, double lo, double hi) {
  return static_cast<float>(lo + (hi - lo) * static_cast<double>(gen() >> 11) * 0x1.0p-53);
}

std::vector<float> RandomLogits(std::mt19937_64& gen, size_t vocab, bool integer_valued) {
  std::vector<float> logits(vocab);
  // Integer values in [-3, 3] make ties for the maximum common.
  for (float& x : logits)
    x = integer_valued ? std::floor(UniformFloat(gen, -3.0, 4.0)) : UniformFloat(gen, -10, 10);
  return logits;
}

SamplerParams Params(float temperature, int top_k = 0, float top_p = 1.0f, uint64_t seed = 0) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

// 99.9 % quantiles of the chi-square distribution, by degrees of freedom (index).
constexpr double kChiSquare999[] = {0,      10.828, 13.816, 16.266, 18.467, 20.515, 22.458,
                                    24.322, 26.124, 27.877, 29.588, 31.264, 32.909};

// Draws `draws` tokens and compares the histogram with `expected`.
// Tolerance: every bin's empirical frequency must lie within 4.5 standard deviations
// sqrt(p (1 - p) / N) of its p (a false alarm per bin is ~7e-6 for a correct sampler),
// bins with p = 0 must stay empty, and Pearson's chi-square over the bins with p > 0
// must be below the 99.9 % quantile for (bins - 1) degrees of freedom. The seed is
// fixed, so the outcome is deterministic; the bounds say how strict the check is.
void ExpectMatchesDistribution(Sampler& sampler, const std::vector<float>& logits,
                               const std::vector<int32_t>& recent,
                               const std::vector<double>& expected) {
  constexpr int kDraws = 10000;
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    const int32_t id = sampler.sample(logits.data(), static_cast<int64_t>(logits.size()), recent);
    ASSERT_GE(id, 0);
    ASSERT_LT(id, static_cast<int32_t>(logits.size()));
    ++counts[id];
  }
  double chi_square = 0.0;
  int bins = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = expected[i];
    if (p == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    ASSERT_GE(p * kDraws, 5.0) << "chi-square needs >= 5 expected draws per bin";
    const double frequency = static_cast<double>(counts[i]) / kDraws;
    const double sigma = std::sqrt(p * (1.0 - p) / kDraws);
    EXPECT_LE(std::abs(frequency - p), 4.5 * sigma)
        << "token " << i << ": frequency " << frequency << " vs p " << p;
    const double diff = counts[i] - p * kDraws;
    chi_square += diff * diff / (p * kDraws);
    ++bins;
  }
  ASSERT_GE(bins, 2);
  ASSERT_LT(bins - 1, static_cast<int>(std::size(kChiSquare999)));
  EXPECT_LT(chi_square, kChiSquare999[bins - 1]) << bins << " bins";
}

// Each probability within 1e-6 of its expected value, zero exactly where expected is zero.
// Fails on a size mismatch and on any NaN or infinity on either side.
::testing::AssertionResult ProbabilitiesNear(const std::vector<float>& probs,
                                             const std::vector<double>& expected) {
  if (probs.size() != expected.size())
    return ::testing::AssertionFailure()
           << probs.size() << " probabilities, expected " << expected.size();
  for (size_t i = 0; i < probs.size(); ++i) {
    if (!std::isfinite(probs[i]) || !std::isfinite(expected[i]) ||
        !(std::abs(probs[i] - expected[i]) <= 1e-6) || (probs[i] == 0.0f) != (expected[i] == 0.0))
      return ::testing::AssertionFailure()
             << "token " << i << ": probability " << probs[i] << ", expected " << expected[i];
  }
  return ::testing::AssertionSuccess();
}

void ExpectProbabilitiesNear(Sampler& sampler, const std::vector<float>& logits,
                             const std::vector<int32_t>& recent,
                             const std::vector<double>& expected) {
  EXPECT_TRUE(ProbabilitiesNear(
      sampler.probabilities(logits.data(), static_cast<int64_t>(logits.size()), recent), expected));
}

TEST(SamplerTest, TheProbabilityComparisonRejectsNonFiniteValuesAndSizeMismatches) {
  const std::vector<double> expected = {0.25, 0.75, 0.0};
  ASSERT_TRUE(ProbabilitiesNear({0.25f, 0.75f, 0.0f}, expected));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf}) {
    EXPECT_FALSE(ProbabilitiesNear({0.25f, bad, 0.0f}, expected));
    EXPECT_FALSE(ProbabilitiesNear({0.25f, 0.75f, 0.0f}, {0.25, double(bad), 0.0}));
  }
  EXPECT_FALSE(ProbabilitiesNear({0.25f, 0.75f}, expected));
  EXPECT_FALSE(ProbabilitiesNear({0.25f, 0.75f, 0.0f, 0.0f}, expected));
  EXPECT_FALSE(ProbabilitiesNear({}, expected));
}

const std::vector<float> kEightLogits = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.5f, 0.25f};

TEST(SamplerTest, TemperatureZeroIsGreedy) {
  Sampler sampler(Params(0.0f, /*top_k=*/5, /*top_p=*/0.5f));  // top-k/top-p are moot
  std::mt19937_64 gen(1);
  for (int trial = 0; trial < 200; ++trial) {
    const auto logits = RandomLogits(gen, 97, /*integer_valued=*/trial % 2 == 0);
    const int32_t want = Argmax(logits);
    EXPECT_EQ(sampler.sample(logits.data(), 97, kNoRecent), want) << "trial " << trial;
    std::vector<double> one_hot(97, 0.0);
    one_hot[want] = 1.0;
    ExpectProbabilitiesNear(sampler, logits, kNoRecent, one_hot);
  }
  const std::vector<float> tied = {1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
  EXPECT_EQ(sampler.sample(tied.data(), 5, kNoRecent), 1);  // lowest index among ties
}

TEST(SamplerTest, TopKOneEqualsGreedyAtAnyTemperature) {
  std::mt19937_64 gen(2);
  for (float temperature : {1e-3f, 0.5f, 1.0f, 2.0f, 100.0f}) {
    for (float top_p : {1.0f, 0.3f}) {
      Sampler sampler(Params(temperature, /*top_k=*/1, top_p, /*seed=*/7));
      for (int trial = 0; trial < 100; ++trial) {
        const auto logits = RandomLogits(gen, 200, /*integer_valued=*/trial % 2 == 0);
        EXPECT_EQ(sampler.sample(logits.data(), 200, kNoRecent), Argmax(logits))
            << "temperature " << temperature << " top_p " << top_p << " trial " << trial;
      }
    }
  }
}

// The smallest top_p a float holds (what the server passes for "top_p": 1e-300) keeps one
// token: the most likely, even where the others together hold almost all the probability.
TEST(SamplerTest, TinyTopPKeepsTheMostLikelyToken) {
  std::mt19937_64 gen(3);
  for (float top_p : {std::numeric_limits<float>::denorm_min(), 1e-30f, 1e-7f}) {
    Sampler sampler(Params(/*temperature=*/2.0f, /*top_k=*/0, top_p, /*seed=*/11));
    for (int trial = 0; trial < 100; ++trial) {
      const auto logits = RandomLogits(gen, 200, /*integer_valued=*/trial % 2 == 0);
      EXPECT_EQ(sampler.sample(logits.data(), 200, kNoRecent), Argmax(logits))
          << "top_p " << top_p << " trial " << trial;
    }
    const std::vector<float> flat = {0.0f, 1e-3f, 0.0f, 0.0f};
    ExpectProbabilitiesNear(sampler, flat, kNoRecent, {0.0, 1.0, 0.0, 0.0});
  }
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferent) {
  const std::vector<float> flat(1000, 0.0f);  // uniform: every draw is pure randomness
  auto run = [&](Sampler& sampler) {
    std::vector<int32_t> out;
    for (int i = 0; i < 100; ++i) out.push_back(sampler.sample(flat.data(), 1000, out));
    return out;
  };
  Sampler a(Params(1.0f, 0, 1.0f, /*seed=*/42));
  Sampler b(Params(1.0f, 0, 1.0f, /*seed=*/42));
  Sampler c(Params(1.0f, 0, 1.0f, /*seed=*/43));
  const auto seq_a = run(a);
  EXPECT_EQ(seq_a, run(b));
  EXPECT_NE(seq_a, run(c));
  c.reseed(42);
  EXPECT_EQ(seq_a, run(c));

  // probabilities() does not advance the generator.
  Sampler d(Params(1.0f, 0, 1.0f, /*seed=*/42));
  std::vector<int32_t> seq_d;
  for (int i = 0; i < 100; ++i) {
    d.probabilities(flat.data(), 1000, seq_d);
    seq_d.push_back(d.sample(flat.data(), 1000, seq_d));
  }
  EXPECT_EQ(seq_a, seq_d);
}

// Golden values from scripts/reference/sampler.py, an independent Python reading of the algorithm
// (xoshiro256** seeded by splitmix64, penalty, temperature, top-k, top-p with its slack, ties by
// id, the draw), in tests/data/sampler_golden.json: the generator's raw outputs, and for each
// case the distribution of the first draw and 64 draws made one after another, each appended to
// `recent` as the Generator does. Same seed, same tokens on every platform: nothing here depends
// on the standard library's distributions or sort algorithm.
nlohmann::json Golden() {
  std::ifstream in(std::string(RETNET_TEST_DATA_DIR) + "/sampler_golden.json");
  if (!in) throw std::runtime_error("cannot open tests/data/sampler_golden.json");
  return nlohmann::json::parse(in);
}

TEST(SamplerGolden, GeneratorStreamsMatchTheReference) {
  const auto golden = Golden();
  ASSERT_GE(golden.at("xoshiro256").size(), 4u);
  for (const auto& stream : golden.at("xoshiro256")) {
    const auto seed = stream.at("seed").get<uint64_t>();
    retnet::detail::Xoshiro256 rng(seed);
    const auto outputs = stream.at("outputs").get<std::vector<uint64_t>>();
    ASSERT_EQ(outputs.size(), 8u);
    for (size_t i = 0; i < outputs.size(); ++i)
      EXPECT_EQ(rng.next(), outputs[i]) << "seed " << seed << ", output " << i;
  }
}

TEST(SamplerGolden, TokensAndProbabilitiesMatchTheReference) {
  const auto golden = Golden();
  std::map<std::string, std::vector<float>> vectors;
  for (const auto& [name, values] : golden.at("vectors").items())
    for (const auto& v : values)  // null stands for a masked logit, -inf
      vectors[name].push_back(v.is_null() ? -std::numeric_limits<float>::infinity()
                                          : static_cast<float>(v.get<double>()));
  ASSERT_GE(golden.at("cases").size(), 10u);
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const auto& logits = vectors.at(c.at("logits").get<std::string>());
    SamplerParams params;
    // Stored as the exact values of the float parameters.
    params.temperature = static_cast<float>(c.at("temperature").get<double>());
    params.top_k = c.at("top_k").get<int>();
    params.top_p = static_cast<float>(c.at("top_p").get<double>());
    params.repeat_penalty = static_cast<float>(c.at("repeat_penalty").get<double>());
    params.repeat_last_n = c.at("repeat_last_n").get<int>();
    params.seed = c.at("seed").get<uint64_t>();
    Sampler sampler(params);
    auto recent = c.at("recent").get<std::vector<int32_t>>();
    const int64_t vocab = static_cast<int64_t>(logits.size());

    const auto want_p = c.at("first_probabilities").get<std::vector<double>>();
    const auto got_p = sampler.probabilities(logits.data(), vocab, recent);
    ASSERT_EQ(got_p.size(), want_p.size());
    for (size_t i = 0; i < want_p.size(); ++i) {  // float32 rounding of the reference's double
      EXPECT_NEAR(got_p[i], want_p[i], 1e-7) << "token " << i;
      EXPECT_EQ(got_p[i] == 0.0f, want_p[i] == 0.0) << "token " << i;
    }

    const auto want = c.at("tokens").get<std::vector<int32_t>>();
    ASSERT_EQ(want.size(), 64u);
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
      got.push_back(sampler.sample(logits.data(), vocab, recent));
      recent.push_back(got.back());
    }
    EXPECT_EQ(got, want);
  }
}

// The old in-code regression values, now also in the golden file's first case.
TEST(SamplerTest, SeedGivesTheSameTokensOnEveryPlatform) {
  Sampler sampler(Params(1.0f, 0, 1.0f, /*seed=*/20240601));
  std::vector<int32_t> got;
  for (int i = 0; i < 12; ++i) got.push_back(sampler.sample(kEightLogits.data(), 8, kNoRecent));
  const std::vector<int32_t> want = {0, 1, 6, 2, 5, 0, 0, 1, 6, 1, 1, 0};
  EXPECT_EQ(got, want);
}

TEST(SamplerTest, DrawsMatchSoftmax) {
  Sampler sampler(Params(0.7f, 0, 1.0f, /*seed=*/1));
  const auto expected = Softmax(kEightLogits, 0.7);
  ExpectProbabilitiesNear(sampler, kEightLogits, kNoRecent, expected);
  ExpectMatchesDistribution(sampler, kEightLogits, kNoRecent, expected);
}

TEST(SamplerTest, DrawsMatchTopKSoftmax) {
  Sampler sampler(Params(1.3f, /*top_k=*/3, 1.0f, /*seed=*/2));
  const auto expected = KeepLargest(Softmax(kEightLogits, 1.3), 3);
  ExpectProbabilitiesNear(sampler, kEightLogits, kNoRecent, expected);
  ExpectMatchesDistribution(sampler, kEightLogits, kNoRecent, expected);
}

TEST(SamplerTest, DrawsMatchTopPSoftmax) {
  const double top_p = 0.9;
  const auto full = Softmax(kEightLogits, 1.0);
  const size_t keep = TopPCount(full, top_p);
  ASSERT_GT(keep, 2u);
  ASSERT_LT(keep, 8u);
  Sampler sampler(Params(1.0f, 0, static_cast<float>(top_p), /*seed=*/3));
  const auto expected = KeepLargest(full, keep);
  ExpectProbabilitiesNear(sampler, kEightLogits, kNoRecent, expected);
  ExpectMatchesDistribution(sampler, kEightLogits, kNoRecent, expected);
}

TEST(SamplerTest, TopPKeepsExactlyTheSmallestSetReachingP) {
  // Probabilities 0.15, 0.5, 0.05, 0.3 out of order, so the sampler must sort them; the
  // most likely first is token 1 (0.5), 3 (0.3), 0 (0.15), 2 (0.05).
  const std::vector<double> truth = {0.15, 0.5, 0.05, 0.3};
  std::vector<float> logits;
  for (double p : truth) logits.push_back(static_cast<float>(std::log(p)));
  const std::vector<int32_t> by_rank = {1, 3, 0, 2};

  struct Case {
    float top_p;
    size_t keep;
  };
  // 0.8 and 0.95 sit exactly on a cumulative sum: reaching p is enough.
  for (const Case& c : {Case{0.3f, 1}, Case{0.5f, 1}, Case{0.6f, 2}, Case{0.8f, 2}, Case{0.81f, 3},
                        Case{0.95f, 3}, Case{0.96f, 4}, Case{1.0f, 4}}) {
    SCOPED_TRACE("top_p " + std::to_string(c.top_p));
    Sampler sampler(Params(1.0f, 0, c.top_p, /*seed=*/11));
    std::vector<double> expected(4, 0.0);
    double kept_mass = 0.0;
    for (size_t r = 0; r < c.keep; ++r) kept_mass += truth[by_rank[r]];
    for (size_t r = 0; r < c.keep; ++r) expected[by_rank[r]] = truth[by_rank[r]] / kept_mass;
    ExpectProbabilitiesNear(sampler, logits, kNoRecent, expected);

    std::vector<int> counts(4, 0);
    for (int i = 0; i < 10000; ++i) ++counts[sampler.sample(logits.data(), 4, kNoRecent)];
    for (size_t r = 0; r < 4; ++r) {
      if (r < c.keep)
        EXPECT_GT(counts[by_rank[r]], 0) << "kept token " << by_rank[r] << " never drawn";
      else
        EXPECT_EQ(counts[by_rank[r]], 0) << "token " << by_rank[r] << " is outside the set";
    }
  }
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 0.0f, 1.0f, 3.0f};
  SamplerParams params = Params(1.0f, 0, 1.0f, /*seed=*/5);
  params.repeat_penalty = 2.0f;

  // Token 1 occurs twice but is penalised once; token 3 (logit 0) stays 0.
  const std::vector<int32_t> recent = {5, 0, 1, 1, 3};
  {
    Sampler sampler(params);
    const auto expected = Softmax({1.0f, -2.0f, 0.5f, 0.0f, 1.0f, 1.5f}, 1.0);
    ExpectProbabilitiesNear(sampler, logits, recent, expected);
    ExpectMatchesDistribution(sampler, logits, recent, expected);
  }
  {  // Only the last repeat_last_n tokens count: here {1, 3}.
    SamplerParams windowed = params;
    windowed.repeat_last_n = 2;
    Sampler sampler(windowed);
    ExpectProbabilitiesNear(sampler, logits, {5, 0, 1, 3},
                            Softmax({2.0f, -2.0f, 0.5f, 0.0f, 1.0f, 3.0f}, 1.0));
  }
  {  // A penalty below 1 rewards repetition.
    SamplerParams reward = params;
    reward.repeat_penalty = 0.5f;
    Sampler sampler(reward);
    ExpectProbabilitiesNear(sampler, logits, {0, 1},
                            Softmax({4.0f, -0.5f, 0.5f, 0.0f, 1.0f, 3.0f}, 1.0));
  }
  {  // Penalty 1 or an empty window leaves the logits alone.
    SamplerParams off = params;
    off.repeat_last_n = 0;
    Sampler no_window(off);
    ExpectProbabilitiesNear(no_window, logits, recent, Softmax(logits, 1.0));
    off = params;
    off.repeat_penalty = 1.0f;
    Sampler no_penalty(off);
    ExpectProbabilitiesNear(no_penalty, logits, recent, Softmax(logits, 1.0));
  }
  {  // The penalty applies before temperature scaling.
    SamplerParams hot = params;
    hot.temperature = 0.5f;
    Sampler sampler(hot);
    ExpectProbabilitiesNear(sampler, logits, recent,
                            Softmax({1.0f, -2.0f, 0.5f, 0.0f, 1.0f, 1.5f}, 0.5));
  }
}

TEST(SamplerTest, RepetitionPenaltyAppliesToGreedy) {
  SamplerParams params = Params(0.0f);
  params.repeat_penalty = 1.5f;
  Sampler sampler(params);
  const std::vector<float> logits = {2.0f, 1.9f};
  EXPECT_EQ(sampler.sample(logits.data(), 2, kNoRecent), 0);
  EXPECT_EQ(sampler.sample(logits.data(), 2, {0}), 1);  // 2 / 1.5 < 1.9
}

TEST(SamplerTest, RecentTokenOutOfRangeThrowsAndLeavesSamplerUsable) {
  SamplerParams params = Params(1.0f);
  params.repeat_penalty = 2.0f;
  Sampler sampler(params);
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 0.0f, 1.0f, 3.0f};
  expect_error<retnet::InvalidArgument>(
      [&] {
        sampler.sample(logits.data(), 6, {0, 5, 99});
      },
      {"99"});
  EXPECT_THROW(sampler.sample(logits.data(), 6, {-1}), retnet::InvalidArgument);
  // Tokens 0 and 5 were seen before the bad id; they must not stay marked as penalised.
  ExpectProbabilitiesNear(sampler, logits, {1},
                          Softmax({2.0f, -2.0f, 0.5f, 0.0f, 1.0f, 3.0f}, 1.0));
}

TEST(SamplerTest, InvalidParamsThrowNamingTheField) {
  struct Case {
    std::function<void(SamplerParams&)> set;
    const char* field;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {[](SamplerParams& p) { p.temperature = -0.1f; }, "temperature"},
      {[&](SamplerParams& p) { p.temperature = nan; }, "temperature"},
      {[&](SamplerParams& p) { p.temperature = inf; }, "temperature"},
      {[](SamplerParams& p) { p.top_k = -1; }, "top_k"},
      {[](SamplerParams& p) { p.top_p = 0.0f; }, "top_p"},
      {[](SamplerParams& p) { p.top_p = -0.5f; }, "top_p"},
      {[](SamplerParams& p) { p.top_p = 1.0001f; }, "top_p"},
      {[&](SamplerParams& p) { p.top_p = nan; }, "top_p"},
      {[](SamplerParams& p) { p.repeat_penalty = 0.0f; }, "repeat_penalty"},
      {[](SamplerParams& p) { p.repeat_penalty = -1.0f; }, "repeat_penalty"},
      {[&](SamplerParams& p) { p.repeat_penalty = nan; }, "repeat_penalty"},
      {[&](SamplerParams& p) { p.repeat_penalty = inf; }, "repeat_penalty"},
      {[](SamplerParams& p) { p.repeat_last_n = -1; }, "repeat_last_n"},
  };
  for (const Case& c : cases) {
    SamplerParams params;
    c.set(params);
    expect_error<retnet::InvalidArgument>([&] { params.validate(); }, {c.field});
    expect_error<retnet::InvalidArgument>([&] { (void)Sampler(params); }, {c.field});
  }
  // Boundary values that are valid.
  SamplerParams edge;
  edge.temperature = 0.0f;
  edge.top_k = 0;
  edge.top_p = 1.0f;
  edge.repeat_last_n = 0;
  EXPECT_NO_THROW(edge.validate());
  EXPECT_NO_THROW(SamplerParams().validate());
}

TEST(SamplerTest, InvalidInputsThrow) {
  Sampler sampler(Params(1.0f));
  std::vector<float> logits = {0.5f, 1.0f, -1.0f, 2.0f};
  EXPECT_THROW(sampler.sample(logits.data(), 0, kNoRecent), retnet::InvalidArgument);
  EXPECT_THROW(sampler.sample(logits.data(), -3, kNoRecent), retnet::InvalidArgument);
  EXPECT_THROW(sampler.sample(nullptr, 4, kNoRecent), retnet::InvalidArgument);

  logits[2] = std::numeric_limits<float>::quiet_NaN();
  expect_error<retnet::InvalidArgument>([&] { sampler.sample(logits.data(), 4, kNoRecent); },
                                        {"logit 2"});
  EXPECT_THROW(sampler.probabilities(logits.data(), 4, kNoRecent), retnet::InvalidArgument);
  logits[2] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(sampler.sample(logits.data(), 4, kNoRecent), retnet::InvalidArgument);
  const std::vector<float> all_masked(4, -std::numeric_limits<float>::infinity());
  EXPECT_THROW(sampler.sample(all_masked.data(), 4, kNoRecent), retnet::InvalidArgument);
}

TEST(SamplerTest, NegativeInfinityMasksAToken) {
  // -inf is accepted as "never pick this token".
  const float masked = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {1.0f, masked, 0.0f, masked};
  Sampler sampler(Params(1.0f, 0, 1.0f, /*seed=*/9));
  ExpectProbabilitiesNear(
      sampler, logits, kNoRecent,
      {std::exp(1.0) / (std::exp(1.0) + 1.0), 0.0, 1.0 / (std::exp(1.0) + 1.0), 0.0});
  for (int i = 0; i < 1000; ++i) {
    const int32_t id = sampler.sample(logits.data(), 4, kNoRecent);
    EXPECT_TRUE(id == 0 || id == 2) << id;
  }
}

TEST(SamplerTest, TinyTemperatureDoesNotOverflow) {
  Sampler sampler(Params(1e-30f));
  const std::vector<float> logits = {1e30f, 3e30f, -1e30f};
  ExpectProbabilitiesNear(sampler, logits, kNoRecent, {0.0, 1.0, 0.0});
  EXPECT_EQ(sampler.sample(logits.data(), 3, kNoRecent), 1);
}

TEST(SamplerTest, SampleDoesNotAllocateOnceWarm) {
  ASSERT_TRUE(malloc_is_counted());
  {  // The counter does see vector allocations.
    const long long before = g_allocations.load();
    std::vector<float> probe(10);
    EXPECT_GT(g_allocations.load(), before);
  }
  std::mt19937_64 gen(3);
  const auto logits = RandomLogits(gen, 5000, /*integer_valued=*/false);
  std::vector<int32_t> recent;
  for (int i = 0; i < 100; ++i) recent.push_back(static_cast<int32_t>(gen() % 5000));
  SamplerParams every_field = SamplerParams::shared_defaults();
  every_field.presence_penalty = 0.5f;
  every_field.frequency_penalty = 0.25f;
  every_field.logit_bias = {{7, 2.0f}, {11, -100.0f}, {4999, -1.0f}};
  for (const SamplerParams& base : {Params(0.0f), Params(0.8f), Params(0.8f, 40),
                                    Params(0.8f, 0, 0.9f), Params(0.8f, 40, 0.9f), every_field}) {
    SamplerParams params = base;
    if (params.repeat_penalty == 1.0f) params.repeat_penalty = 1.1f;
    Sampler sampler(params);
    sampler.sample(logits.data(), 5000, recent);  // first call sizes the buffers
    const long long before = g_allocations.load();
    int32_t sink = 0;
    for (int i = 0; i < 50; ++i) sink += sampler.sample(logits.data(), 5000, recent);
    EXPECT_EQ(g_allocations.load(), before) << "temperature " << params.temperature << " top_k "
                                            << params.top_k << " top_p " << params.top_p;
    EXPECT_GE(sink, 0);
  }
}

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

// A penalty far below 1 divides positive logits into +inf: refused when the parameters are
// checked, and a logit the penalty still overflows is refused, not sampled as garbage.
TEST(SamplerArguments, RepeatPenaltyIsBoundedAndOverflowIsRefused) {
  SamplerParams tiny;
  tiny.repeat_penalty = 1e-40f;
  EXPECT_THROW(tiny.validate(), retnet::InvalidArgument);
  SamplerParams low;
  low.repeat_penalty = SamplerParams::kMinRepeatPenalty;
  Sampler sampler(low);
  const std::vector<float> logits = {1.0f, 3e38f, 2.0f};
  EXPECT_THROW(sampler.sample(logits.data(), 3, {1}), retnet::InvalidArgument);
  EXPECT_EQ(sampler.sample(logits.data(), 3, {0}), 1);  // token 1 not penalised: fine
}
