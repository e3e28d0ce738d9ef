// Next-token sampling from a logit vector: logit bias, repetition, presence and frequency
// penalties, top-k, temperature, top-p, min-p, then a draw from a seeded generator that gives
// the same tokens on every platform (no std:: distributions, whose algorithms are
// implementation-defined). docs/NUMERICS.md#sampling states the order and each step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/random.hpp"

namespace retnet {

struct SamplerParams {
  float temperature = 0.8f;     // 0: greedy (argmax, lowest index on ties)
  int top_k = 0;                // keep the k most likely tokens; 0 = off
  float top_p = 1.0f;           // keep the smallest set whose probability reaches p; 1 = off
  float repeat_penalty = 1.0f;  // 1 = off; > 1 discourages recently seen tokens
  int repeat_last_n = 64;       // how many of the most recent tokens are penalised; 0 = off
  float min_p = 0.0f;  // keep tokens at least min_p x as likely as the most likely; 0 = off
  // OpenAI's penalties over the last repeat_last_n tokens of `recent`: a token seen c > 0 times
  // there has presence_penalty + c x frequency_penalty subtracted from its logit. 0 = off.
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  // Added to an id's logit before anything else, in [-100, 100]; -100 bans the id.
  std::vector<std::pair<int32_t, float>> logit_bias = {};
  uint64_t seed = 0;

  /// The penalty divides or multiplies logits: far outside this range it turns them into 0 or
  /// inf, which is no longer a preference between tokens.
  static constexpr float kMinRepeatPenalty = 1e-3f, kMaxRepeatPenalty = 1e3f;
  /// OpenAI's ranges for presence_penalty, frequency_penalty and logit_bias's values.
  static constexpr float kMaxPresenceFrequencyPenalty = 2.0f;
  static constexpr float kMinLogitBias = -100.0f, kMaxLogitBias = 100.0f;

  /// The one default sampler of the command line, the server and its page, so that the same
  /// seed and settings give the same text in all three. The seed stays 0: callers draw one at
  /// random when none is given. (The member defaults above are the library's neutral ones.)
  static SamplerParams shared_defaults() {
    SamplerParams p;
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.1f;
    p.repeat_last_n = 64;
    return p;
  }

  /// Throws InvalidArgument naming the first invalid field.
  void validate() const {
    RETNET_REQUIRE(
        std::isfinite(temperature) && temperature >= 0.0f,
        "SamplerParams: temperature must be finite and >= 0, got " + std::to_string(temperature));
    RETNET_REQUIRE(top_k >= 0,
                   "SamplerParams: top_k must be >= 0 (0 = off), got " + std::to_string(top_k));
    // Written so that NaN fails too.
    RETNET_REQUIRE(top_p > 0.0f && top_p <= 1.0f,
                   "SamplerParams: top_p must be in (0, 1], got " + std::to_string(top_p));
    RETNET_REQUIRE(repeat_penalty >= kMinRepeatPenalty && repeat_penalty <= kMaxRepeatPenalty,
                   "SamplerParams: repeat_penalty must be in [0.001, 1000], got " +
                       std::to_string(repeat_penalty));
    RETNET_REQUIRE(repeat_last_n >= 0, "SamplerParams: repeat_last_n must be >= 0 (0 = off), got " +
                                           std::to_string(repeat_last_n));
    RETNET_REQUIRE(min_p >= 0.0f && min_p <= 1.0f,
                   "SamplerParams: min_p must be in [0, 1], got " + std::to_string(min_p));
    constexpr float kMaxPenalty = kMaxPresenceFrequencyPenalty;
    RETNET_REQUIRE(presence_penalty >= -kMaxPenalty && presence_penalty <= kMaxPenalty,
                   "SamplerParams: presence_penalty must be in [-2, 2], got " +
                       std::to_string(presence_penalty));
    RETNET_REQUIRE(frequency_penalty >= -kMaxPenalty && frequency_penalty <= kMaxPenalty,
                   "SamplerParams: frequency_penalty must be in [-2, 2], got " +
                       std::to_string(frequency_penalty));
    validate_logit_bias();
  }

