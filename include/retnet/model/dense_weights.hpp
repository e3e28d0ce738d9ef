// Dense copies of a model's weights for training (DenseModelWeights: every linear map a row-major
// Matrix), and back into the panels that RetNetModel multiplies. Both walk the one name/shape
// table of ModelWeights::visit, so no tensor is named twice.
#pragma once

#include <vector>

#include "retnet/model/retnet_model.hpp"
#include "retnet/model/weights.hpp"

namespace retnet {

namespace detail {

/// The tensors of a DenseModelWeights as (values, elements) in visit order.
template <typename Scalar, typename Weights>
std::vector<std::pair<Scalar*, Index>> dense_tensors(const ModelConfig& c, Weights& w) {
  std::vector<std::pair<Scalar*, Index>> out;
  w.visit(c, [&](const std::string&, auto& t, const std::vector<int64_t>&) {
    out.emplace_back(const_cast<Scalar*>(t.data()), static_cast<Index>(t.size()));
  });
  return out;
}

}  // namespace detail

/// Dense copies of `w` (any weight type: f16, bf16, q8 and q4 maps are decoded to Scalar).
template <typename Scalar>
DenseModelWeights<Scalar> dense_weights(const ModelConfig& c, const ModelWeights<Scalar>& w) {
  DenseModelWeights<Scalar> dense;
  dense.allocate(c);
  const auto targets = detail::dense_tensors<Scalar>(c, dense);
  size_t i = 0;
  w.visit(c, [&](const std::string&, const auto& t, const std::vector<int64_t>& shape) {
    Scalar* out = targets[i++].first;
    if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value) {
      for (Index r = 0; r < shape[0]; ++r) t.copy_row(r, out + r * shape[1]);
    } else {
      std::copy_n(t.data(), t.size(), out);
    }
  });
  return dense;
}

/// The weights as RetNetModel reads them: f32 panels of the dense maps (for Scalar = float;
/// double models keep double).
template <typename Scalar>
ModelWeights<Scalar> linear_weights(const ModelConfig& c, const DenseModelWeights<Scalar>& dense) {
  const auto sources = detail::dense_tensors<Scalar>(c, dense);
  ModelWeights<Scalar> w;
  w.layers.resize(static_cast<size_t>(c.layers));
  size_t i = 0;
  w.visit(c, [&](const std::string&, auto& t, const std::vector<int64_t>& shape) {
    const Scalar* in = sources[i++].first;
    const Index cols = shape.size() == 2 ? shape[1] : 1;
    ModelWeights<Scalar>::write_row_major(t, shape, [&](Index first, Index n, Scalar* out) {
      std::copy_n(in + first * cols, n * cols, out);
    });
  });
  return w;
}

/// A zero state of `batch` sequences at position 0, shaped for config `c`.
template <typename Scalar>
ModelState<Scalar> zero_state(const ModelConfig& c, Index batch) {
  const Index columns = RetNetModel<Scalar>::layer_params(c).retention.state_columns();
  ModelState<Scalar> s;
  s.positions.assign(static_cast<size_t>(batch), 0);
  s.layers.reserve(static_cast<size_t>(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    RetentionState<Scalar> t(batch, c.heads, c.key_head_dim(), columns);
    t.setZero();
    s.layers.push_back(std::move(t));
  }
  return s;
}

}  // namespace retnet
