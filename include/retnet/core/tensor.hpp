// Tensor and matrix types used throughout the library. Everything is row-major so
// that the last index is contiguous, as in PyTorch: a [batch, heads, time, dk]
// tensor stores each head's [time, dk] block as a contiguous row-major matrix.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <unsupported/Eigen/CXX11/Tensor>

namespace retnet {

using Index = Eigen::Index;

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

}  // namespace retnet
