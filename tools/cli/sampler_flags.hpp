// The sampler flags of the commands that generate text (`generate`, `chat`): declared once here,
// with the defaults of SamplerParams::shared_defaults(), the one default sampler of the command
// line, the server and its page.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <retnet/retnet.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/common.hpp"
#include "flags.hpp"

namespace retnet::cli {

struct SamplerFlags {
  float temperature;
  int top_k;
  float top_p, min_p;
  float repeat_penalty;
  int repeat_last_n;
  float presence_penalty, frequency_penalty;
  std::vector<std::string> logit_bias;
  int64_t seed;

  void declare(FlagTable& f) {
    const SamplerParams d = SamplerParams::shared_defaults();
    constexpr float kPenalty = SamplerParams::kMaxPresenceFrequencyPenalty;
    f.value(temperature, "--temp|--temperature", "T", d.temperature, {0, 100},
            "temperature; 0 = greedy");
    f.value(top_k, "--top-k", "K", d.top_k, {0, std::numeric_limits<int32_t>::max()},
            "keep the K most likely tokens; 0 = off");
    f.value(top_p, "--top-p", "P", d.top_p, {0, 1, tools::Bound::kExclusive},
            "keep the smallest set reaching probability P; 1 = off");
    f.value(min_p, "--min-p", "P", d.min_p, {0, 1},
            "keep tokens at least P x as likely as the most likely; 0 = off");
    f.value(repeat_penalty, "--repeat-penalty", "R", d.repeat_penalty,
            {SamplerParams::kMinRepeatPenalty, SamplerParams::kMaxRepeatPenalty},
            "divide the logits of the last --repeat-last-n tokens by R; 1 = off");
    f.value(repeat_last_n, "--repeat-last-n", "N", d.repeat_last_n, {0, 1 << 24},
            "how many recent tokens the penalties look at; 0 = off");
    f.value(presence_penalty, "--presence-penalty", "A", d.presence_penalty, {-kPenalty, kPenalty},
            "subtract A from the logit of each token among them; 0 = off");
    f.value(frequency_penalty, "--frequency-penalty", "B", d.frequency_penalty,
            {-kPenalty, kPenalty}, "subtract B x its count there from a token's logit; 0 = off");
    f.list(logit_bias, "--logit-bias", "ID=BIAS",
           "add BIAS in [-100, 100] to token ID's logit; -100 bans it");
    f.value(seed, "--seed", "S", -1, {-1, std::numeric_limits<int64_t>::max()},
            "random seed; -1 = drawn at random (printed with the speeds)");
  }

  /// The sampler these flags ask for, drawing with `sampler_seed` (--seed, or one drawn for -1);
  /// `command` names the command in a refusal.
  SamplerParams params(const std::string& command, uint64_t sampler_seed) const {
    SamplerParams s;
    s.temperature = temperature;
    s.top_k = top_k;
    s.top_p = top_p;
    s.min_p = min_p;
    s.repeat_penalty = repeat_penalty;
    s.repeat_last_n = repeat_last_n;
    s.presence_penalty = presence_penalty;
    s.frequency_penalty = frequency_penalty;
    for (const std::string& item : logit_bias)
      s.logit_bias.push_back(parse_logit_bias(command, item));
    s.seed = sampler_seed;
    try {
      s.validate();  // what the flags' ranges leave: an id given twice
    } catch (const InvalidArgument& e) {
      throw UsageError(command + ": " + e.what());
    }
    return s;
  }

  /// The seed to draw with: --seed, or one drawn from std::random_device for -1, in [0, 2^63) so
  /// that --seed takes it back.
  uint64_t seed_to_use() const {
    if (seed >= 0) return static_cast<uint64_t>(seed);
    std::random_device random;
    const uint64_t high = random(), low = random();
    return ((high << 32) ^ low) >> 1;
  }

  /// "ID=BIAS", each part checked as a flag's value is.
  static std::pair<int32_t, float> parse_logit_bias(const std::string& command,
                                                    const std::string& item) {
    const size_t equals = item.find('=');
    if (equals == std::string::npos)
      throw UsageError(command + ": --logit-bias expects ID=BIAS, got '" + item + "'");
    namespace values = tools::flag_values;
    std::pair<int32_t, float> entry;
    std::string part = "ID";
    try {
      entry.first = values::read<int32_t>(item.substr(0, equals),
                                          Range<int32_t>{0, std::numeric_limits<int32_t>::max()});
      part = "BIAS";
      entry.second = values::read<float>(
          item.substr(equals + 1),
          Range<float>{SamplerParams::kMinLogitBias, SamplerParams::kMaxLogitBias});
    } catch (const values::FlagValueError& e) {
      throw UsageError(command + ": --logit-bias " + part + e.problem);
    }
    return entry;
  }
};

}  // namespace retnet::cli
