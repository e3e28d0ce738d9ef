// RMSNorm and LayerNorm over the last dimension (docs/NUMERICS.md#decoder). Activations are
// row-major [rows, features] matrices, one row per (batch entry, position).
#pragma once

#include <cmath>

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"

namespace retnet {

enum class NormKind { kRMSNorm, kLayerNorm };

/// Normalises `n` contiguous values in place, without weight:
///   RMSNorm:   x / sqrt(mean(x²) + eps)
///   LayerNorm: (x - mean(x)) / sqrt(var(x) + eps)
template <typename Scalar>
void normalize(NormKind kind, Scalar eps, Scalar* x, Index n) {
  Eigen::Map<Vector<Scalar>> v(x, n);
  if (kind == NormKind::kLayerNorm) v.array() -= v.mean();
  v *= Scalar(1) / std::sqrt(v.squaredNorm() / Scalar(n) + eps);
}

/// A norm with its learned weight (and bias, for LayerNorm).
template <typename Scalar>
struct Norm {
  NormKind kind = NormKind::kRMSNorm;
  Vector<Scalar> weight;
  Vector<Scalar> bias;  // LayerNorm only

  /// y = norm(x) ⊙ weight (+ bias), row by row.
  void apply(const Matrix<Scalar>& x, Scalar eps, Matrix<Scalar>& y) const {
    RETNET_REQUIRE(
        weight.size() == x.cols() && (kind != NormKind::kLayerNorm || bias.size() == x.cols()),
        "norm: input has " + std::to_string(x.cols()) + " features, the weight " +
            std::to_string(weight.size()));
    y = x;
    for (Index r = 0; r < y.rows(); ++r) {
      normalize(kind, eps, y.row(r).data(), y.cols());
      y.row(r).array() *= weight.transpose().array();
      if (kind == NormKind::kLayerNorm) y.row(r) += bias.transpose();
    }
  }
};

}  // namespace retnet
