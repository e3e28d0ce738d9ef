// Rotation ("theta shift", rotary embedding) of each head's queries and keys
// (docs/NUMERICS.md#multi-scale-retention), in one of two layouts:
//   kPairs  (torchscale, syncdoth): the pair (2i, 2i+1) at position n turns by n·angle_i,
//           angle_i = 1 / 10000^(i / (dk/2 - 1))  (the values of torch.linspace(0, 1, dk/2));
//   kHalves (fla, GPT-NeoX style):  the pair (i, i + dk/2) turns by n·theta_i,
//           theta_i = 10000^(-2i/dk).
// Angles, phases and their cosines and sines are computed in double for every Scalar.
#pragma once

#include <cmath>
#include <vector>

#include "retnet/core/tensor.hpp"

namespace retnet {

enum class RotationLayout { kPairs, kHalves };

/// The angle of pair i of `dk / 2` pairs in `layout`.
inline double rotation_angle(RotationLayout layout, Index i, Index pairs) {
  if (layout == RotationLayout::kHalves)
    return std::pow(10000.0, -2.0 * double(i) / double(2 * pairs));
  const double exponent = pairs > 1 ? double(i) / double(pairs - 1) : 0.0;
  return 1.0 / std::pow(10000.0, exponent);
}

/// cos and sin of n·angle_i for one row (position n) per activation row, shared by all layers.
template <typename Scalar>
struct RotationTable {
  Matrix<Scalar> cos, sin;  // [rows, dk/2]
  RotationLayout layout = RotationLayout::kPairs;

  /// Fills the table for rows whose positions are `positions[r]`.
  void compute(const std::vector<int64_t>& positions, Index key_head_dim,
               RotationLayout rotation = RotationLayout::kPairs) {
    layout = rotation;
    const Index pairs = key_head_dim / 2;
    const Index rows = static_cast<Index>(positions.size());
    if (cos.rows() != rows || cos.cols() != pairs) cos.resize(rows, pairs), sin.resize(rows, pairs);
    for (Index i = 0; i < pairs; ++i) {
      const double angle = rotation_angle(layout, i, pairs);
      for (Index r = 0; r < rows; ++r) {
        const double phase = double(positions[r]) * angle;
        cos(r, i) = static_cast<Scalar>(std::cos(phase));
        sin(r, i) = static_cast<Scalar>(std::sin(phase));
      }
    }
  }

  /// (a, b) -> (a cos - b sin, b cos + a sin) for every pair of `z` (dk values), table row `row`:
  /// (z[2i], z[2i+1]) for kPairs, (z[i], z[i + dk/2]) for kHalves.
  void rotate(const Scalar* z, Index row, Index key_head_dim, Scalar* out) const {
    const Index pairs = key_head_dim / 2;
    if (layout == RotationLayout::kPairs) {
      for (Index i = 0; i < pairs; ++i) {
        const Scalar a = z[2 * i], b = z[2 * i + 1], c = cos(row, i), s = sin(row, i);
        out[2 * i] = a * c - b * s;
        out[2 * i + 1] = b * c + a * s;
      }
      return;
    }
    for (Index i = 0; i < pairs; ++i) {
      const Scalar a = z[i], b = z[i + pairs], c = cos(row, i), s = sin(row, i);
      out[i] = a * c - b * s;
      out[i + pairs] = b * c + a * s;
    }
  }
};

}  // namespace retnet
