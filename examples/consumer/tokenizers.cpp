// Uses the installed package's RetNet::tokenizers: loads a tokenizer.json folder (the first
// argument) and checks that a text survives encode and decode.
#include <cstdio>
#include <retnet/tokenizers.hpp>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR\n", argv[0]);
    return 2;
  }
  try {
    const auto tokenizer = retnet::load_tokenizer(argv[1]);
    const std::string text = "the cat sat on the mat, caf\xC3\xA9 \xF0\x9F\x98\x80";
    const auto ids = tokenizer->encode(text);
    const std::string back = tokenizer->decode(ids);
    std::printf("retnet consumer: %zu ids, round trip %s\n", ids.size(),
                back == text ? "ok" : "FAILED");
    return back == text ? 0 : 1;
  } catch (const retnet::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
