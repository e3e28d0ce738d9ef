// Shared by the model benchmarks: the reference config, a fixed token stream, and wall-clock
// time per iteration (the library's OpenMP threads make CPU time misleading).
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <retnet/retnet.hpp>

namespace retnet_bench {

inline const retnet::ModelConfig& base_config() {
  static const retnet::ModelConfig c =
      retnet::load_config_json(RETNET_SOURCE_DIR "/benchmarks/configs/base.json");
  return c;
}

using Clock = std::chrono::steady_clock;

/// Wall-clock milliseconds per iteration of the loop that started at `started` (one token each).
inline double ms_per_iteration(const benchmark::State& state, Clock::time_point started) {
  const std::chrono::duration<double, std::milli> elapsed = Clock::now() - started;
  return elapsed.count() / double(std::max<benchmark::IterationCount>(state.iterations(), 1));
}

inline int32_t token_at(int64_t position, int64_t vocab) {
  return static_cast<int32_t>((position * 7919 + 13) % vocab);  // a fixed pseudo-random stream
}

}  // namespace retnet_bench
