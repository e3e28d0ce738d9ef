// Parallel form of retention (docs/NUMERICS.md#retention):
//     O = (Q Kᵀ ⊙ D) V,  D[n][m] = gamma^(n-m) for n >= m.
// O(T²) time and memory per head; the form for training-style passes and short prompts.
#pragma once

#include "retnet/kernels/retention_common.hpp"

namespace retnet {

/// q, k [batch, heads, T, dk], v [batch, heads, T, dv] -> o [batch, heads, T, dv].
/// If `final_state` is given it receives S_{T-1} = Kᵀ diag(gamma^(T-1-m)) V [batch, heads, dk, dv].
template <typename Scalar>
void parallel_retention(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                        const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                        RetentionState<Scalar>* final_state, Tensor4<Scalar>& out) {
  const detail::RetentionDims dims = detail::check_retention_args(q, k, v, decays);
  detail::resize_if_needed(out, dims.batch, dims.heads, dims.time, dims.dv);
  if (final_state) final_state->resize(dims.batch, dims.heads, dims.dk, dims.dv);

  parallel_for(dims.batch * dims.heads, [&](Index bh) {
    const Index b = bh / dims.heads, h = bh % dims.heads;
    const auto qh = detail::head_block(q, b, h);
    const auto kh = detail::head_block(k, b, h);
    const auto vh = detail::head_block(v, b, h);
    Vector<Scalar> powers;
    detail::decay_powers(decays[h], dims.time, powers);

    Matrix<Scalar> scores = qh * kh.transpose();
    detail::apply_causal_decay(scores, powers);
    detail::head_block(out, b, h).noalias() = scores * vh;

    if (final_state && dims.time > 0) {
      // gamma^(T-1-m) weights each k_m v_m, so the state is Kᵀ (w ⊙ V).
      const Vector<Scalar> w = powers.head(dims.time).reverse();
      detail::head_block(*final_state, b, h).noalias() = kh.transpose() * (w.asDiagonal() * vh);
    } else if (final_state) {
      detail::head_block(*final_state, b, h).setZero();
    }
  });
}

/// As above, returning a new output tensor.
template <typename Scalar>
Tensor4<Scalar> parallel_retention(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                                   const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                                   RetentionState<Scalar>* final_state = nullptr) {
  Tensor4<Scalar> out;
  parallel_retention(q, k, v, decays, final_state, out);
  return out;
}

}  // namespace retnet
