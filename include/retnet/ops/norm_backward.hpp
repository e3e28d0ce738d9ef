// Gradients of the norms of ops/norm.hpp.
//
// normalize(): with u = x (RMSNorm) or u = x - mean(x) (LayerNorm), r = (mean(u²) + eps)^-1/2
// and y = u r, the derivative of y along dy is
//     du = r (dy - y mean(dy ⊙ y))
// and LayerNorm's centring subtracts the mean: dx = du - mean(du) (RMSNorm: dx = du).
// Norm::apply multiplies by the weight (and adds the bias):
//     dweight += Σ_rows dy ⊙ y,   dbias += Σ_rows dy,   and normalize() sees dy ⊙ weight.
#pragma once

#include <vector>

#include "retnet/ops/norm.hpp"

namespace retnet {

/// dx of normalize(kind, eps) at input x (n values) for the output gradient dy. dx may alias dy.
template <typename Scalar>
void normalize_backward(NormKind kind, Scalar eps, const Scalar* x, const Scalar* dy, Index n,
                        Scalar* dx) {
  Eigen::Map<const Vector<Scalar>> xv(x, n), dyv(dy, n);
  Vector<Scalar> y = xv;  // (n values: a row of d or F, or one head's dv)
  if (kind == NormKind::kLayerNorm) y.array() -= y.mean();
  const Scalar r = Scalar(1) / std::sqrt(y.squaredNorm() / Scalar(n) + eps);
  y *= r;
  const Scalar mean_dy_y = dyv.dot(y) / Scalar(n);
  Eigen::Map<Vector<Scalar>> dxv(dx, n);
  dxv = r * (dyv - mean_dy_y * y);
  if (kind == NormKind::kLayerNorm) dxv.array() -= dxv.mean();
}

/// Gradient of y = norm.apply(x, eps): writes dx and adds into grad.weight (and grad.bias for
/// LayerNorm), which must have the weight's size.
template <typename Scalar>
void norm_backward(const Norm<Scalar>& norm, Scalar eps, const Matrix<Scalar>& x,
                   const Matrix<Scalar>& dy, Matrix<Scalar>& dx, Norm<Scalar>& grad) {
  const Index n = x.cols();
  RETNET_REQUIRE(dy.rows() == x.rows() && dy.cols() == n && grad.weight.size() == n,
                 "norm_backward: dy or the gradient does not have x's shape");
  dx.resize(x.rows(), n);
  Vector<Scalar> normalized(n), d_normalized(n);
  for (Index r = 0; r < x.rows(); ++r) {
    normalized = x.row(r).transpose();
    normalize(norm.kind, eps, normalized.data(), n);
    grad.weight.array() += dy.row(r).transpose().array() * normalized.array();
    if (norm.kind == NormKind::kLayerNorm) grad.bias += dy.row(r).transpose();
    d_normalized = dy.row(r).transpose().cwiseProduct(norm.weight);
    normalize_backward(norm.kind, eps, x.row(r).data(), d_normalized.data(), n, dx.row(r).data());
  }
}

}  // namespace retnet
