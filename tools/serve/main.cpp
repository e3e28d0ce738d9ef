// `retnet serve` (the executable retnet-serve, which `retnet serve` runs): an OpenAI-compatible
// HTTP/1.1 server over one const model, with continuous batching (serve/engine.hpp) and sessions
// whose whole history is one fixed-size state (serve/session_store.hpp). This file reads the
// command line into ServeOptions (read_options, the only code that reads flags), loads the model
// and starts the parts; serve/server.hpp holds the routes. docs/SERVER.md describes the API, the
// limits and how batching works.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>
#include <string>
#include <vector>

#include "flags.hpp"
#include "load_progress.hpp"
#include "serve/context.hpp"
#include "serve/engine.hpp"
#include "serve/http.hpp"
#include "serve/local_session_store.hpp"
#include "serve/redis_session_store.hpp"
#include "serve/server.hpp"
#include "serve/shutdown.hpp"

namespace {

using namespace retnet::serve;
using retnet::tools::UsageError;

/// Everything `retnet serve` takes from its command line.
struct ServeOptions {
  std::string model_dir;       // -m; empty with random_weights
  std::string random_weights;  // --random-weights: a config.json, for development
  std::string chat_template;   // --chat-template FILE; empty: the model folder's
  retnet::LoadOptions load;    // --weights, --bf16-dots
  int threads = 0;             // --threads; 0: the default (all cores)
  std::string host;
  int port = 0;  // 0: any free port
  std::string api_key;
  std::vector<std::string> cors_origins;       // --cors
  std::string sessions_dir;                    // empty: sessions in memory only
  std::optional<RedisAddress> sessions_redis;  // --sessions redis://...: shared by replicas
  size_t sessions_memory_bytes = 0;
  SessionQuota sessions_quota;  // --sessions-max, --sessions-disk
  RedisStoreOptions redis;      // --session-ttl, --session-lease
  retnet::StatePrecision session_precision = retnet::StatePrecision::kNative;
  int64_t max_tokens = 0;
  EngineOptions engine;
  http::ServerOptions http;
};

/// The most sequences one step decodes. Nothing in a step limits the rows (each row's result is
/// the same whatever the others are, docs/SERVER.md), but every row holds a state (5.3 MB for
/// the base config, hundreds of MB for a large model) and more rows than cores keep busy only
/// make every stream slower.
constexpr int kMaxBatch = 256;

/// The flags of `retnet serve` (tools/flags.hpp), each declared once with its default, range and
/// help line.
struct ServeFlags {
  std::optional<std::string> model, api_key, sessions_dir, random_weights;
  std::optional<std::string> api_key_file;
  std::optional<std::string> chat_template;
  std::vector<std::string> cors;
  std::string host;
  int port = 0, max_batch = 0, http_threads = 0, max_connections = 0;
  int header_timeout = 0, body_timeout = 0;
  int64_t sessions_memory = 0, prefill_chunk = 0, max_tokens = 0, max_body = 0, max_queue = 0;
  int64_t max_header = 0;
  bool reuse_port = false;
  int64_t sessions_max = 0;
  std::optional<int64_t> sessions_disk;
  std::optional<std::string> sessions_url;
  int64_t session_ttl = 0, session_lease = 0;
  retnet::StatePrecision session_precision = retnet::StatePrecision::kNative;
  std::optional<int> threads;
  retnet::LoadOptions load;  // --weights, --bf16-dots