 private:
  void validate_logit_bias() const {
    for (const auto& [id, bias] : logit_bias) {
      RETNET_REQUIRE(id >= 0,
                     "SamplerParams: logit_bias id must be >= 0, got " + std::to_string(id));
      RETNET_REQUIRE(bias >= kMinLogitBias && bias <= kMaxLogitBias,
                     "SamplerParams: logit_bias of id " + std::to_string(id) +
                         " must be in [-100, 100], got " + std::to_string(bias));
    }
    std::vector<int32_t> ids;
    ids.reserve(logit_bias.size());
    for (const auto& entry : logit_bias) ids.push_back(entry.first);
    std::sort(ids.begin(), ids.end());
    const auto twice = std::adjacent_find(ids.begin(), ids.end());
    RETNET_REQUIRE(twice == ids.end(),
                   "SamplerParams: logit_bias gives id " + std::to_string(*twice) + " twice");
  }
};

namespace detail {

/// xoshiro256** seeded through splitmix64: small, fast, and fully specified, so a seed
/// means the same stream everywhere.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    // splitmix64 spreads any seed (0 included) over the 256-bit state, which must not
    // be all zero.
    uint64_t x = seed;
    for (uint64_t& word : s_) word = splitmix64(x);
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform in [0, 1): the top 53 bits scaled by 2^-53, exact in a double.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace detail

/// The ids a Sampler may return: those below `limit` other than `excluded`. A model's
/// vocabulary may be larger than its tokenizer's (a padded embedding) and a tokenizer's ids may
/// have gaps; an id the tokenizer cannot decode is never sampled, whatever its logit
/// (generate.hpp's sampleable_ids builds this from a Tokenizer). The default allows every id.
struct SampleableIds {
  int64_t limit = std::numeric_limits<int64_t>::max();
  std::vector<int32_t> excluded;  // ids below `limit` that are never sampled
};

/// Draws token ids from logits. Holds its generator and scratch buffers, so it is not
/// thread-safe; after the first call with a given vocabulary size, sample() allocates
/// nothing.
class Sampler {
 public:
  explicit Sampler(const SamplerParams& params, SampleableIds sampleable = {})
      : params_(params), rng_(params.seed), sampleable_(std::move(sampleable)) {
    params_.validate();
    RETNET_REQUIRE(sampleable_.limit > 0, "Sampler: the sampleable ids' limit must be > 0, got " +
                                              std::to_string(sampleable_.limit));
  }

  const SamplerParams& params() const { return params_; }

  /// Restarts the random stream as if constructed with `seed`.
  void reseed(uint64_t seed) {
    params_.seed = seed;
    rng_ = detail::Xoshiro256(seed);
  }

  /// Next token from `logits[0..vocab)`, one of the sampleable ids (their logits only are read:
  /// the others count as -inf). `recent` holds the previous tokens (prompt and
  /// generated, oldest first); its last repeat_last_n entries are penalised. A logit_bias id
  /// at or beyond `vocab` is refused (InvalidArgument).
  int32_t sample(const float* logits, int64_t vocab, const std::vector<int32_t>& recent) {
    const int64_t n = prepare(logits, vocab, recent);
    if (n == 1) return ids_[0];  // greedy, or a single survivor: no random draw needed
    // Scale the draw by the kept mass instead of trusting it to sum to exactly 1.
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) total += probs_[i];
    const double target = rng_.uniform() * total;
    double cumulative = 0.0;
    int64_t last_nonzero = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (probs_[i] <= 0.0) continue;
      cumulative += probs_[i];
      last_nonzero = i;
      if (target < cumulative) return ids_[i];
    }
    return ids_[last_nonzero];  // only reachable through rounding at the very top
  }

  /// The distribution sample() draws from for these inputs (zero outside the kept set),
  /// without advancing the generator.
  std::vector<float> probabilities(const float* logits, int64_t vocab,
                                   const std::vector<int32_t>& recent) {
    const int64_t n = prepare(logits, vocab, recent);
    std::vector<float> out(static_cast<size_t>(vocab), 0.0f);
    for (int64_t i = 0; i < n; ++i) out[ids_[i]] = static_cast<float>(probs_[i]);
    return out;
  }

 private:
  // top_p and the logits are floats, so a cumulative probability within float rounding
  // of p counts as reaching it: without this slack, p = 0.8 over {0.5, 0.3, ...} would
  // keep a third token because 0.8f is slightly above 0.8.
  static constexpr double kTopPSlack = 1e-6;

