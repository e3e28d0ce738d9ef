// `retnet bench`: times reading a prompt and decoding after it, on a model folder or on random
// weights of a config.json; medians of timed runs after a warm-up run.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <retnet/retnet.hpp>
#include <string>
#include <vector>

#include "cli/common.hpp"

namespace retnet::cli {

struct BenchFlags {
  std::optional<std::string> model, config;
  Index prompt_len, gen_len, batch;
  std::optional<int> threads;
  std::optional<WeightType> weights;
  Form mode;
  std::optional<Index> chunk_size;
  LogitsMode logits;
  int repeat;
  bool json;

  void declare(FlagTable& f) {
    f.optional(model, "-m", "DIR", "model folder (config.json + weights)");
    f.optional(config, "--config", "FILE", "a config.json (random weights, seeded)");
    f.value(prompt_len, "--prompt-len", "N", 512, {1, 1 << 20}, "prompt tokens");
    f.value(gen_len, "--gen-len", "N", 128, {0, 1 << 20}, "decoded tokens");
    f.value(batch, "--batch", "B", 1, {1, 1024}, "sequences decoded together");
    tools::declare_threads(f, threads);
    tools::declare_weights(f, weights);
    f.choice(mode, "--mode", "M", Form::kChunkwise, kPromptForms,
             "prompt form: parallel | chunkwise");
    declare_chunk_size(f, chunk_size);
    f.choice(logits, "--logits", "M", LogitsMode::kLast,
             {{"last", LogitsMode::kLast}, {"all", LogitsMode::kAll}},
             "prompt logits: last (time to first token) | all");
    f.value(repeat, "--repeat", "R", 3, {1, 1000},
            "timed runs after one warm-up run; medians reported");
    f.toggle(json, "--json", "print one JSON object");
  }
};

/// This process's peak resident memory (VmHWM). getrusage's ru_maxrss is not used: Linux
/// carries it over from the parent across exec, so a large launcher inflates it.
inline int64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline Model bench_model(const BenchFlags& flags) {
  if (flags.model.has_value() == flags.config.has_value())
    throw UsageError("bench: give exactly one of -m DIR or --config CONFIG.json");
  if (flags.model) return load_model<float>(*flags.model, LoadOptions{flags.weights});
  auto config = load_config_json(*flags.config);
  config.weights = flags.weights.value_or(WeightType::kF32);
  return Model(config, ModelWeights<float>::random(config, 1, config.weights));
}

/// The seconds of each timed run (the warm-up run is not among them) and the state's size.
struct BenchTimes {
  std::vector<double> prefill_s, decode_s;
  size_t state_bytes = 0;
};

inline BenchTimes time_runs(const Model& model, const BenchFlags& flags) {
  const Index batch = flags.batch, prompt_len = flags.prompt_len;
  std::mt19937_64 rng(7);
  TokenMatrix prompt(batch, prompt_len);
  for (Index i = 0; i < prompt.size(); ++i)
    prompt.data()[i] = int32_t(rng() % model.config().vocab_size);
  BenchTimes times;
  Matrix<float> logits;
  Workspace<float> ws;
  for (int run = 0; run <= flags.repeat; ++run) {  // run 0 warms up (page faults, caches)
    auto state = model.new_state(batch);
    auto t0 = std::chrono::steady_clock::now();
    model.forward(prompt, flags.mode, flags.chunk_size.value_or(0), state, ws, logits,
                  flags.logits);
    const double prefill = seconds_since(t0);
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (Index b = 0; b < batch; ++b) next[b] = prompt(b, prompt_len - 1);
    t0 = std::chrono::steady_clock::now();
    for (Index s = 0; s < flags.gen_len; ++s) {
      model.step(next, state, ws, logits);
      for (Index b = 0; b < batch; ++b) {  // greedy, so that decoding does real work
        Index arg;
        logits.row(b).maxCoeff(&arg);
        next[b] = static_cast<int32_t>(arg);
      }
    }
    const double decode = seconds_since(t0);
    times.state_bytes = state.size_bytes();
    if (run == 0) continue;
    times.prefill_s.push_back(prefill);
    times.decode_s.push_back(decode);
  }
  return times;
}

inline int bench(const BenchFlags& flags) {
  set_threads(flags.threads);
  const auto load_start = std::chrono::steady_clock::now();
  const Model model = bench_model(flags);
  const double load_seconds = seconds_since(load_start);
  const auto& config = model.config();
  const BenchTimes times = time_runs(model, flags);
  const Index batch = flags.batch, prompt_len = flags.prompt_len, gen_len = flags.gen_len;
  const double prefill = median(times.prefill_s), decode = median(times.decode_s);
  const double prefill_tps = double(batch * prompt_len) / prefill;
  const double decode_tps = gen_len ? double(batch * gen_len) / decode : 0.0;
  const double ms_per_step = gen_len ? 1000.0 * decode / double(gen_len) : 0.0;
  const size_t weight_bytes = model.weights().size_bytes(config);
  // What one decoding step streams: every weight except the embedding rows it does not touch
  // (the table still counts once when it doubles as the output projection).
  const size_t embed_bytes = model.weights().embed.stored_bytes();
  const size_t step_bytes = config.tie_embeddings ? weight_bytes : weight_bytes - embed_bytes;
  if (flags.json) {
    nlohmann::json j = {{"prompt_len", prompt_len},
                        {"gen_len", gen_len},
                        {"batch", batch},
                        {"threads", num_threads()},
                        {"weights", weight_type_name(config.weights)},
                        {"int8_dot_instructions", int8_dot_instructions()},
                        {"mode", form_name(flags.mode)},
                        {"logits", flags.logits == LogitsMode::kAll ? "all" : "last"},
                        {"repeat", flags.repeat},
                        {"prefill_seconds", prefill},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"decode_seconds", decode},
                        {"decode_tokens_per_s", decode_tps},
                        {"decode_ms_per_step", ms_per_step},
                        {"peak_rss_bytes", peak_rss_bytes()},
                        {"load_seconds", load_seconds},
                        {"state_bytes", times.state_bytes},
                        {"weight_bytes", weight_bytes},
                        {"decode_step_weight_bytes", step_bytes},
                        {"prefill_seconds_all", times.prefill_s},
                        {"decode_seconds_all", times.decode_s}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::printf("prefill: %ld x %ld tokens (%s) in %.3f s = %.1f tokens/s\n", long(batch),
              long(prompt_len), form_name(flags.mode), prefill, prefill_tps);
  std::printf("decode:  %ld x %ld tokens in %.3f s = %.1f tokens/s (%.2f ms/step)\n", long(batch),
              long(gen_len), decode, decode_tps, ms_per_step);
  std::printf("weights %.1f MB (%s), state %.1f KB, peak RSS %.1f MB (median of %d runs)\n",
              weight_bytes / 1e6, weight_type_name(config.weights), times.state_bytes / 1e3,
              peak_rss_bytes() / 1e6, flags.repeat);
  if (is_block_quantised(config.weights))
    std::printf("q8/q4 products: int8 dot products %s\n", int8_dot_instructions());
  return 0;
}

}  // namespace retnet::cli
