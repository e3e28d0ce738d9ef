// libFuzzer target: treats the input as a model.safetensors.index.json and parses its tensor
// map (bounded JSON depth, no duplicate keys, "weight_map" of plain file names). Only
// retnet::Error may escape; a crash, a sanitizer report, another exception or a broken
// invariant of the result is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "retnet/core/error.hpp"
#include "retnet/io/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto map = retnet::CheckpointReader::parse_index(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz-index");
    // A shard name that survives is a plain file name: never a path out of the folder.
    if (map.empty()) std::abort();
    for (const auto& [name, shard] : map)
      if (shard.empty() || shard == "." || shard == ".." ||
          shard.find_first_of(std::string("/\\\0", 3)) != std::string::npos)
        std::abort();
  } catch (const retnet::Error& e) {
    // Rejected input. Its message is one bounded line (the file is quoted only as an excerpt).
    const std::string message = e.what();
    if (message.find('\n') != std::string::npos || message.size() > 1000) std::abort();
  }
  return 0;
}
