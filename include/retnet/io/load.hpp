// Loading a model folder (config.json + model.safetensors or its sharded index) into a
// RetNetModel. Every tensor the config asks for is first checked against the checkpoint
// headers (present, right shape, nothing left over), so a config whose sizes do not match the
// checkpoint fails before any weight is allocated. Tensors then stream straight from the file
// into their final matrices, converted to Scalar on the way (NaN or infinite values refused),
// so peak memory is the weights plus one read block.
//
// The family (torchscale, syncdoth, fla) comes from config.json and must agree with the tensor
// names (docs/FORMATS.md#published-checkpoint-families); a folder that mixes them is refused.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "retnet/core/file.hpp"
#include "retnet/io/checkpoint.hpp"
#include "retnet/model/retnet_model.hpp"

namespace retnet {

/// `config` (from config.json) checked against the checkpoint's tensor names, with what only
/// the tensors tell: syncdoth for torchscale keys with Hugging Face names ("model."), and fla's
/// fused MLP (files before 2025 have no up_proj). Throws FormatError, in one line, when the
/// config and the tensors are of different families, or for tensors of unsupported variants.
inline ModelConfig resolve_family(ModelConfig config, CheckpointReader& reader) {
  const bool fla_names = reader.naming() == TensorNaming::kFla;
  if (fla_names != (config.family == Family::kFla))
    throw FormatError(reader.dir() + ": mixes checkpoint families: config.json is " +
                      (config.family == Family::kFla ? "fla's (hidden_size, num_heads)"
                                                     : "torchscale's (decoder_embed_dim)") +
                      " but the tensors are " +
                      (fla_names ? "fla's (model.embeddings.weight)"
                                 : "torchscale's (" + reader.prefix() + "embed_tokens.weight)"));
  for (const std::string& name : reader.names())
    if (name.find("decay_proj") != std::string::npos)
      throw FormatError(reader.dir() + ": tensor " + name +
                        " is syncdoth's tensor-parallel decay_proj: not supported");
  if (fla_names) {
    config.fused_gate_up = !reader.has("layers.0.mlp.up_proj.weight");
    return config;
  }
  if (reader.prefix() == "model.") config.family = Family::kSyncdoth;
  // syncdoth (and torchscale) store ln(gamma_h) as retnet_rel_pos.decay: derived from the config,
  // so it must agree with the decays the config gives (use_lm_decay or not).
  if (reader.has("retnet_rel_pos.decay") &&
      reader.info("retnet_rel_pos.decay").shape == std::vector<int64_t>{config.heads}) {
    std::vector<double> stored(static_cast<size_t>(config.heads));
    reader.read<double>("retnet_rel_pos.decay", {config.heads}, stored.data());
    const auto gammas =
        config.lm_decay ? lm_decays<double>(config.heads) : default_decays<double>(config.heads);
    for (int64_t h = 0; h < config.heads; ++h)
      if (!(std::abs(std::exp(stored[h]) - gammas[h]) <= 1e-5))
        throw FormatError(reader.dir() + ": stored retnet_rel_pos.decay gives gamma_" +
                          std::to_string(h) + " = " + std::to_string(std::exp(stored[h])) +
                          ", the config (use_lm_decay " + (config.lm_decay ? "true" : "false") +
                          ") gives " + std::to_string(gammas[h]));
  }
  return config;
}

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

/// The config of the model folder `dir`, resolved against its tensors (resolve_family).
inline ModelConfig load_config(const std::string& dir, CheckpointReader& reader) {
  return resolve_family(ModelConfig::load(dir + "/config.json"), reader);
}

/// Loads `dir/config.json` and the weights of `dir`. Throws FormatError naming the file and
/// tensor on any mismatch.
template <typename Scalar>
RetNetModel<Scalar> load_model(const std::string& dir) {
  ModelConfig config;
  try {
    config = ModelConfig::load(path_in_folder(dir, "config.json"));
  } catch (const FormatError&) {
    // syncdoth's layout of 2023-09 has a config of its own: name the layout, not a missing key.
    try {
      CheckpointReader probe(dir);
    } catch (const FormatError& e) {
      if (std::string(e.what()).find("September 2023") != std::string::npos) throw;
    }
    throw;
  }
  CheckpointReader reader(dir);
  config = resolve_family(config, reader);
  return RetNetModel<Scalar>(config, load_weights<Scalar>(reader, config));
}

}  // namespace retnet
