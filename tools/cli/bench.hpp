// `retnet bench`: times reading a prompt and decoding after it, on a model folder or on random
// weights of a config.json, for every combination of the lists given (weight types, thread
// counts, batch sizes, prompt and decode lengths): a markdown table of mean ± standard deviation
// over timed runs after a warm-up run, or one JSON object per row. Each weight type is loaded
// once and its load time reported.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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
#include "load_progress.hpp"

namespace retnet::cli {

/// The flags of `bench`: the sizes, thread counts and weight types take comma lists
/// ("--threads 1,2 --prompt-len 128,512"), and every combination is run.
struct BenchFlags {
  std::optional<std::string> model, config;
  std::string prompt_lens, gen_lens, batches;
  std::optional<std::string> threads, weights;
  Form mode;
  std::optional<Index> chunk_size;
  LogitsMode logits;
  int repetitions;
  Index fold_every;
  bool bf16_dots, json;

  void declare(FlagTable& f) {
    f.optional(model, "-m|--model", "DIR", "model folder (config.json + weights)");
    f.optional(config, "--config", "FILE", "a config.json (random weights, seeded)");
    f.value(prompt_lens, "--prompt-len", "LIST", "512", "prompt tokens, e.g. 128,512");
    f.value(gen_lens, "--gen-len", "LIST", "128", "decoded tokens, e.g. 0,128");
    f.value(batches, "--batch", "LIST", "1", "sequences decoded together, e.g. 1,8");
    f.optional(threads, "--threads", "LIST",
               "threads, e.g. 1,2 (default: all cores; at most 4 x the hardware threads)");
    f.optional(weights, "--weights", "LIST",
               "weight types, e.g. f32,q8: f32 | bf16 | q8 | q4 (default: the checkpoint's own)");
    tools::declare_bf16_dots(f, bf16_dots);
    f.choice(mode, "--mode", "M", Form::kChunkwise, kPromptForms,
             "prompt form: parallel | chunkwise");
    declare_chunk_size(f, chunk_size);
    f.choice(logits, "--logits", "M", LogitsMode::kLast,
             {{"last", LogitsMode::kLast}, {"all", LogitsMode::kAll}},
             "prompt logits: last (time to first token) | all");
    f.value(fold_every, "--fold-every", "N", 1, {1, kMaxPendingPairs},
            "decoding adds the last N tokens into the state at once (RetNetModel::defer_fold); "
            "1: every token, the plain recurrence");
    f.value(repetitions, "--repetitions", "R", 3, {1, 1000},
            "timed runs after one warm-up run; mean and standard deviation reported");
    f.toggle(json, "--json", "print one JSON object per row (JSON Lines)");
  }
};

/// The items of a comma list given to `flag`, each read and checked as the flag's single value
/// would be (tools::flag_values); a malformed item is a one-line UsageError naming it.
template <typename T>
std::vector<T> parse_list(const std::string& list, const char* flag,
                          std::optional<tools::Range<T>> range) {
  std::vector<T> items;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string item = list.substr(begin, end - begin);
    if (item.empty())
      throw UsageError(std::string("bench: ") + flag + " has an empty item in '" + list + "'");
    try {
      items.push_back(tools::flag_values::read<T>(item, range));
    } catch (const tools::flag_values::FlagValueError& e) {
      throw UsageError(std::string("bench: ") + flag + e.problem +
                       (item == list ? "" : " (in the list '" + list + "')"));
    }
    if (end == list.size()) return items;
    begin = end + 1;
  }
}

/// The combinations `bench` runs: every item of each list.
struct BenchLists {
  std::vector<std::optional<WeightType>> weights{std::nullopt};
  std::vector<int> threads;
  std::vector<Index> batches, prompt_lens, gen_lens;
};

inline BenchLists bench_lists(const BenchFlags& flags) {
  BenchLists lists;
  if (flags.weights) {
    lists.weights.clear();
    for (WeightType w : parse_list<WeightType>(*flags.weights, "--weights", std::nullopt))
      lists.weights.push_back(w);
  }
  lists.threads = flags.threads ? parse_list<int>(*flags.threads, "--threads",
                                                  tools::Range<int>{1, tools::max_threads()})
                                : std::vector<int>{num_threads()};
  lists.batches = parse_list<Index>(flags.batches, "--batch", tools::Range<Index>{1, 1024});
  lists.prompt_lens =
      parse_list<Index>(flags.prompt_lens, "--prompt-len", tools::Range<Index>{1, 1 << 20});
  lists.gen_lens = parse_list<Index>(flags.gen_lens, "--gen-len", tools::Range<Index>{0, 1 << 20});
  return lists;
}

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

