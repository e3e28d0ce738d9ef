// libFuzzer target: hostile regular expressions meet the match budget. The input's first line
// is the Regex of a Split pre-tokenizer (with a Replace normalizer on the same pattern); the
// rest is the text to encode. A tiny tokenizer.json is built around them, loaded and run: only
// retnet::Error may escape, and every id must be a token.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/tokenizers.hpp"

namespace {

std::string tokenizer_json(const std::string& regex) {
  nlohmann::json pattern = {{"Regex", regex}};
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", {{"type", "Replace"}, {"pattern", pattern}, {"content", "ab"}}},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", pattern}, {"behavior", "Isolated"}, {"invert", false}}},
      {"post_processor", nullptr},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "?"},
        {"vocab", {{"?", 0}, {"a", 1}, {"b", 2}, {"c", 3}, {"ab", 4}, {"bc", 5}}},
        {"merges", {"b c", "a b"}}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string regex(input.substr(0, newline));
  const std::string text(newline == std::string_view::npos ? std::string_view()
                                                           : input.substr(newline + 1));
  try {
    const retnet::HfTokenizer tok = retnet::HfTokenizer::from_json(tokenizer_json(regex));
    for (const std::string& t : {text, text + text + text}) {
      try {
        const std::vector<int32_t> ids = tok.encode(t);
        for (int32_t id : ids)
          if (id < 0 || id >= tok.vocab_size()) std::abort();
      } catch (const retnet::InvalidArgument&) {
        // A pattern at its limits, or text that is not UTF-8: refusals are fine.
      }
    }
  } catch (const retnet::Error&) {
  }
  return 0;
}