  void declare(retnet::tools::FlagTable& f) {
    using retnet::tools::Range;
    f.optional(model, "-m", "DIR", "model folder (config.json + weights [+ tokenizer])");
    f.value(host, "--host", "HOST", "127.0.0.1", "address to listen on");
    f.value(port, "--port", "PORT", 8080, Range<int>{0, 65535},
            "port (0: any free port, printed at start)");
    f.optional(api_key, "--api-key", "KEY",
               "require 'Authorization: Bearer KEY' (default: $RETNET_API_KEY if set, else no "
               "key)");
    f.optional(api_key_file, "--api-key-file", "FILE",
               "the API key from a file (its one line), not shown by ps as --api-key is");
    f.list(cors, "--cors", "ORIGIN",
           "let pages of this origin (http://host:port) call the API from a browser "
           "(repeatable)");
    f.value(max_batch, "--max-batch", "N", 8, Range<int>{1, kMaxBatch},
            "requests decoded together in one step (at most 256)");
    f.optional(sessions_dir, "--sessions-dir", "DIR",
               "keep sessions here too (they survive a restart)");
    f.value(sessions_memory, "--sessions-memory", "MB", 512, Range<int64_t>{0, 1 << 24},
            "memory for session states (least recently used out to --sessions-dir; without "
            "it, a session beyond is refused: 429)");
    f.value(sessions_max, "--sessions-max", "N", int64_t(SessionQuota{}.max_sessions),
            Range<int64_t>{1, 1 << 24},
            "sessions in all, in memory and on disk; more are refused (429)");
    f.optional(sessions_disk, "--sessions-disk", "MB", Range<int64_t>{1, 1 << 24},
               "bytes of session files in --sessions-dir; a larger save is refused (507) "
               "(default 2048)");
    f.optional(sessions_url, "--sessions", "redis://HOST:PORT[/DB]",
               "keep sessions in Redis, shared by every replica given the same address (not with "
               "--sessions-dir; --sessions-memory is then a cache)");
    f.value(session_ttl, "--session-ttl", "S", 0, Range<int64_t>{0, int64_t(1) << 31},
            "with --sessions: a session unused for S seconds expires (0: never)");
    f.value(session_lease, "--session-lease", "S", 10, Range<int64_t>{1, 3600},
            "with --sessions: a request's hold on its session, renewed while it runs; a "
            "replica that dies lets go after S seconds");
    f.choice(
        session_precision, "--session-precision", "P", retnet::StatePrecision::kNative,
        {{"f32", retnet::StatePrecision::kNative}, {"bf16", retnet::StatePrecision::kBFloat16}},
        "stored session states: f32, or bf16 (half the bytes, continuations drift; "
        "docs/SERVER.md)");
    retnet::tools::declare_threads(f, threads);
    retnet::tools::declare_load(f, load);
    f.value(prefill_chunk, "--prefill-chunk", "N", 64, Range<int64_t>{1, 1 << 16},
            "prompt tokens read between two decoding steps");
    f.value(max_tokens, "--max-tokens", "N", 4096, Range<int64_t>{1, 1 << 24},
            "the largest max_tokens a request may ask for");
    f.value(max_body, "--max-body", "BYTES", 1048576, Range<int64_t>{1024, 1 << 30},
            "larger request bodies are refused (413)");
    f.value(max_queue, "--max-queue", "N", 256, Range<int64_t>{1, 1 << 20},
            "requests waiting beyond this are refused (503)");
    f.value(http_threads, "--http-threads", "N", 64, Range<int>{2, 4096},
            "handler threads: requests read into jobs, and polls of waiting answers, at once");
    f.value(max_connections, "--max-connections", "N", 512, Range<int>{1, 1 << 20},
            "open connections beyond this are refused (503)");
    f.value(max_header, "--max-header", "BYTES", 16384, Range<int64_t>{1024, 1 << 20},
            "larger request headers are refused (431)");
    f.value(header_timeout, "--header-timeout", "S", 10, Range<int>{1, 3600},
            "seconds to receive a request's header, and keep-alive idle time (408)");
    f.value(body_timeout, "--body-timeout", "S", 60, Range<int>{1, 3600},
            "seconds to receive a request's body (408)");
    f.toggle(reuse_port, "--reuse-port",
             "share the port with other processes (SO_REUSEPORT); without it a busy port is an "
             "error");
    f.optional(chat_template, "--chat-template", "FILE",
               "the chat template of /v1/chat/completions (docs/CHAT.md; default: the model "
               "folder's, else plain)");
    f.optional(random_weights, "--random-weights", "CONFIG",
               "(development) a config.json with random weights instead of -m, as `retnet bench "
               "--config`");
  }
};

/// --sessions and the flags that only mean something with it or with a folder.
void read_shared_sessions(const ServeFlags& flags, ServeOptions& o) {
  if (flags.sessions_url) {
    if (flags.sessions_dir)
      throw UsageError(
          "serve: --sessions and --sessions-dir both name where sessions are kept: "
          "give one");
    try {
      o.sessions_redis = RedisAddress::parse(*flags.sessions_url);
    } catch (const retnet::InvalidArgument& e) {
      throw UsageError(std::string("serve: --sessions ") + e.what());
    }
  } else if (flags.session_ttl != 0) {
    throw UsageError("serve: --session-ttl needs --sessions redis://...");
  }
  if (flags.session_precision == retnet::StatePrecision::kBFloat16 && !flags.sessions_url &&
      !flags.sessions_dir)
    throw UsageError(
        "serve: --session-precision bf16 halves stored sessions: it needs "
        "--sessions-dir or --sessions");
  o.session_precision = flags.session_precision;
  o.redis.memory_budget = size_t(flags.sessions_memory) << 20;
  o.redis.max_sessions = size_t(flags.sessions_max);
  o.redis.ttl = std::chrono::seconds(flags.session_ttl);
  o.redis.lease = std::chrono::seconds(flags.session_lease);
  o.redis.precision = flags.session_precision;
}

/// The API key of --api-key, --api-key-file or $RETNET_API_KEY, in that order; empty when none
/// is given. An empty key is refused: it would silently turn authentication off.
std::string read_api_key(const ServeFlags& flags) {
  if (flags.api_key && flags.api_key_file)
    throw UsageError("serve: give --api-key or --api-key-file, not both");
  if (flags.api_key_file) {
    std::string key = retnet::read_regular_file(*flags.api_key_file, 4096, "key");
    if (!key.empty() && key.back() == '\n') key.pop_back();
    if (!key.empty() && key.back() == '\r') key.pop_back();
    if (key.empty())
      throw UsageError("serve: --api-key-file " + *flags.api_key_file +
                       " is empty: an empty key would turn authentication off");
    if (key.find_first_of("\r\n") != std::string::npos)
      throw UsageError("serve: --api-key-file " + *flags.api_key_file +
                       " holds more than one line: the key is its one line");
    return key;
  }
  if (flags.api_key) {
    if (flags.api_key->empty())
      throw UsageError(
          "serve: --api-key is empty: an empty key would turn authentication off (leave the flag "
          "out to run without a key)");
    return *flags.api_key;
  }
  const char* env = std::getenv("RETNET_API_KEY");
  if (env && !*env)
    throw UsageError(
        "serve: RETNET_API_KEY is set but empty: an empty key would turn authentication off "
        "(unset it to run without a key)");
  return env ? env : "";
}

/// The command line read into ServeOptions; nullopt after --help, which it prints. A bad command
/// line is a UsageError.
std::optional<ServeOptions> read_options(int argc, char** argv) {
  const auto line = retnet::tools::parse_command_line<ServeFlags>("serve", argc, argv);
  if (line.help) {
    std::fputs(retnet::tools::flags_help<ServeFlags>(
                   "serve", "retnet serve -m DIR [options]",
                   "An OpenAI-compatible HTTP server (docs/SERVER.md): /v1/completions with "
                   "continuous\nbatching, sessions that continue from a fixed-size state, a page "
                   "at /.")
                   .c_str(),
               stdout);
    return std::nullopt;
  }
  const ServeFlags& flags = line.flags;
  if (flags.model.has_value() == flags.random_weights.has_value())
    throw UsageError("serve: give -m DIR (or, for development, --random-weights CONFIG.json)");
  ServeOptions o;
  o.model_dir = flags.model.value_or("");
  o.random_weights = flags.random_weights.value_or("");
  o.chat_template = flags.chat_template.value_or("");
  o.load = flags.load;
  o.threads = flags.threads.value_or(0);
  o.host = flags.host;
  o.port = flags.port;
  o.api_key = read_api_key(flags);
  for (const std::string& origin : flags.cors) {
    if (!is_origin(origin))
      throw UsageError("serve: --cors " + retnet::excerpt(origin) +
                       " is not an origin: expected http://HOST[:PORT] or https://HOST[:PORT], "
                       "without a path");
    o.cors_origins.push_back(origin);
  }
  o.sessions_dir = flags.sessions_dir.value_or("");
  o.sessions_memory_bytes = size_t(flags.sessions_memory) << 20;
  if (!flags.sessions_dir && !flags.sessions_url && flags.sessions_memory == 0)
    throw UsageError(
        "serve: --sessions-memory 0 without --sessions-dir keeps no session: give a folder or "
        "some memory");
  if (!flags.sessions_dir && flags.sessions_disk)
    throw UsageError("serve: --sessions-disk needs --sessions-dir");
  read_shared_sessions(flags, o);
  o.sessions_quota.max_sessions = size_t(flags.sessions_max);
  if (flags.sessions_disk) o.sessions_quota.disk_bytes = uint64_t(*flags.sessions_disk) << 20;
  o.max_tokens = flags.max_tokens;
  o.engine.max_batch = flags.max_batch;
  o.engine.prefill_chunk = flags.prefill_chunk;
  o.engine.threads = o.threads;
  o.engine.max_queue = size_t(flags.max_queue);
  o.http.threads = size_t(flags.http_threads);
  o.http.max_body = size_t(flags.max_body);
  o.http.max_connections = size_t(flags.max_connections);
  o.http.header_limit = size_t(flags.max_header);
  o.http.header_timeout_s = flags.header_timeout;
  o.http.body_timeout_s = flags.body_timeout;
  o.http.reuse_port = flags.reuse_port;
  return o;
}

/// For --random-weights: ids below 128 are their ASCII bytes, every other id of the model's
/// vocabulary is the text "<id>". Sampling then runs over the whole vocabulary, as with a real
/// tokenizer of that size, and every token is whole UTF-8 text (one streamed piece per token).
class RandomWeightsTokenizer : public retnet::ByteTokenizer {
 public:
  explicit RandomWeightsTokenizer(int64_t vocab) : vocab_(vocab) {}
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t id : ids) text += decode_token(id);
    return text;
  }
  std::string decode_token(int32_t id) const override {
    if (id < 0 || id >= vocab_) throw retnet::InvalidArgument("token id out of range");
    return id < 128 ? std::string(1, char(id)) : "<" + std::to_string(id) + ">";
  }
  int64_t vocab_size() const override { return vocab_; }

 private:
  int64_t vocab_;
};

