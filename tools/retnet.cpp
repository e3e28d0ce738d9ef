// The `retnet` command line: generate text, score text, benchmark. A thin frontend over the
// library: each subcommand declares its flags once (name, default, range, help) in the tables of
// tools/flags.hpp, which drive both parsing and --help (`retnet serve` shares them); the work is
// done by Generator and RetNetModel.
// Every error ends in one line on stderr and a non-zero exit status.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <new>
#include <random>
#include <retnet/io/npy.hpp>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "flags.hpp"

namespace {

using Model = retnet::RetNetModel<float>;
using retnet::Index;

// ---------------------------------------------------------------- flags (tools/flags.hpp)

using retnet::tools::Args;
using retnet::tools::Flag;
using retnet::tools::help_text;
using retnet::tools::integer;
using retnet::tools::load_options;
using retnet::tools::number;
using retnet::tools::text;
using retnet::tools::threads_flag;
using retnet::tools::toggle;
using retnet::tools::UsageError;
using retnet::tools::weights_flag;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

Flag model_flag() {
  return text("-m", "DIR", nullptr, "model folder (config.json + weights)");
}
Flag chunk_flag() {
  return integer("--chunk-size", "C", nullptr, 1, 1 << 20,
                 "chunk size of the chunkwise form (default: the config's)");
}

// ---------------------------------------------------------------- shared helpers

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// This process's peak resident memory (VmHWM). getrusage's ru_maxrss is not used: Linux
/// carries it over from the parent across exec, so a large launcher inflates it.
int64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

retnet::Form parse_form(const Args& args, bool allow_recurrent) {
  const std::string m = args.str("--mode");
  if (m == "parallel") return retnet::Form::kParallel;
  if (m == "chunkwise") return retnet::Form::kChunkwise;
  if (m == "recurrent" && allow_recurrent) return retnet::Form::kRecurrent;
  throw UsageError("--mode must be parallel, chunkwise" +
                   std::string(allow_recurrent ? " or recurrent" : "") + ", got '" + m + "'");
}

void set_threads(const Args& args) {
  if (args.has("--threads")) retnet::set_num_threads(static_cast<int>(args.integer("--threads")));
}

Index chunk_size(const Args& args) {
  return args.has("--chunk-size") ? args.integer("--chunk-size") : 0;
}

/// --file takes a regular file (not a FIFO or a device that never ends) of a stated size.
constexpr uint64_t kMaxTextFileBytes = uint64_t(256) << 20;

// ---------------------------------------------------------------- generate

const std::vector<Flag> kGenerateFlags = {
    model_flag(),
    text("-p", "TEXT", nullptr, "prompt (default: a newline; with --load-state: nothing)"),
    integer("-n", "N", "256", 0, 1 << 24, "tokens to generate"),
    number("--temp", "T", "0.8", 0, 100, "temperature; 0 = greedy"),
    integer("--top-k", "K", "40", 0, std::numeric_limits<int32_t>::max(),
            "keep the K most likely tokens; 0 = off"),
    number("--top-p", "P", "0.95", 0, 1, "keep the smallest set reaching probability P (> 0)"),
    number("--repeat-penalty", "R", "1.1", retnet::SamplerParams::kMinRepeatPenalty,
           retnet::SamplerParams::kMaxRepeatPenalty, "penalty for the last 64 tokens; 1 = off"),
    integer("--seed", "S", "0", 0, double(kInt64Max), "random seed"),
    threads_flag(),
    chunk_flag(),
    weights_flag(),
    text("--stop", "TEXT", nullptr, "stop before this text appears"),
    text("--save-state", "F", nullptr, "after reading the prompt, save the state to F"),
    text("--load-state", "F", nullptr,
         "start from a state saved by --save-state (the prompt, if any, follows it)"),
};

int generate(const Args& args) {
  set_threads(args);
  retnet::GenerationParams params;
  params.max_new_tokens = args.integer("-n");
  params.sampler.temperature = static_cast<float>(args.number("--temp"));
  params.sampler.top_k = static_cast<int>(args.integer("--top-k"));
  params.sampler.top_p = static_cast<float>(args.number("--top-p"));
  params.sampler.repeat_penalty = static_cast<float>(args.number("--repeat-penalty"));
  params.sampler.seed = static_cast<uint64_t>(args.integer("--seed"));
  params.sampler.validate();
  params.chunk_size = chunk_size(args);
  if (args.has("--stop")) params.stop_strings.push_back(args.str("--stop"));

  const std::string dir = args.str("-m");
  const Model model = retnet::load_model<float>(dir, load_options(args));
  const auto tokenizer = retnet::load_tokenizer(dir, model.config().vocab_size);
  params.end_tokens = tokenizer->eos_ids();
  retnet::Generator<float> generator(model, *tokenizer);

  const bool resume = args.has("--load-state");
  const std::string prompt = args.has("-p") ? args.str("-p") : resume ? "" : "\n";
  retnet::GenerationState<float> state;
  if (resume) {
    auto in = retnet::open_regular_file(args.str("--load-state"));
    state = retnet::load_generation_state(in, model, args.str("--load-state"));
    generator.continue_with(state, prompt, params);
  } else {
    state = generator.read_prompt(prompt, params);
  }
  if (args.has("--save-state")) {
    std::ofstream out(args.str("--save-state"), std::ios::binary);
    if (!out) throw UsageError("cannot write state file '" + args.str("--save-state") + "'");
    retnet::save_generation_state(out, state, model.fingerprint());
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

// ---------------------------------------------------------------- score

const std::vector<Flag> kScoreFlags = {
    model_flag(),
    text("--text", "S", nullptr, "the text to score"),
    text("--file", "PATH", nullptr, "a regular file to score (at most 256 MiB)"),
    text("--tokens", "LIST", nullptr, "comma-separated token ids (no tokenizer needed)"),
    text("--mode", "M", "chunkwise", "parallel | chunkwise | recurrent"),
    chunk_flag(),
    threads_flag(),
    weights_flag(),
    text("--logits-out", "F.npy", nullptr,
         "write float32 logits [T, vocab]; row t = logits after reading token t"),
    toggle("--json", "print one JSON object instead of text"),
};

std::vector<int32_t> parse_token_list(const std::string& list, const std::string& command) {
  std::vector<int32_t> ids;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string item = list.substr(begin, end - begin);
    char* stop = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || errno == ERANGE || v < 0 ||
        v > std::numeric_limits<int32_t>::max())
      throw UsageError(command + ": expected comma-separated token ids, got '" + item + "'");
    ids.push_back(static_cast<int32_t>(v));
    if (end == list.size()) return ids;
    begin = end + 1;
  }
}

/// The ids to score: --tokens as given; --text and --file through the model's tokenizer.
std::vector<int32_t> score_input(const Args& args, const std::string& dir, int64_t vocab) {
  const int sources = args.has("--text") + args.has("--file") + args.has("--tokens");
  if (sources != 1) throw UsageError("score: give exactly one of --text, --file, --tokens");
  if (args.has("--tokens")) return parse_token_list(args.str("--tokens"), "score: --tokens");
  const auto tokenizer = retnet::load_tokenizer(dir, vocab);
  if (args.has("--text")) return tokenizer->encode(args.str("--text"));
  return tokenizer->encode(
      retnet::read_regular_file(args.str("--file"), kMaxTextFileBytes, "--file"));
}

int score(const Args& args) {
  set_threads(args);
  const retnet::Form form = parse_form(args, true);
  const std::string dir = args.str("-m");
  const Model model = retnet::load_model<float>(dir, load_options(args));
  const Index vocab = model.config().vocab_size;
  const std::vector<int32_t> ids = score_input(args, dir, vocab);
  const Index time = static_cast<Index>(ids.size());
  if (time < 2)
    throw UsageError("score: " + std::to_string(time) +
                     " token(s) to score; at least 2 are needed (the first is only context)");
  const Eigen::Map<const retnet::TokenMatrix> tokens(ids.data(), 1, time);

  std::unique_ptr<retnet::NpyWriter> logits_out;
  if (args.has("--logits-out"))
    logits_out = std::make_unique<retnet::NpyWriter>(args.str("--logits-out"),
                                                     std::vector<int64_t>{time, vocab});
  // Sum of -log p(token t+1 | tokens <= t), accumulated as segments arrive.
  double nll = 0;
  const bool progress = time > 4096;
  const auto t0 = std::chrono::steady_clock::now();
  auto state = model.new_state(1);
  retnet::Workspace<float> ws;
  model.forward_segments(
      tokens, form, chunk_size(args), state, ws,
      [&](Index start, Index len, const retnet::Matrix<float>& logits) {
        for (Index r = 0; r < len; ++r) {
          const Index t = start + r;
          if (t + 1 < time) {
            const auto row = logits.row(r);
            const double max = row.maxCoeff();
            const double log_sum = max + std::log((row.array().cast<double>() - max).exp().sum());
            nll += log_sum - row(ids[t + 1]);
          }
        }
        if (logits_out) logits_out->write(logits.data(), len * vocab);
        if (progress)
          std::fprintf(stderr, "\rscored %ld / %ld tokens", long(start + len), long(time));
      });
  if (progress) std::fputc('\n', stderr);
  if (logits_out) logits_out->close();
  if (!std::isfinite(nll))
    throw retnet::Error("the model's logits are not finite (NaN or inf): nothing to report");
  const double seconds = seconds_since(t0);
  const int64_t predicted = time - 1;
  const double nats = nll / double(predicted);
  if (args.has("--json")) {
    nlohmann::json j = {{"tokens", time},
                        {"predicted_tokens", predicted},
                        {"nats_per_token", nats},
                        {"bits_per_token", nats / std::log(2.0)},
                        {"perplexity", std::exp(nats)},
                        {"mode", retnet::form_name(form)},
                        {"seconds", seconds},
                        {"tokens_per_s", time / std::max(seconds, 1e-9)}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("tokens %ld, nats/token %.4f, bits/token %.4f, perplexity %.3f (%s, %.2f s)\n",
                long(time), nats, nats / std::log(2.0), std::exp(nats), retnet::form_name(form),
                seconds);
  }
  return 0;
}

// ---------------------------------------------------------------- bench

const std::vector<Flag> kBenchFlags = {
    model_flag(),
    text("--config", "FILE", nullptr, "a config.json (random weights, seeded)"),
    integer("--prompt-len", "N", "512", 1, 1 << 20, "prompt tokens"),
    integer("--gen-len", "N", "128", 0, 1 << 20, "decoded tokens"),
    integer("--batch", "B", "1", 1, 1024, "sequences decoded together"),
    threads_flag(),
    weights_flag(),
    text("--mode", "M", "chunkwise", "prompt form: parallel | chunkwise"),
    chunk_flag(),
    text("--logits", "M", "last", "prompt logits: last (time to first token) | all"),
    integer("--repeat", "R", "3", 1, 1000, "timed runs after one warm-up run; medians reported"),
    toggle("--json", "print one JSON object"),
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Model bench_model(const Args& args) {
  if (args.has("-m") == args.has("--config"))
    throw UsageError("bench: give exactly one of -m DIR or --config CONFIG.json");
  const retnet::LoadOptions options = load_options(args);
  if (args.has("-m")) return retnet::load_model<float>(args.str("-m"), options);
  auto config = retnet::load_config_json(args.str("--config"));
  config.weights = options.weights.value_or(retnet::WeightType::kF32);
  return Model(config, retnet::ModelWeights<float>::random(config, 1, config.weights));
}

int bench(const Args& args) {
  set_threads(args);
  const retnet::Form form = parse_form(args, false);
  const Index prompt_len = args.integer("--prompt-len"), gen_len = args.integer("--gen-len");
  const Index batch = args.integer("--batch");
  const int repeat = static_cast<int>(args.integer("--repeat"));
  const std::string logits_flag = args.str("--logits");
  if (logits_flag != "last" && logits_flag != "all")
    throw UsageError("bench: --logits must be last or all, got '" + logits_flag + "'");
  const auto logits_mode =
      logits_flag == "all" ? retnet::LogitsMode::kAll : retnet::LogitsMode::kLast;

  const auto load_start = std::chrono::steady_clock::now();
  const Model model = bench_model(args);
  const double load_seconds = seconds_since(load_start);
  const auto& config = model.config();
  std::mt19937_64 rng(7);
  retnet::TokenMatrix prompt(batch, prompt_len);
  for (Index i = 0; i < prompt.size(); ++i) prompt.data()[i] = int32_t(rng() % config.vocab_size);

  std::vector<double> prefill_s, decode_s;
  size_t state_bytes = 0;
  retnet::Matrix<float> logits;
  retnet::Workspace<float> ws;
  for (int run = 0; run <= repeat; ++run) {  // run 0 warms up (page faults, caches): not counted
    auto state = model.new_state(batch);
    auto t0 = std::chrono::steady_clock::now();
    model.forward(prompt, form, chunk_size(args), state, ws, logits, logits_mode);
    prefill_s.push_back(seconds_since(t0));
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (Index b = 0; b < batch; ++b) next[b] = prompt(b, prompt_len - 1);
    t0 = std::chrono::steady_clock::now();
    for (Index s = 0; s < gen_len; ++s) {
      model.step(next, state, ws, logits);
      for (Index b = 0; b < batch; ++b) {  // greedy, so that decoding does real work
        Index arg;
        logits.row(b).maxCoeff(&arg);
        next[b] = static_cast<int32_t>(arg);
      }
    }
    decode_s.push_back(seconds_since(t0));
    state_bytes = state.size_bytes();
    if (run == 0) prefill_s.clear(), decode_s.clear();
  }
  const double prefill = median(prefill_s), decode = median(decode_s);
  const double prefill_tps = double(batch * prompt_len) / prefill;
  const double decode_tps = gen_len ? double(batch * gen_len) / decode : 0.0;
  const size_t weight_bytes = model.weights().size_bytes(config);
  // What one decoding step streams: every weight except the embedding rows it does not touch
  // (the table still counts once when it doubles as the output projection).
  const size_t embed_bytes = model.weights().embed.stored_bytes();
  const size_t step_bytes = config.tie_embeddings ? weight_bytes : weight_bytes - embed_bytes;
  if (args.has("--json")) {
    nlohmann::json j = {{"prompt_len", prompt_len},
                        {"gen_len", gen_len},
                        {"batch", batch},
                        {"threads", retnet::num_threads()},
                        {"weights", retnet::weight_type_name(config.weights)},
                        {"int8_dot_instructions", retnet::int8_dot_instructions()},
                        {"mode", retnet::form_name(form)},
                        {"logits", logits_flag},
                        {"repeat", repeat},
                        {"prefill_seconds", prefill},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"decode_seconds", decode},
                        {"decode_tokens_per_s", decode_tps},
                        {"decode_ms_per_step", gen_len ? 1000.0 * decode / double(gen_len) : 0.0},
                        {"peak_rss_bytes", peak_rss_bytes()},
                        {"load_seconds", load_seconds},
                        {"state_bytes", state_bytes},
                        {"weight_bytes", weight_bytes},
                        {"decode_step_weight_bytes", step_bytes},
                        {"prefill_seconds_all", prefill_s},
                        {"decode_seconds_all", decode_s}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("prefill: %ld x %ld tokens (%s) in %.3f s = %.1f tokens/s\n", long(batch),
                long(prompt_len), retnet::form_name(form), prefill, prefill_tps);
    std::printf("decode:  %ld x %ld tokens in %.3f s = %.1f tokens/s (%.2f ms/step)\n", long(batch),
                long(gen_len), decode, decode_tps,
                gen_len ? 1000.0 * decode / double(gen_len) : 0.0);
    std::printf("weights %.1f MB (%s), state %.1f KB, peak RSS %.1f MB (median of %d runs)\n",
                weight_bytes / 1e6, retnet::weight_type_name(config.weights), state_bytes / 1e3,
                peak_rss_bytes() / 1e6, repeat);
    if (retnet::is_block_quantised(config.weights))
      std::printf("q8/q4 products: int8 dot products %s\n", retnet::int8_dot_instructions());
  }
  return 0;
}

// ---------------------------------------------------------------- tokenize, detokenize

const std::vector<Flag> kTokenizeFlags = {
    text("-m", "DIR", nullptr, "a model folder, or one holding only tokenizer files"),
    text("--text", "S", nullptr, "the text to encode"),
    text("--file", "PATH", nullptr, "a regular file to encode (at most 256 MiB)"),
    toggle("--json", "print {\"ids\": [...]} instead of comma-separated ids"),
};

/// The ids of encode(text), with the tokenizer's default special tokens, as `retnet score
/// --tokens` and `retnet detokenize --ids` read them.
int tokenize(const Args& args) {
  if (args.has("--text") == args.has("--file"))
    throw UsageError("tokenize: give exactly one of --text, --file");
  const auto tokenizer = retnet::load_tokenizer(args.str("-m"));
  const std::vector<int32_t> ids =
      tokenizer->encode(args.has("--text") ? args.str("--text")
                                           : retnet::read_regular_file(
                                                 args.str("--file"), kMaxTextFileBytes, "--file"));
  if (args.has("--json")) {
    std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
  std::cout << line << "\n";
  return 0;
}

const std::vector<Flag> kDetokenizeFlags = {
    text("-m", "DIR", nullptr, "a model folder, or one holding only tokenizer files"),
    text("--ids", "LIST", nullptr, "comma-separated token ids"),
};

/// decode(ids) to stdout byte for byte: special tokens skipped, nothing added (no newline).
int detokenize(const Args& args) {
  const auto tokenizer = retnet::load_tokenizer(args.str("-m"));
  const std::string text = tokenizer->decode(parse_token_list(args.str("--ids"), "detokenize"));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

// ---------------------------------------------------------------- info

const std::vector<Flag> kInfoFlags = {
    model_flag(),
    toggle("--json", "print one JSON object"),
};

/// What reads the folder's text: its tokenizer.json (loaded, so a broken one is reported) or,
/// without one, bytes.
std::string tokenizer_kind(const std::string& dir) {
  const auto tokenizer = retnet::load_tokenizer(dir);
  const auto* hf = dynamic_cast<const retnet::HfTokenizer*>(tokenizer.get());
  if (!hf) return "byte-level (no tokenizer.json: ids 0-255)";
  return std::string("tokenizer.json, BPE") +
         (hf->byte_level()      ? ", byte-level"
          : hf->byte_fallback() ? ", byte fallback (SentencePiece style)"
                                : "") +
         ", " + std::to_string(hf->vocab_size()) + " ids";
}

int info(const Args& args) {
  const std::string dir = args.str("-m");
  retnet::CheckpointReader reader(dir);
  const retnet::ModelConfig c = retnet::load_config(dir, reader);
  std::map<std::string, std::pair<int64_t, uint64_t>> dtypes;  // tensors, bytes
  for (const auto& shard : reader.shards())
    for (const auto& t : shard.tensors()) {
      if (t.name.find("retnet_rel_pos.") != std::string::npos) continue;  // derived buffers
      auto& d = dtypes[retnet::dtype_name(t.dtype)];
      d.first += 1, d.second += t.nbytes();
    }
  int64_t parameters = 0;  // from the config's shapes: quantised tensors store codes and scales
  retnet::detail::visit_shapes<float>(
      c, c.layers, [&](const std::string&, const std::vector<int64_t>& shape, bool) {
        int64_t n = 1;
        for (int64_t extent : shape) n *= extent;
        parameters += n;
      });
  const char* weights = retnet::weight_type_name(retnet::stored_weight_type<float>(c, reader));
  const std::string tokenizer = tokenizer_kind(dir);
  const bool fla = c.family == retnet::Family::kFla;
  const std::string mlp = !c.use_glu        ? "plain FFN"
                          : c.fused_gate_up ? "GLU, gate and up fused in one [2F, d] tensor"
                          : fla             ? "GLU (gate_proj, up_proj)"
                                            : "GLU (fc1, gate)";
  if (args.has("--json")) {
    nlohmann::json j = {{"family", retnet::family_name(c.family)},
                        {"layers", c.layers},
                        {"embed_dim", c.embed_dim},
                        {"heads", c.heads},
                        {"kv_heads", c.key_value_heads()},
                        {"key_head_dim", c.key_head_dim()},
                        {"value_head_dim", c.value_head_dim()},
                        {"ffn_dim", c.ffn_dim},
                        {"vocab_size", c.vocab_size},
                        {"tied_embeddings", c.tie_embeddings},
                        {"parameters", parameters},
                        {"weights", weights},
                        {"files", reader.shards().size()},
                        {"tokenizer", tokenizer}};
    for (const auto& [name, d] : dtypes)
      j["dtypes"][name] = {{"tensors", d.first}, {"bytes", d.second}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::printf("family      %s\n", retnet::family_name(c.family));
  std::printf("layers      %ld, d %ld, heads %ld (key/value heads %ld), dk %ld, dv %ld\n",
              long(c.layers), long(c.embed_dim), long(c.heads), long(c.key_value_heads()),
              long(c.key_head_dim()), long(c.value_head_dim()));
  std::printf("ffn         %ld, %s\n", long(c.ffn_dim), mlp.c_str());
  std::printf("vocab       %ld, %s\n", long(c.vocab_size), c.tie_embeddings ? "tied" : "untied");
  std::printf("parameters  %ld (%.3f %s)\n", long(parameters),
              parameters >= 1e9 ? parameters / 1e9 : parameters / 1e6,
              parameters >= 1e9 ? "B" : "M");
  std::printf("weights     %s\n", weights);
  for (const auto& [name, d] : dtypes)
    std::printf("stored      %s: %ld tensors, %.1f MB\n", name.c_str(), long(d.first),
                d.second / 1e6);
  std::printf("files       %zu safetensors file(s)\n", reader.shards().size());
  std::printf("tokenizer   %s\n", tokenizer.c_str());
  return 0;
}

// ---------------------------------------------------------------- convert

const std::vector<Flag> kConvertFlags = {
    model_flag(),
    text("-o", "DIR", nullptr, "output folder (created; must not hold a model already)"),
    text("--weights", "T", nullptr, "weight type to write: bf16 | q8 | q4 | f32"),
    threads_flag(),
};

/// Files beside the weights that a converted folder keeps, copied unchanged.
const char* const kFolderFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                    "special_tokens_map.json", "generation_config.json"};

int convert(const Args& args) {
  set_threads(args);
  const std::string in = args.str("-m"), out = args.str("-o");
  const retnet::LoadOptions options = load_options(args);
  if (!options.weights) throw UsageError("convert: --weights is required");
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path(out) / "config.json", ec) ||
      fs::exists(fs::path(out) / "model.safetensors", ec))
    throw UsageError("convert: " + out + " already holds a model; choose a new folder");
  if (fs::equivalent(in, out, ec)) throw UsageError("convert: -o must differ from -m");
  const auto t0 = std::chrono::steady_clock::now();
  const Model model = retnet::load_model<float>(in, options);
  fs::create_directories(out, ec);
  if (ec) throw UsageError("convert: cannot create " + out + ": " + ec.message());
  retnet::save_model(out, model.config(), model.weights());
  for (const char* name : kFolderFiles) {
    const fs::path from = fs::path(in) / name;
    if (!fs::is_regular_file(from, ec)) continue;
    if (!fs::copy_file(from, fs::path(out) / name, ec))
      throw UsageError("convert: cannot copy " + from.string() + ": " + ec.message());
  }
  std::fprintf(stderr, "converted %s to %s (%s): weights %.1f MB, in %.1f s\n", in.c_str(),
               out.c_str(), retnet::weight_type_name(model.config().weights),
               double(model.weights().size_bytes(model.config())) / 1e6, seconds_since(t0));
  return 0;
}

// ---------------------------------------------------------------- commands

struct Command {
  const char* name;
  const char* usage;
  const char* summary;
  const std::vector<Flag>& flags;
  int (*run)(const Args&);
};

const Command kCommands[] = {
    {"generate", "retnet generate -m DIR [options]",
     "Generates text from a prompt and streams it to stdout; speeds go to stderr.", kGenerateFlags,
     generate},
    {"score", "retnet score -m DIR (--text S | --file PATH | --tokens 1,2,3) [options]",
     "How well the model predicts a sequence: each token from the ones before it.", kScoreFlags,
     score},
    {"bench", "retnet bench (-m DIR | --config CONFIG.json) [options]",
     "Times reading a prompt and decoding after it.", kBenchFlags, bench},
    {"tokenize", "retnet tokenize -m DIR (--text S | --file PATH) [--json]",
     "Prints the token ids of a text (the tokenizer's default special tokens included).",
     kTokenizeFlags, tokenize},
    {"detokenize", "retnet detokenize -m DIR --ids 1,2,3",
     "Writes the text of token ids to stdout, byte for byte (special tokens skipped).",
     kDetokenizeFlags, detokenize},
    {"convert", "retnet convert -m DIR -o OUT --weights bf16|q8|q4|f32",
     "Writes a copy of a model folder with its weights in another type (loads without "
     "converting again).",
     kConvertFlags, convert},
    {"info", "retnet info -m DIR [--json]",
     "Describes a model folder: family, sizes, parameters, stored dtypes, tokenizer.", kInfoFlags,
     info},
};

std::string overview() {
  std::string out = "usage: retnet COMMAND [options]\n";
  for (const Command& c : kCommands) {
    std::string name = std::string("  ") + c.name;
    name.resize(13, ' ');
    out += name + c.summary + "\n";
  }
  out += "  serve      An OpenAI-compatible HTTP server (the retnet-serve executable).\n";
  return out + "Run `retnet COMMAND --help` for the options of each.\n";
}

/// `retnet serve ...` runs retnet-serve from this executable's folder (tools/serve.cpp: its own
/// executable, so that the command line needs no HTTP library). Returns only on failure.
int exec_server(char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string server = (self.parent_path() / "retnet-serve").string();
  argv[1] = const_cast<char*>(server.c_str());
  execv(server.c_str(), argv + 1);
  std::fprintf(stderr,
               "retnet serve: cannot run %s (%s); it is built when cpp-httplib is found "
               "(apt-get install libcpp-httplib-dev pkg-config)\n",
               server.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs("retnet: missing command (see retnet --help)\n", stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help")
    return std::fputs(overview().c_str(), stdout), 0;
  if (name == "serve") return exec_server(argv);
  const Command* command = nullptr;
  for (const Command& c : kCommands)
    if (name == c.name) command = &c;
  if (!command) {
    std::fprintf(stderr, "retnet: unknown command '%s' (see retnet --help)\n", name.c_str());
    return 2;
  }
  try {
    const Args args(name, command->flags, argc - 2, argv + 2);
    if (args.help())
      return std::fputs(help_text(command->usage, command->summary, command->flags).c_str(),
                        stdout),
             0;
    return command->run(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "retnet: %s\n", e.what());
    return 2;
  } catch (const retnet::Error& e) {
    std::fprintf(stderr, "retnet %s: %s\n", name.c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "retnet %s: out of memory\n", name.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "retnet %s: %s\n", name.c_str(), e.what());
    return 1;
  }
}
