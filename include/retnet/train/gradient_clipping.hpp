// Clipping by the global norm: all gradients scaled by one factor so that their joint L2 norm
// (over every tensor, as one vector) is at most max_norm; the direction is kept.
#pragma once

#include <cmath>

#include "retnet/train/parameter_views.hpp"

namespace retnet {

/// sqrt(Σ g²) over every tensor of `grads`, summed in double.
template <typename Scalar>
double gradient_norm(const ModelConfig& c, DenseModelWeights<Scalar>& grads) {
  double sum = 0;
  for (const ParameterView<Scalar>& g : parameter_views(c, grads))
    for (Index i = 0; i < g.size; ++i) sum += double(g.data[i]) * double(g.data[i]);
  return std::sqrt(sum);
}

/// Scales `grads` by max_norm / norm when their global norm exceeds max_norm (> 0; <= 0 turns
/// clipping off). Returns the norm before clipping (NaN or inf passes through, unscaled).
template <typename Scalar>
double clip_gradient_norm(const ModelConfig& c, DenseModelWeights<Scalar>& grads, double max_norm) {
  const double norm = gradient_norm(c, grads);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    const double scale = max_norm / norm;
    for (const ParameterView<Scalar>& g : parameter_views(c, grads))
      for (Index i = 0; i < g.size; ++i) g.data[i] = static_cast<Scalar>(double(g.data[i]) * scale);
  }
  return norm;
}

}  // namespace retnet
