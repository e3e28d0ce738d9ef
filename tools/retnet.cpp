// The `retnet` command line: generate text, score text, benchmark. A thin frontend over the
// library: it parses flags, loads a model folder and calls Generator / RetNetModel.
// Every error ends in one line on stderr and a non-zero exit status.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <new>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>  // load_tokenizer
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Model = retnet::RetNetModel<float>;
using retnet::Index;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `--flag value` pairs and bare `--switch`es, checked against the flags a subcommand knows.
class Flags {
 public:
  Flags(const std::string& command, int argc, char** argv, const std::set<std::string>& with_value,
        const std::set<std::string>& switches)
      : command_(command) {
    for (int i = 0; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "-h") arg = "--help";
      if (switches.count(arg)) {
        values_[arg] = "1";
      } else if (with_value.count(arg)) {
        if (i + 1 >= argc) throw UsageError(command + ": " + arg + " needs a value");
        values_[arg] = argv[++i];
      } else {
        throw UsageError(command + ": unknown argument '" + arg + "' (see retnet " + command +
                         " --help)");
      }
    }
  }
  bool has(const std::string& f) const { return values_.count(f) > 0; }
  std::string str(const std::string& f, const std::string& fallback = "") const {
    auto it = values_.find(f);
    return it == values_.end() ? fallback : it->second;
  }
  double number(const std::string& f, double fallback) const {
    if (!has(f)) return fallback;
    const std::string& v = values_.at(f);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x))
      throw UsageError(command_ + ": " + f + " expects a number, got '" + v + "'");
    return x;
  }
  int64_t integer(const std::string& f, int64_t fallback, int64_t min = 0) const {
    if (!has(f)) return fallback;
    const std::string& v = values_.at(f);
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0')
      throw UsageError(command_ + ": " + f + " expects an integer, got '" + v + "'");
    if (x < min)
      throw UsageError(command_ + ": " + f + " must be >= " + std::to_string(min) + ", got " + v);
    return x;
  }

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
};

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

retnet::Form parse_form(const Flags& flags, const std::string& fallback, bool allow_recurrent) {
  const std::string m = flags.str("--mode", fallback);
  if (m == "parallel") return retnet::Form::kParallel;
  if (m == "chunkwise") return retnet::Form::kChunkwise;
  if (m == "recurrent" && allow_recurrent) return retnet::Form::kRecurrent;
  throw UsageError("--mode must be parallel, chunkwise" +
                   std::string(allow_recurrent ? " or recurrent" : "") + ", got '" + m + "'");
}

void set_threads(const Flags& flags) {
  retnet::set_num_threads(static_cast<int>(flags.integer("--threads", retnet::num_threads(), 1)));
}

std::string require_model_dir(const Flags& flags, const std::string& command) {
  if (!flags.has("-m")) throw UsageError(command + ": -m MODEL_DIR is required");
  return flags.str("-m");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot open '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---------------------------------------------------------------- generate

const char* kGenerateHelp = R"(usage: retnet generate -m DIR [options]
Generates text from a prompt and streams it to stdout; speeds go to stderr.
  -m DIR                model folder (config.json + model.safetensors)
  -p TEXT               prompt (default: a newline)
  -n N                  tokens to generate (default 256)
  --temp T              temperature; 0 = greedy (default 0.8)
  --top-k K             keep the K most likely tokens; 0 = off (default 40)
  --top-p P             keep the smallest set reaching probability P (default 0.95)
  --repeat-penalty R    penalty for the last 64 tokens; 1 = off (default 1.1)
  --seed S              random seed (default 0)
  --threads N           threads (default: all cores)
  --chunk-size C        chunk size of the prompt's chunkwise pass (default: config)
  --stop TEXT           stop before this text appears
  --save-state F        after reading the prompt, save the state to F
  --load-state F        start from a state saved by --save-state (the prompt, if any, follows it)
)";