/// The mean and the sample standard deviation (0 for one value) of `v`.
struct MeanSd {
  double mean = 0, sd = 0;
};
inline MeanSd mean_sd(const std::vector<double>& v) {
  MeanSd m;
  for (double x : v) m.mean += x / double(v.size());
  if (v.size() < 2) return m;
  double squares = 0;
  for (double x : v) squares += (x - m.mean) * (x - m.mean);
  m.sd = std::sqrt(squares / double(v.size() - 1));
  return m;
}

/// The model of -m (its load shown on stderr) or random weights of --config, as `weights`.
inline Model bench_model(const BenchFlags& flags, std::optional<WeightType> weights) {
  LoadOptions options{weights};
  options.bf16_dots = flags.bf16_dots;
  if (flags.model) return tools::load_model_showing_progress(*flags.model, options);
  auto config = load_config_json(*flags.config);
  config.weights = weights.value_or(WeightType::kF32);
  auto random = ModelWeights<float>::random(config, 1, config.weights);
  random.set_bf16_dots(config, flags.bf16_dots);
  return Model(config, std::move(random));
}

/// One combination of the lists, and what its timed runs measured (the warm-up run is not
/// among them).
struct BenchRow {
  int threads = 1;
  Index batch = 1, prompt_len = 1, gen_len = 0;
  double load_seconds = 0;
  std::vector<double> prefill_s, decode_s, prefill_tps, decode_tps;
  size_t state_bytes = 0;    // the recurrent state, without pending pairs
  size_t pending_bytes = 0;  // the pairs of a deferred fold
};

inline void time_runs(const Model& model, const BenchFlags& flags, BenchRow& row) {
  const Index batch = row.batch, prompt_len = row.prompt_len;
  std::mt19937_64 rng(7);
  TokenMatrix prompt(batch, prompt_len);
  for (Index i = 0; i < prompt.size(); ++i)
    prompt.data()[i] = int32_t(rng() % model.config().vocab_size);
  Matrix<float> logits;
  Workspace<float> ws;
  for (int run = 0; run <= flags.repetitions; ++run) {  // run 0 warms up (page faults, caches)
    auto state = model.new_state(batch);
    auto t0 = std::chrono::steady_clock::now();
    model.forward(prompt, flags.mode, flags.chunk_size.value_or(0), state, ws, logits,
                  flags.logits);
    const double prefill = seconds_since(t0);
    if (flags.fold_every > 1) model.defer_fold(state, flags.fold_every);
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (Index b = 0; b < batch; ++b) next[b] = prompt(b, prompt_len - 1);
    t0 = std::chrono::steady_clock::now();
    for (Index s = 0; s < row.gen_len; ++s) {
      model.step(next, state, ws, logits);
      for (Index b = 0; b < batch; ++b) {  // greedy, so that decoding does real work
        Index arg;
        logits.row(b).maxCoeff(&arg);
        next[b] = static_cast<int32_t>(arg);
      }
    }
    const double decode = seconds_since(t0);
    row.pending_bytes = state.pending_bytes();
    row.state_bytes = state.size_bytes() - row.pending_bytes;
    if (run == 0) continue;
    row.prefill_s.push_back(prefill);
    row.decode_s.push_back(decode);
    row.prefill_tps.push_back(double(batch * prompt_len) / std::max(prefill, 1e-9));
    row.decode_tps.push_back(row.gen_len ? double(batch * row.gen_len) / std::max(decode, 1e-9)
                                         : 0.0);
  }
}

