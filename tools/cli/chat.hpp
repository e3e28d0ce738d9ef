// `retnet chat`: an interactive conversation in the terminal. Each line read from stdin is a
// user message; the reply streams to stdout. The model's state is kept between turns, so each
// turn reads only its new text (the user's message and the assistant's opening, in the chat
// template's format): the cost of a turn does not grow with the conversation, which RetNet's
// recurrent form allows. The per-turn speeds on stderr show it.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "cli/sampler_flags.hpp"
#include "load_progress.hpp"

namespace retnet::cli {

struct ChatFlags {
  std::string model;
  std::optional<std::string> chat_template;
  std::optional<std::string> system;
  int64_t max_new_tokens;
  SamplerFlags sampler;
  std::optional<int> threads;
  LoadOptions load;  // --weights, --bf16-dots

  void declare(FlagTable& f) {
    declare_model(f, model);
    f.optional(chat_template, "--chat-template", "FILE",
               "message format with {role}, {Role} and {content} (default: the model folder's "
               "when it is a simple one, else the plain template; docs/CHAT.md)");
    f.optional(system, "--system", "TEXT", "a system message before the first user message");
    f.value(max_new_tokens, "-n", "N", 256, {1, 1 << 24}, "most tokens in one reply");
    sampler.declare(f);
    tools::declare_threads(f, threads);
    tools::declare_load(f, load);
  }
};

/// A conversation with its model state kept between turns.
class ChatSession {
 public:
  ChatSession(const Model& model, const Tokenizer& tokenizer, ChatTemplate chat_template,
              GenerationParams params)
      : tokenizer_(tokenizer),
        template_(std::move(chat_template)),
        params_(std::move(params)),
        generator_(model, tokenizer) {
    params_.stop_strings = template_.stop_strings();
    params_.end_tokens = template_.end_token_ids(tokenizer);
  }

  /// Reads `text` (the start of the conversation, or the next turn's new text) into the state.
  void read(const std::string& text) {
    if (!state_) {
      state_ = generator_.read_prompt(text, params_);
    } else {
      generator_.extend(*state_, encode_inside(text), params_);
    }
  }

  /// Generates the reply, streaming it through `on_text`, then reads the rest of the assistant's
  /// message (assistant_closing) so that the state has read the conversation as the template
  /// writes it. Sets closing_tokens() and rereads().
  GenerationResult reply(const std::function<void(const std::string&)>& on_text) {
    const GenerationState<float> before = *state_;
    GenerationResult r = generator_.decode(
        *state_, params_, [&](Index, int32_t, const std::string& piece) { on_text(piece); });
    const std::string closing = template_.assistant_closing();
    std::optional<std::vector<int32_t>> rest = closing_rest(r, closing);
    rereads_ = !rest;
    if (!rest) {
      // The state read text the conversation does not hold (the start of a user message the
      // model ran on into): read the reply again from the state before it.
      *state_ = before;
      rest = encode_inside(r.text + closing);
    }
    closing_tokens_ = static_cast<int64_t>(rest->size());
    generator_.extend(*state_, *rest, params_);
    return r;
  }

  int64_t closing_tokens() const { return closing_tokens_; }
  bool rereads() const { return rereads_; }

 private:
  /// The ids of `text` inside a conversation: without the BOS the tokenizer adds at the start.
  std::vector<int32_t> encode_inside(const std::string& text) const {
    std::vector<int32_t> ids = tokenizer_.encode(text);
    const std::optional<int32_t> bos = tokenizer_.bos_id();
    if (bos && !ids.empty() && ids.front() == *bos) ids.erase(ids.begin());
    return ids;
  }

  /// The tokens that complete the assistant's message after the reply `r`, when what the state
  /// read past the reply's text is the start of `closing`; nullopt otherwise.
  std::optional<std::vector<int32_t>> closing_rest(const GenerationResult& r,
                                                   const std::string& closing) const {
    std::string read;
    for (int32_t t : r.tokens) read += tokenizer_.decode_token(t);
    if (read.compare(0, r.text.size(), r.text) != 0) return std::nullopt;
    const std::string past = read.substr(r.text.size());
    if (r.reason == StopReason::kEndToken) {
      // The end token is pending in the state: fine when the closing starts with it.
      std::vector<int32_t> ids = encode_inside(closing);
      if (!past.empty() || ids.empty() || ids.front() != state_->pending) return std::nullopt;
      return std::vector<int32_t>(ids.begin() + 1, ids.end());
    }
    if (closing.compare(0, past.size(), past) != 0) return std::nullopt;
    return encode_inside(closing.substr(past.size()));
  }

  const Tokenizer& tokenizer_;
  ChatTemplate template_;
  GenerationParams params_;
  Generator<float> generator_;
  std::optional<GenerationState<float>> state_;
  int64_t closing_tokens_ = 0;
  bool rereads_ = false;
};

/// One line of stdin without its line end; false at the end of the input.
inline bool read_user_line(std::string& line) {
  if (isatty(STDIN_FILENO)) std::fputs("> ", stderr);
  if (!std::getline(std::cin, line)) return false;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

inline int chat(const ChatFlags& flags) {
  set_threads(flags.threads);
  GenerationParams params;
  params.max_new_tokens = flags.max_new_tokens;
  const uint64_t seed = flags.sampler.seed_to_use();
  params.sampler = flags.sampler.params("chat", seed);
  // A template file is read before the model loads, so that a bad one is refused at once; the
  // folder's after, so that a bad -m gets the loader's message.
  std::optional<ChatTemplate> given;
  if (flags.chat_template) given = ChatTemplate::from_file(*flags.chat_template);
  const Model model = tools::load_model_showing_progress(flags.model, flags.load);
  const auto tokenizer = load_tokenizer(flags.model, model.config().vocab_size);
  const ChatTemplate chat_template = given ? *given : ChatTemplate::for_model_folder(flags.model);
  std::fprintf(stderr, "chat template: %s; seed: %llu\n", chat_template.name().c_str(),
               static_cast<unsigned long long>(seed));
  ChatSession session(model, *tokenizer, chat_template, params);
  std::string start = flags.system ? chat_template.render_turn({"system", *flags.system}) : "";
  std::string line;
  for (int turn = 1; read_user_line(line);) {
    if (line == "/exit") break;
    if (line.empty()) continue;
    session.read(start + chat_template.render_turn({"user", line}) +
                 chat_template.assistant_opening());
    start.clear();
    const GenerationResult r = session.reply([](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    std::fprintf(stderr,
                 "turn %d: read %lld tokens (new text only) in %.3f s; reply: %zu tokens in "
                 "%.3f s (%.1f tokens/s); closing: %lld tokens%s\n",
                 turn++, static_cast<long long>(r.prompt_tokens), r.prompt_seconds, r.tokens.size(),
                 r.decode_seconds, r.tokens.size() / std::max(r.decode_seconds, 1e-9),
                 static_cast<long long>(session.closing_tokens()),
                 session.rereads() ? " (the reply read again: the model ran past its end)" : "");
  }
  return 0;
}

}  // namespace retnet::cli
