// Which files the tokenizer loader reads and what it says about them: links that resolve
// nowhere or out of the folder, a folder that is not one, and text of the files quoted in
// messages (bounded, escaped, on one line). The name starts with test_hf_ so that a build
// without PCRE2 leaves it out with the other tokenizer.json tests.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "retnet/tokenizers.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using retnet::FormatError;
using retnet::HfTokenizer;
using retnet::testing::expect_error;
using retnet::testing::TempDir;

const std::string kData = std::string(RETNET_TEST_DATA_DIR) + "/tokenizers/";

// A tokenizer.json that loads: two tokens, no merges.
const char* const kSmallJson =
    R"({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})";

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The message is one line of printable ASCII of at most `max_bytes`.
void expect_one_bounded_line(const std::string& message, size_t max_bytes) {
  EXPECT_LE(message.size(), max_bytes) << message.substr(0, 400);
  for (char ch : message) {
    const unsigned char c = static_cast<unsigned char>(ch);
    ASSERT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(c) << " in: " << message.substr(0, 400);
  }
}

// ---- Links that resolve nowhere ------------------------------------------------------------

TEST(TokenizerFilesTest, DanglingTokenizerJsonLinkIsAnErrorNotBytes) {
  TempDir dir;
  fs::create_symlink(dir.file("download.incomplete"), dir.file("tokenizer.json"));
  for (int64_t vocab : {int64_t(0), int64_t(256)}) {
    const std::string message = expect_error<FormatError>(
        [&] {
          vocab ? retnet::load_tokenizer(dir.str(), vocab) : retnet::load_tokenizer(dir.str());
        },
        {dir.file("tokenizer.json") + ": is a symbolic link to \"" +
         dir.file("download.incomplete") + "\", which does not exist"});
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
  expect_error<FormatError>([&] { HfTokenizer::load(dir.str()); },
                            {"tokenizer.json: is a symbolic link to", "which does not exist"});
}

TEST(TokenizerFilesTest, LoopingTokenizerJsonLinkIsAnError) {
  TempDir dir;
  fs::create_symlink("other.json", dir.file("tokenizer.json"));
  fs::create_symlink("tokenizer.json", dir.file("other.json"));
  expect_error<FormatError>([&] { retnet::load_tokenizer(dir.str()); },
                            {dir.file("tokenizer.json"), "a loop of links"});
}

TEST(TokenizerFilesTest, DanglingOrLoopingCompanionLinkIsAnErrorNotAMissingFile) {
  for (const char* name :
       {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json"}) {
    TempDir dir;
    write(dir.file("tokenizer.json"), kSmallJson);
    fs::create_symlink("gone.json", dir.file(name));
    expect_error<FormatError>(
        [&] { retnet::load_tokenizer(dir.str()); },
        {dir.file(name) + ": is a symbolic link to \"gone.json\"", "which does not exist"});
    fs::remove(dir.file(name));
    fs::create_symlink(name, dir.file(name));  // a link to itself
    expect_error<FormatError>([&] { HfTokenizer::load(dir.str()); }, {name, "a loop of links"});
  }
}

// ---- The folder itself ---------------------------------------------------------------------

TEST(TokenizerFilesTest, FolderThatDoesNotExistIsAnErrorNotBytes) {
  TempDir dir;
  expect_error<FormatError>([&] { retnet::load_tokenizer(dir.file("nowhere")); },
                            {dir.file("nowhere") + ": no such folder"});
  expect_error<FormatError>([&] { retnet::load_tokenizer(dir.file("nowhere"), 256); },
                            {"no such folder"});
  fs::create_symlink(dir.file("nowhere"), dir.file("link"));
  expect_error<FormatError>([&] { retnet::load_tokenizer(dir.file("link")); },
                            {dir.file("link") + ": is a symbolic link to", "which does not exist"});
}

TEST(TokenizerFilesTest, FileGivenAsTheFolderIsAnError) {
  TempDir dir;
  write(dir.file("tokenizer.json"), kSmallJson);
  expect_error<FormatError>(
      [&] { retnet::load_tokenizer(dir.file("tokenizer.json")); },
      {dir.file("tokenizer.json") + ": is a regular file, expected a folder"});
}

TEST(TokenizerFilesTest, BytesOnlyForAnExistingFolderWithoutTokenizerJson) {
  TempDir dir;
  write(dir.file("tokenizer_config.json"), "{}");
  EXPECT_NE(dynamic_cast<const retnet::ByteTokenizer*>(retnet::load_tokenizer(dir.str()).get()),
            nullptr);
  // A link to the folder is the folder.
  TempDir other;
  fs::create_symlink(dir.str(), other.file("model"));
  EXPECT_NE(
      dynamic_cast<const retnet::ByteTokenizer*>(retnet::load_tokenizer(other.file("model")).get()),
      nullptr);
}

// ---- Links out of the folder ---------------------------------------------------------------

TEST(TokenizerFilesTest, LinkToAFileOutsideTheFolderIsRefusedAndNotQuoted) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    TempDir outside, dir;
    // Valid JSON for tokenizer_config.json, invalid for tokenizer.json: either way the loader
    // must refuse before it reads, so the content never reaches a message.
    write(outside.file("secret"), R"({"bos_token": "SECRET-VALUE"})");
    fs::permissions(outside.file("secret"), fs::perms::owner_read | fs::perms::owner_write);
    if (std::string(name) != "tokenizer.json") write(dir.file("tokenizer.json"), kSmallJson);
    fs::create_symlink(outside.file("secret"), dir.file(name));
    const std::string message =
        expect_error<FormatError>([&] { retnet::load_tokenizer(dir.str()); },
                                  {dir.file(name) + ": resolves to", "outside the model folder"});
    EXPECT_EQ(message.find("SECRET-VALUE"), std::string::npos) << message;
  }
}

