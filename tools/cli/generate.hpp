// `retnet generate`: text from a prompt, streamed to stdout as it is decoded; the load time,
// the speeds and the seed go to stderr. A state saved after the prompt (--save-state) resumes it
// later (--load-state).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <retnet/io/output_file.hpp>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/common.hpp"
#include "cli/sampler_flags.hpp"
#include "load_progress.hpp"

namespace retnet::cli {

struct GenerateFlags {
  std::string model;
  std::optional<std::string> prompt, prompt_file;
  int64_t max_new_tokens;
  SamplerFlags sampler;
  std::optional<int> threads;
  std::optional<Index> chunk_size;
  LoadOptions load;  // --weights, --bf16-dots
  std::vector<std::string> stop;
  std::optional<std::string> save_state, load_state;

  void declare(FlagTable& f) {
    declare_model(f, model);
    f.optional(prompt, "-p|--prompt", "TEXT",
               "prompt (default: a newline; with --load-state: nothing)");
    f.optional(prompt_file, "-f|--file", "PATH",
               "read the prompt from a regular file (at most 256 MiB)");
    f.value(max_new_tokens, "-n|--n-predict|--max-tokens", "N", 256, {0, 1 << 24},
            "tokens to generate");
    sampler.declare(f);
    tools::declare_threads(f, threads);
    declare_chunk_size(f, chunk_size);
    tools::declare_load(f, load);
    f.list(stop, "--stop", "TEXT",
           "stop before this text appears (several: before the first to appear)");
    f.optional(save_state, "--save-state", "F", "after reading the prompt, save the state to F");
    f.optional(load_state, "--load-state", "F",
               "start from a state saved by --save-state (the prompt, if any, follows it)");
  }

  /// The generation parameters, sampling with `sampler_seed` (--seed, or one drawn for -1).
  GenerationParams params(uint64_t sampler_seed) const {
    GenerationParams params;
    params.max_new_tokens = max_new_tokens;
    params.sampler = sampler.params("generate", sampler_seed);
    params.chunk_size = chunk_size.value_or(0);
    params.stop_strings = stop;
    return params;
  }
};

/// The prompt: -p, -f's file, or a newline (nothing when resuming a state).
inline std::string generate_prompt(const GenerateFlags& flags) {
  if (flags.prompt && flags.prompt_file) throw UsageError("generate: give -p or -f, not both");
  if (flags.prompt_file) return read_regular_file(*flags.prompt_file, kMaxTextFileBytes, "prompt");
  return flags.prompt ? *flags.prompt : flags.load_state ? "" : "\n";
}

/// Text to stdout at once, remembering whether it ended a line.
struct TextOut {
  bool at_line_start = true;
  void write(const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (!text.empty()) at_line_start = text.back() == '\n';
  }
};

inline int generate(const GenerateFlags& flags) {
  set_threads(flags.threads);
  const uint64_t seed = flags.sampler.seed_to_use();
  GenerationParams params = flags.params(seed);
  const std::string prompt = generate_prompt(flags);
  // Created first, so that a path that cannot be written is refused before the model loads.
  std::optional<ReplacingFile> state_out;
  if (flags.save_state) state_out.emplace(*flags.save_state);

  const auto load_start = std::chrono::steady_clock::now();
  const Model model = tools::load_model_showing_progress(flags.model, flags.load);
  const auto tokenizer = load_tokenizer(flags.model, model.config().vocab_size);
  const double load_seconds = seconds_since(load_start);
  for (const auto& [id, bias] : params.sampler.logit_bias)
    if (id >= model.config().vocab_size)
      throw InvalidArgument("--logit-bias id " + std::to_string(id) +
                            " is outside the model's vocabulary [0, " +
                            std::to_string(model.config().vocab_size) + ")");
  params.end_tokens = tokenizer->eos_ids();
  Generator<float> generator(model, *tokenizer);

  GenerationState<float> state;
  if (flags.load_state) {
    auto in = open_regular_file(*flags.load_state);
    state = load_generation_state(in, model, *flags.load_state);
    generator.continue_with(state, prompt, params);
  } else {
    state = generator.read_prompt(prompt, params);
  }
  if (state_out) {
    std::ostringstream bytes;
    save_generation_state(bytes, state, model.fingerprint());
    const std::string data = bytes.str();
    state_out->write(data.data(), data.size());
    state_out->commit();
  }
  TextOut out;
  if (!flags.load_state) out.write(prompt);
  const auto r = generator.decode(
      state, params, [&out](Index, int32_t, const std::string& piece) { out.write(piece); });
  // The speed line goes to stderr, often the same terminal or file: it starts on a line of its
  // own, and stdout is flushed before it so that nothing of the text can follow it.
  if (!out.at_line_start) out.write("\n");
  std::fprintf(stderr,
               "load: %.2f s; prompt: %lld tokens in %.3f s (%.1f tokens/s); decode: %zu tokens "
               "in %.3f s (%.1f tokens/s); seed: %llu\n",
               load_seconds, static_cast<long long>(r.prompt_tokens), r.prompt_seconds,
               r.prompt_tokens / std::max(r.prompt_seconds, 1e-9), r.tokens.size(),
               r.decode_seconds, r.tokens.size() / std::max(r.decode_seconds, 1e-9),
               static_cast<unsigned long long>(seed));
  return 0;
}

}  // namespace retnet::cli
