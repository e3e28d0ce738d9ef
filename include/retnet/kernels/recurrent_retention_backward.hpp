// Gradient of the recurrent form of retention, in O(dk·dv) memory per head:
//     S_n = gamma S_{n-1} + k_nᵀ v_n,   o_n = q_n S_n
// With G_n the gradient of S_n (from o_n and from S_{n+1}):
//     G_n      = q_nᵀ do_n + gamma G_{n+1}        (G_T: d_final_state)
//     dq_n     = do_n S_nᵀ
//     dk_n     = v_n G_nᵀ,     dv_n = k_n G_n
//     dS_{-1}  = gamma G_0
// dq needs the states, dk and dv the gradients flowing back: a forward sweep recomputes S_n
// and writes dq_n; a backward sweep carries G and writes dk_n, dv_n. Neither stores a state per
// position, and no state is ever recovered by dividing by gamma (unstable for small gamma).
#pragma once

#include "retnet/kernels/parallel_retention_backward.hpp"

namespace retnet {

/// Gradients of recurrent_retention started from `initial_state` (zero when empty): given d_out
/// and d_final_state (empty = zero), writes dq, dk, dv and d_initial_state.
template <typename Scalar>
void recurrent_retention_backward(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                                  const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                                  const RetentionState<Scalar>& initial_state,
                                  const Tensor4<Scalar>& d_out,
                                  const RetentionState<Scalar>& d_final_state, Tensor4<Scalar>& dq,
                                  Tensor4<Scalar>& dk, Tensor4<Scalar>& dv,
                                  RetentionState<Scalar>& d_initial_state) {
  const detail::RetentionDims dims = detail::check_retention_args(q, k, v, decays);
  detail::check_backward_args(dims, d_out, initial_state, d_final_state,
                              "recurrent_retention_backward");
  detail::shape_gradients(dims, dq, dk, dv, d_initial_state);

  parallel_for(dims.batch * dims.heads, [&](Index bh) {
    const Index b = bh / dims.heads, h = bh % dims.heads;
    const Scalar gamma = decays[h];
    const auto qh = detail::head_block(q, b, h), kh = detail::head_block(k, b, h);
    const auto vh = detail::head_block(v, b, h), doh = detail::head_block(d_out, b, h);
    auto dqh = detail::head_block(dq, b, h), dkh = detail::head_block(dk, b, h);
    auto dvh = detail::head_block(dv, b, h);
    // Forward sweep: S_n, then dq_n = do_n S_nᵀ.
    Matrix<Scalar> s = detail::head_state_or_zero(initial_state, dims, b, h);
    for (Index n = 0; n < dims.time; ++n) {
      s *= gamma;
      s.noalias() += kh.row(n).transpose() * vh.row(n);
      dqh.row(n).noalias() = doh.row(n) * s.transpose();
    }
    // Backward sweep: G_n = q_nᵀ do_n + gamma G_{n+1}; dk_n = v_n G_nᵀ, dv_n = k_n G_n.
    Matrix<Scalar> g = detail::head_state_or_zero(d_final_state, dims, b, h);
    for (Index n = dims.time - 1; n >= 0; --n) {
      g.noalias() += qh.row(n).transpose() * doh.row(n);
      dkh.row(n).noalias() = vh.row(n) * g.transpose();
      dvh.row(n).noalias() = kh.row(n) * g;
      g *= gamma;
    }
    detail::head_block(d_initial_state, b, h) = g;
  });
}

}  // namespace retnet
