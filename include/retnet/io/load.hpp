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
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "retnet/core/file.hpp"
#include "retnet/io/checkpoint.hpp"
#include "retnet/io/config_json.hpp"
#include "retnet/io/model_folder.hpp"
#include "retnet/model/retnet_model.hpp"

namespace retnet {

/// `config` (from config.json) checked against the checkpoint's tensor names, with what only
/// the tensors tell: a port's prefix (syncdoth's "model." before torchscale's names) and fla's
/// fused MLP (files before 2025 have no up_proj). Throws FormatError, in one line, when the
/// config and the tensors are of different families.
inline ModelConfig resolve_family(ModelConfig config, CheckpointReader& reader) {
  const FamilyTable& named = reader.family();  // the family of the tensor names
  const FamilyTable& keyed = family_table(config.family);
  const auto describe = [](const FamilyTable& t, const std::string& what) {
    return std::string(t.name) + "'s (" + what + ")";
  };
  if (std::string(named.tensors.embed) != keyed.tensors.embed) {
    std::string keys;
    for (const char* key : keyed.keys.identity)
      keys += (keys.empty() ? "" : ", ") + std::string(key);
    throw FormatError(reader.dir() + ": mixes checkpoint families: config.json is " +
                      describe(keyed, keys) + " but the tensors are " +
                      describe(named, reader.prefix() + named.tensors.embed));
  }
  if (!named.keys.markers.empty()) config.family = named.family;  // the port's own names
  if (named.fla_switches) {
    config.fused_gate_up = !reader.has("layers.0." + std::string(named.tensors.gate));
    return config;
  }
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

/// How far a load has come, for a progress display: the stored bytes of the tensors read (and
/// converted) so far and of all the tensors the load reads.
struct LoadProgress {
  uint64_t bytes_done = 0, bytes_total = 0;
  std::string stored;                     // the stored dtypes, "F16" or "BF16, F32"
  WeightType weights = WeightType::kF32;  // what the linear maps become
};

/// How load_model reads a folder.
struct LoadOptions {
  LoadOptions() = default;
  LoadOptions(std::optional<WeightType> weights_,  // NOLINT: LoadOptions{type} reads as the type
              std::function<void(const LoadProgress&)> progress_ = {})
      : weights(weights_), progress(std::move(progress_)) {}

  /// The type of every linear map and of the embedding (ops/weight_type.hpp). Unset keeps the
  /// checkpoint's own where the model's scalar supports it: a converted folder's q8 or q4, f16 or
  /// bf16 when every linear map is stored as F16 or as BF16 (their values kept as they are), f32
  /// otherwise (and always f32 for a double model).
  std::optional<WeightType> weights;
  /// Round x to bfloat16 inside the products too (LinearWeight::set_bf16_dots; vdpbf16ps where
  /// the CPU has AVX512-BF16): bf16 weights only.
  bool bf16_dots = false;
  /// Called once before the first tensor is read (bytes_done 0) and once after each tensor, so
  /// that its last call has bytes_done == bytes_total; unset for none.
  std::function<void(const LoadProgress&)> progress;
};

namespace detail {

/// The names and shapes under which a converted folder stores a q8/q4 weight `name` [rows,
/// cols]: its codes under the weight's own name, its scales beside it
/// (docs/FORMATS.md, "Quantised weights").
struct StoredTensors {
  std::string codes, scales;
  std::vector<int64_t> code_shape, scale_shape;
  DType code_dtype;

  StoredTensors(const std::string& name, const std::vector<int64_t>& shape, WeightType type)
      : codes(name),
        scales(name + "_scale"),
        code_shape{shape[0], code_bytes(type, shape[1])},
        scale_shape{shape[0], quant_blocks(shape[1])},
        code_dtype(type == WeightType::kQ8 ? DType::I8 : DType::U8) {}
};

/// Calls f(name, shape, is_linear) for every tensor of `config` (linear maps: LinearWeights).
template <typename Scalar, typename F>
void visit_shapes(const ModelConfig& config, int64_t layers, F&& f) {
  ModelConfig probe_config = config;
  probe_config.layers = layers;
  ModelWeights<Scalar> probe;  // empty tensors: only the layer list is allocated
  probe.layers.resize(static_cast<size_t>(layers));
  probe.visit(probe_config,
              [&](const std::string& name, const auto& t, const std::vector<int64_t>& shape) {
                f(name, shape, is_linear_weight<std::decay_t<decltype(t)>>::value);
              });
}

/// The bytes `name` [shape] takes in the checkpoint (a q8/q4 map's codes and scales).
inline uint64_t stored_bytes(const CheckpointReader& reader, const std::string& name,
                             const std::vector<int64_t>& shape, bool linear, WeightType stored) {
  if (!linear || !is_block_quantised(stored)) return reader.info(name).nbytes();
  const StoredTensors t(name, shape, stored);
  return reader.info(t.codes).nbytes() + reader.info(t.scales).nbytes();
}

/// The stored dtypes of the checkpoint's tensors, by name: "F16" or "BF16, F32".
inline std::string stored_dtypes(const CheckpointReader& reader) {
  std::set<std::string> names;
  for (const auto& shard : reader.shards())
    for (const auto& t : shard.tensors()) names.insert(dtype_name(t.dtype));
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace detail

/// The number of parameters `config` describes: the values of every weight it asks for, however
/// they are stored (a q8 or q4 map counts its weights, not its codes and scales).
inline int64_t parameter_count(const ModelConfig& config) {
  int64_t count = 0;
  detail::visit_shapes<float>(config, config.layers,
                              [&](const std::string&, const std::vector<int64_t>& shape, bool) {
                                int64_t values = 1;
                                for (int64_t extent : shape) values *= extent;
                                count += values;
                              });
  return count;
}

/// The type the checkpoint stores its linear maps in: the config's q8/q4 for a converted
/// folder, f16 (bf16) when every linear map is an F16 (BF16) tensor, f32 otherwise.
template <typename Scalar>
WeightType stored_weight_type(const ModelConfig& config, const CheckpointReader& reader) {
  if (is_block_quantised(config.weights)) return config.weights;
  bool all_f16 = true, all_bf16 = true;
  detail::visit_shapes<Scalar>(
      config, std::min<int64_t>(config.layers, 1),
      [&](const std::string& name, const std::vector<int64_t>&, bool linear) {
        if (!linear || !reader.has(name)) return;
        all_f16 &= reader.dtype(name) == DType::F16;
        all_bf16 &= reader.dtype(name) == DType::BF16;
      });
  return all_f16 ? WeightType::kF16 : all_bf16 ? WeightType::kBF16 : WeightType::kF32;
}

/// Checks, from the headers alone, that `reader` holds every tensor `config` asks for with the
/// shape it asks for (the codes and scales of each linear map in a q8/q4 folder), and nothing
/// else; reads no weight and allocates nothing in proportion to the config's sizes. Throws
/// FormatError "missing tensor", "has shape [..], expected [..]" or "unexpected tensor".
template <typename Scalar>
void check_checkpoint_shapes(CheckpointReader& reader, const ModelConfig& config) {
  // visit() walks the tensors of a ModelWeights whose layers exist; empty ones cost a few hundred
  // bytes a layer. Each layer has tensors of its own, so a checkpoint of n tensors holds at most
  // n layers: a config asking for more is probed for n + 1 layers only, among which (or before
  // which, in visit order) lies the first missing tensor.
  const int64_t layers =
      std::min<int64_t>(config.layers, static_cast<int64_t>(reader.tensor_count()) + 1);
  const WeightType stored = config.weights;
  const auto expect = [&](const std::string& name, const std::vector<int64_t>& shape, bool linear) {
    if (!linear || !is_block_quantised(stored)) return reader.expect(name, shape);
    const detail::StoredTensors t(name, shape, stored);
    reader.expect(t.codes, t.code_shape);
    reader.expect(t.scales, t.scale_shape);
  };
  detail::visit_shapes<Scalar>(config, layers, expect);
  if (layers < config.layers)  // unreachable by the count above; kept as a guard
    throw FormatError(reader.dir() + ": missing tensors of layer " + std::to_string(layers) +
                      " (the config asks for " + std::to_string(config.layers) + " layers)");
  if (config.tie_embeddings && reader.has("output_projection.weight"))
    expect("output_projection.weight", {config.vocab_size, config.embed_dim}, true);
  reader.check_all_consumed();
}

/// Reads the linear map `name` [rows, cols] into t as `type`, from the checkpoint's `stored`
/// type: codes straight into the panels when the two agree, else through Scalar rows a panel at
/// a time (a q8/q4 weight asked for in another type is decoded first).
template <typename Scalar>
void read_linear(CheckpointReader& reader, const std::string& name,
                 const std::vector<int64_t>& shape, WeightType stored, WeightType type,
                 LinearWeight<Scalar>& t) {
  const Index rows = shape[0], cols = shape[1];
  if (!is_block_quantised(stored)) {
    t.assign(rows, cols, type, [&](Index first, Index n, Scalar* p) {
      reader.read_rows<Scalar>(name, shape, first, n, p);
    });
    return;
  }
  const detail::StoredTensors names(name, shape, stored);
  const auto read_stored = [&](Index first, Index n, StoredRows& out) {
    const uint64_t code_row = static_cast<uint64_t>(names.code_shape[1]);
    const uint64_t scale_row = 2 * static_cast<uint64_t>(names.scale_shape[1]);
    reader.read_bytes(names.codes, names.code_shape, names.code_dtype, first * code_row,
                      n * code_row, out.codes.data());
    reader.read_bytes(names.scales, names.scale_shape, DType::F16, first * scale_row, n * scale_row,
                      reinterpret_cast<uint8_t*>(out.scales.data()));
    for (uint16_t h : out.scales)
      if ((h & 0x7c00u) == 0x7c00u)
        throw FormatError(reader.dir() + ": tensor " + name +
                          "_scale: a scale is NaN or infinite: expected finite weights");
  };
  if (type == stored) return t.assign_stored(rows, cols, stored, read_stored);
  LinearWeight<Scalar> codes;
  codes.assign_stored(rows, cols, stored, read_stored);
  t.assign(rows, cols, type, [&](Index first, Index n, Scalar* p) {
    for (Index r = 0; r < n; ++r) codes.copy_row(first + r, p + r * cols);
  });
}

/// Reads every tensor `config` asks for from `reader`, after checking all their shapes (and that
/// nothing is left over) against the headers: nothing is allocated for a mismatched config. The
/// linear maps become `type` (the result's config.weights tells which it took).
template <typename Scalar>
ModelWeights<Scalar> load_weights(CheckpointReader& reader, ModelConfig& config,
                                  const LoadOptions& options = {}) {
  check_checkpoint_shapes<Scalar>(reader, config);
  const WeightType stored = stored_weight_type<Scalar>(config, reader);
  const WeightType type =
      !std::is_same_v<Scalar, float> ? WeightType::kF32 : options.weights.value_or(stored);
  if (!std::is_same_v<Scalar, float> && options.weights && *options.weights != WeightType::kF32)
    throw InvalidArgument(std::string("weights ") + weight_type_name(*options.weights) +
                          ": only float models hold f16, bf16, q8 or q4 weights");
  if (options.bf16_dots && type != WeightType::kBF16)
    throw InvalidArgument(std::string("bf16 dots need bf16 weights, and these load as ") +
                          weight_type_name(type) + " (ask for bf16: --weights bf16)");
  // Tied checkpoints usually omit the output projection; if one is stored anyway, use it (and
  // keep the embedding apart).
  const bool stored_output = config.tie_embeddings && reader.has("output_projection.weight");
  const std::vector<int64_t> output_shape{config.vocab_size, config.embed_dim};
  LoadProgress progress{0, 0, detail::stored_dtypes(reader), type};
  const auto count = [&](const std::string& name, const std::vector<int64_t>& shape, bool linear) {
    return detail::stored_bytes(reader, name, shape, linear, config.weights);
  };
  if (options.progress) {
    detail::visit_shapes<Scalar>(
        config, config.layers,
        [&](const std::string& name, const std::vector<int64_t>& shape, bool linear) {
          progress.bytes_total += count(name, shape, linear);
        });
    if (stored_output)
      progress.bytes_total += count("output_projection.weight", output_shape, true);
    options.progress(progress);
  }
  const auto advance = [&](const std::string& name, const std::vector<int64_t>& shape,
                           bool linear) {
    if (!options.progress) return;
    progress.bytes_done += count(name, shape, linear);
    options.progress(progress);
  };
  ModelWeights<Scalar> w;
  w.allocate(config, type);
  w.visit(config, [&](const std::string& name, auto& t, const std::vector<int64_t>& shape) {
    constexpr bool linear = is_linear_weight<std::decay_t<decltype(t)>>::value;
    if constexpr (linear)
      read_linear(reader, name, shape, config.weights, type, t);
    else
      ModelWeights<Scalar>::write_row_major(
          t, shape, [&](Index, Index, Scalar* p) { reader.template read<Scalar>(name, shape, p); });
    advance(name, shape, linear);
  });
  if (stored_output) {
    w.embed = std::move(w.output);
    read_linear(reader, "output_projection.weight", output_shape, config.weights, type, w.output);
    advance("output_projection.weight", output_shape, true);
  }
  reader.check_all_consumed();
  config.weights = type;
  w.set_bf16_dots(config, options.bf16_dots);
  return w;
}

template <typename Scalar>
ModelWeights<Scalar> load_weights(const std::string& dir, ModelConfig& config,
                                  const LoadOptions& options = {}) {
  CheckpointReader reader(dir);
  return load_weights<Scalar>(reader, config, options);
}

/// The config of the model folder `dir`, resolved against its tensors (resolve_family).
inline ModelConfig load_config(const std::string& dir, CheckpointReader& reader) {
  return resolve_family(load_config_json(path_in_folder(dir, "config.json")), reader);
}

/// Loads `dir/config.json` and the weights of `dir`. Throws FormatError naming the file and
/// tensor on any mismatch.
template <typename Scalar>
RetNetModel<Scalar> load_model(const std::string& dir, const LoadOptions& options = {}) {
  require_model_folder(dir);
  ModelConfig config;
  try {
    config = load_config_json(path_in_folder(dir, "config.json"));
  } catch (const FormatError&) {
    // syncdoth's layout of 2023-09 has a config of its own: name the layout, not a missing key;
    // weights in a format that is not read (pytorch_model.bin) matter more than the config.
    try {
      CheckpointReader probe(dir);
    } catch (const FormatError& e) {
      if (std::string(e.what()).find("September 2023") != std::string::npos ||
          !unread_weight_files(dir).empty())
        throw;
    }
    throw;
  }
  CheckpointReader reader(dir);
  config = resolve_family(config, reader);
  ModelWeights<Scalar> weights = load_weights<Scalar>(reader, config, options);
  return RetNetModel<Scalar>(config, std::move(weights));
}

}  // namespace retnet
