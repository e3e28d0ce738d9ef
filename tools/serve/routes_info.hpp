// The routes that describe the server and its model: GET /health, GET /metrics (Prometheus),
// GET /v1/models, GET /v1/models/ID, GET /props (the defaults a request starts from), and the
// tokenizer's POST /tokenize and POST /detokenize.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "serve/api.hpp"
#include "serve/context.hpp"
#include "serve/http.hpp"
#include "serve/metrics.hpp"

namespace retnet::serve {

/// A field of /proc/self/status ("VmRSS", "Threads"), in its own unit (kB for sizes); -1 when
/// it cannot be read.
inline int64_t proc_status(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(status, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  return -1;
}

class InfoRoutes {
 public:
  explicit InfoRoutes(const ServerContext& context) : ctx_(context) {}

  /// GET /health: counts of the engine and the sessions, the process's threads and memory.
  void health(const http::Request&, http::Response& res) const {
    const auto e = ctx_.engine.stats();
    const auto s = ctx_.sessions.stats();
    reply(res, 200,
          {{"status", "ok"},
           {"model", ctx_.options.model_id},
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
             {"persistent", ctx_.sessions.persistent()}}},
           {"process",
            {{"threads", proc_status("Threads")}, {"rss_bytes", proc_status("VmRSS") * 1024}}},
           {"limits",
            {{"max_tokens", ctx_.options.limits.max_tokens},
             {"max_batch", ctx_.engine.options().max_batch},
             {"prefill_chunk", ctx_.engine.options().prefill_chunk}}}});
  }

  /// GET /metrics: the engine's and the sessions' counts, the answers by status, the streams
  /// open and the time to first token, in Prometheus's text format (docs/SERVER.md, "Metrics").
  void metrics(const http::Request&, http::Response& res) const {
    const auto e = ctx_.engine.stats();
    const auto s = ctx_.sessions.stats();
    MetricsText m;
    MetricsText::Labelled answers;
    for (const auto& [status, n] : ctx_.metrics.answers())
      answers.emplace_back(std::to_string(status), double(n));
    m.counter("retnet_http_responses_total",
              "HTTP answers sent, by status (the HTTP layer's own refusals too).", "status",
              answers);
    m.counter("retnet_requests_total", "Completions the engine ended, by outcome.", "outcome",
              {{"completed", double(e.completed)},
               {"cancelled", double(e.cancelled)},
               {"failed", double(e.failed)}});
    m.counter("retnet_prompt_tokens_total", "Prompt tokens read.", double(e.prompt_tokens));
    m.counter("retnet_generated_tokens_total", "Tokens generated.", double(e.tokens));
    m.counter("retnet_decode_steps_total", "Batched decoding steps.", double(e.steps));
    m.gauge("retnet_queue_length", "Requests waiting for a batch slot.", double(e.queued));
    m.gauge("retnet_requests_prefilling", "Requests whose prompt is being read.",
            double(e.prefilling));
    m.gauge("retnet_requests_decoding", "Requests generating tokens.", double(e.decoding));
    m.gauge("retnet_active_streams", "Streamed answers open.", double(ctx_.metrics.streams()));
    m.gauge("retnet_sessions_in_memory", "Sessions held in memory.", double(s.in_memory));
    m.gauge("retnet_sessions_on_disk", "Session files in --sessions-dir.", double(s.on_disk));
    m.gauge("retnet_session_memory_bytes", "Bytes of the session states in memory.",
            double(s.memory_bytes));
    m.histogram("retnet_time_to_first_token_seconds",
                "Seconds from a completion's arrival at the engine to its first token.",
                e.first_token_seconds);
    res.send(200, m.str(), MetricsText::kContentType);
  }

  /// GET /v1/models: the one model.
  void models(const http::Request&, http::Response& res) const {
    reply(res, 200, {{"object", "list"}, {"data", json::array({model()})}});
  }

  /// GET /v1/models/ID
  void model(const http::Request& req, http::Response& res) const {
    const std::string id = req.param(1);
    if (id != ctx_.options.model_id)
      throw ApiError(404,
                     "no model '" + id + "' here; this server has '" + ctx_.options.model_id + "'",
                     "model", "model_not_found");
    reply(res, 200, model());
  }

  /// GET /props: what a completion gets for the fields it leaves out (the sampler shared with
  /// `retnet generate` and the page) and what it may ask for.
  void props(const http::Request&, http::Response& res) const {
    reply(res, 200,
          {{"model", ctx_.options.model_id},
           {"chat_template", ctx_.options.chat_template.name()},
           {"default_sampler", sampler_json(SamplerParams::shared_defaults())},
           {"limits",
            {{"max_tokens", ctx_.options.limits.max_tokens},
             {"max_stop", ctx_.options.limits.max_stop},
             {"max_choices", kMaxChoices}}}});
  }

  /// POST /tokenize: {"content": TEXT} -> {"tokens": [ids]}
  void tokenize(const http::Request& req, http::Response& res) const {
    reply(res, 200, {{"tokens", ctx_.tokenizer.encode(parse_tokenize(req.body()))}});
  }

  /// POST /detokenize: {"tokens": [ids]} -> {"content": TEXT}
  void detokenize(const http::Request& req, http::Response& res) const {
    const auto ids = parse_detokenize(req.body(), ctx_.tokenizer.vocab_size());
    reply(res, 200, {{"content", ctx_.tokenizer.decode(ids)}});
  }

 private:
  json model() const {
    return model_json(ctx_.model, ctx_.tokenizer, ctx_.options.model_id, ctx_.started);
  }

  const ServerContext& ctx_;
};

}  // namespace retnet::serve
