// The tensors of a DenseModelWeights as flat views (name, shape, pointer, size), in the
// checkpoint walk order: what the optimiser, the clipping and the training checkpoint iterate,
// so that weights, gradients and the optimiser's moments line up tensor by tensor.
#pragma once

#include <string>
#include <vector>

#include "retnet/model/weights.hpp"

namespace retnet {

template <typename Scalar>
struct ParameterView {
  std::string name;            // as ModelWeights::visit gives it (no checkpoint prefix)
  std::vector<int64_t> shape;  // [out, in] for a matrix, [n] for a norm weight or a bias
  Scalar* data = nullptr;
  Index size = 0;
};

/// Every tensor of `w` the config asks for (a tied model's embedding once, as the output).
template <typename Scalar>
std::vector<ParameterView<Scalar>> parameter_views(const ModelConfig& c,
                                                   DenseModelWeights<Scalar>& w) {
  std::vector<ParameterView<Scalar>> views;
  w.visit(c, [&](const std::string& name, auto& t, const std::vector<int64_t>& shape) {
    views.push_back({name, shape, t.data(), static_cast<Index>(t.size())});
  });
  return views;
}

/// Whether weight decay applies to a tensor: the matrices of the linear maps, not the norms'
/// weights, the biases, nor the embedding (nor, when tied, the output that is the embedding).
inline bool decays_weight(const ModelConfig& c, const std::string& name,
                          const std::vector<int64_t>& shape) {
  return shape.size() == 2 && name != family_table(c.family).tensors.embed;
}

}  // namespace retnet