/// The model of -m, or random weights from a config (for benchmarks of shapes that have no
/// trained checkpoint); `model_id` is the name the server gives it.
std::unique_ptr<Model> load_model(const ServeOptions& o, std::string& model_id) {
  if (!o.model_dir.empty()) {
    const std::string& dir = o.model_dir;
    model_id = std::filesystem::path(dir).lexically_normal().filename().string();
    if (model_id.empty() || model_id == ".")
      model_id =
          std::filesystem::absolute(dir).lexically_normal().parent_path().filename().string();
    return std::make_unique<Model>(retnet::tools::load_model_showing_progress(dir, o.load));
  }
  auto config = retnet::load_config_json(o.random_weights);
  model_id = "random-" + std::filesystem::path(o.random_weights).stem().string();
  config.weights = o.load.weights.value_or(retnet::WeightType::kF32);
  auto weights = retnet::ModelWeights<float>::random(config, 1, config.weights);
  weights.set_bf16_dots(config, o.load.bf16_dots);
  return std::make_unique<Model>(config, std::move(weights));
}

std::unique_ptr<retnet::Tokenizer> load_tokenizer(const ServeOptions& o, const Model& model) {
  if (!o.model_dir.empty()) return retnet::load_tokenizer(o.model_dir, model.config().vocab_size);
  return std::make_unique<RandomWeightsTokenizer>(model.config().vocab_size);
}

