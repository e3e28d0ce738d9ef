// Loading a model folder (config.json + model.safetensors or its sharded index) into a
// RetNetModel. Tensors stream straight from the file into their final matrices, converted to
// Scalar on the way, so peak memory is the weights plus one read block.
#pragma once

#include <string>

#include "retnet/io/checkpoint.hpp"
#include "retnet/model/retnet_model.hpp"

namespace retnet {

/// Reads every tensor `config` asks for from `reader`, then checks that nothing is left over.
template <typename Scalar>
ModelWeights<Scalar> load_weights(CheckpointReader& reader, const ModelConfig& config) {
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
  const ModelConfig config = ModelConfig::load(dir + "/config.json");
  return RetNetModel<Scalar>(config, load_weights<Scalar>(dir, config));
}

}  // namespace retnet