TEST(TokenizerFilesTest, LinkInsideTheFolderIsFollowed) {
  TempDir dir;
  fs::create_directories(dir.file("files"));
  fs::copy_file(kData + "gpt2/tokenizer.json", dir.file("files/tokenizer.json"));
  fs::create_symlink("files/tokenizer.json", dir.file("tokenizer.json"));
  const auto tok = retnet::load_tokenizer(dir.str());
  ASSERT_NE(dynamic_cast<const HfTokenizer*>(tok.get()), nullptr);
  EXPECT_EQ(tok->encode("Hello"), HfTokenizer::load(kData + "gpt2").encode("Hello"));
}

// ---- Text of the files in messages ---------------------------------------------------------

// A string that would clear the screen and take a megabyte of the terminal if quoted raw, as
// JSON writes it.
std::string hostile_json_string() {
  return "\"\\n\\u001b[2J" + std::string(1 << 20, 'x') + "\"";
}

std::string with(const std::string& model, const std::string& top = "") {
  return R"({"version": "1.0", )" + top + R"("model": {"type": "BPE", )" + model + "}}";
}

TEST(TokenizerFilesTest, FileTextInMessagesIsBoundedAndEscaped) {
  const std::string h = hostile_json_string();
  const std::string vocab = R"("vocab": {"a": 0, "b": 1}, "merges": [])";
  const std::vector<std::string> documents = {
      R"({"version": "1.0", "model": {"type": )" + h + "}}",
      with(vocab, R"("pre_tokenizer": {"type": )" + h + "}, "),
      with(vocab,
           R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": )" + h + "}]}, "),
      with(vocab, R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": )" +
                      h.substr(0, h.size() - 1) +
                      R"(("}, "behavior": "Isolated", "invert": false}, )"),
      with(vocab, R"("pre_tokenizer": {"type": "Split", "pattern": {"String": "a"},
                     "behavior": )" +
                      h + R"(, "invert": false}, )"),
      with(vocab, R"("normalizer": {"type": )" + h + "}, "),
      with(vocab, R"("decoder": {"type": )" + h + "}, "),
      with(vocab, R"("post_processor": {"type": )" + h + "}, "),
      R"({"version": )" + h + R"(, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})",
      with(R"("unk_token": )" + h + ", " + vocab),
      with(R"("vocab": {)" + h + R"(: "one"}, "merges": [])"),
      with(R"("vocab": {"a": 0, )" + h + R"(: 0}, "merges": [])"),
      with(R"("vocab": {)" + h + R"(: 99999999}, "merges": [])"),
      with(R"("vocab": {"a": 0, "b": 1}, "merges": [)" + h + "]"),
      with(R"("vocab": {"a": 0, "b": 1}, "merges": [["a", )" + h + "]]"),
      with(vocab, R"("added_tokens": [{"id": 0, "content": "a", "special": true}], "truncation":
                     {"max_length": 5, "direction": )" +
                      h + "}, "),
      // Parse errors: the token read so far is a megabyte long.
      R"({"version": "1.0", "model": )" + h.substr(0, h.size() - 1) + "\x01\"}",
      R"({"version": "1.0", "model": 1)" + std::string(1 << 20, '1') + "x}",
      R"({"version": "1.0", "model": )" + std::string(1 << 20, 't') + "}",
  };
  for (size_t i = 0; i < documents.size(); ++i) {
    SCOPED_TRACE("document " + std::to_string(i));
    const std::string message = expect_error<FormatError>(
        [&] { HfTokenizer::from_json(documents[i]); }, {"tokenizer.json"});
    expect_one_bounded_line(message, 300);
  }
}

TEST(TokenizerFilesTest, CompanionTextInMessagesIsBoundedAndEscaped) {
  TempDir dir;
  write(dir.file("tokenizer.json"), kSmallJson);
  const std::string h = hostile_json_string();
  for (const std::string& config :
       {R"({"eos_token": )" + h + "}", R"({"bos_token": {"content": )" + h + "}}",
        R"({"eos_token": "a", )" + h + ": 1, " + h + ": 2}"}) {
    write(dir.file("tokenizer_config.json"), config);
    const std::string message = expect_error<FormatError>(
        [&] { retnet::load_tokenizer(dir.str()); }, {"tokenizer_config.json"});
    expect_one_bounded_line(message, 300 + dir.str().size());
  }
}

}  // namespace

// ---- Size caps -----------------------------------------------------------------------------

// A sparse file one byte over the cap costs no disk; the loader must refuse it from its size,
// before reading (reading a 1 GiB file whole would take seconds and a GiB of memory).
TEST(TokenizerFilesTest, FilesOverTheSizeCapAreRefusedBeforeReading) {
  namespace hf = retnet::detail::hf;
  {
    TempDir dir;
    write(dir.file("tokenizer.json"), kSmallJson);
    fs::resize_file(dir.file("tokenizer.json"), hf::kMaxTokenizerJsonBytes + 1);
    expect_error<FormatError>(
        [&] { retnet::load_tokenizer(dir.str()); },
        {dir.file("tokenizer.json"), "-byte limit for a tokenizer.json file"});
  }
  {
    TempDir dir;
    write(dir.file("tokenizer.json"), kSmallJson);
    write(dir.file("tokenizer_config.json"), "{}");
    fs::resize_file(dir.file("tokenizer_config.json"), hf::kMaxCompanionBytes + 1);
    expect_error<FormatError>([&] { retnet::load_tokenizer(dir.str()); },
                              {"tokenizer_config.json", "-byte limit"});
  }
}
