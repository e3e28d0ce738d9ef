// Writing a model folder that load_model() reads back: config.json and model.safetensors with
// the checkpoint names of docs/NUMERICS.md#tensor-names (torchscale's, unprefixed).
#pragma once

#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "retnet/io/safetensors.hpp"
#include "retnet/model/weights.hpp"

namespace retnet {

/// Writes `dir`/config.json and `dir`/model.safetensors (float32, or `dtype`) for `weights`.
/// The folder must exist. Tests and tools use it to make model folders; it holds one float32
/// copy of the weights while writing.
template <typename Scalar>
void save_model(const std::string& dir, const ModelConfig& config,
                const ModelWeights<Scalar>& weights, DType dtype = DType::F32) {
  std::vector<std::vector<float>> values;  // row-major float copies that SavedTensor points into
  std::vector<SavedTensor> tensors;
  weights.visit(config,
                [&](const std::string& name, const auto& t, const std::vector<int64_t>& shape) {
                  std::vector<float> v(static_cast<size_t>(t.rows() * t.cols()));
                  if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value) {
                    std::vector<Scalar> row(static_cast<size_t>(t.cols()));
                    for (Index r = 0; r < t.rows(); ++r) {
                      t.copy_row(r, row.data());
                      for (Index c = 0; c < t.cols(); ++c)
                        v[r * t.cols() + c] = static_cast<float>(row[c]);
                    }
                  } else {
                    for (Index i = 0; i < t.size(); ++i) v[i] = static_cast<float>(t.data()[i]);
                  }
                  values.push_back(std::move(v));
                  tensors.push_back({name, dtype, shape, nullptr});
                });
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = values[i].data();
  save_safetensors(dir + "/model.safetensors", tensors);
  std::ofstream out(dir + "/config.json");
  out << config.to_json().dump(2) << "\n";
  if (!out) throw Error(dir + "/config.json: write failed");
}

}  // namespace retnet
