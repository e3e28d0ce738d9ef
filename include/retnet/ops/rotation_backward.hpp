// Gradient of the rotation of ops/rotation.hpp. Each pair (a, b) is rotated by the angle of its
// position, an orthogonal map; its gradient is the transpose, the rotation by minus the angle:
//     (da, db) = (dy_a cos + dy_b sin, dy_b cos - dy_a sin)
#pragma once

#include "retnet/ops/rotation.hpp"

namespace retnet {

/// out = R(row)ᵀ dz for the dk values of dz (one head), in the table's layout.
template <typename Scalar>
void rotate_backward(const RotationTable<Scalar>& table, const Scalar* dz, Index row,
                     Index key_head_dim, Scalar* out) {
  const Index pairs = key_head_dim / 2;
  const bool halves = table.layout == RotationLayout::kHalves;
  for (Index i = 0; i < pairs; ++i) {
    const Index ia = halves ? i : 2 * i, ib = halves ? i + pairs : 2 * i + 1;
    const Scalar da = dz[ia], db = dz[ib], c = table.cos(row, i), s = table.sin(row, i);
    out[ia] = da * c + db * s;
    out[ib] = db * c - da * s;
  }
}

}  // namespace retnet
