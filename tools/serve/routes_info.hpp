// The routes that describe the server and its model: GET /health, GET /v1/models,
// GET /v1/models/ID, and the tokenizer's POST /tokenize and POST /detokenize.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "serve/api.hpp"
#include "serve/context.hpp"
#include "serve/http.hpp"

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
