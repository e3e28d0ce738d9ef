// Row-wise building blocks shared by the layers. Activations are row-major [rows, features]
// matrices, one row per (batch entry, position).
#pragma once

#include <cmath>

#include "retnet/core/tensor.hpp"
#include "retnet/model/config.hpp"

namespace retnet {

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

/// Normalises `n` contiguous values in place, without weight:
///   RMSNorm:   x / sqrt(mean(x²) + eps)
///   LayerNorm: (x - mean(x)) / sqrt(var(x) + eps)
template <typename Scalar>
void normalize(NormKind kind, Scalar eps, Scalar* x, Index n) {
  Eigen::Map<Vector<Scalar>> v(x, n);
  if (kind == NormKind::kLayerNorm) v.array() -= v.mean();
  v *= Scalar(1) / std::sqrt(v.squaredNorm() / Scalar(n) + eps);
}

/// A decoder norm with its learned weight (and bias, for LayerNorm).
template <typename Scalar>
struct Norm {
  NormKind kind = NormKind::kRMSNorm;
  Vector<Scalar> weight;
  Vector<Scalar> bias;  // LayerNorm only

  /// y = norm(x) ⊙ weight (+ bias), row by row.
  void apply(const Matrix<Scalar>& x, Scalar eps, Matrix<Scalar>& y) const {
    y = x;
    for (Index r = 0; r < y.rows(); ++r) {
      normalize(kind, eps, y.row(r).data(), y.cols());
      y.row(r).array() *= weight.transpose().array();
      if (kind == NormKind::kLayerNorm) y.row(r) += bias.transpose();
    }
  }
};

}  // namespace retnet