  // Leaves the kept token ids in ids_[0..n) and their normalised probabilities in
  // probs_[0..n); returns n >= 1. The candidates are ids below the sampleable limit.
  int64_t prepare(const float* logits, int64_t vocab, const std::vector<int32_t>& recent) {
    copy_checked_logits(logits, vocab);
    const auto v = work_.size();
    apply_penalties(vocab, recent);

    ids_.resize(v);
    probs_.resize(v);
    if (params_.temperature == 0.0f) {
      // max_element returns the first maximum, i.e. the lowest index on ties.
      ids_[0] = static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
      probs_[0] = 1.0;
      return 1;
    }

    std::iota(ids_.begin(), ids_.end(), 0);
    // Ordering by logit is ordering by probability; the index tie-break makes it a strict
    // total order, so every standard library sorts the same way. Selecting before
    // temperature scaling keeps rounding from creating ties.
    const auto more_likely = [this](int32_t a, int32_t b) {
      return work_[a] > work_[b] || (work_[a] == work_[b] && a < b);
    };
    int64_t n = static_cast<int64_t>(v);
    bool sorted = false;
    if (params_.top_k > 0 && params_.top_k < n) {
      n = params_.top_k;
      std::partial_sort(ids_.begin(), ids_.begin() + n, ids_.end(), more_likely);
      sorted = true;
    }
    const bool use_top_p = params_.top_p < 1.0f;
    if (use_top_p && !sorted) {
      std::sort(ids_.begin(), ids_.begin() + n, more_likely);
      sorted = true;
    }

    // Softmax of logit / temperature in double; subtracting the maximum first keeps a
    // tiny temperature from overflowing.
    float max_logit = work_[ids_[0]];
    if (!sorted)
      for (int64_t i = 1; i < n; ++i) max_logit = std::max(max_logit, work_[ids_[i]]);
    const double inv_t = 1.0 / static_cast<double>(params_.temperature);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double p =
          std::exp((static_cast<double>(work_[ids_[i]]) - static_cast<double>(max_logit)) * inv_t);
      probs_[i] = p;
      sum += p;
    }

