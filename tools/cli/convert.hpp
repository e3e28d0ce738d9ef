// `retnet convert`: a copy of a model folder with its linear maps stored in another weight type,
// which loads without converting again; the tokenizer files beside the weights come along.
#pragma once

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <retnet/retnet.hpp>
#include <string>
#include <system_error>

#include "cli/common.hpp"

namespace retnet::cli {

struct ConvertFlags {
  std::string model, out;
  WeightType weights;
  std::optional<int> threads;

  void declare(FlagTable& f) {
    declare_model(f, model);
    f.required(out, "-o", "DIR", "output folder (created; must not hold a model already)");
    f.required(weights, "--weights", "T", "weight type to write: bf16 | q8 | q4 | f32");
    tools::declare_threads(f, threads);
  }
};

/// Files beside the weights that a converted folder keeps, copied unchanged.
inline const char* const kFolderFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                           "special_tokens_map.json", "generation_config.json"};

inline int convert(const ConvertFlags& flags) {
  set_threads(flags.threads);
  const std::string& in = flags.model;
  const std::string& out = flags.out;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path(out) / "config.json", ec) ||
      fs::exists(fs::path(out) / "model.safetensors", ec))
    throw UsageError("convert: " + out + " already holds a model; choose a new folder");
  if (fs::equivalent(in, out, ec)) throw UsageError("convert: -o must differ from -m");
  const auto t0 = std::chrono::steady_clock::now();
  const Model model = load_model<float>(in, LoadOptions{flags.weights});
  fs::create_directories(out, ec);
  if (ec) throw UsageError("convert: cannot create " + out + ": " + ec.message());
  save_model(out, model.config(), model.weights());
  for (const char* name : kFolderFiles) {
    const fs::path from = fs::path(in) / name;
    if (!fs::is_regular_file(from, ec)) continue;
    if (!fs::copy_file(from, fs::path(out) / name, ec))
      throw UsageError("convert: cannot copy " + from.string() + ": " + ec.message());
  }
  std::fprintf(stderr, "converted %s to %s (%s): weights %.1f MB, in %.1f s\n", in.c_str(),
               out.c_str(), weight_type_name(model.config().weights),
               double(model.weights().size_bytes(model.config())) / 1e6, seconds_since(t0));
  return 0;
}

}  // namespace retnet::cli
