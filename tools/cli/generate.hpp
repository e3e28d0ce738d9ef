// `retnet generate`: text from a prompt, streamed to stdout as it is decoded; the speeds go to
// stderr. A state saved after the prompt (--save-state) resumes it later (--load-state).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "load_progress.hpp"

namespace retnet::cli {

struct GenerateFlags {
  std::string model;
  std::optional<std::string> prompt;
  int64_t max_new_tokens;
  float temperature;
  int top_k;
  float top_p;
  float repeat_penalty;
  int64_t seed;
  std::optional<int> threads;
  std::optional<Index> chunk_size;
  std::optional<WeightType> weights;
  std::vector<std::string> stop;
  std::optional<std::string> save_state, load_state;

  void declare(FlagTable& f) {
    declare_model(f, model);
    f.optional(prompt, "-p", "TEXT", "prompt (default: a newline; with --load-state: nothing)");
    f.value(max_new_tokens, "-n", "N", 256, {0, 1 << 24}, "tokens to generate");
    f.value(temperature, "--temp", "T", 0.8, {0, 100}, "temperature; 0 = greedy");
    f.value(top_k, "--top-k", "K", 40, {0, std::numeric_limits<int32_t>::max()},
            "keep the K most likely tokens; 0 = off");
    f.value(top_p, "--top-p", "P", 0.95, {0, 1},
            "keep the smallest set reaching probability P (> 0)");
    f.value(repeat_penalty, "--repeat-penalty", "R", 1.1,
            {SamplerParams::kMinRepeatPenalty, SamplerParams::kMaxRepeatPenalty},
            "penalty for the last 64 tokens; 1 = off");
    f.value(seed, "--seed", "S", 0, {0, std::numeric_limits<int64_t>::max()}, "random seed");
    tools::declare_threads(f, threads);
    declare_chunk_size(f, chunk_size);
    tools::declare_weights(f, weights);
    f.list(stop, "--stop", "TEXT",
           "stop before this text appears (several: before the first to appear)");
    f.optional(save_state, "--save-state", "F", "after reading the prompt, save the state to F");
    f.optional(load_state, "--load-state", "F",
               "start from a state saved by --save-state (the prompt, if any, follows it)");
  }

  GenerationParams params() const {
    GenerationParams params;
    params.max_new_tokens = max_new_tokens;
    params.sampler.temperature = temperature;
    params.sampler.top_k = top_k;
    params.sampler.top_p = top_p;
    params.sampler.repeat_penalty = repeat_penalty;
    params.sampler.seed = static_cast<uint64_t>(seed);
    params.sampler.validate();
    params.chunk_size = chunk_size.value_or(0);
    params.stop_strings = stop;
    return params;
  }
};

inline int generate(const GenerateFlags& flags) {
  set_threads(flags.threads);
  GenerationParams params = flags.params();
  const Model model = tools::load_model_showing_progress(flags.model, LoadOptions{flags.weights});
  const auto tokenizer = load_tokenizer(flags.model, model.config().vocab_size);
  params.end_tokens = tokenizer->eos_ids();
  Generator<float> generator(model, *tokenizer);

  const bool resume = flags.load_state.has_value();
  const std::string prompt = flags.prompt ? *flags.prompt : resume ? "" : "\n";
  GenerationState<float> state;
  if (resume) {
    auto in = open_regular_file(*flags.load_state);
    state = load_generation_state(in, model, *flags.load_state);
    generator.continue_with(state, prompt, params);
  } else {
    state = generator.read_prompt(prompt, params);
  }
  if (flags.save_state) {
    std::ofstream out(*flags.save_state, std::ios::binary);
    if (!out) throw UsageError("cannot write state file '" + *flags.save_state + "'");
    save_generation_state(out, state, model.fingerprint());
  }
  if (!resume) std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  const auto r = generator.decode(state, params, [](Index, int32_t, const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  std::fprintf(stderr,
               "prompt: %lld tokens in %.3f s (%.1f tokens/s); decode: %zu tokens in %.3f s (%.1f "
               "tokens/s)\n",
               static_cast<long long>(r.prompt_tokens), r.prompt_seconds,
               r.prompt_tokens / std::max(r.prompt_seconds, 1e-9), r.tokens.size(),
               r.decode_seconds, r.tokens.size() / std::max(r.decode_seconds, 1e-9));
  return 0;
}

}  // namespace retnet::cli
