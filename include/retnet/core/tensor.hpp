// Tensor and matrix types used throughout the library, and the few helpers every floor needs.
// Everything is row-major so that the last index is contiguous, as in PyTorch: a
// [batch, heads, time, dk] tensor stores each head's [time, dk] block as a contiguous
// row-major matrix.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <string>
#include <unsupported/Eigen/CXX11/Tensor>

namespace retnet {

using Index = Eigen::Index;

template <typename Scalar>
using Tensor3 = Eigen::Tensor<Scalar, 3, Eigen::RowMajor>;

template <typename Scalar>
using Tensor4 = Eigen::Tensor<Scalar, 4, Eigen::RowMajor>;

template <typename Scalar>
using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <typename Scalar>
using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

template <typename Scalar>
using RowVector = Eigen::Matrix<Scalar, 1, Eigen::Dynamic>;

template <typename Scalar>
using MatrixMap = Eigen::Map<Matrix<Scalar>>;

template <typename Scalar>
using ConstMatrixMap = Eigen::Map<const Matrix<Scalar>>;

/// Token ids, row-major [batch, time].
using TokenMatrix = Eigen::Matrix<int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace detail {

inline std::string shape_string(const Eigen::DSizes<Index, 4>& d) {
  return "[" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) +
         ", " + std::to_string(d[3]) + "]";
}

/// Gives `t` shape [a, b, c, d], reallocating only when the size changes (no per-token allocation).
template <typename Scalar>
void resize_if_needed(Tensor4<Scalar>& t, Index a, Index b, Index c, Index d) {
  if (t.dimension(0) != a || t.dimension(1) != b || t.dimension(2) != c || t.dimension(3) != d)
    t.resize(a, b, c, d);
}

/// Row-major [rows, cols] view of block (b, h) of a [batch, heads, rows, cols] tensor.
template <typename Scalar>
ConstMatrixMap<Scalar> head_block(const Tensor4<Scalar>& t, Index b, Index h) {
  const auto& d = t.dimensions();
  return ConstMatrixMap<Scalar>(t.data() + (b * d[1] + h) * d[2] * d[3], d[2], d[3]);
}

template <typename Scalar>
MatrixMap<Scalar> head_block(Tensor4<Scalar>& t, Index b, Index h) {
  const auto& d = t.dimensions();
  return MatrixMap<Scalar>(t.data() + (b * d[1] + h) * d[2] * d[3], d[2], d[3]);
}

}  // namespace detail
}  // namespace retnet