int generate(int argc, char** argv) {
  const Flags flags("generate", argc, argv,
                    {"-m", "-p", "-n", "--temp", "--top-k", "--top-p", "--repeat-penalty", "--seed",
                     "--threads", "--chunk-size", "--stop", "--save-state", "--load-state"},
                    {"--help"});
  if (flags.has("--help")) return std::fputs(kGenerateHelp, stdout), 0;
  set_threads(flags);
  retnet::GenerationParams params;
  params.max_new_tokens = flags.integer("-n", 256, 0);
  params.sampler.temperature = static_cast<float>(flags.number("--temp", 0.8));
  params.sampler.top_k = static_cast<int>(flags.integer("--top-k", 40, 0));
  params.sampler.top_p = static_cast<float>(flags.number("--top-p", 0.95));
  params.sampler.repeat_penalty = static_cast<float>(flags.number("--repeat-penalty", 1.1));
  params.sampler.seed = static_cast<uint64_t>(flags.integer("--seed", 0, 0));
  params.sampler.validate();
  params.chunk_size = flags.integer("--chunk-size", 0, 1);
  if (flags.has("--stop")) params.stop_strings.push_back(flags.str("--stop"));

  const std::string dir = require_model_dir(flags, "generate");
  Model model = retnet::load_model<float>(dir);
  const auto tokenizer = retnet::load_tokenizer(dir, model.config().vocab_size);
  retnet::Generator<float> generator(model, *tokenizer);
  params.end_token = tokenizer->eos_id();

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> prompt;
  retnet::GenerationState<float> state;
  if (flags.has("--load-state")) {
    const std::string path = flags.str("--load-state");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError("cannot open state file '" + path + "'");
    state = retnet::GenerationState<float>::load(in, model, path);
    prompt = tokenizer->encode(flags.str("-p"));
    generator.extend(state, prompt, params);
  } else {
    prompt = tokenizer->encode(flags.str("-p", "\n"));
    if (prompt.empty()) throw UsageError("generate: the prompt is empty");
    state = generator.prefill(prompt, params);
  }
  const double prompt_seconds = seconds_since(t0);
  if (flags.has("--save-state")) {
    const std::string path = flags.str("--save-state");
    std::ofstream out(path, std::ios::binary);
    if (!out) throw UsageError("cannot write state file '" + path + "'");
    state.save(out);
  }
  if (!flags.has("--load-state")) std::fputs(flags.str("-p", "\n").c_str(), stdout);
  std::fflush(stdout);
  std::vector<retnet::GenerationState<float>> states{state};
  const auto results = generator.decode(states, params, [](Index, int32_t, const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  const auto& r = results.front();
  std::fprintf(stderr,
               "prompt: %zu tokens in %.3f s (%.1f tokens/s); decode: %zu tokens in %.3f s (%.1f "
               "tokens/s)\n",
               prompt.size(), prompt_seconds, prompt.size() / std::max(prompt_seconds, 1e-9),
               r.tokens.size(), r.decode_seconds,
               r.tokens.size() / std::max(r.decode_seconds, 1e-9));
  return 0;
}

// ---------------------------------------------------------------- score

const char* kScoreHelp =
    R"(usage: retnet score -m DIR (--text S | --file PATH | --tokens 1,2,3) [options]
How well the model predicts a sequence: each token from the ones before it.
  -m DIR              model folder
  --text S            the text to score
  --file PATH         a file to score (read in chunks: memory stays bounded)
  --tokens LIST       comma-separated token ids
  --mode M            parallel | chunkwise | recurrent (default chunkwise)
  --chunk-size C      chunk size of the chunkwise form (default: config)
  --threads N         threads (default: all cores)
  --logits-out F.npy  write float32 logits [T, vocab]; row t = logits after reading token t
  --json              print one JSON object instead of text
)";

std::vector<int32_t> parse_token_list(const std::string& list) {
  std::vector<int32_t> ids;
  std::stringstream s(list);
  std::string item;
  while (std::getline(s, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      throw UsageError("score: --tokens expects comma-separated ids, got '" + item + "'");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

int score(int argc, char** argv) {
  const Flags flags(
      "score", argc, argv,
      {"-m", "--text", "--file", "--tokens", "--mode", "--chunk-size", "--threads", "--logits-out"},
      {"--help", "--json"});
  if (flags.has("--help")) return std::fputs(kScoreHelp, stdout), 0;
  set_threads(flags);
  const int sources = flags.has("--text") + flags.has("--file") + flags.has("--tokens");
  if (sources != 1) throw UsageError("score: give exactly one of --text, --file, --tokens");
  const retnet::Form form = parse_form(flags, "chunkwise", true);
  const Index chunk = flags.integer("--chunk-size", 0, 1);
  const std::string dir = require_model_dir(flags, "score");
  Model model = retnet::load_model<float>(dir);
  const auto tokenizer = retnet::load_tokenizer(dir, model.config().vocab_size);

  std::vector<int32_t> ids = flags.has("--tokens") ? parse_token_list(flags.str("--tokens"))
                             : flags.has("--file")
                                 ? tokenizer->encode(read_file(flags.str("--file")))
                                 : tokenizer->encode(flags.str("--text"));
  if (ids.empty()) throw UsageError("score: nothing to score (0 tokens)");
  const Index time = static_cast<Index>(ids.size()), vocab = model.config().vocab_size;
  const retnet::TokenMatrix tokens = Eigen::Map<const retnet::TokenMatrix>(ids.data(), 1, time);

  std::unique_ptr<retnet::NpyWriter> logits_out;
  if (flags.has("--logits-out"))
    logits_out = std::make_unique<retnet::NpyWriter>(flags.str("--logits-out"),
                                                     std::vector<int64_t>{time, vocab});
  // Sum of -log p(token t+1 | tokens <= t), accumulated as segments arrive.
  double nll = 0;
  const bool progress = time > 4096;
  const auto t0 = std::chrono::steady_clock::now();
  auto state = model.new_state(1);
  std::vector<float> row_buffer;
  model.forward_segments(
      tokens, form, chunk, state, [&](Index start, Index len, const retnet::Matrix<float>& logits) {
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
  const double seconds = seconds_since(t0);
  const int64_t predicted = time - 1;
  const double nats = predicted > 0 ? nll / double(predicted) : 0.0;
  if (flags.has("--json")) {
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

const char* kBenchHelp = R"(usage: retnet bench (-m DIR | --config CONFIG.json) [options]
Times reading a prompt and decoding after it. With --config alone, weights are random (seeded).
  -m DIR             model folder
  --config FILE      a config.json (random weights)
  --prompt-len N     prompt tokens (default 512)
  --gen-len N        decoded tokens (default 128)
  --batch B          sequences decoded together (default 1)
  --threads N        threads (default: all cores)
  --mode M           prompt form: parallel | chunkwise (default chunkwise)
  --chunk-size C     chunk size of the chunkwise form (default: config)
  --logits M         prompt logits: last | all (default last: time to first token)
  --repeat R         timed runs after one warm-up run; medians are reported (default 3)
  --json             print one JSON object
)";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int bench(int argc, char** argv) {
  const Flags flags("bench", argc, argv,
                    {"-m", "--config", "--prompt-len", "--gen-len", "--batch", "--threads",
                     "--mode", "--chunk-size", "--logits", "--repeat"},
                    {"--help", "--json"});
  if (flags.has("--help")) return std::fputs(kBenchHelp, stdout), 0;
  set_threads(flags);
  if (flags.has("-m") == flags.has("--config"))
    throw UsageError("bench: give exactly one of -m DIR or --config CONFIG.json");
  const retnet::Form form = parse_form(flags, "chunkwise", false);
  const Index prompt_len = flags.integer("--prompt-len", 512, 1);
  const Index gen_len = flags.integer("--gen-len", 128, 0);
  const Index batch = flags.integer("--batch", 1, 1);
  const Index chunk = flags.integer("--chunk-size", 0, 1);
  const int repeat = static_cast<int>(flags.integer("--repeat", 3, 1));
  const std::string logits_flag = flags.str("--logits", "last");
  if (logits_flag != "last" && logits_flag != "all")
    throw UsageError("bench: --logits must be last or all, got '" + logits_flag + "'");
  const auto logits_mode =
      logits_flag == "all" ? retnet::LogitsMode::kAll : retnet::LogitsMode::kLast;

  std::unique_ptr<Model> model;
  if (flags.has("-m")) {
    model = std::make_unique<Model>(retnet::load_model<float>(flags.str("-m")));
  } else {
    const auto config = retnet::ModelConfig::load(flags.str("--config"));
    model = std::make_unique<Model>(config, retnet::ModelWeights<float>::random(config, 1));
  }
  const auto& config = model->config();
  std::mt19937_64 rng(7);
  retnet::TokenMatrix prompt(batch, prompt_len);
  for (Index i = 0; i < prompt.size(); ++i) prompt.data()[i] = int32_t(rng() % config.vocab_size);

  std::vector<double> prefill_s, decode_s;
  size_t state_bytes = 0;
  retnet::Matrix<float> logits;
  for (int run = 0; run <= repeat; ++run) {  // run 0 warms up (page faults, caches): not counted
    auto state = model->new_state(batch);
    auto t0 = std::chrono::steady_clock::now();
    model->forward(prompt, form, chunk, state, logits, logits_mode);
    prefill_s.push_back(seconds_since(t0));
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (Index b = 0; b < batch; ++b) next[b] = prompt(b, prompt_len - 1);
    t0 = std::chrono::steady_clock::now();
    for (Index s = 0; s < gen_len; ++s) {
      model->step(next, state, logits);
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
  const size_t weight_bytes = model->weights().size_bytes(config);
  // What one decoding step streams: every weight except the embedding rows it does not touch
  // (the table still counts once when it doubles as the output projection).
  const size_t embed_bytes = size_t(config.vocab_size * config.embed_dim) * sizeof(float);
  const size_t step_bytes = config.tie_embeddings ? weight_bytes : weight_bytes - embed_bytes;
  if (flags.has("--json")) {
    nlohmann::json j = {{"prompt_len", prompt_len},
                        {"gen_len", gen_len},
                        {"batch", batch},
                        {"threads", retnet::num_threads()},
                        {"mode", retnet::form_name(form)},
                        {"logits", logits_flag},
                        {"repeat", repeat},
                        {"prefill_seconds", prefill},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"decode_seconds", decode},
                        {"decode_tokens_per_s", decode_tps},
                        {"decode_ms_per_step", gen_len ? 1000.0 * decode / double(gen_len) : 0.0},
                        {"peak_rss_bytes", peak_rss_bytes()},
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
    std::printf("weights %.1f MB, state %.1f KB, peak RSS %.1f MB (median of %d runs)\n",
                weight_bytes / 1e6, state_bytes / 1e3, peak_rss_bytes() / 1e6, repeat);
  }
  return 0;
}

const char* kHelp = R"(usage: retnet COMMAND [options]
  generate   generate text from a prompt
  score      score a text (nats per token, perplexity)
  bench      time prompt processing and decoding
Run `retnet COMMAND --help` for the options of each.
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs("retnet: missing command (generate, score, bench); see retnet --help\n", stderr);
    return 2;
  }
  const std::string command = argv[1];
  try {
    if (command == "generate") return generate(argc - 2, argv + 2);
    if (command == "score") return score(argc - 2, argv + 2);
    if (command == "bench") return bench(argc - 2, argv + 2);
    if (command == "--help" || command == "-h" || command == "help")
      return std::fputs(kHelp, stdout), 0;
    std::fprintf(stderr, "retnet: unknown command '%s' (generate, score, bench)\n",
                 command.c_str());
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "retnet: %s\n", e.what());
    return 2;
  } catch (const retnet::Error& e) {
    std::fprintf(stderr, "retnet %s: %s\n", command.c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "retnet %s: out of memory (the parallel form holds T x T scores per head; "
                 "long inputs need --mode chunkwise)\n",
                 command.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "retnet %s: %s\n", command.c_str(), e.what());
    return 1;
  }
}
