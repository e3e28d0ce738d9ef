// A training checkpoint: a model folder that `retnet generate` and `score` load (config.json,
// model.safetensors in float32) plus optimizer.safetensors, the rest of what an exact resume
// needs: AdamW's moments ("m.NAME", "v.NAME", in the weights' scalar type), and in the header's
// metadata the step count, the data position (generator state and stream cursors), the batch
// shape and the fingerprint of the weights the moments belong to.
//
// The three files are first written to a staging folder inside the destination, then renamed
// over the old ones: a save that fails while writing (a full disk) leaves the previous
// checkpoint as it was.
#pragma once

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "retnet/io/safetensors.hpp"
#include "retnet/io/safetensors_writer.hpp"
#include "retnet/io/save.hpp"
#include "retnet/train/trainer.hpp"

namespace retnet {

constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kTrainingStateFormat = "retnet training state 1";

namespace detail {

inline std::string join_integers(const std::vector<int64_t>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + std::to_string(values[i]);
  return s;
}

inline std::vector<int64_t> split_integers(const std::string& text, const std::string& what) {
  std::vector<int64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      values.push_back(std::stoll(item, &used));
      RETNET_REQUIRE(used == item.size(), what + ": '" + item + "' is not an integer");
    } catch (const std::logic_error&) {
      throw FormatError(what + ": '" + item + "' is not an integer");
    }
  }
  return values;
}

/// The metadata value `key` of an optimizer file, which must be there.
inline const std::string& training_metadata(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end())
    throw FormatError(f.path() + ": no \"" + key + "\" in the metadata (not a training state)");
  return it->second;
}

}  // namespace detail

namespace detail {

/// The three files of a checkpoint, written into `dir`.
template <typename Scalar>
void write_training_files(const std::string& dir, const Trainer<Scalar>& trainer) {
  const ModelConfig& c = trainer.config();
  const ModelWeights<Scalar> linear = linear_weights(c, trainer.weights());
  save_model(dir, c, linear);
  std::vector<SavedTensor> tensors;  // the moments as they are held: float32 or float64
  // parameter_views walks mutable weights; nothing is written through them here.
  auto& optimiser = const_cast<AdamW<Scalar>&>(trainer.optimiser());
  for (const auto& [prefix, moments] :
       {std::pair<const char*, DenseModelWeights<Scalar>*>{"m.", &optimiser.m},
        {"v.", &optimiser.v}})
    for (const ParameterView<Scalar>& t : parameter_views(c, *moments)) {
      if constexpr (std::is_same_v<Scalar, float>)
        tensors.push_back({prefix + t.name, DType::F32, t.shape, t.data, nullptr});
      else  // doubles as their bytes (the hosts built for are little-endian)
        tensors.push_back({prefix + t.name, DType::F64, t.shape, nullptr, t.data});
    }
  const BatchPosition& p = trainer.batcher().position();
  const std::map<std::string, std::string> metadata = {
      {"format", kTrainingStateFormat},
      {"step", std::to_string(optimiser.step)},
      {"rng", std::to_string(p.rng)},
      {"cursors", join_integers(p.cursors)},
      {"batch", std::to_string(trainer.options().batch)},
      {"seq_len", std::to_string(trainer.options().seq_len)},
      {"fingerprint", std::to_string(model_fingerprint(c, linear))}};
  save_safetensors(dir + "/" + kOptimizerFile, tensors, metadata);
}

}  // namespace detail

/// Writes `dir`/config.json, model.safetensors and optimizer.safetensors for the trainer's
/// current step. `dir` must exist. The files are written in `dir`/.checkpoint-partial, then
/// moved in: a failure while writing leaves the previous checkpoint (and no staging folder).
template <typename Scalar>
void save_training_checkpoint(const std::string& dir, const Trainer<Scalar>& trainer) {
  namespace fs = std::filesystem;
  const std::string staging = dir + "/.checkpoint-partial";
  std::error_code ec;
  fs::remove_all(staging, ec);
  fs::create_directory(staging, ec);
  if (ec) throw Error(staging + ": cannot create the staging folder (" + ec.message() + ")");
  try {
    detail::write_training_files(staging, trainer);
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
  for (const char* name : {"model.safetensors", "config.json", kOptimizerFile}) {
    fs::rename(staging + "/" + name, dir + "/" + name, ec);
    if (ec)
      throw Error(dir + "/" + name + ": cannot move the new checkpoint in (" + ec.message() + ")");
  }
  fs::remove_all(staging, ec);
}

/// Continues `trainer` (built on the weights of `dir`) from `dir`/optimizer.safetensors: its
/// moments, step count and data position. Refuses a state of other weights, batch or seq_len.
template <typename Scalar>
void resume_training(const std::string& dir, Trainer<Scalar>& trainer) {
  const SafetensorsFile f(dir + "/" + kOptimizerFile);
  RETNET_REQUIRE(detail::training_metadata(f, "format") == kTrainingStateFormat,
                 f.path() + ": not a " + std::string(kTrainingStateFormat) + " file");
  const ModelConfig& c = trainer.config();
  const auto number = [&](const char* key) {
    const auto v = detail::split_integers(detail::training_metadata(f, key), f.path() + ": " + key);
    RETNET_REQUIRE(v.size() == 1, f.path() + ": \"" + key + "\" is not one integer");
    return v[0];
  };
  const auto& o = trainer.options();
  RETNET_REQUIRE(number("batch") == o.batch && number("seq_len") == o.seq_len,
                 f.path() + ": saved with --batch " + std::to_string(number("batch")) +
                     " --seq-len " + std::to_string(number("seq_len")) +
                     "; resume with the same (given: " + std::to_string(o.batch) + ", " +
                     std::to_string(o.seq_len) + ")");
  const std::string fingerprint = detail::training_metadata(f, "fingerprint");
  RETNET_REQUIRE(
      fingerprint == std::to_string(model_fingerprint(c, linear_weights(c, trainer.weights()))),
      f.path() + ": the optimiser state belongs to other weights than " + dir +
          "/model.safetensors (an interrupted save?)");
  AdamW<Scalar>& optimiser = trainer.optimiser();
  for (const auto& [prefix, moments] :
       {std::pair<const char*, DenseModelWeights<Scalar>*>{"m.", &optimiser.m},
        {"v.", &optimiser.v}})
    for (const ParameterView<Scalar>& t : parameter_views(c, *moments)) {
      const TensorInfo& info = f.info(prefix + t.name);
      RETNET_REQUIRE(info.shape == t.shape,
                     f.path() + ": tensor " + prefix + t.name + " has another shape");
      f.read(info, t.data);
    }
  optimiser.step = number("step");
  BatchPosition p;
  p.rng = std::stoull(detail::training_metadata(f, "rng"));
  p.cursors = detail::split_integers(detail::training_metadata(f, "cursors"), f.path());
  trainer.batcher().set_position(p);
}

}  // namespace retnet
