// Chat templates: how a conversation (system, user and assistant messages) becomes the text a
// model reads, what starts the model's reply and what ends it.
//
// A template is one message format with placeholders, the same for every role:
//   {role}     the role as given: system, user or assistant
//   {Role}     the same with a capital first letter: System, User, Assistant
//   {content}  the message's text (exactly once)
// e.g. ChatML's "<|im_start|>{role}\n{content}<|im_end|>\n". Any other "{name}" (letters, digits,
// underscores) is refused, and so is a Jinja template ("{{" or "{%"), so that a typo or a file
// of the wrong kind is a one-line error and never text the model reads. Other braces are text.
// A template file (--chat-template FILE, or chat_template.txt in a model folder) holds exactly
// that format as UTF-8, at most kMaxChatTemplateBytes; its final newline is part of the format.
// docs/CHAT.md describes the format and how a model folder's template is chosen.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"
#include "retnet/core/json.hpp"

namespace retnet {

/// Largest template file read (a message format is a few dozen bytes).
constexpr uint64_t kMaxChatTemplateBytes = uint64_t{64} << 10;
/// Largest tokenizer_config.json or chat_template.jinja read for its chat template (the
/// limit of the tokenizer's companion files).
constexpr uint64_t kMaxChatTemplateSourceBytes = uint64_t{64} << 20;

/// One message of a conversation; role is "system", "user" or "assistant".
struct ChatMessage {
  std::string role, content;
};

class ChatTemplate {
 public:
  /// The template for base models (the Shakespeare demo): a play script's or a transcript's
  /// layout, "User:\nhello\n\nAssistant:\n", which such a model continues with a reply and
  /// ends with a blank line before the next speaker.
  static ChatTemplate plain() { return ChatTemplate("plain", "{Role}:\n{content}\n\n"); }

  /// ChatML (Qwen, many fine-tunes): <|im_start|>ROLE\nTEXT<|im_end|>\n.
  static ChatTemplate chatml() {
    return ChatTemplate("chatml", "<|im_start|>{role}\n{content}<|im_end|>\n");
  }

  /// Zephyr-like: <|ROLE|>\nTEXT</s>\n, with the folder's EOS text in place of </s>.
  static ChatTemplate zephyr(const std::string& eos_text) {
    return ChatTemplate("zephyr", "<|{role}|>\n{content}" + eos_text + "\n");
  }

  /// A template from `text` in the placeholder format; `label` names it in messages and name().
  /// Throws FormatError "LABEL: PROBLEM" for a format that is not one (see the file comment).
  static ChatTemplate from_text(const std::string& text, const std::string& label) {
    check_format(text, label);
    return ChatTemplate(label, text);
  }

  /// The template of file `path` (--chat-template FILE); name() is "file PATH".
  static ChatTemplate from_file(const std::string& path) {
    const std::string text = read_regular_file(path, kMaxChatTemplateBytes, "chat template");
    check_format(text, path);
    return ChatTemplate("file " + path, text);
  }

  /// The template of model folder `dir`: its chat_template.txt when there is one; else the
  /// chat_template of tokenizer_config.json (or chat_template.jinja) when it is one this
  /// reader recognises (ChatML, Zephyr-like); else plain(), and when the folder has a Jinja
  /// template that is not recognised, name() says so.
  static ChatTemplate for_model_folder(const std::string& dir) {
    require_folder(dir);
    if (entry_exists(label_in(dir, "chat_template.txt")))
      return from_file(path_in_folder(dir, "chat_template.txt"));
    std::optional<std::string> jinja = read_in_folder(dir, "chat_template.jinja");
    std::string source = "chat_template.jinja";
    std::string eos_text;
    const std::optional<std::string> config = read_in_folder(dir, "tokenizer_config.json");
    if (config) {
      const std::string label = label_in(dir, "tokenizer_config.json");
      const nlohmann::json document = parse_json(*config, label);
      const JsonObject o(document, label);
      eos_text = token_text(o, "eos_token");
      if (!jinja && o.has("chat_template")) {
        jinja = jinja_text(o);
        source = "tokenizer_config.json";
      }
    }
    if (!jinja) return plain();
    if (contains(*jinja, "<|im_start|>") && contains(*jinja, "<|im_end|>")) return chatml();
    if (contains(*jinja, "<|user|>") && contains(*jinja, "<|assistant|>") && !eos_text.empty())
      return zephyr(eos_text);
    ChatTemplate fallback = plain();
    fallback.name_ = "plain (the Jinja chat_template of " + label_in(dir, source) +
                     " is not one this reader recognises; give --chat-template FILE)";
    return fallback;
  }

  /// "plain", "chatml", "zephyr", "file PATH", or plain's note on an unrecognised template.
  std::string name() const { return name_; }
  /// The message format, placeholders and all.
  const std::string& format() const { return format_; }

  /// The conversation's messages, then the assistant's opening: the text a model reads before
  /// it replies.
  std::string render(const std::vector<ChatMessage>& messages) const {
    std::string text;
    for (const ChatMessage& m : messages) text += render_turn(m);
    return text + assistant_opening();
  }

  /// One message in the format. Throws InvalidArgument for a role other than system, user or
  /// assistant.
  std::string render_turn(const ChatMessage& m) const {
    check_role(m.role);
    return substitute(format_, m.role, &m.content);
  }

  /// The assistant's message up to its content: what the model reads before its reply.
  std::string assistant_opening() const { return opening("assistant"); }

  /// The assistant's message after its content: what follows a reply in the conversation.
  std::string assistant_closing() const {
    return substitute(format_.substr(format_.find(kContent) + kContent.size()), "assistant",
                      nullptr);
  }

