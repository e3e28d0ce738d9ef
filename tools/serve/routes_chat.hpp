// POST /v1/chat/completions: the chat shape of serve/routes_completions.hpp's route. A request's
// "messages" become the prompt through the server's chat template (--chat-template FILE, else
// the model folder's; include/retnet/text/chat_template.hpp), whose stop strings end the reply;
// the answers are OpenAI's "chat.completion" and "chat.completion.chunk" objects.
#pragma once

#include <cstdint>
#include <retnet/retnet.hpp>
#include <string>
#include <vector>

#include "serve/answer_shape.hpp"
#include "serve/api.hpp"
#include "serve/job.hpp"

namespace retnet::serve {

/// The most alternatives a chat request's "top_logprobs" may ask for, as OpenAI's.
constexpr int64_t kMaxTopLogprobs = 20;

/// A message's "content": a string, or OpenAI's array of parts of which only {"type": "text",
/// "text": ...} is read (an image or audio part is refused, naming it).
inline std::string read_content(const JsonObject& m) {
  const json& content = m.require("content");
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    m.fail("content", "must be a string or an array of text parts, found " + json_excerpt(content),
           JsonFieldError::Problem::kWrongType);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const JsonObject part = m.element("content", content, i);
    if (part.string("type") != "text")
      throw ApiError(400,
                     "'" + part.path("type") + "' is '" +
                         detail::escape_bounded(part.string("type"), 40) +
                         "': only text parts are read",
                     part.path("type"), "unsupported");
    refuse_unknown_fields(part, {"type", "text"}, "/v1/chat/completions");
    text += part.string("text");
  }
  return text;
}

/// "messages": [{role, content}], at least one; a role is system, user or assistant
/// ("developer", OpenAI's newer name for system, is read as system).
inline std::vector<ChatMessage> read_messages(const JsonObject& o) {
  const json& list = o.array("messages");
  if (list.empty()) o.fail("messages", "must hold at least one message");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonObject m = o.element("messages", list, i);
    refuse_unknown_fields(m, {"role", "content"}, "/v1/chat/completions");
    ChatMessage message;
    message.role = m.string("role");
    if (message.role == "developer") message.role = "system";
    if (message.role != "system" && message.role != "user" && message.role != "assistant")
      throw ApiError(400,
                     "'" + m.path("role") + "' is '" + detail::escape_bounded(message.role, 40) +
                         "': expected system, user or assistant",
                     m.path("role"), "unsupported");
    message.content = read_content(m);
    messages.push_back(std::move(message));
  }
  return messages;
}

/// Reads a /v1/chat/completions body: the prompt is `chat_template`'s rendering of the
/// messages (with the assistant's opening), its stop strings join the request's, and
/// max_tokens (or max_completion_tokens) defaults to the server's limit.
inline CompletionRequest parse_chat(const std::string& body, const Limits& limits, int64_t vocab,
                                    const ChatTemplate& chat_template) {
  return read_body(body, [&](const JsonObject& o) {
    refuse_unknown_fields(o,
                          shared_fields({"messages", "max_tokens", "max_completion_tokens",
                                         "logprobs", "top_logprobs"}),
                          "/v1/chat/completions");
    CompletionRequest r;
    r.text = chat_template.render(read_messages(o));
    o.optional_string("model");  // any name: the server has one model
    o.optional_string("user");   // OpenAI's end-user id: nothing here depends on it
    const auto max_tokens = read_max_tokens(o, limits);
    const auto max_completion_tokens = read_max_tokens(o, limits, "max_completion_tokens");
    if (max_tokens && max_completion_tokens && *max_tokens != *max_completion_tokens)
      throw ApiError(400, "'max_tokens' and 'max_completion_tokens' differ: give one",
                     "max_completion_tokens", "invalid_value");
    r.max_tokens = max_tokens.value_or(max_completion_tokens.value_or(limits.max_tokens));
    read_sampler(o, r, vocab);
    read_stop(o, r.stop, limits);
    for (const std::string& stop : chat_template.stop_strings())
      if (std::find(r.stop.begin(), r.stop.end(), stop) == r.stop.end()) r.stop.push_back(stop);
    read_choices_and_stream(o, r);
    const auto top = o.optional_integer("top_logprobs", 0, kMaxTopLogprobs);
    if (o.boolean("logprobs", false))
      r.logprobs = static_cast<int>(top.value_or(0));
    else if (top)
      throw ApiError(400, "'top_logprobs' needs \"logprobs\": true", "top_logprobs",
                     "invalid_value");
    return r;
  });
}

/// A token's text and its bytes, as OpenAI's chat logprobs give them.
inline json chat_token_json(const Tokenizer& tokenizer, int32_t token, float logprob) {
  const std::string text = tokenizer.decode_token(token);
  json bytes = json::array();
  for (unsigned char b : text) bytes.push_back(int(b));
  return {{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
}

/// POST /v1/chat/completions: OpenAI's "chat.completion" and "chat.completion.chunk" objects.
class ChatShape : public AnswerShape {
 public:
  explicit ChatShape(const ChatTemplate& chat_template) : template_(chat_template) {}

  CompletionRequest read(const std::string& body, const Limits& limits,
                         int64_t vocab) const override {
    return parse_chat(body, limits, vocab, template_);
  }
  std::string id_prefix() const override { return "chatcmpl-"; }
  std::string object(bool chunk) const override {
    return chunk ? "chat.completion.chunk" : "chat.completion";
  }
  json choice(int index, const std::string& text, const json& logprobs,
              const json& finish_reason) const override {
    return {{"index", index},
            {"message", {{"role", "assistant"}, {"content", text}}},
            {"logprobs", logprobs},
            {"finish_reason", finish_reason}};
  }
  json piece(int index, const std::string& text, const json& logprobs,
             const json& finish_reason) const override {
    const json delta =
        text.empty() && !finish_reason.is_null() ? json::object() : json{{"content", text}};
    return {{"index", index},
            {"delta", delta},
            {"logprobs", logprobs},
            {"finish_reason", finish_reason}};
  }
  json opening(int index, const std::string&) const override {
    return {{"index", index},
            {"delta", {{"role", "assistant"}, {"content", ""}}},
            {"logprobs", nullptr},
            {"finish_reason", nullptr}};
  }
  json logprobs(const std::vector<TokenLogprob>& entries, const Tokenizer& tokenizer,
                int top) const override {
    json content = json::array();
    for (const auto& e : entries) {
      json token = chat_token_json(tokenizer, e.token, e.logprob);
      token["top_logprobs"] = json::array();
      for (size_t i = 0; i < e.top.size() && int(i) < top; ++i)
        token["top_logprobs"].push_back(
            chat_token_json(tokenizer, e.top[i].first, e.top[i].second));
      content.push_back(std::move(token));
    }
    return {{"content", content}, {"refusal", nullptr}};
  }

 private:
  const ChatTemplate& template_;
};

}  // namespace retnet::serve
