// POST /v1/completions and POST /v1/chat/completions: the request read by the route's
// AnswerShape (serve/answer_shape.hpp), its session leased, a job submitted to the engine per
// choice ("n"), and the engine's updates answered as one object or streamed as server-sent
// events. The two routes differ only in their shape: this file holds everything else once.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "serve/answer_shape.hpp"
#include "serve/api.hpp"
#include "serve/context.hpp"
#include "serve/engine.hpp"
#include "serve/http.hpp"
#include "serve/routes_sessions.hpp"
#include "serve/session_store.hpp"

namespace retnet::serve {

class CompletionsRoute {
 public:
  CompletionsRoute(const ServerContext& context, std::unique_ptr<const AnswerShape> shape)
      : ctx_(context), shape_(std::move(shape)) {}

  void operator()(const http::Request& req, http::Response& res) {
    auto c = std::make_shared<Completion>();
    c->request = shape_->read(req.body(), ctx_.options.limits, ctx_.model.config().vocab_size);
    const CompletionRequest& r = c->request;
    JobParams p;
    p.prompt = r.text ? ctx_.tokenizer.encode(*r.text) : r.ids;
    p.max_tokens = r.max_tokens;
    p.sampler = r.sampler;
    p.stop = r.stop;
    p.logprobs = r.logprobs;
    if (!r.session.empty()) lease_session(*c, p);
    if (p.prompt.empty() && !p.start)
      throw ApiError(400,
                     r.session.empty() ? "the prompt is empty"
                                       : "the session is empty: its first prompt cannot be",
                     "prompt", "empty_prompt");
    if (r.echo) c->echo = r.text ? *r.text : ctx_.tokenizer.decode(r.ids);
    c->names.id =
        shape_->id_prefix() + std::to_string(ctx_.started) + "-" + std::to_string(next_id_++);
    c->names.created = std::time(nullptr);
    c->names.model = ctx_.options.model_id;
    submit(*c, std::move(p));
    if (r.stream)
      stream(c, res);
    else
      answer(c, res);
  }

 private:
  /// One choice: its job and what its answer has taken from it.
  struct Choice {
    std::shared_ptr<Job> job;
    std::string text;                    // a deferred answer's text so far
    std::vector<TokenLogprob> logprobs;  // and its log-probabilities
    bool opened = false;                 // a stream has sent the choice's opening
    bool done = false;
    std::string finish_reason, error;
  };

  /// One request in flight: its choices, its session and what the answer needs.
  struct Completion {
    std::vector<Choice> choices;
    std::unique_ptr<SessionLease> lease;  // null without a session (and then n may be > 1)
    CompletionRequest request;
    CompletionId names;
    std::string echo;  // the prompt's text, before each choice's text
    int64_t session_tokens_before = 0;
    bool listening = false;                       // the jobs wake the answer
    bool finished = false;                        // a stream has sent [DONE]
    Clock::time_point last_write = Clock::now();  // a stream's last event
  };

  /// Takes the request's session for the job to continue (409 busy, 404 unknown).
  void lease_session(Completion& c, JobParams& p) const {
    const std::string& id = c.request.session;
    Session s;
    SessionStore::Result got;
    try {
      got = ctx_.sessions.acquire(id, s);
    } catch (const SessionRefused& e) {
      throw session_refused_error(e);  // a damaged file
    }
    if (got != SessionStore::Result::kOk) throw session_error(got, id, "session");
    c.lease = std::make_unique<SessionLease>(ctx_.sessions, id);
    c.session_tokens_before = s.tokens();
    p.start = std::move(s.state);
    p.keep_state = true;
  }

  /// A job per choice, choice i with seed + i; all or none are queued (503 when the queue is
  /// full).
  void submit(Completion& c, JobParams p) const {
    const uint64_t seed = p.sampler.seed;
    for (int i = 0; i < c.request.n; ++i) {
      JobParams one = i + 1 < c.request.n ? p : std::move(p);
      one.sampler.seed = seed + uint64_t(i);
      c.choices.emplace_back();
      c.choices.back().job = std::make_shared<Job>(std::move(one));
    }
    for (auto& choice : c.choices)
      if (!ctx_.engine.submit(choice.job)) {
        cancel(c);
        throw ApiError(503, "the server is busy (" +
                                std::to_string(ctx_.engine.options().max_queue) +
                                " requests queued) or shutting down; try again later");
      }
  }

  static void cancel(Completion& c) {
    for (auto& choice : c.choices) choice.job->cancel();
  }