  /// What ends a reply: the closing (without trailing whitespace, when something is left) and
  /// the start of the next user message, for a model that runs on into the user's turn.
  std::vector<std::string> stop_strings() const {
    std::vector<std::string> stops;
    const auto add = [&](const std::string& s) {
      const std::string trimmed = trim_end(s);
      const std::string stop = trimmed.empty() ? s : trimmed;
      if (!stop.empty() && std::find(stops.begin(), stops.end(), stop) == stops.end())
        stops.push_back(stop);
    };
    add(assistant_closing());
    add(opening("user"));
    return stops;
  }

 private:
  ChatTemplate(std::string name, std::string format)
      : name_(std::move(name)), format_(std::move(format)) {}

  static constexpr std::string_view kContent = "{content}";

  std::string opening(const std::string& role) const {
    return substitute(format_.substr(0, format_.find(kContent)), role, nullptr);
  }

  /// File `name` of folder `dir` as messages name it ("DIR/NAME").
  static std::string label_in(const std::string& dir, const std::string& name) {
    return (std::filesystem::path(dir) / name).string();
  }

  /// The text of file `name` in folder `dir`, or nullopt when there is none (a link out of the
  /// folder, a dangling link, a FIFO or a file over the limit are FormatErrors).
  static std::optional<std::string> read_in_folder(const std::string& dir,
                                                   const std::string& name) {
    if (!entry_exists(label_in(dir, name))) return std::nullopt;
    return read_regular_file(path_in_folder(dir, name), kMaxChatTemplateSourceBytes, name);
  }

  static bool contains(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
  }

  static std::string trim_end(const std::string& s) {
    size_t end = s.size();
    while (end > 0 &&
           (s[end - 1] == ' ' || s[end - 1] == '\n' || s[end - 1] == '\r' || s[end - 1] == '\t'))
      --end;
    return s.substr(0, end);
  }

  static void check_role(const std::string& role) {
    if (role != "system" && role != "user" && role != "assistant")
      throw InvalidArgument("chat message role " + excerpt(role) +
                            ": expected system, user or assistant");
  }

  /// The name of the placeholder at `text[i]` ("{name}"), or "" when none starts there.
  static std::string placeholder_at(const std::string& text, size_t i) {
    if (text[i] != '{') return "";
    size_t j = i + 1;
    while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_'))
      ++j;
    if (j == i + 1 || j >= text.size() || text[j] != '}') return "";
    return text.substr(i + 1, j - i - 1);
  }

  /// `part` of the format with role placeholders filled and, when `content` is given, the
  /// content placeholder (placeholders are filled in one pass: content holding "{role}" stays).
  static std::string substitute(const std::string& part, const std::string& role,
                                const std::string* content) {
    std::string out;
    for (size_t i = 0; i < part.size();) {
      const std::string name = placeholder_at(part, i);
      if (name == "role") {
        out += role;
      } else if (name == "Role") {
        out += role.empty() ? role : std::string(1, char(std::toupper(role[0]))) + role.substr(1);
      } else if (name == "content" && content) {
        out += *content;
      } else {
        out += part[i++];
        continue;
      }
      i += name.size() + 2;
    }
    return out;
  }

  /// Refuses a format that is not one: see the file comment.
  static void check_format(const std::string& text, const std::string& label) {
    if (text.size() > kMaxChatTemplateBytes)
      throw FormatError(label + ": " + std::to_string(text.size()) + " bytes, more than the " +
                        std::to_string(kMaxChatTemplateBytes) + "-byte limit for a chat template");
    if (contains(text, "{{") || contains(text, "{%"))
      throw FormatError(label +
                        ": is a Jinja template; expected one message format with the "
                        "placeholders {role}, {Role} and {content} (docs/CHAT.md)");
    size_t contents = 0, roles = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const std::string name = placeholder_at(text, i);
      if (name.empty()) continue;
      if (name == "content")
        ++contents;
      else if (name == "role" || name == "Role")
        ++roles;
      else
        throw FormatError(label + ": unknown placeholder " + excerpt("{" + name + "}") +
                          " at byte " + std::to_string(i) +
                          ": expected {role}, {Role} or {content}");
    }
    if (contents != 1)
      throw FormatError(label + ": has " + std::to_string(contents) +
                        " {content} placeholders: expected exactly one");
    if (roles == 0)
      throw FormatError(label +
                        ": has no {role} or {Role} placeholder: every message would read the same");
    if (!valid_utf8(text)) throw FormatError(label + ": is not valid UTF-8");
  }

  static bool valid_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      const size_t n = c < 0x80         ? 1
                       : (c >> 5) == 6  ? 2
                       : (c >> 4) == 14 ? 3
                       : (c >> 3) == 30 ? 4
                                        : 0;
      if (n == 0 || i + n > s.size()) return false;
      for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
      i += n;
    }
    return true;
  }

  /// tokenizer_config.json's chat_template: a string, or a list of {name, template} of which
  /// the one named "default" is used.
  static std::string jinja_text(const JsonObject& o) {
    const nlohmann::json& value = o.require("chat_template");
    if (!value.is_array()) return o.string("chat_template");
    for (size_t i = 0; i < value.size(); ++i) {
      const JsonObject entry = o.element("chat_template", value, i);
      if (entry.string("name") == "default") return entry.string("template");
    }
    o.fail("chat_template", "is a list of templates without one named \"default\"");
  }

  /// A special token's text at `key`: "text", {"content": "text"}, or "" when absent.
  static std::string token_text(const JsonObject& o, const std::string& key) {
    if (!o.has(key)) return "";
    return o.require(key).is_object() ? o.object(key).string("content") : o.string(key);
  }

  std::string name_;
  std::string format_;
};

}  // namespace retnet
