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

/// Applies the activation in place, row by row: `x` may be a block of a wider matrix, whose rows
/// are contiguous but not adjacent.
template <typename Scalar>
void activate(Activation kind, Eigen::Ref<Matrix<Scalar>> x) {
  const Index n = x.cols();
  for (Index r = 0; r < x.rows(); ++r) {
    Scalar* p = x.row(r).data();
    if (kind == Activation::kSwish) {
      for (Index i = 0; i < n; ++i) p[i] = swish(p[i]);
    } else {
      for (Index i = 0; i < n; ++i) p[i] = gelu(p[i]);
    }
  }
}

}  // namespace retnet
