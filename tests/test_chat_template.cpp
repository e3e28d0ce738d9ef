// text/chat_template.hpp: rendering and stop strings against conversations written out by hand,
// the refusals of files that are not a message format, and the choice of a model folder's
// template (its chat_template.txt, a recognised Jinja template, an unrecognised one).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "retnet/text/chat_template.hpp"
#include "temp_dir.hpp"

namespace {

using retnet::ChatMessage;
using retnet::ChatTemplate;
using retnet::FormatError;
using retnet::InvalidArgument;
using retnet::testing::expect_error;
using retnet::testing::TempDir;

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi {role}"}, {"assistant", "Hello."}, {"user", "Bye"}};

TEST(ChatTemplate, PlainRendersAScriptLayout) {
  const ChatTemplate t = ChatTemplate::plain();
  EXPECT_EQ(t.name(), "plain");
  EXPECT_EQ(t.render(kConversation),
            "System:\nBe brief.\n\nUser:\nHi {role}\n\nAssistant:\nHello.\n\nUser:\nBye\n\n"
            "Assistant:\n");
  EXPECT_EQ(t.render_turn({"user", "x"}), "User:\nx\n\n");
  EXPECT_EQ(t.assistant_opening(), "Assistant:\n");
  EXPECT_EQ(t.assistant_closing(), "\n\n");
  // The closing is whitespace only, so it stays as is; the user's opening is trimmed.
  EXPECT_EQ(t.stop_strings(), (std::vector<std::string>{"\n\n", "User:"}));
}

TEST(ChatTemplate, ChatMLRendersAndStops) {
  const ChatTemplate t = ChatTemplate::chatml();
  EXPECT_EQ(t.render({{"user", "Hi"}}), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.assistant_closing(), "<|im_end|>\n");
  EXPECT_EQ(t.stop_strings(), (std::vector<std::string>{"<|im_end|>", "<|im_start|>user"}));
}

TEST(ChatTemplate, RefusesAnUnknownRole) {
  expect_error<InvalidArgument>(
      [] {
        ChatTemplate::plain().render_turn({"tool", "x"});
      },
      {"role \"tool\"", "expected system, user or assistant"});
}

TEST(ChatTemplate, ReadsAFileInThePlaceholderFormat) {
  TempDir dir;
  write(dir.file("t.txt"), "[{Role}] {content}\n");
  const ChatTemplate t = ChatTemplate::from_file(dir.file("t.txt"));
  EXPECT_EQ(t.name(), "file " + dir.file("t.txt"));
  EXPECT_EQ(t.render({{"user", "a"}, {"assistant", "b"}}), "[User] a\n[Assistant] b\n[Assistant] ");
  EXPECT_EQ(t.stop_strings(), (std::vector<std::string>{"\n", "[User]"}));
}

TEST(ChatTemplate, RefusesFilesThatAreNotAMessageFormat) {
  TempDir dir;
  const auto refused = [&](const std::string& text, const std::vector<std::string>& snippets) {
    write(dir.file("bad.txt"), text);
    const std::string message =
        expect_error<FormatError>([&] { ChatTemplate::from_file(dir.file("bad.txt")); }, snippets);
    EXPECT_EQ(message.rfind(dir.file("bad.txt") + ": ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  refused("{role}: no content\n", {"has 0 {content} placeholders: expected exactly one"});
  refused("{role}: {content} {content}\n", {"has 2 {content} placeholders"});
  refused("{role}: {contents}\n", {"unknown placeholder \"{contents}\" at byte 8"});
  refused("{% for m in messages %}{{ m.content }}{% endfor %}", {"is a Jinja template"});
  refused("{content}\n", {"has no {role} or {Role} placeholder"});
  refused("{role}: {content}\xff\n", {"is not valid UTF-8"});
  refused(std::string(70000, 'x') + "{role}{content}", {"70015 bytes", "65536-byte limit"});
  expect_error<FormatError>([&] { ChatTemplate::from_file(dir.file("absent.txt")); },
                            {"absent.txt: cannot open: no such file"});
  expect_error<FormatError>([&] { ChatTemplate::from_file(dir.str()); }, {"is a directory"});
}

TEST(ChatTemplate, FolderWithoutTemplateIsPlain) {
  TempDir dir;
  EXPECT_EQ(ChatTemplate::for_model_folder(dir.str()).name(), "plain");
  write(dir.file("tokenizer_config.json"), R"({"eos_token": "</s>"})");
  EXPECT_EQ(ChatTemplate::for_model_folder(dir.str()).name(), "plain");
  expect_error<FormatError>([&] { ChatTemplate::for_model_folder(dir.file("none")); },
                            {"none: no such folder"});
}

TEST(ChatTemplate, FolderWithChatMLJinjaIsChatML) {
  TempDir dir;
  write(dir.file("tokenizer_config.json"),
        R"({"chat_template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + )"
        R"('\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if )"
        R"(add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"})");
  const ChatTemplate t = ChatTemplate::for_model_folder(dir.str());
  EXPECT_EQ(t.name(), "chatml");
  EXPECT_EQ(t.format(), ChatTemplate::chatml().format());
}

TEST(ChatTemplate, FolderWithZephyrJinjaUsesItsEosText) {
  TempDir dir;
  write(dir.file("tokenizer_config.json"),
        R"({"eos_token": {"content": "</s>"}, "chat_template": "{% for message in messages %})"
        R"({% if message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + eos_token }})"
        R"({% elif message['role'] == 'assistant' %}{{ '<|assistant|>\n' + message['content'] + )"
        R"(eos_token }}{% endif %}{% endfor %}"})");
  const ChatTemplate t = ChatTemplate::for_model_folder(dir.str());
  EXPECT_EQ(t.name(), "zephyr");
  EXPECT_EQ(t.render({{"user", "Hi"}}), "<|user|>\nHi</s>\n<|assistant|>\n");
}

