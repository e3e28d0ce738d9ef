// Loading a model folder (config.json + model.safetensors or its sharded index) into a
// RetNetModel. Every tensor the config asks for is first checked against the checkpoint
// headers (present, right shape, nothing left over), so a config whose sizes do not match the
// checkpoint fails before any weight is allocated. Tensors then stream straight from the file
// into their final matrices, converted to Scalar on the way (NaN or infinite values refused),
// so peak memory is the weights plus one read block.
#pragma once

#include <algorithm>
#include <string>

#include "retnet/core/file.hpp"
#include "retnet/io/checkpoint.hpp"
#include "retnet/model/retnet_model.hpp"

namespace retnet {

/// Checks, from the headers alone, that `reader` holds every tensor `config` asks for with the
/// shape it asks for, and nothing else; reads no weight and allocates nothing in proportion to
/// the config's sizes. Throws FormatError "missing tensor", "has shape [..], expected [..]" or
/// "unexpected tensor".
template <typename Scalar>
void check_checkpoint_shapes(CheckpointReader& reader, const ModelConfig& config) {
  // visit() walks the tensors of a ModelWeights whose layers exist; empty ones cost a few hundred
  // bytes a layer. Each layer has tensors of its own, so a checkpoint of n tensors holds at most
  // n layers: a config asking for more is probed for n + 1 layers only, among which (or before
  // which, in visit order) lies the first missing tensor.
  ModelConfig probe_config = config;
  probe_config.layers =
      std::min<int64_t>(config.layers, static_cast<int64_t>(reader.tensor_count()) + 1);
  ModelWeights<Scalar> probe;
  probe.layers.resize(static_cast<size_t>(probe_config.layers));
  probe.visit(probe_config, [&](const std::string& name, auto&, const std::vector<int64_t>& shape) {
    reader.expect(name, shape);
  });
  if (probe_config.layers < config.layers)  // unreachable by the count above; kept as a guard
    throw FormatError(reader.dir() + ": missing tensors of layer " +
                      std::to_string(probe_config.layers) + " (the config asks for " +
                      std::to_string(config.layers) + " layers)");
  if (config.tie_embeddings && reader.has("output_projection.weight"))
    reader.expect("output_projection.weight", {config.vocab_size, config.embed_dim});
  reader.check_all_consumed();
}

/// Reads every tensor `config` asks for from `reader`, after checking all their shapes (and that
/// nothing is left over) against the headers: nothing is allocated for a mismatched config.
template <typename Scalar>
ModelWeights<Scalar> load_weights(CheckpointReader& reader, const ModelConfig& config) {
  check_checkpoint_shapes<Scalar>(reader, config);
  ModelWeights<Scalar> w;
  w.allocate(config);
  w.visit(config, [&](const std::string& name, auto& t, const std::vector<int64_t>& shape) {
    ModelWeights<Scalar>::write_row_major(
        t, shape, [&](Scalar* p) { reader.template read<Scalar>(name, shape, p); });
  });
  // Tied checkpoints usually omit the output projection; if one is stored anyway, use it (and
  // keep the embedding apart, in rows).
  if (config.tie_embeddings && reader.has("output_projection.weight")) {
    w.embed = w.output.to_matrix();
    w.output.assign(config.vocab_size, config.embed_dim, [&](Scalar* p) {
      reader.template read<Scalar>("output_projection.weight",
                                   {config.vocab_size, config.embed_dim}, p);
    });
  }
  reader.check_all_consumed();
  return w;
}

template <typename Scalar>
ModelWeights<Scalar> load_weights(const std::string& dir, const ModelConfig& config) {
  CheckpointReader reader(dir);
  return load_weights<Scalar>(reader, config);
}

/// Loads `dir/config.json` and the weights of `dir`. Throws FormatError naming the file and
/// tensor on any mismatch.
template <typename Scalar>
RetNetModel<Scalar> load_model(const std::string& dir) {
  const ModelConfig config = ModelConfig::load(path_in_folder(dir, "config.json"));
  return RetNetModel<Scalar>(config, load_weights<Scalar>(dir, config));
}

}  // namespace retnet
