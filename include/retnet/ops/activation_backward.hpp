// Derivatives of the activations of ops/activation.hpp:
//     swish(x) = x σ(x)          swish'(x) = σ(x) (1 + x (1 - σ(x)))
//     gelu(x)  = x Φ(x)          gelu'(x)  = Φ(x) + x φ(x)
// with σ the logistic function, Φ and φ the standard normal's distribution and density.
#pragma once

#include <cmath>

#include "retnet/ops/activation.hpp"

namespace retnet {

template <typename Scalar>
Scalar swish_derivative(Scalar x) {
  const Scalar sigma = Scalar(1) / (Scalar(1) + std::exp(-x));
  return sigma * (Scalar(1) + x * (Scalar(1) - sigma));
}

template <typename Scalar>
Scalar gelu_derivative(Scalar x) {
  const Scalar cdf = Scalar(0.5) * (Scalar(1) + std::erf(x / std::sqrt(Scalar(2))));
  const Scalar pdf = std::exp(Scalar(-0.5) * x * x) / std::sqrt(Scalar(2 * 3.14159265358979323846));
  return cdf + x * pdf;
}

template <typename Scalar>
Scalar activation_derivative(Activation kind, Scalar x) {
  return kind == Activation::kSwish ? swish_derivative(x) : gelu_derivative(x);
}

/// d ⊙= act'(pre), element-wise; `pre` is the activation's input, of d's shape.
template <typename Scalar>
void activation_backward(Activation kind, const Eigen::Ref<const Matrix<Scalar>>& pre,
                         Eigen::Ref<Matrix<Scalar>> d) {
  for (Index r = 0; r < d.rows(); ++r)
    for (Index c = 0; c < d.cols(); ++c) d(r, c) *= activation_derivative(kind, pre(r, c));
}

}  // namespace retnet
