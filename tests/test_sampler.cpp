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
#include "sampler_reference.hpp"

namespace {

using retnet::Sampler;
using retnet::SamplerParams;
using retnet::testing::expect_error;

const std::vector<int32_t> kNoRecent;

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
