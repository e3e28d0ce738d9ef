// libFuzzer target: treats the input as a config.json and parses it as load_config_json does
// (bounded JSON depth, no duplicate keys, then read_config_json's checks). Only retnet::Error may
// escape; a crash, a sanitizer report, another exception or a broken invariant is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "retnet/core/error.hpp"
#include "retnet/core/json.hpp"
#include "retnet/io/config_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const nlohmann::json j =
        retnet::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    const retnet::ModelConfig c = retnet::read_config_json(j, "fuzz-config");
    // An accepted config is valid and survives a round trip through to_json.
    if (c.embed_dim <= 0 || c.heads <= 0 || c.embed_dim % c.heads != 0 || c.layers <= 0)
      std::abort();
    if (retnet::read_config_json(c.to_json()).to_json() != c.to_json()) std::abort();
  } catch (const retnet::Error& e) {
    const std::string message = e.what();
    if (message.find('\n') != std::string::npos || message.size() > 1000) std::abort();
  }
  return 0;
}
