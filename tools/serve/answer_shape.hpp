// What differs between POST /v1/completions and POST /v1/chat/completions: how a body is read
// into a CompletionRequest, and how the choices are shown (OpenAI's "text_completion" objects,
// or "chat.completion" and "chat.completion.chunk"). serve/routes_completions.hpp runs both
// through the same jobs, deferred answers and streams; this file holds the interface and the
// text shape, serve/routes_chat.hpp the chat shape.
#pragma once

#include <cstdint>
#include <retnet/retnet.hpp>
#include <string>
#include <vector>

#include "serve/api.hpp"
#include "serve/job.hpp"

namespace retnet::serve {

/// The shape of one completion route's requests and answers.
class AnswerShape {
 public:
  virtual ~AnswerShape() = default;

  /// The request in `body` (a 400 ApiError when it is wrong).
  virtual CompletionRequest read(const std::string& body, const Limits& limits,
                                 int64_t vocab) const = 0;
  /// "cmpl-", "chatcmpl-": the start of every answer's id.
  virtual std::string id_prefix() const = 0;
  /// The "object" of a whole answer (chunk false) or of a streamed chunk.
  virtual std::string object(bool chunk) const = 0;
  /// Choice `index` of a whole answer.
  virtual json choice(int index, const std::string& text, const json& logprobs,
                      const json& finish_reason) const = 0;
  /// Choice `index` of a streamed chunk: a piece of its text, or (finish_reason set) its end.
  virtual json piece(int index, const std::string& text, const json& logprobs,
                     const json& finish_reason) const = 0;
  /// The choice's first chunk, sent before its first piece (`echo`: the prompt's text; chat:
  /// the assistant's role); null when the shape has none.
  virtual json opening(int index, const std::string& echo) const = 0;
  /// The log-probabilities of a choice's tokens (`top`: how many alternatives each).
  virtual json logprobs(const std::vector<TokenLogprob>& entries, const Tokenizer& tokenizer,
                        int top) const = 0;
};

/// An answer object of `shape` with these choices.
inline json answer_json(const AnswerShape& shape, const CompletionId& c, json choices, bool chunk) {
  return {{"id", c.id},
          {"object", shape.object(chunk)},
          {"created", c.created},
          {"model", c.model},
          {"choices", std::move(choices)}};
}

/// POST /v1/completions: OpenAI's legacy "text_completion" objects.
class TextShape : public AnswerShape {
 public:
  CompletionRequest read(const std::string& body, const Limits& limits,
                         int64_t vocab) const override {
    return parse_completion(body, limits, vocab);
  }
  std::string id_prefix() const override { return "cmpl-"; }
  std::string object(bool) const override { return "text_completion"; }
  json choice(int index, const std::string& text, const json& logprobs,
              const json& finish_reason) const override {
    return {
        {"text", text}, {"index", index}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
  }
  json piece(int index, const std::string& text, const json& logprobs,
             const json& finish_reason) const override {
    return choice(index, text, logprobs, finish_reason);
  }
  json opening(int index, const std::string& echo) const override {
    return echo.empty() ? json(nullptr) : choice(index, echo, nullptr, nullptr);
  }
  json logprobs(const std::vector<TokenLogprob>& entries, const Tokenizer& tokenizer,
                int top) const override {
    return logprobs_json(entries, tokenizer, top);
  }
};

}  // namespace retnet::serve
