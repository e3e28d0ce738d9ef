// `retnet serve` (the executable retnet-serve, which `retnet serve` runs): an OpenAI-compatible
// HTTP/1.1 server over one const model, with continuous batching (serve/engine.hpp) and sessions
// whose whole history is one fixed-size state (serve/sessions.hpp). docs/SERVER.md describes the
// API, the limits and how batching works.
#include <httplib.h>
// httplib.h includes <resolv.h>, whose macro `_res` would rename a parameter in Eigen's products.
#undef _res

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>
#include <string>
#include <thread>
#include <vector>

#include "flags.hpp"
#include "serve/api.hpp"
#include "serve/engine.hpp"
#include "serve/page.hpp"
#include "serve/sessions.hpp"

namespace {

using namespace retnet::serve;
using Model = retnet::RetNetModel<float>;

using retnet::tools::Args;
using retnet::tools::Flag;
using retnet::tools::integer;
using retnet::tools::text;
using retnet::tools::UsageError;

// ---------------------------------------------------------------- flags (tools/flags.hpp)

/// The most sequences one step decodes. Nothing in a step limits the rows (each row's result is
/// the same whatever the others are, docs/SERVER.md), but every row holds a state (5.3 MB for
/// the base config, hundreds of MB for a large model) and more rows than cores keep busy only
/// make every stream slower.
constexpr int kMaxBatch = 256;

const std::vector<Flag> kFlags = {
    text("-m", "DIR", nullptr, "model folder (config.json + weights [+ tokenizer])"),
    text("--host", "HOST", "127.0.0.1", "address to listen on"),
    integer("--port", "PORT", "8080", 0, 65535, "port (0: any free port, printed at start)"),
    text("--api-key", "KEY", nullptr,
         "require 'Authorization: Bearer KEY' (default: $RETNET_API_KEY if set, else no key)"),
    integer("--max-batch", "N", "8", 1, kMaxBatch,
            "requests decoded together in one step (at most 256)"),
    text("--sessions-dir", "DIR", nullptr, "keep sessions here too (they survive a restart)"),
    integer("--sessions-memory", "MB", "512", 0, 1 << 24,
            "memory for session states (least recently used out)"),
    retnet::tools::threads_flag(),
    retnet::tools::weights_flag(),
    integer("--prefill-chunk", "N", "64", 1, 1 << 16,
            "prompt tokens read between two decoding steps"),
    integer("--max-tokens", "N", "4096", 1, 1 << 24,
            "the largest max_tokens a request may ask for"),
    integer("--max-body", "BYTES", "1048576", 1024, 1 << 30,
            "larger request bodies are refused (413)"),
    integer("--max-queue", "N", "256", 1, 1 << 20,
            "requests waiting beyond this are refused (503)"),
    integer("--http-threads", "N", "64", 2, 4096,
            "connections served at once (a stream holds one)"),
    text("--random-weights", "CONFIG", nullptr,
         "(development) a config.json with random weights instead of -m, as `retnet bench "
         "--config`"),
};

const char* const kUsage = "retnet serve -m DIR [options]";
const char* const kSummary =
    "An OpenAI-compatible HTTP server (docs/SERVER.md): /v1/completions with continuous\n"
    "batching, sessions that continue from a fixed-size state, a page at /.";

// ---------------------------------------------------------------- process facts

/// A field of /proc/self/status ("VmRSS", "Threads"), in its own unit (kB for sizes).
int64_t proc_status(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(status, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  return -1;
}

/// Compares without stopping at the first difference (the key is a secret).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// ---------------------------------------------------------------- the server

/// httplib's listen backlog is fixed at build time (5 in Debian's library): a burst of clients
/// would have their connections retried a second later. listen() on a listening socket only
/// changes its backlog, so the socket is given a larger one after binding.
class HttpServer : public httplib::Server {
 public:
  void widen_backlog(int backlog) { ::listen(svr_sock_, backlog); }
};

struct Server {
  const Model& model;
  const retnet::Tokenizer& tokenizer;
  std::string model_id;
  Engine& engine;
  SessionStore& sessions;
  Limits limits;
  std::string api_key;
  std::time_t started = std::time(nullptr);
  std::atomic<uint64_t> next_id{1};

  void reply(httplib::Response& res, int status, const json& body) const {
    res.status = status;
    res.set_content(dump(body), "application/json");
  }
  void reply_error(httplib::Response& res, const ApiError& e) const {
    reply(res, e.status, error_json(e));
  }

  json model_json() const {
    const auto& c = model.config();
    return {{"id", model_id},
            {"object", "model"},
            {"created", started},
            {"owned_by", "retnet"},
            {"meta",
             {{"vocab_size", c.vocab_size},
              {"tokenizer_vocab_size", tokenizer.vocab_size()},
              {"embed_dim", c.embed_dim},
              {"layers", c.layers},
              {"heads", c.heads},
              {"state_bytes", model.new_state(1).size_bytes()},
              {"weight_bytes", model.weights().size_bytes(c)}}}};
  }

  json health() const {
    const auto e = engine.stats();
    const auto s = sessions.stats();
    return {{"status", "ok"},
            {"model", model_id},
            {"requests",
             {{"queued", e.queued},
              {"prefilling", e.prefilling},
              {"decoding", e.decoding},
              {"largest_step", e.largest_step},
              {"largest_prefill", e.largest_prefill},
              {"completed", e.completed},
              {"cancelled", e.cancelled},
              {"failed", e.failed},
              {"tokens", e.tokens},
              {"steps", e.steps}}},
            {"sessions",
             {{"in_memory", s.in_memory},
              {"memory_bytes", s.memory_bytes},
              {"busy", s.busy},
              {"on_disk", s.on_disk},
              {"evicted", s.evicted},
              {"dropped", s.dropped},
              {"persistent", sessions.persistent()}}},
            {"process",
             {{"threads", proc_status("Threads")}, {"rss_bytes", proc_status("VmRSS") * 1024}}},
            {"limits",
             {{"max_tokens", limits.max_tokens},
              {"max_batch", engine.options().max_batch},
              {"prefill_chunk", engine.options().prefill_chunk}}}};
  }

  std::string session_error(SessionStore::Result r, const std::string& id) const {
    return r == SessionStore::Result::kBusy
               ? "session '" + id + "' is in use by another request"
               : "session '" + id + "' does not exist (create it with POST /v1/sessions)";
  }

  /// A session held by one request: released unchanged unless the request commits it.
  struct Lease {
    SessionStore* store = nullptr;
    std::string id;
    Lease() = default;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }
    void release() {
      if (store) store->release(id), store = nullptr;
    }
    void commit(std::optional<State> state) {
      if (!store) return;
      Session s;
      if (state) s.state = std::make_shared<const State>(std::move(*state));
      SessionStore* st = store;
      store = nullptr;
      st->commit(id, std::move(s));
    }
  };

  /// One completion in flight: the job, its session and what the answer needs.
  struct Completion {
    std::shared_ptr<Job> job;
    std::shared_ptr<Lease> lease;  // null without a session
    CompletionRequest request;
    std::string id;
    std::time_t created = 0;
    int64_t session_tokens_before = 0;
  };

  void completions(const httplib::Request& req, httplib::Response& res) {
    auto c = std::make_shared<Completion>();
    c->request = parse_completion(parse_body(req.body), limits, model.config().vocab_size);
    const CompletionRequest& r = c->request;
    JobParams p;
    p.prompt = r.text ? tokenizer.encode(*r.text) : r.ids;
    p.max_tokens = r.max_tokens;
    p.sampler = r.sampler;
    p.stop = r.stop;
    p.logprobs = r.logprobs;
    if (!r.session.empty()) {
      Session s;
      const auto got = sessions.acquire(r.session, s);
      if (got != SessionStore::Result::kOk)
        throw ApiError(got == SessionStore::Result::kBusy ? 409 : 404,
                       session_error(got, r.session), "session",
                       got == SessionStore::Result::kBusy ? "session_busy" : "session_not_found");
      c->lease = std::make_shared<Lease>();
      c->lease->store = &sessions;
      c->lease->id = r.session;
      c->session_tokens_before = s.tokens();
      p.start = std::move(s.state);
      p.keep_state = true;
    }
    if (p.prompt.empty() && !p.start)
      throw ApiError(400,
                     r.session.empty() ? "the prompt is empty"
                                       : "the session is empty: its first prompt cannot be",
                     "prompt", "empty_prompt");
    c->job = std::make_shared<Job>(std::move(p));
    c->id = "cmpl-" + std::to_string(started) + "-" + std::to_string(next_id++);
    c->created = std::time(nullptr);
    if (!engine.submit(c->job))
      throw ApiError(503, "the server is busy (" + std::to_string(engine.options().max_queue) +
                              " requests queued) or shutting down; try again later");
    if (r.stream)
      stream(c, res);
    else
      answer(c, res);
  }

  json session_json(const Completion& c, const JobResult& result) const {
    if (!c.lease) return nullptr;
    const int64_t tokens =
        result.state ? result.state->model.positions.at(0) + 1 : c.session_tokens_before;
    return {{"id", c.request.session}, {"tokens", tokens}};
  }

  /// The job ended well: store the session (before the client hears of the end, so that a
  /// next request finds it).
  void commit(Completion& c) {
    if (c.lease) c.lease->commit(std::move(c.job->result().state));
  }

  static ApiError job_error(const std::string& error) {
    if (error == "server shutting down") return ApiError(503, error);
    return ApiError(500, "generation failed: " + error, "", "generation_failed");
  }

  void answer(const std::shared_ptr<Completion>& c, httplib::Response& res) {
    std::string text;
    std::vector<TokenLogprob> logprobs;
    Update u;
    do {
      u = c->job->take(std::chrono::seconds(1));
      text += u.text;
      for (auto& l : u.logprobs) logprobs.push_back(std::move(l));
    } while (!u.done);
    if (!u.error.empty()) throw job_error(u.error);
    JobResult& result = c->job->result();
    const json session = session_json(*c, result);
    commit(*c);
    json choice = {{"text", text},
                   {"index", 0},
                   {"logprobs", c->request.logprobs >= 0
                                    ? logprobs_json(logprobs, tokenizer, c->request.logprobs)
                                    : json(nullptr)},
                   {"finish_reason", u.finish_reason}};
    json body = {{"id", c->id},
                 {"object", "text_completion"},
                 {"created", c->created},
                 {"model", model_id},
                 {"choices", json::array({choice})},
                 {"usage", usage_json(result)},
                 {"timings", timings_json(result)}};
    if (!session.is_null()) body["session"] = session;
    reply(res, 200, body);
  }

  json chunk(const Completion& c, const std::string& text, const json& logprobs,
             const json& finish_reason) const {
    return {{"id", c.id},
            {"object", "text_completion"},
            {"created", c.created},
            {"model", model_id},
            {"choices", json::array({{{"text", text},
                                      {"index", 0},
                                      {"logprobs", logprobs},
                                      {"finish_reason", finish_reason}}})}};
  }

  /// Server-sent events: a chunk per update, the last with finish_reason (and, when asked, a
  /// usage chunk), then "data: [DONE]". While nothing comes, a comment line every second finds
  /// out whether the client is still there; a failed write cancels the job.
  void stream(const std::shared_ptr<Completion>& c, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto finished = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, c, finished](size_t, httplib::DataSink& sink) {
          const auto send = [&](const std::string& event) {
            return sink.write(event.data(), event.size());
          };
          const auto data = [&](const json& j) { return send("data: " + dump(j) + "\n\n"); };
          Update u = c->job->take(std::chrono::seconds(1));
          if (u.empty()) return send(": keep-alive\n\n");
          const int top = c->request.logprobs;
          const json lp = top >= 0 ? logprobs_json(u.logprobs, tokenizer, top) : json(nullptr);
          if ((!u.text.empty() || !u.logprobs.empty()) && !data(chunk(*c, u.text, lp, nullptr)))
            return false;
          if (!u.done) return true;
          if (!u.error.empty()) {
            if (!data(error_json(job_error(u.error)))) return false;
          } else {
            JobResult& result = c->job->result();
            const json session = session_json(*c, result);
            try {
              commit(*c);
            } catch (const std::exception& e) {
              data(error_json(ApiError(500, std::string("session not saved: ") + e.what())));
              send("data: [DONE]\n\n");
              *finished = true;
              sink.done();
              return true;
            }
            json last = chunk(*c, "", nullptr, u.finish_reason);
            last["timings"] = timings_json(result);
            if (!session.is_null()) last["session"] = session;
            if (!data(last)) return false;
            if (c->request.include_usage) {
              json usage = chunk(*c, "", nullptr, nullptr);
              usage["choices"] = json::array();
              usage["usage"] = usage_json(result);
              if (!session.is_null()) usage["session"] = session;
              if (!data(usage)) return false;
            }
          }
          if (!send("data: [DONE]\n\n")) return false;
          *finished = true;
          sink.done();
          return true;
        },
        [c, finished](bool) {
          // Called when the stream ends, written out or not: a job still running has lost its
          // reader (the client left, or a write failed) and leaves the batch.
          if (!*finished) c->job->cancel();
          if (c->lease) c->lease->release();
        });
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const auto content = fields::string(body, "content");
    if (!content) throw ApiError(400, "'content' is required (a string)", "content", "missing");
    reply(res, 200, {{"tokens", tokenizer.encode(*content)}});
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const json* tokens = fields::find(body, "tokens");
    if (!tokens) throw ApiError(400, "'tokens' is required (token ids)", "tokens", "missing");
    if (!tokens->is_array()) fields::wrong("tokens", "an array of integer token ids", *tokens);
    const auto ids = fields::token_ids(*tokens, "tokens", tokenizer.vocab_size());
    reply(res, 200, {{"content", tokenizer.decode(ids)}});
  }

  json session_info_json(const std::string& id, const SessionStore::Info& info) const {
    return {{"id", id},
            {"object", "session"},
            {"tokens", info.tokens},
            {"state_bytes", info.state_bytes},
            {"in_memory", info.in_memory},
            {"busy", info.busy}};
  }

  void create_session(const httplib::Request& req, httplib::Response& res) {
    std::string id;
    if (!req.body.empty()) {
      const json body = parse_body(req.body);
      if (auto given = fields::string(body, "id")) {
        if (!valid_session_id(*given))
          throw ApiError(400, "'id' must match [A-Za-z0-9_-]{1,64}", "id", "invalid_session_id");
        id = *given;
      }
    }
    if (sessions.create(id) == SessionStore::Result::kExists)
      throw ApiError(409, "session '" + id + "' already exists", "id", "session_exists");
    reply(res, 201, session_info_json(id, SessionStore::Info{0, 0, true, false}));
  }

  static std::string session_id(const httplib::Request& req) {
    const std::string id = req.matches[1];
    if (!valid_session_id(id))
      throw ApiError(400, "session ids match [A-Za-z0-9_-]{1,64}", "id", "invalid_session_id");
    return id;
  }

  void get_session(const httplib::Request& req, httplib::Response& res) {
    const std::string id = session_id(req);
    const auto info = sessions.info(id);
    if (!info)
      throw ApiError(404, "session '" + id + "' does not exist", "id", "session_not_found");
    reply(res, 200, session_info_json(id, *info));
  }

  void delete_session(const httplib::Request& req, httplib::Response& res) {
    const std::string id = session_id(req);
    const auto r = sessions.remove(id);
    if (r != SessionStore::Result::kOk)
      throw ApiError(r == SessionStore::Result::kBusy ? 409 : 404, session_error(r, id), "id",
                     r == SessionStore::Result::kBusy ? "session_busy" : "session_not_found");
    reply(res, 200, {{"id", id}, {"object", "session"}, {"deleted", true}});
  }

  /// Wraps a handler: ApiError and library errors become OpenAI-style answers.
  httplib::Server::Handler handle(void (Server::*method)(const httplib::Request&,
                                                         httplib::Response&)) {
    return [this, method](const httplib::Request& req, httplib::Response& res) {
      try {
        (this->*method)(req, res);
      } catch (const ApiError& e) {
        reply_error(res, e);
      } catch (const retnet::InvalidArgument& e) {
        reply_error(res, ApiError(400, e.what()));
      } catch (const std::exception& e) {
        reply_error(res, ApiError(500, std::string("internal error: ") + e.what()));
      }
    };
  }

  void routes(httplib::Server& http) {
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(kPage, "text/html; charset=utf-8");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      reply(res, 200, health());
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      reply(res, 200, {{"object", "list"}, {"data", json::array({model_json()})}});
    });
    http.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] == model_id) return reply(res, 200, model_json());
      reply_error(res, ApiError(404,
                                "no model '" + std::string(req.matches[1]) +
                                    "' here; this "
                                    "server has '" +
                                    model_id + "'",
                                "model", "model_not_found"));
    });
    http.Post("/v1/completions", handle(&Server::completions));
    http.Post("/tokenize", handle(&Server::tokenize));
    http.Post("/detokenize", handle(&Server::detokenize));
    http.Post("/v1/sessions", handle(&Server::create_session));
    http.Get("/v1/sessions/(.*)", handle(&Server::get_session));
    http.Delete("/v1/sessions/(.*)", handle(&Server::delete_session));

    // Everything but the page and /health needs the key when one is set.
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (api_key.empty() || (req.method == "GET" && (req.path == "/" || req.path == "/health")))
        return httplib::Server::HandlerResponse::Unhandled;
      if (same_secret(req.get_header_value("Authorization"), "Bearer " + api_key))
        return httplib::Server::HandlerResponse::Unhandled;
      reply_error(res, ApiError(401,
                                req.has_header("Authorization")
                                    ? "incorrect API key"
                                    : "an API key is required: 'Authorization: Bearer KEY'",
                                "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    // Answers httplib gives itself (no route, body too large, malformed request) in the same
    // JSON shape as ours.
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          std::string message = "no route for " + req.method + " " + req.path;
          if (res.status == 413)
            message = "the request body is larger than this server's limit";
          else if (res.status == 400)
            message = "malformed HTTP request";
          else if (res.status != 404)
            message = "HTTP status " + std::to_string(res.status);
          reply_error(res, ApiError(res.status, message));
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          reply_error(res, ApiError(500, "internal error"));
        });
  }
};

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