    if (use_top_p) n = keep_top_p(n, sum);
    if (params_.min_p > 0.0f) n = keep_min_p(n, sum);
    for (int64_t i = 0; i < n; ++i) probs_[i] /= sum;
    return n;
  }

  // Keeps, in their order, the candidates whose probability is at least min_p times the most
  // likely one's; sets `sum` to their total and returns how many. The most likely always stays.
  int64_t keep_min_p(int64_t n, double& sum) {
    double most = 0.0;
    for (int64_t i = 0; i < n; ++i) most = std::max(most, probs_[i]);
    const double threshold = static_cast<double>(params_.min_p) * most;
    int64_t kept = 0;
    sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      if (probs_[i] < threshold) continue;
      ids_[kept] = ids_[i];
      probs_[kept] = probs_[i];
      sum += probs_[kept];
      ++kept;
    }
    return kept;
  }

  // Copies the logits of the ids below the sampleable limit into work_ (reusing its capacity: no
  // allocation once warm), the excluded ids' as -inf, and checks them. Plain ifs rather than
  // require(): its message would be built, and allocated, on every call.
  void copy_checked_logits(const float* logits, int64_t vocab) {
    if (vocab <= 0)
      throw InvalidArgument("Sampler: vocab must be > 0, got " + std::to_string(vocab));
    if (vocab > std::numeric_limits<int32_t>::max())
      throw InvalidArgument("Sampler: vocab " + std::to_string(vocab) +
                            " does not fit int32 token ids");
    if (logits == nullptr) throw InvalidArgument("Sampler: logits is null");
    const auto v = static_cast<size_t>(std::min(vocab, sampleable_.limit));
    work_.assign(logits, logits + v);
    for (const auto& [id, bias] : params_.logit_bias) {
      if (id >= vocab)
        throw InvalidArgument("Sampler: logit_bias id " + std::to_string(id) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
      if (static_cast<size_t>(id) >= v) continue;  // never sampled anyway
      float& x = work_[static_cast<size_t>(id)];
      // The bias is finite and bounded: a finite logit stays finite, -inf stays -inf.
      x = bias <= SamplerParams::kMinLogitBias ? -std::numeric_limits<float>::infinity() : x + bias;
    }
    for (const int32_t id : sampleable_.excluded)
      if (id >= 0 && static_cast<size_t>(id) < v)
        work_[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    // -inf is allowed (a masked token); NaN or +inf means the model output is broken.
    bool any_finite = false;
    for (size_t i = 0; i < v; ++i) {
      const float x = work_[i];
      if (std::isnan(x) || x == std::numeric_limits<float>::infinity())
        throw InvalidArgument("Sampler: logit " + std::to_string(i) + " is " + std::to_string(x) +
                              " (NaN or +inf)");
      any_finite = any_finite || std::isfinite(x);
    }
    if (!any_finite)
      throw InvalidArgument(v == static_cast<size_t>(vocab) && sampleable_.excluded.empty() &&
                                    params_.logit_bias.empty()
                                ? "Sampler: every logit is -inf"
                                : "Sampler: every logit of a sampleable id is -inf (masked, "
                                  "excluded or banned by logit_bias)");
  }

  // The smallest prefix of the n sorted candidates whose probability (probs_ / sum) reaches
  // top_p; sets `sum` to the prefix's total and returns its length.
  int64_t keep_top_p(int64_t n, double& sum) const {
    const double threshold = static_cast<double>(params_.top_p) - kTopPSlack;
    double cumulative = 0.0;
    int64_t kept = 0;
    while (kept < n) {
      cumulative += probs_[kept] / sum;
      ++kept;
      if (cumulative >= threshold) break;
    }
    sum = 0.0;
    for (int64_t i = 0; i < kept; ++i) sum += probs_[i];
    return kept;
  }

  // The penalties over the last repeat_last_n of `recent`, as in llama.cpp: each distinct token
  // there has, first, a positive logit divided by repeat_penalty and a non-positive one
  // multiplied (CTRL-style: both move toward "less likely" when the penalty is > 1), then
  // presence_penalty + count x frequency_penalty subtracted. Ids beyond the candidates in work_
  // are checked but have no logit to penalise. counts_ is all zero between calls.
  void apply_penalties(int64_t vocab, const std::vector<int32_t>& recent) {
    const bool any = params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                     params_.frequency_penalty != 0.0f;
    if (!any || params_.repeat_last_n == 0 || recent.empty()) return;
    const size_t window = std::min(recent.size(), static_cast<size_t>(params_.repeat_last_n));
    counts_.resize(static_cast<size_t>(vocab), 0);
    const auto begin = recent.end() - static_cast<std::ptrdiff_t>(window);
    for (auto it = begin; it != recent.end(); ++it) {
      const int32_t id = *it;
      if (id < 0 || id >= vocab) {
        for (auto jt = begin; jt != it; ++jt) counts_[*jt] = 0;  // leave counts_ clean
        throw InvalidArgument("Sampler: recent token id " + std::to_string(id) +
                              " is outside [0, " + std::to_string(vocab) + ")");
      }
      ++counts_[id];
    }
    for (auto it = begin; it != recent.end(); ++it) {
      const int32_t id = *it;
      const int32_t count = counts_[id];
      if (count == 0) continue;  // an earlier occurrence applied the penalty
      counts_[id] = 0;
      if (static_cast<size_t>(id) >= work_.size()) continue;
      float& x = work_[id];
      if (params_.repeat_penalty != 1.0f)
        x = x > 0.0f ? x / params_.repeat_penalty : x * params_.repeat_penalty;
      x -= params_.presence_penalty + static_cast<float>(count) * params_.frequency_penalty;
      if (x == std::numeric_limits<float>::infinity()) {
        for (auto jt = it; jt != recent.end(); ++jt) counts_[*jt] = 0;
        throw InvalidArgument("Sampler: logit " + std::to_string(id) +
                              " overflows to +inf under the repetition penalties");
      }
    }
  }

  SamplerParams params_;
  detail::Xoshiro256 rng_;
  SampleableIds sampleable_;
  std::vector<float> work_;      // penalised logits
  std::vector<int32_t> ids_;     // candidate ids, most likely first once sorted
  std::vector<double> probs_;    // probabilities of ids_[i]
  std::vector<int32_t> counts_;  // per-id count in the penalty window, kept all zero
};

}  // namespace retnet
