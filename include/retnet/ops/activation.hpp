// Element-wise activations of the feed-forward and gate paths (docs/NUMERICS.md#feed-forward).
#pragma once

#include <cmath>

#include "retnet/core/tensor.hpp"

namespace retnet {

enum class Activation { kGelu, kSwish };

template <typename Scalar>
Scalar swish(Scalar x) {
  return x / (Scalar(1) + std::exp(-x));
}

/// Exact (erf) GELU, as torch.nn.functional.gelu.
template <typename Scalar>
Scalar gelu(Scalar x) {
  return Scalar(0.5) * x * (Scalar(1) + std::erf(x / std::sqrt(Scalar(2))));
}

template <typename Scalar>
void activate(Activation kind, Eigen::Ref<Matrix<Scalar>> x) {
  Scalar* p = x.data();
  const Index n = x.size();
  if (kind == Activation::kSwish) {
    for (Index i = 0; i < n; ++i) p[i] = swish(p[i]);
  } else {
    for (Index i = 0; i < n; ++i) p[i] = gelu(p[i]);
  }
}

}  // namespace retnet