void print_start(const ServeOptions& o, const Model& model, const std::string& model_id, int port,
                 const SessionStore& sessions, const std::string& chat_template_name) {
  std::fprintf(stderr,
               "retnet serve: model %s (%s of weights, %.2f MB state per sequence), max batch "
               "%ld, %d compute threads, sessions %s\n",
               model_id.c_str(),
               (std::to_string(model.weights().size_bytes(model.config()) >> 20) + " MiB").c_str(),
               model.new_state(1).size_bytes() / 1e6, long(o.engine.max_batch),
               o.threads > 0 ? o.threads : retnet::num_threads(), sessions.describe().c_str());
  std::fprintf(stderr, "retnet serve: chat template: %s\n", chat_template_name.c_str());
  std::fprintf(stderr, "retnet serve: listening on http://%s:%d\n", o.host.c_str(), port);
  std::fflush(stderr);
}

/// The template of --chat-template, else the model folder's (plain for random weights); read
/// before the model, so that a bad file is refused at once.
retnet::ChatTemplate chat_template(const ServeOptions& o) {
  if (!o.chat_template.empty()) return retnet::ChatTemplate::from_file(o.chat_template);
  if (!o.model_dir.empty()) return retnet::ChatTemplate::for_model_folder(o.model_dir);
  return retnet::ChatTemplate::plain();
}

