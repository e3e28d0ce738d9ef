// Rotation ("theta shift") of each head's queries and keys
// (docs/NUMERICS.md#multi-scale-retention):
// the pair (2i, 2i+1) at position n turns by n·angle_i, angle_i = 1 / 10000^(i / (dk/2 - 1)).
// The angles are those of torch.linspace(0, 1, dk/2); computed in double for every Scalar.
#pragma once

#include <cmath>
#include <vector>

#include "retnet/core/tensor.hpp"

namespace retnet {

/// cos and sin of n·angle_i for one row (position n) per activation row, shared by all layers.
template <typename Scalar>
struct RotationTable {
  Matrix<Scalar> cos, sin;  // [rows, dk/2]

  /// Fills the table for rows whose positions are `positions[r]`.
  void compute(const std::vector<int64_t>& positions, Index key_head_dim) {
    const Index pairs = key_head_dim / 2;
    const Index rows = static_cast<Index>(positions.size());
    if (cos.rows() != rows || cos.cols() != pairs) cos.resize(rows, pairs), sin.resize(rows, pairs);
    for (Index i = 0; i < pairs; ++i) {
      const double exponent = pairs > 1 ? double(i) / double(pairs - 1) : 0.0;
      const double angle = 1.0 / std::pow(10000.0, exponent);
      for (Index r = 0; r < rows; ++r) {
        const double phase = double(positions[r]) * angle;
        cos(r, i) = static_cast<Scalar>(std::cos(phase));
        sin(r, i) = static_cast<Scalar>(std::sin(phase));
      }
    }
  }

  /// (a, b) -> (a cos - b sin, b cos + a sin) for every pair of `z` (dk values), table row `row`.
  void rotate(const Scalar* z, Index row, Index key_head_dim, Scalar* out) const {
    for (Index i = 0; i < key_head_dim / 2; ++i) {
      const Scalar a = z[2 * i], b = z[2 * i + 1], c = cos(row, i), s = sin(row, i);
      out[2 * i] = a * c - b * s;
      out[2 * i + 1] = b * c + a * s;
    }
  }
};

}  // namespace retnet
