// Row-wise building blocks shared by the layers. Activations are row-major [rows, features]
// matrices, one row per (batch entry, position).
#pragma once

#include <algorithm>
#include <cmath>

#include "retnet/core/tensor.hpp"
#include "retnet/core/threads.hpp"
#include "retnet/model/config.hpp"

namespace retnet {

/// y = x Wᵀ for a PyTorch-layout weight W [out, in].
template <typename Scalar>
void linear(const Matrix<Scalar>& x, const Matrix<Scalar>& weight, Matrix<Scalar>& y) {
  y.resize(x.rows(), weight.rows());
  if (x.rows() > 16) {
    y.noalias() = x * weight.transpose();  // Eigen (or the BLAS behind it) threads the GEMM
    return;
  }
  // Few rows (decoding): the product is bound by reading W once. Each thread streams its own
  // slice of W's rows; within it, blocks of 8 rows of W meet all of x as dot products (a lazy,
  // coefficient-wise product: no packing of W, which a GEMM would copy every step).
  const auto slice = [&](Index begin, Index end) {
    constexpr Index kBlock = 8;
    for (Index j = begin; j < end; j += kBlock) {
      const Index n = std::min(kBlock, end - j);
      y.middleCols(j, n).noalias() = x.lazyProduct(weight.middleRows(j, n).transpose());
    }
  };
#ifdef _OPENMP
  if (omp_get_max_threads() > 1 && weight.rows() >= 256 && !omp_in_parallel()) {
#pragma omp parallel
    {
      const Index n = weight.rows(), threads = omp_get_num_threads(), t = omp_get_thread_num();
      slice(n * t / threads, n * (t + 1) / threads);
    }
    return;
  }
#endif
  slice(0, weight.rows());
}

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