std::unique_ptr<SessionStore> make_session_store(const ServeOptions& o, const Model& model) {
  if (o.sessions_redis)
    return std::make_unique<RedisSessionStore>(model, *o.sessions_redis, o.redis);
  return std::make_unique<LocalSessionStore>(model, o.sessions_memory_bytes, o.sessions_dir,
                                             o.sessions_quota, o.session_precision);
}

int run(const ServeOptions& o) {
  if (o.threads > 0) retnet::set_num_threads(o.threads);
  ServerOptions server_options;
  server_options.chat_template = chat_template(o);
  const auto model = load_model(o, server_options.model_id);
  const auto tokenizer = load_tokenizer(o, *model);
  const auto store = make_session_store(o, *model);
  SessionStore& sessions = *store;

  StopSignals signals;  // before the threads of the engine and of HTTP, which inherit its mask
  Engine engine(*model, *tokenizer, o.engine);
  server_options.limits.max_tokens = o.max_tokens;
  server_options.api_key = o.api_key;
  server_options.host = o.host;
  server_options.cors_origins = o.cors_origins;
  Server server(*model, *tokenizer, engine, sessions, server_options);
  http::Server http(o.http, &Server::reply_http_error);
  server.add_routes(http);

  const int port = http.bind(o.host, o.port);
  if (port < 0)
    throw UsageError("serve: cannot listen on " + o.host + ":" + std::to_string(o.port) + " (" +
                     std::strerror(errno) + ")");
  signals.watch([&] {
    engine.stop();  // fails what is running, so that every handler returns
    http.stop();
  });
  if (o.api_key.empty() && !is_loopback_host(o.host))
    std::fprintf(stderr,
                 "retnet serve: warning: --host %s is not loopback and no API key is set: anyone "
                 "who can reach it can use the model (set --api-key-file)\n",
                 o.host.c_str());
  print_start(o, *model, server_options.model_id, port, sessions,
              server_options.chat_template.name());
  const bool ok = http.listen();
  signals.finish();
  engine.stop();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto options = read_options(argc - 1, argv + 1);
    return options ? run(*options) : 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "retnet %s\n", e.what());  // "retnet serve: ...", as the CLI's
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "retnet serve: %s\n", e.what());
    return 1;
  }
}
