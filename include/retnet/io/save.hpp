// Writing a model folder that load_model() reads back: config.json and model.safetensors with
// the checkpoint names of the config's family (docs/NUMERICS.md#tensor-names, docs/FORMATS.md).
// Linear maps are written in their own type: f32 as `dtype`, f16 as F16, bf16 as BF16, q8 and q4
// as codes and scales (docs/FORMATS.md, "Quantised weights"), so a converted folder loads as it
// was saved.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "retnet/io/load.hpp"
#include "retnet/io/output_file.hpp"
#include "retnet/io/safetensors.hpp"
#include "retnet/io/safetensors_writer.hpp"
#include "retnet/model/family.hpp"
#include "retnet/model/weights.hpp"

namespace retnet {

/// Writes `dir`/config.json and `dir`/model.safetensors for `weights`, whose linear maps must all
/// be of one type. The folder must exist. Each file is written beside its name and renamed over
/// it (ReplacingFile): a symbolic link of that name is replaced, never written through. Holds one
/// stored copy of the weights while writing (float32 for f32 weights, codes for q8 and q4).
template <typename Scalar>
void save_model(const std::string& dir, ModelConfig config, const ModelWeights<Scalar>& weights,
                DType dtype = DType::F32) {
  config.weights = weights.output.type();
  // The family's first prefix, which tells the families apart when the folder is read
  // (CheckpointReader).
  const FamilyTable& family = family_table(config.family);
  const auto stored_name = [&](const std::string& name) {
    const char* stem = family.unprefixed_stem;
    return (stem && name.rfind(stem, 0) == 0 ? "" : std::string(family.prefixes.front())) + name;
  };
  std::vector<std::vector<float>> values;  // row-major float copies that SavedTensor points into
  std::vector<StoredRows> codes;           // the same for q8/q4 weights
  std::vector<SavedTensor> tensors;
  const auto save = [&](const std::string& name, const auto& t, const std::vector<int64_t>& shape) {
    if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value) {
      RETNET_REQUIRE(t.type() == config.weights, "save_model: linear maps of several types");
      if (is_block_quantised(t.type())) {
        codes.push_back(t.stored_rows(0, t.rows()));
        const detail::StoredTensors stored(stored_name(name), shape, t.type());
        tensors.push_back({stored.codes, stored.code_dtype, stored.code_shape, nullptr, nullptr});
        tensors.push_back({stored.scales, DType::F16, stored.scale_shape, nullptr, nullptr});
        return;
      }
      std::vector<float> v(static_cast<size_t>(t.rows() * t.cols()));
      std::vector<Scalar> row(static_cast<size_t>(t.cols()));
      for (Index r = 0; r < t.rows(); ++r) {
        t.copy_row(r, row.data());
        for (Index c = 0; c < t.cols(); ++c) v[r * t.cols() + c] = static_cast<float>(row[c]);
      }
      values.push_back(std::move(v));
      const DType stored = t.type() == WeightType::kF16    ? DType::F16
                           : t.type() == WeightType::kBF16 ? DType::BF16
                                                           : dtype;
      tensors.push_back({stored_name(name), stored, shape, nullptr, nullptr});
    } else {
      std::vector<float> v(static_cast<size_t>(t.size()));
      for (Index i = 0; i < t.size(); ++i) v[i] = static_cast<float>(t.data()[i]);
      values.push_back(std::move(v));
      tensors.push_back({stored_name(name), dtype, shape, nullptr, nullptr});
    }
  };
  weights.visit(config,
                [&](const std::string& name, const auto& t, const std::vector<int64_t>& shape) {
                  if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value)
                    if (&t == &weights.output && config.tie_embeddings && weights.embed.size())
                      return save(name, weights.embed, shape);  // the embedding, kept apart
                  save(name, t, shape);
                });
  if (config.tie_embeddings && weights.embed.size())  // a tied model that keeps both
    save("output_projection.weight", weights.output, {config.vocab_size, config.embed_dim});
  // Point the tensors at their data now that the vectors no longer move.
  size_t next_value = 0, next_code = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    SavedTensor& t = tensors[i];
    if (t.dtype == DType::I8 || t.dtype == DType::U8) {
      const StoredRows& c = codes[next_code++];
      t.bytes = c.codes.data();
      tensors[++i].bytes = c.scales.data();
    } else {
      t.data = values[next_value++].data();
    }
  }
  save_safetensors(dir + "/model.safetensors", tensors);
  const std::string text = config.to_json().dump(2) + "\n";
  ReplacingFile out(dir + "/config.json");
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace retnet