/// One row as a JSON object: the combination, the means (tokens/s and seconds) and standard
/// deviations, every run's seconds, the load time and the sizes.
inline nlohmann::json row_json(const Model& model, const BenchFlags& flags, const BenchRow& row) {
  const auto& config = model.config();
  const size_t weight_bytes = model.weights().size_bytes(config);
  // What one decoding step streams: every weight except the embedding rows it does not touch
  // (the table still counts once when it doubles as the output projection).
  const size_t embed_bytes = model.weights().embed.stored_bytes();
  const MeanSd prefill = mean_sd(row.prefill_s), decode = mean_sd(row.decode_s);
  const MeanSd prefill_tps = mean_sd(row.prefill_tps), decode_tps = mean_sd(row.decode_tps);
  return {{"prompt_len", row.prompt_len},
          {"gen_len", row.gen_len},
          {"batch", row.batch},
          {"threads", row.threads},
          {"weights", weight_type_name(config.weights)},
          {"int8_dot_instructions", int8_dot_instructions()},
          {"bf16_dots", flags.bf16_dots},
          {"mode", form_name(flags.mode)},
          {"logits", flags.logits == LogitsMode::kAll ? "all" : "last"},
          {"repetitions", flags.repetitions},
          {"prefill_seconds", prefill.mean},
          {"prefill_tokens_per_s", prefill_tps.mean},
          {"prefill_tokens_per_s_sd", prefill_tps.sd},
          {"decode_seconds", decode.mean},
          {"decode_tokens_per_s", decode_tps.mean},
          {"decode_tokens_per_s_sd", decode_tps.sd},
          {"decode_ms_per_step", row.gen_len ? 1000.0 * decode.mean / double(row.gen_len) : 0.0},
          {"peak_rss_bytes", peak_rss_bytes()},
          {"load_seconds", row.load_seconds},
          {"state_bytes", row.state_bytes},
          {"fold_every", flags.fold_every},
          // What a decoding step moves of the state: read every step and written once per
          // fold_every steps, plus about half the pending pairs read.
          {"step_state_bytes", double(row.state_bytes) * (1.0 + 1.0 / double(flags.fold_every)) +
                                   0.5 * double(row.pending_bytes)},
          {"weight_bytes", weight_bytes},
          {"decode_step_weight_bytes",
           config.tie_embeddings ? weight_bytes : weight_bytes - embed_bytes},
          {"prefill_seconds_all", row.prefill_s},
          {"decode_seconds_all", row.decode_s}};
}

/// "1234.5 ± 6.7"
inline std::string plus_minus(const std::vector<double>& v) {
  const MeanSd m = mean_sd(v);
  char text[64];
  std::snprintf(text, sizeof text, "%.1f ± %.1f", m.mean, m.sd);
  return text;
}

inline void print_table_head() {
  std::printf(
      "| weights | threads | batch | prompt | gen | prefill tokens/s | decode tokens/s | weights "
      "MB "
      "| load s |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
}

inline void print_table_row(const Model& model, const BenchFlags& flags, const BenchRow& row) {
  const auto& config = model.config();
  std::printf("| %s%s | %d | %ld | %ld | %ld | %s | %s | %.1f | %.2f |\n",
              weight_type_name(config.weights), flags.bf16_dots ? " dots" : "", row.threads,
              long(row.batch), long(row.prompt_len), long(row.gen_len),
              plus_minus(row.prefill_tps).c_str(),
              row.gen_len ? plus_minus(row.decode_tps).c_str() : "-",
              model.weights().size_bytes(config) / 1e6, row.load_seconds);
  std::fflush(stdout);
}

inline int bench(const BenchFlags& flags) {
  if (flags.model.has_value() == flags.config.has_value())
    throw UsageError("bench: give exactly one of -m DIR or --config CONFIG.json");
  const BenchLists lists = bench_lists(flags);
  if (!flags.json) print_table_head();
  bool quantised = false;
  for (const auto& weights : lists.weights) {
    const auto load_start = std::chrono::steady_clock::now();
    const Model model = bench_model(flags, weights);
    const double load_seconds = seconds_since(load_start);
    quantised |= is_block_quantised(model.config().weights);
    for (int threads : lists.threads)
      for (Index batch : lists.batches)
        for (Index prompt_len : lists.prompt_lens)
          for (Index gen_len : lists.gen_lens) {
            set_num_threads(threads);
            BenchRow row;
            row.threads = threads, row.batch = batch, row.prompt_len = prompt_len;
            row.gen_len = gen_len, row.load_seconds = load_seconds;
            time_runs(model, flags, row);
            if (flags.json)
              std::cout << row_json(model, flags, row).dump() << std::endl;
            else
              print_table_row(model, flags, row);
          }
  }
  if (flags.json) return 0;
  std::printf("\n%s prompts, mean ± sd of %d timed runs after a warm-up; peak RSS %.1f MB\n",
              form_name(flags.mode), flags.repetitions, peak_rss_bytes() / 1e6);
  if (quantised) std::printf("q8/q4 products: int8 dot products %s\n", int8_dot_instructions());
  return 0;
}

}  // namespace retnet::cli
