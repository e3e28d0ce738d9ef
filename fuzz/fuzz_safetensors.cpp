// libFuzzer target: treats the input as a whole safetensors file held in memory, parses
// its header and reads every (bounded) tensor as float, then loads it as the weights of a
// tiny model (prefix detection, names, shapes, leftovers, non-finite values) through the model
// loader. Only retnet::Error may escape the library, with a one-line bounded message; anything
// else (crash, sanitizer report, other exception, a multi-line or unbounded message) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/io/load.hpp"
#include "retnet/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const retnet::SafetensorsFile file = retnet::SafetensorsFile::parse("fuzz-input", data, size);
    std::vector<float> buffer;
    for (const retnet::TensorInfo& t : file.tensors()) {
      // A validated entry lies inside the data area and spans exactly numel elements;
      // a violation would be a reader bug, so make it a crash the fuzzer reports.
      if (t.end > file.data_size() || t.begin > t.end ||
          t.nbytes() != static_cast<uint64_t>(t.numel()) * retnet::dtype_size(t.dtype))
        std::abort();
      if (t.numel() > (int64_t{1} << 20)) continue;  // keep each run small and fast
      buffer.assign(static_cast<size_t>(t.numel()), 0.0f);
      file.read(t, buffer.data());
    }
    // The loader on the same bytes: a model with d 4, one head, one layer, vocab 8.
    retnet::ModelConfig config;
    config.vocab_size = 8, config.embed_dim = 4, config.value_embed_dim = 4, config.heads = 1;
    config.ffn_dim = 4, config.layers = 1;
    retnet::CheckpointReader reader("fuzz-input",
                                    retnet::SafetensorsFile::parse("fuzz-input", data, size));
    retnet::load_weights<float>(reader, config);
  } catch (const retnet::Error& e) {
    // Rejected input: the expected outcome for most fuzz cases. Its message is one bounded
    // line: the file's content is quoted only as a bounded, escaped excerpt.
    const std::string message = e.what();
    if (message.find('\n') != std::string::npos || message.size() > 1000) std::abort();
  }
  return 0;
}
