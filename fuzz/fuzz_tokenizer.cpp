// libFuzzer target: treats the input as a tokenizer.json (up to its first NUL byte; what
// follows the NUL is a text to encode), loads it, and with what loaded encodes that text and a
// few fixed ones (valid and invalid UTF-8), then decodes the ids, whole and token by token.
// Only retnet::Error may escape the library; anything else (crash, sanitizer report, other
// exception) is a finding, and so is an id that encode produces but decode rejects.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/tokenizers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  std::vector<std::string> texts = {"Hello, world! It's 2024.\n\tcode  <s>x</s> ",
                                    "caf\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x98\x80", "a\xFF\xC0 b", ""};
  if (nul != std::string_view::npos) texts.emplace_back(input.substr(nul + 1));
  try {
    const retnet::HfTokenizer tok = retnet::HfTokenizer::from_json(json, {}, "fuzz-input");
    for (const std::string& text : texts) {
      std::vector<int32_t> ids;
      try {
        ids = tok.encode(text);
      } catch (const retnet::InvalidArgument&) {
        continue;  // invalid UTF-8 for this kind of tokenizer, or a regex at its limits
      }
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) std::abort();
      try {
        tok.decode(ids);
        for (int32_t id : ids) tok.decode_token(id);
      } catch (const retnet::InvalidArgument& e) {
        // Every id encode makes is a token: decode may only fail in a decoder's expression.
        if (std::string(e.what()).find("regular expression") == std::string::npos) std::abort();
      }
    }
  } catch (const retnet::Error&) {
    // Rejected input: the expected outcome for most fuzz cases.
  }
  return 0;
}
