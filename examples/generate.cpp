// The smallest useful program: load a model folder and generate text greedily.
//     retnet_generate_example MODEL_DIR "PROMPT"
#include <cstdio>
#include <retnet/retnet.hpp>
#include <retnet/tokenizers.hpp>  // load_tokenizer

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR PROMPT\n", argv[0]);
    return 2;
  }
  try {
    auto model = retnet::load_model<float>(argv[1]);
    const auto tokenizer = retnet::load_tokenizer(argv[1], model.config().vocab_size);
    retnet::Generator<float> generator(model, *tokenizer);
    retnet::GenerationParams params;
    params.max_new_tokens = 200;
    params.sampler.temperature = 0;  // greedy
    std::printf("%s", argv[2]);
    generator.generate(argv[2], params, [](retnet::Index, int32_t, const std::string& piece) {
      std::printf("%s", piece.c_str());
      std::fflush(stdout);
    });
    std::printf("\n");
  } catch (const retnet::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
