// What a model folder must be, checked before anything in it is opened, so that a path that is
// not one gets one line saying what was given and what is expected: a file named instead of its
// folder (model.safetensors, config.json) names the folder to give; weights in a format that is
// not read (GGUF, PyTorch pickles) say so and how to get safetensors. Pickles (pytorch_model.bin,
// *.pt, *.pth) are never unpickled, on purpose: loading a pickle can run arbitrary code.
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"

namespace retnet {

namespace detail {

/// How to get what load_model reads, for a message about weights it does not read.
inline const char* const kHowToGetSafetensors =
    "get the model's *.safetensors files (and config.json) from its Hugging Face repository, or "
    "convert with transformers: model.save_pretrained(DIR, safe_serialization=True)";

/// The lower-case extension of `path` (".gguf"), empty when it has none.
inline std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

/// What a weight file of a format load_model does not read is, or "" for any other file.
inline std::string unread_weight_format(const std::string& path) {
  const std::string ext = lower_extension(path);
  if (ext == ".gguf") return "a GGUF file, a format retnet does not read";
  if (ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt")
    return "a PyTorch pickle, which retnet does not read (never unpickled: loading a pickle can "
           "run code)";
  return "";
}

}  // namespace detail

/// The files directly in `dir` whose weights are in a format that is not read (GGUF, PyTorch
/// pickles), sorted; empty when there are none or the folder cannot be listed.
inline std::vector<std::string> unread_weight_files(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (!detail::unread_weight_format(it->path().string()).empty())
      found.push_back(it->path().filename().string());
  std::sort(found.begin(), found.end());
  return found;
}

/// Refuses `dir` unless it is a folder, in one line that says what was given: a GGUF or PyTorch
/// file ("PATH: a GGUF file, a format retnet does not read: expected a model folder ...; get
/// ..."), another file ("PATH: is a file, expected a model folder (config.json and safetensors
/// weights): give the folder that holds it, PARENT"), or what require_folder says.
inline void require_model_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::status(dir, ec).type() != fs::file_type::regular) return require_folder(dir);
  const std::string format = detail::unread_weight_format(dir);
  if (!format.empty())
    throw FormatError(dir + ": " + format +
                      ": expected a model folder with config.json and safetensors weights; " +
                      detail::kHowToGetSafetensors);
  const std::string parent = fs::path(dir).parent_path().string();
  throw FormatError(dir +
                    ": is a file, expected a model folder (config.json and safetensors weights): "
                    "give the folder that holds it, " +
                    (parent.empty() ? std::string(".") : parent));
}

/// For a folder without model.safetensors: what it holds instead, as the end of the message
/// ("; it holds pytorch_model.bin, a PyTorch pickle, ...; get ..."), or "" when nothing of note.
inline std::string unread_weights_note(const std::string& dir) {
  const std::vector<std::string> files = unread_weight_files(dir);
  if (files.empty()) return "";
  std::string names;
  for (size_t i = 0; i < files.size() && i < 3; ++i) names += (i ? ", " : "") + files[i];
  if (files.size() > 3) names += " and " + std::to_string(files.size() - 3) + " more";
  return "; it holds " + names + ": " + detail::unread_weight_format(files[0]) + "; " +
         detail::kHowToGetSafetensors;
}

}  // namespace retnet
