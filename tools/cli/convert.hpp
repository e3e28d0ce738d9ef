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
#include <utility>
#include <vector>

#include "cli/common.hpp"
#include "load_progress.hpp"

namespace retnet::cli {

struct ConvertFlags {
  std::string model, out;
  WeightType weights;
  std::optional<int> threads;

  void declare(FlagTable& f) {
    declare_model(f, model);
    f.required(out, "-o", "DIR", "output folder (created; must not hold a model already)");
    f.required(weights, "--weights", "T", "weight type to write: f16 | bf16 | q8 | q4 | f32");
    tools::declare_threads(f, threads);
  }
};

/// Files beside the weights that a converted folder keeps, copied unchanged.
inline const char* const kFolderFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                           "special_tokens_map.json", "generation_config.json"};
/// The files save_model writes.
inline const char* const kWrittenFiles[] = {"config.json", "model.safetensors"};

/// Refuses an output folder that has an entry (a link included, dangling or not) named like a
/// file convert writes: writing would replace it, and a link there must not lead the copy out.
inline void check_output_folder(const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::pair<const char*, bool>> names;  // name, a model file
  for (const char* name : kWrittenFiles) names.push_back({name, true});
  for (const char* name : kFolderFiles) names.push_back({name, false});
  for (const auto& [name, model_file] : names) {
    const fs::path path = fs::path(out) / name;
    const fs::file_type type = fs::symlink_status(path, ec).type();
    if (type == fs::file_type::not_found) continue;
    if (type == fs::file_type::none)
      throw UsageError("convert: cannot examine " + path.string() + " (" + ec.message() + ")");
    if (model_file && type != fs::file_type::symlink)
      throw UsageError("convert: " + out + " already holds a model; choose a new folder");
    throw UsageError("convert: " + path.string() + " exists" +
                     (type == fs::file_type::symlink ? " (a symbolic link)" : "") +
                     ": choose a new folder");
  }
}

/// The companion files of `in` to copy, each checked as a load reads it (a regular file inside
/// the folder; a link out of it or one that resolves nowhere is a FormatError), before anything
/// is written.
inline std::vector<std::string> folder_files_to_copy(const std::string& in) {
  std::vector<std::string> names;
  for (const char* name : kFolderFiles) {
    if (!entry_exists((std::filesystem::path(in) / name).string())) continue;
    const std::string path = path_in_folder(in, name);
    open_regular_file(path);  // refuses a directory, a FIFO, a device
    names.push_back(name);
  }
  return names;
}

inline int convert(const ConvertFlags& flags) {
  set_threads(flags.threads);
  const std::string& in = flags.model;
  const std::string& out = flags.out;
  namespace fs = std::filesystem;
  std::error_code ec;
  check_output_folder(out);
  if (fs::equivalent(in, out, ec)) throw UsageError("convert: -o must differ from -m");
  const std::vector<std::string> copied = folder_files_to_copy(in);
  const auto t0 = std::chrono::steady_clock::now();
  const Model model = tools::load_model_showing_progress(in, LoadOptions{flags.weights});
  fs::create_directories(out, ec);
  if (ec) throw UsageError("convert: cannot create " + out + ": " + ec.message());
  save_model(out, model.config(), model.weights());
  for (const std::string& name : copied) {
    const std::string from = path_in_folder(in, name);
    if (!fs::copy_file(from, fs::path(out) / name, ec))
      throw UsageError("convert: cannot copy " + from + ": " + ec.message());
  }
  std::fprintf(stderr, "converted %s to %s (%s): weights %.1f MB, in %.1f s\n", in.c_str(),
               out.c_str(), weight_type_name(model.config().weights),
               double(model.weights().size_bytes(model.config())) / 1e6, seconds_since(t0));
  return 0;
}

}  // namespace retnet::cli
