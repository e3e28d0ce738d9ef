// POST /v1/completions: the request read (serve/api.hpp), its session leased, a job submitted to
// the engine, and the engine's updates answered as one completion object or streamed as
// server-sent events.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "serve/api.hpp"
#include "serve/context.hpp"
#include "serve/engine.hpp"
#include "serve/http.hpp"
#include "serve/routes_sessions.hpp"
#include "serve/session_store.hpp"

namespace retnet::serve {

class CompletionsRoute {
 public:
  explicit CompletionsRoute(const ServerContext& context) : ctx_(context) {}

  void operator()(const http::Request& req, http::Response& res) {
    auto c = std::make_shared<Completion>();
    c->request = parse_completion(req.body(), ctx_.options.limits, ctx_.model.config().vocab_size);
    const CompletionRequest& r = c->request;
    JobParams p;
    p.prompt = r.text ? ctx_.tokenizer.encode(*r.text) : r.ids;
    p.max_tokens = r.max_tokens;
    p.sampler = r.sampler;
    p.stop = r.stop;
    p.logprobs = r.logprobs;
    if (!r.session.empty()) {
      Session s;
      SessionStore::Result got;
      try {
        got = ctx_.sessions.acquire(r.session, s);
      } catch (const SessionRefused& e) {
        throw session_refused_error(e);  // a damaged file
      }
      if (got != SessionStore::Result::kOk) throw session_error(got, r.session, "session");
      c->lease = std::make_unique<SessionLease>(ctx_.sessions, r.session);
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
    c->names.id = "cmpl-" + std::to_string(ctx_.started) + "-" + std::to_string(next_id_++);
    c->names.created = std::time(nullptr);
    c->names.model = ctx_.options.model_id;
    if (!ctx_.engine.submit(c->job))
      throw ApiError(503, "the server is busy (" + std::to_string(ctx_.engine.options().max_queue) +
                              " requests queued) or shutting down; try again later");
    if (r.stream)
      stream(c, res);
    else
      answer(c, res);
  }

 private:
  /// One completion in flight: the job, its session and what the answer needs.
  struct Completion {
    std::shared_ptr<Job> job;
    std::unique_ptr<SessionLease> lease;  // null without a session
    CompletionRequest request;
    CompletionId names;
    int64_t session_tokens_before = 0;
    bool listening = false;                       // the job wakes the answer
    std::string text;                             // a deferred answer's text so far
    std::vector<TokenLogprob> logprobs;           // and its log-probabilities
    Clock::time_point last_write = Clock::now();  // a stream's last event
  };

  json session_json(const Completion& c, const JobResult& result) const {
    if (!c.lease) return nullptr;
    const int64_t tokens =
        result.state ? result.state->model.positions.at(0) + 1 : c.session_tokens_before;
    return {{"id", c.request.session}, {"tokens", tokens}};
  }

  /// The job ended well: store the session (before the client hears of the end, so that a
  /// next request finds it). Throws the ApiError of a save that failed: the session is then
  /// as it was before the request.
  static void commit(Completion& c) {
    try {
      if (c.lease) c.lease->commit(std::move(c.job->result().state));
    } catch (const SessionRefused& e) {
      throw session_refused_error(e);
    } catch (const std::exception& e) {
      throw ApiError(500, std::string("session not saved: ") + e.what(), "", "session_not_saved");
    }
  }

  static ApiError job_error(const std::string& error) {
    if (error == "server shutting down") return ApiError(503, error);
    return ApiError(500, "generation failed: " + error, "", "generation_failed");
  }

  json logprobs_or_null(const std::vector<TokenLogprob>& logprobs, int top) const {
    return top >= 0 ? logprobs_json(logprobs, ctx_.tokenizer, top) : json(nullptr);
  }

  /// Registers the answer's wake with the job once, so that each update polls the answer.
  static void listen(Completion& c, const http::Wake& wake) {
    if (c.listening) return;
    c.job->set_listener(wake);
    c.listening = true;
  }

  /// The whole completion as one object, once the job is done (deferred: no thread waits).
  void answer(const std::shared_ptr<Completion>& c, http::Response& res) const {
    res.defer([this, c](http::Response& out, const http::PollContext& poll) {
      if (poll.client_gone) {  // nobody will read the answer: the job leaves the batch
        c->job->cancel();
        if (c->lease) c->lease->release();
        return true;
      }
      listen(*c, poll.wake);
      Update u = c->job->take();
      c->text += u.text;
      for (auto& l : u.logprobs) c->logprobs.push_back(std::move(l));
      if (!u.done) return false;
      try {
        if (!u.error.empty()) throw job_error(u.error);
        JobResult& result = c->job->result();
        const json session = session_json(*c, result);
        commit(*c);
        json body = completion_json(
            c->names, c->text, logprobs_or_null(c->logprobs, c->request.logprobs), u.finish_reason);
        body["usage"] = usage_json(result);
        body["timings"] = timings_json(result);
        if (!session.is_null()) body["session"] = session;
        reply(out, 200, body);
      } catch (const ApiError& e) {
        reply_error(out, e);
      } catch (const std::exception& e) {
        reply_error(out, ApiError(500, std::string("internal error: ") + e.what()));
      }
      if (c->lease) c->lease->release();
      return true;
    });
  }

  /// Server-sent events: a chunk per update, the last with finish_reason (and, when asked, a
  /// usage chunk), then "data: [DONE]". While nothing comes, a comment line every second finds
  /// out whether the client is still there; a client gone cancels the job.
  void stream(const std::shared_ptr<Completion>& c, http::Response& res) const {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto finished = std::make_shared<bool>(false);
    ctx_.metrics.stream_opened();  // closed in `ended`, which the HTTP layer calls once
    res.stream(
        "text/event-stream",
        [this, c, finished](http::StreamSink& sink) { return stream_next(*c, *finished, sink); },
        [c, finished, &metrics = ctx_.metrics] {
          // The stream has ended, written out or not: a job still running has lost its reader
          // (the client left, or a write failed) and leaves the batch.
          metrics.stream_closed();
          if (!*finished) c->job->cancel();
          if (c->lease) c->lease->release();
        });
  }

  /// One poll of a stream: what the job has produced since the last, as events.
  bool stream_next(Completion& c, bool& finished, http::StreamSink& sink) const {
    listen(c, sink.wake());
    const auto send = [&](const std::string& event) {
      c.last_write = Clock::now();
      return sink.write(event);
    };
    const auto data = [&](const json& j) { return send("data: " + dump(j) + "\n\n"); };
    const auto end = [&] {
      if (!send("data: [DONE]\n\n")) return false;
      finished = true;
      sink.done();
      return true;
    };
    Update u = c.job->take();
    if (u.empty())
      return Clock::now() - c.last_write < std::chrono::seconds(1) || send(": keep-alive\n\n");
    size_t text_at = 0, logprobs_at = 0;
    for (const auto& [text_end, logprobs_end] : u.piece_ends) {
      const std::vector<TokenLogprob> piece_logprobs(u.logprobs.begin() + logprobs_at,
                                                     u.logprobs.begin() + logprobs_end);
      const json lp = logprobs_or_null(piece_logprobs, c.request.logprobs);
      if (!data(completion_json(c.names, u.text.substr(text_at, text_end - text_at), lp, nullptr)))
        return false;
      text_at = text_end;
      logprobs_at = logprobs_end;
    }
    if (!u.done) return true;
    if (!u.error.empty()) return data(error_json(job_error(u.error))) && end();
    JobResult& result = c.job->result();
    const json session = session_json(c, result);
    try {
      commit(c);
    } catch (const ApiError& e) {
      data(error_json(e));
      return end();
    }
    json last = completion_json(c.names, "", nullptr, u.finish_reason);
    last["timings"] = timings_json(result);
    if (!session.is_null()) last["session"] = session;
    if (!data(last)) return false;
    if (c.request.include_usage) {
      json usage = completion_json(c.names, "", nullptr, nullptr);
      usage["choices"] = json::array();
      usage["usage"] = usage_json(result);
      if (!session.is_null()) usage["session"] = session;
      if (!data(usage)) return false;
    }
    return end();
  }

  const ServerContext& ctx_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace retnet::serve
