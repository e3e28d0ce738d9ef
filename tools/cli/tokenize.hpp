// `retnet tokenize` and `retnet detokenize`: a model folder's tokenizer (or one of a folder that
// holds only tokenizer files) between text and the token ids that `score --tokens` reads.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>
#include <string>
#include <vector>

#include "cli/common.hpp"

namespace retnet::cli {

inline void declare_tokenizer_folder(FlagTable& f, std::string& folder) {
  f.required(folder, "-m|--model", "DIR", "a model folder, or one holding only tokenizer files");
}

struct TokenizeFlags {
  std::string model;
  std::optional<std::string> text, file;
  bool json;

  void declare(FlagTable& f) {
    declare_tokenizer_folder(f, model);
    f.optional(text, "--text", "S", "the text to encode");
    f.optional(file, "--file", "PATH", "a regular file to encode (at most 256 MiB)");
    f.toggle(json, "--json", "print {\"ids\": [...]} instead of comma-separated ids");
  }
};

/// The ids of encode(text), with the tokenizer's default special tokens, as `retnet score
/// --tokens` and `retnet detokenize --ids` read them.
inline int tokenize(const TokenizeFlags& flags) {
  if (flags.text.has_value() == flags.file.has_value())
    throw UsageError("tokenize: give exactly one of --text, --file");
  const auto tokenizer = load_tokenizer(flags.model);
  const std::vector<int32_t> ids = tokenizer->encode(
      flags.text ? *flags.text : read_regular_file(*flags.file, kMaxTextFileBytes, "--file"));
  if (flags.json) {
    std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
  std::cout << line << "\n";
  return 0;
}

struct DetokenizeFlags {
  std::string model;
  std::string ids;

  void declare(FlagTable& f) {
    declare_tokenizer_folder(f, model);
    f.required(ids, "--ids", "LIST", "comma-separated token ids");
  }
};

/// decode(ids) to stdout: special tokens skipped. Into a pipe or a file the bytes are exactly
/// the text (so detokenize(tokenize(x)) == x); on a terminal a newline follows a text that does
/// not end with one, so that the shell's prompt starts on a line of its own.
inline int detokenize(const DetokenizeFlags& flags) {
  const auto tokenizer = load_tokenizer(flags.model);
  const std::string text = tokenizer->decode(parse_token_list(flags.ids, "detokenize"));
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (isatty(fileno(stdout)) && (text.empty() || text.back() != '\n')) std::fputc('\n', stdout);
  return 0;
}

}  // namespace retnet::cli
