// Test helper for the sampler's tests (test_sampler.cpp, test_sampler_fields.cpp): softmax,
// top-k and top-p written independently of the library, random logits, and the checks that
// compare a sampler's draws or probabilities with an expected distribution.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "retnet/text/sampler.hpp"

namespace {

using retnet::Sampler;
using retnet::SamplerParams;

// Softmax of logits / temperature in double, written independently of the library.
inline std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
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
inline std::vector<double> KeepLargest(std::vector<double> p, size_t keep) {
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
inline size_t TopPCount(const std::vector<double>& p, double top_p) {
  std::vector<double> sorted = p;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  double cumulative = 0.0;
  for (size_t r = 0; r < sorted.size(); ++r) {
    cumulative += sorted[r];
    if (cumulative >= top_p) return r + 1;
  }
  return sorted.size();
}

inline int32_t Argmax(const std::vector<float>& logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);  // strict: first max wins
  return best;
}

// Uniform in [lo, hi) from mt19937_64's raw output: its sequence is fixed by the standard,
// unlike std::uniform_real_distribution's.
inline float UniformFloat(std::mt19937_64& gen, double lo, double hi) {
  return static_cast<float>(lo + (hi - lo) * static_cast<double>(gen() >> 11) * 0x1.0p-53);
}

inline std::vector<float> RandomLogits(std::mt19937_64& gen, size_t vocab, bool integer_valued) {
  std::vector<float> logits(vocab);
  // Integer values in [-3, 3] make ties for the maximum common.
  for (float& x : logits)
    x = integer_valued ? std::floor(UniformFloat(gen, -3.0, 4.0)) : UniformFloat(gen, -10, 10);
  return logits;
}

inline SamplerParams Params(float temperature, int top_k = 0, float top_p = 1.0f,
                            uint64_t seed = 0) {
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
inline void ExpectMatchesDistribution(Sampler& sampler, const std::vector<float>& logits,
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

inline void ExpectProbabilitiesNear(Sampler& sampler, const std::vector<float>& logits,
                                    const std::vector<int32_t>& recent,
                                    const std::vector<double>& expected) {
  EXPECT_TRUE(ProbabilitiesNear(
      sampler.probabilities(logits.data(), static_cast<int64_t>(logits.size()), recent), expected));
}

const std::vector<float> kEightLogits = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.5f, 0.25f};

}  // namespace
