// The sampler flags of the commands that generate text (`generate`, `chat`): declared once here
// so that both take the same names, defaults and ranges.
#pragma once

#include <cstdint>
#include <limits>
#include <retnet/retnet.hpp>

#include "flags.hpp"

namespace retnet::cli {

struct SamplerFlags {
  float temperature;
  int top_k;
  float top_p;
  float repeat_penalty;
  int64_t seed;

  void declare(tools::FlagTable& f) {
    f.value(temperature, "--temp", "T", 0.8, {0, 100}, "temperature; 0 = greedy");
    f.value(top_k, "--top-k", "K", 40, {0, std::numeric_limits<int32_t>::max()},
            "keep the K most likely tokens; 0 = off");
    f.value(top_p, "--top-p", "P", 0.95, {0, 1},
            "keep the smallest set reaching probability P (> 0)");
    f.value(repeat_penalty, "--repeat-penalty", "R", 1.1,
            {SamplerParams::kMinRepeatPenalty, SamplerParams::kMaxRepeatPenalty},
            "penalty for the last 64 tokens; 1 = off");
    f.value(seed, "--seed", "S", 0, {0, std::numeric_limits<int64_t>::max()}, "random seed");
  }

  /// The sampler these flags ask for, validated.
  SamplerParams params() const {
    SamplerParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.repeat_penalty = repeat_penalty;
    p.seed = static_cast<uint64_t>(seed);
    p.validate();
    return p;
  }
};

}  // namespace retnet::cli