/// Model and tokenizer from -m, or random weights from a config (for benchmarks of shapes that
/// have no trained checkpoint).
std::unique_ptr<Model> load(const Args& args, std::string& model_id) {
  if (args.has("-m") == args.has("--random-weights"))
    throw UsageError("serve: give -m DIR (or, for development, --random-weights CONFIG.json)");
  if (args.has("-m")) {
    const std::string dir = args.str("-m");
    model_id = std::filesystem::path(dir).lexically_normal().filename().string();
    if (model_id.empty() || model_id == ".")
      model_id =
          std::filesystem::absolute(dir).lexically_normal().parent_path().filename().string();
    return std::make_unique<Model>(
        retnet::load_model<float>(dir, retnet::tools::load_options(args)));
  }
  const std::string file = args.str("--random-weights");
  auto config = retnet::load_config_json(file);
  model_id = "random-" + std::filesystem::path(file).stem().string();
  const auto type = retnet::tools::load_options(args).weights.value_or(retnet::WeightType::kF32);
  config.weights = type;
  return std::make_unique<Model>(config,
                                 retnet::ModelWeights<float>::random(config, 1, config.weights));
}

int run(const Args& args) {
  std::string model_id;
  if (args.has("--threads")) retnet::set_num_threads(int(args.integer("--threads")));
  const auto model = load(args, model_id);
  const auto tokenizer = args.has("-m")
                             ? retnet::load_tokenizer(args.str("-m"), model->config().vocab_size)
                             : std::unique_ptr<retnet::Tokenizer>(
                                   new RandomWeightsTokenizer(model->config().vocab_size));

  SessionStore sessions(*model, size_t(args.integer("--sessions-memory")) << 20,
                        args.has("--sessions-dir") ? args.str("--sessions-dir") : "");
  EngineOptions options;
  options.max_batch = args.integer("--max-batch");
  options.prefill_chunk = args.integer("--prefill-chunk");
  options.threads = args.has("--threads") ? int(args.integer("--threads")) : 0;
  options.max_queue = size_t(args.integer("--max-queue"));

  // SIGINT and SIGTERM are taken by one thread (blocked everywhere else, so every thread
  // started from here on inherits the mask); a write to a client that left must not kill us.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  Engine engine(*model, *tokenizer, options);
  Server server{*model, *tokenizer, model_id, engine, sessions, {}, {}};
  server.limits.max_tokens = args.integer("--max-tokens");
  if (args.has("--api-key"))
    server.api_key = args.str("--api-key");
  else if (const char* key = std::getenv("RETNET_API_KEY"))
    server.api_key = key;

  HttpServer http;
  const int http_threads = int(args.integer("--http-threads"));
  http.new_task_queue = [http_threads] { return new httplib::ThreadPool(size_t(http_threads)); };
  http.set_tcp_nodelay(true);  // a token per write: no waiting for the previous one's ACK
  http.set_payload_max_length(size_t(args.integer("--max-body")));
  http.set_keep_alive_max_count(1000);
  server.routes(http);
  http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
  });

  const std::string host = args.str("--host");
  int port = int(args.integer("--port"));
  if (port == 0)
    port = http.bind_to_any_port(host);
  else if (!http.bind_to_port(host, port))
    port = -1;
  if (port < 0)
    throw UsageError("serve: cannot listen on " + host + ":" + args.str("--port") + " (" +
                     std::strerror(errno) + ")");
  http.widen_backlog(512);

  std::atomic<bool> signalled{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    signalled = true;
    std::fprintf(stderr, "retnet serve: signal %d, stopping\n", sig);
    engine.stop();  // fails what is running, so that every handler returns
    http.stop();
  });
  std::fprintf(
      stderr,
      "retnet serve: model %s (%s of weights, %.2f MB state per sequence), max batch "
      "%ld, %d compute threads, sessions %s\n",
      model_id.c_str(),
      (std::to_string(model->weights().size_bytes(model->config()) >> 20) + " MiB").c_str(),
      model->new_state(1).size_bytes() / 1e6, long(options.max_batch),
      options.threads > 0 ? options.threads : retnet::num_threads(),
      sessions.persistent() ? ("in memory and " + args.str("--sessions-dir")).c_str()
                            : "in memory only");
  std::fprintf(stderr, "retnet serve: listening on http://%s:%d\n", host.c_str(), port);
  std::fflush(stderr);
  const bool ok = http.listen_after_bind();
  if (!signalled) pthread_kill(signals.native_handle(), SIGTERM);  // listen ended on its own
  signals.join();
  engine.stop();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args("serve", kFlags, argc - 1, argv + 1);
    if (args.help())
      return std::fputs(retnet::tools::help_text(kUsage, kSummary, kFlags).c_str(), stdout), 0;
    return run(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "retnet: %s\n", e.what());  // "retnet: serve: ...", as the CLI's
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "retnet serve: %s\n", e.what());
    return 1;
  }
}