TEST(ChatTemplate, FolderWithAnUnknownJinjaTemplateSaysSo) {
  TempDir dir;
  write(dir.file("tokenizer_config.json"),
        R"({"chat_template": "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }})"
        R"( [/INST]{% endfor %}"})");
  const ChatTemplate t = ChatTemplate::for_model_folder(dir.str());
  EXPECT_EQ(t.format(), ChatTemplate::plain().format());
  EXPECT_NE(t.name().find("plain (the Jinja chat_template of " + dir.file("tokenizer_config.json") +
                          " is not one this reader recognises"),
            std::string::npos)
      << t.name();
}

TEST(ChatTemplate, FolderChatTemplateTxtComesFirst) {
  TempDir dir;
  write(dir.file("tokenizer_config.json"), R"({"chat_template": "<|im_start|><|im_end|>"})");
  write(dir.file("chat_template.txt"), "## {role}\n{content}\n");
  const ChatTemplate t = ChatTemplate::for_model_folder(dir.str());
  EXPECT_EQ(t.render_turn({"user", "x"}), "## user\nx\n");
  write(dir.file("chat_template.txt"), "{role}\n");
  expect_error<FormatError>([&] { ChatTemplate::for_model_folder(dir.str()); },
                            {"chat_template.txt: has 0 {content} placeholders"});
}

TEST(ChatTemplate, FolderWithBadTokenizerConfigIsAnError) {
  TempDir dir;
  write(dir.file("tokenizer_config.json"), R"({"chat_template": 5})");
  expect_error<FormatError>([&] { ChatTemplate::for_model_folder(dir.str()); },
                            {"tokenizer_config.json", "chat_template"});
  write(dir.file("tokenizer_config.json"),
        R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
  expect_error<FormatError>([&] { ChatTemplate::for_model_folder(dir.str()); },
                            {"without one named \"default\""});
}

}  // namespace