  json session_json(const Completion& c) const {
    if (!c.lease) return nullptr;
    const JobResult& result = c.choices[0].job->result();
    const int64_t tokens =
        result.state ? result.state->model.positions.at(0) + 1 : c.session_tokens_before;
    return {{"id", c.request.session}, {"tokens", tokens}};
  }

  /// The job ended well: store the session (before the client hears of the end, so that a
  /// next request finds it). Throws the ApiError of a save that failed: the session is then
  /// as it was before the request.
  static void commit(Completion& c) {
    try {
      if (c.lease) c.lease->commit(std::move(c.choices[0].job->result().state));
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

  /// The log-probabilities a choice's answer shows: null unless the request asked for them.
  json logprobs_or_null(const Completion& c, const std::vector<TokenLogprob>& logprobs) const {
    const int top = c.request.logprobs;
    return top >= 0 ? shape_->logprobs(logprobs, ctx_.tokenizer, top) : json(nullptr);
  }

  /// The usage of all choices: the prompt once, every choice's tokens.
  static json usage(const Completion& c) {
    int64_t completion = 0;
    for (const auto& choice : c.choices) completion += choice.job->result().completion_tokens;
    return usage_json(c.choices[0].job->result().prompt_tokens, completion);
  }

  /// The timings of the choice that ended last: those of the whole request.
  static json timings(const Completion& c) {
    const auto last =
        std::max_element(c.choices.begin(), c.choices.end(), [](const Choice& a, const Choice& b) {
          return a.job->result().total_ms < b.job->result().total_ms;
        });
    return timings_json(last->job->result());
  }

  /// Registers the answer's wake with every job once, so that each update polls the answer.
  static void listen(Completion& c, const http::Wake& wake) {
    if (c.listening) return;
    for (auto& choice : c.choices) choice.job->set_listener(wake);
    c.listening = true;
  }

  // ------------------------------------------------------------ whole answers

  /// The whole answer as one object, once every job is done (deferred: no thread waits).
  void answer(const std::shared_ptr<Completion>& c, http::Response& res) const {
    res.defer([this, c](http::Response& out, const http::PollContext& poll) {
      if (poll.client_gone) {  // nobody will read the answer: the jobs leave the batch
        cancel(*c);
        if (c->lease) c->lease->release();
        return true;
      }
      listen(*c, poll.wake);
      if (!take_all(*c)) return false;
      try {
        reply(out, 200, whole_answer(*c));
      } catch (const ApiError& e) {
        reply_error(out, e);
      } catch (const std::exception& e) {
        reply_error(out, ApiError(500, std::string("internal error: ") + e.what()));
      }
      if (c->lease) c->lease->release();
      return true;
    });
  }

  /// Takes every choice's updates; true once all are done, or one has failed (the others are
  /// then cancelled).
  static bool take_all(Completion& c) {
    bool all_done = true;
    for (auto& choice : c.choices) {
      if (choice.done) continue;
      Update u = choice.job->take();
      choice.text += u.text;
      for (auto& l : u.logprobs) choice.logprobs.push_back(std::move(l));
      if (!u.done) {
        all_done = false;
        continue;
      }
      choice.done = true;
      choice.finish_reason = u.finish_reason;
      choice.error = u.error;
      if (!u.error.empty()) {
        cancel(c);
        return true;
      }
    }
    return all_done;
  }

  /// The answer once take_all() is done; throws the ApiError of a failed job or session save.
  json whole_answer(Completion& c) const {
    for (const auto& choice : c.choices)
      if (!choice.error.empty()) throw job_error(choice.error);
    const json session = session_json(c);
    commit(c);
    json choices = json::array();
    for (size_t i = 0; i < c.choices.size(); ++i) {
      const Choice& choice = c.choices[i];
      choices.push_back(shape_->choice(int(i), c.echo + choice.text,
                                       logprobs_or_null(c, choice.logprobs), choice.finish_reason));
    }
    json body = answer_json(*shape_, c.names, std::move(choices), false);
    body["usage"] = usage(c);
    body["timings"] = timings(c);
    body["seed"] = c.request.seed;
    if (!session.is_null()) body["session"] = session;
    return body;
  }

  // ------------------------------------------------------------ streams

  /// Server-sent events: per choice an opening chunk when the shape has one, a chunk per
  /// update, a last one with finish_reason; once every choice has ended the usage chunk (when
  /// asked), then "data: [DONE]". While nothing comes, a comment line every second finds out
  /// whether the client is still there; a client gone cancels the jobs.
  void stream(const std::shared_ptr<Completion>& c, http::Response& res) const {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    ctx_.metrics.stream_opened();  // closed in `ended`, which the HTTP layer calls once
    res.stream(
        "text/event-stream", [this, c](http::StreamSink& sink) { return stream_next(*c, sink); },
        [c, &metrics = ctx_.metrics] {
          // The stream has ended, written out or not: jobs still running have lost their
          // reader (the client left, or a write failed) and leave the batch.
          metrics.stream_closed();
          if (!c->finished) cancel(*c);
          if (c->lease) c->lease->release();
        });
  }

  static bool send(Completion& c, http::StreamSink& sink, const std::string& event) {
    c.last_write = Clock::now();
    return sink.write(event);
  }
  static bool data(Completion& c, http::StreamSink& sink, const json& j) {
    return send(c, sink, "data: " + dump(j) + "\n\n");
  }
  static bool end(Completion& c, http::StreamSink& sink) {
    if (!send(c, sink, "data: [DONE]\n\n")) return false;
    c.finished = true;
    sink.done();
    return true;
  }

  /// A chunk holding one choice.
  json chunk(const Completion& c, json choice) const {
    return answer_json(*shape_, c.names, json::array({std::move(choice)}), true);
  }

  /// One poll of a stream: what the jobs have produced since the last, as events.
  bool stream_next(Completion& c, http::StreamSink& sink) const {
    listen(c, sink.wake());
    bool any = false;
    for (size_t i = 0; i < c.choices.size(); ++i) {
      Choice& choice = c.choices[i];
      if (choice.done) continue;
      Update u = choice.job->take();
      if (u.empty()) continue;
      any = true;
      if (!send_pieces(c, int(i), u, sink)) return false;
      if (!u.done) continue;
      choice.done = true;
      if (!u.error.empty()) {
        cancel(c);
        return data(c, sink, error_json(job_error(u.error))) && end(c, sink);
      }
      if (!send_finish(c, int(i), u.finish_reason, sink)) return false;
      if (c.finished) return true;  // a session save failed: the stream has ended
    }
    if (!any)
      return Clock::now() - c.last_write < std::chrono::seconds(1) ||
             send(c, sink, ": keep-alive\n\n");
    for (const auto& choice : c.choices)
      if (!choice.done) return true;
    if (c.request.include_usage) {
      json usage_chunk = answer_json(*shape_, c.names, json::array(), true);
      usage_chunk["usage"] = usage(c);
      const json session = session_json(c);
      if (!session.is_null()) usage_chunk["session"] = session;
      if (!data(c, sink, usage_chunk)) return false;
    }
    return end(c, sink);
  }

  /// Choice i's opening (first time) and one chunk per piece of the update.
  bool send_pieces(Completion& c, int i, const Update& u, http::StreamSink& sink) const {
    Choice& choice = c.choices[size_t(i)];
    if (!choice.opened) {
      choice.opened = true;
      const json opening = shape_->opening(i, c.echo);
      if (!opening.is_null() && !data(c, sink, chunk(c, opening))) return false;
    }
    size_t text_at = 0, logprobs_at = 0;
    for (const auto& [text_end, logprobs_end] : u.piece_ends) {
      const std::vector<TokenLogprob> piece_logprobs(u.logprobs.begin() + logprobs_at,
                                                     u.logprobs.begin() + logprobs_end);
      const json piece = shape_->piece(i, u.text.substr(text_at, text_end - text_at),
                                       logprobs_or_null(c, piece_logprobs), nullptr);
      if (!data(c, sink, chunk(c, piece))) return false;
      text_at = text_end;
      logprobs_at = logprobs_end;
    }
    return true;
  }

  /// Choice i's last chunk: its finish_reason, timings, the seed and (saved first) the session.
  /// A failed save ends the stream with an error event.
  bool send_finish(Completion& c, int i, const std::string& reason, http::StreamSink& sink) const {
    const json session = session_json(c);
    try {
      commit(c);
    } catch (const ApiError& e) {
      return data(c, sink, error_json(e)) && end(c, sink);
    }
    json last = chunk(c, shape_->piece(i, "", nullptr, reason));
    last["timings"] = timings_json(c.choices[size_t(i)].job->result());
    last["seed"] = c.request.seed;
    if (!session.is_null()) last["session"] = session;
    return data(c, sink, last);
  }

  const ServerContext& ctx_;
  std::unique_ptr<const AnswerShape> shape_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace retnet::serve
