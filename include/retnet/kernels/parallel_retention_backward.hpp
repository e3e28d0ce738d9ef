// Gradient of the parallel form of retention, for one block of positions that starts from a
// state S0 (zero for a whole sequence; a chunk's incoming state in the chunkwise backward).
// Forward, per head, for positions n = 0..T-1 of the block:
//     O   = A V + diag(gamma^(n+1)) Q S0,          A = Q Kᵀ ⊙ D,  D[n][m] = gamma^(n-m), m <= n
//     S_T = gamma^T S0 + Kᵀ diag(gamma^(T-1-m)) V
// Given dO and G = dS_T, the chain rule gives
//     dV  = Aᵀ dO + diag(gamma^(T-1-m)) K G
//     dP  = (dO Vᵀ) ⊙ D
//     dQ  = dP K + diag(gamma^(n+1)) dO S0ᵀ
//     dK  = dPᵀ Q + diag(gamma^(T-1-m)) V Gᵀ
//     dS0 = Qᵀ diag(gamma^(n+1)) dO + gamma^T G
// O(T²) memory per head, like the forward.
#pragma once

#include "retnet/kernels/retention_common.hpp"

namespace retnet {
namespace detail {

/// The buffers of one head's backward, reused across blocks (no allocation per chunk).
template <typename Scalar>
struct HeadBackwardScratch {
  Matrix<Scalar> scores, d_scores, weighted;
  Vector<Scalar> powers;
};

/// One head, one block of `len` positions (rows of q, k, v, d_out), from state s0 [dk, dv] with
/// g = dS_T: writes dq, dk, dv (same rows) and d_s0. `powers` holds gamma^0..gamma^len or more.
template <typename Q, typename DQ, typename S0, typename DS0>
void retention_block_backward(const Q& q, const Q& k, const Q& v, const Q& d_out, const S0& s0,
                              const S0& g, const Vector<typename Q::Scalar>& powers,
                              HeadBackwardScratch<typename Q::Scalar>& scratch, DQ&& dq, DQ&& dk,
                              DQ&& dv, DS0&& d_s0) {
  using Scalar = typename Q::Scalar;
  const Index len = q.rows();
  Matrix<Scalar>& a = scratch.scores;
  a.resize(len, len);
  a.noalias() = q * k.transpose();
  apply_causal_decay(a, powers);  // A
  Matrix<Scalar>& dp = scratch.d_scores;
  dp.resize(len, len);
  dp.noalias() = d_out * v.transpose();
  apply_causal_decay(dp, powers);                  // dP = (dO Vᵀ) ⊙ D
  const auto to_end = powers.head(len).reverse();  // gamma^(T-1-m)
  const auto from_start = powers.segment(1, len);  // gamma^(n+1)

  dv.noalias() = a.transpose() * d_out;
  dv.noalias() += to_end.asDiagonal() * (k * g);
  dq.noalias() = dp * k;
  dq.noalias() += from_start.asDiagonal() * (d_out * s0.transpose());
  dk.noalias() = dp.transpose() * q;
  dk.noalias() += to_end.asDiagonal() * (v * g.transpose());
  Matrix<Scalar>& weighted = scratch.weighted;
  weighted.resize(len, d_out.cols());
  weighted.noalias() = from_start.asDiagonal() * d_out;
  d_s0.noalias() = q.transpose() * weighted;
  d_s0 += powers[len] * g;
}

/// Checks the backward's extra arguments (d_out, d_final_state, initial_state) against q, k, v.
template <typename Scalar>
void check_backward_args(const RetentionDims& dims, const Tensor4<Scalar>& d_out,
                         const RetentionState<Scalar>& initial_state,
                         const RetentionState<Scalar>& d_final_state, const std::string& where) {
  const Eigen::DSizes<Index, 4> out_shape(dims.batch, dims.heads, dims.time, dims.dv);
  const Eigen::DSizes<Index, 4> state_shape(dims.batch, dims.heads, dims.dk, dims.dv);
  RETNET_REQUIRE(d_out.dimensions() == out_shape, where + ": d_out has shape " +
                                                      shape_string(d_out.dimensions()) +
                                                      ", expected " + shape_string(out_shape));
  RETNET_REQUIRE(initial_state.size() == 0 || initial_state.dimensions() == state_shape,
                 where + ": initial_state has shape " + shape_string(initial_state.dimensions()) +
                     ", expected " + shape_string(state_shape) + " or empty");
  RETNET_REQUIRE(d_final_state.size() == 0 || d_final_state.dimensions() == state_shape,
                 where + ": d_final_state has shape " + shape_string(d_final_state.dimensions()) +
                     ", expected " + shape_string(state_shape) + " or empty");
}

/// Shapes the four gradients like q, k, v and the state.
template <typename Scalar>
void shape_gradients(const RetentionDims& dims, Tensor4<Scalar>& dq, Tensor4<Scalar>& dk,
                     Tensor4<Scalar>& dv, RetentionState<Scalar>& d_initial_state) {
  resize_if_needed(dq, dims.batch, dims.heads, dims.time, dims.dk);
  resize_if_needed(dk, dims.batch, dims.heads, dims.time, dims.dk);
  resize_if_needed(dv, dims.batch, dims.heads, dims.time, dims.dv);
  resize_if_needed(d_initial_state, dims.batch, dims.heads, dims.dk, dims.dv);
}

/// Block (b, h) of a state, or a zero matrix when the state is empty.
template <typename Scalar>
Matrix<Scalar> head_state_or_zero(const RetentionState<Scalar>& s, const RetentionDims& dims,
                                  Index b, Index h) {
  if (s.size() == 0) return Matrix<Scalar>::Zero(dims.dk, dims.dv);
  return head_block(s, b, h);
}

}  // namespace detail

/// Gradients of parallel_retention (generalised to a start state: zero or empty for the form as
/// the model runs it). Given d_out [B,H,T,dv] and d_final_state [B,H,dk,dv] (empty = zero),
/// writes dq, dk, dv and d_initial_state (the gradient of the state before position 0).
template <typename Scalar>
void parallel_retention_backward(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                                 const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                                 const RetentionState<Scalar>& initial_state,
                                 const Tensor4<Scalar>& d_out,
                                 const RetentionState<Scalar>& d_final_state, Tensor4<Scalar>& dq,
                                 Tensor4<Scalar>& dk, Tensor4<Scalar>& dv,
                                 RetentionState<Scalar>& d_initial_state) {
  const detail::RetentionDims dims = detail::check_retention_args(q, k, v, decays);
  detail::check_backward_args(dims, d_out, initial_state, d_final_state,
                              "parallel_retention_backward");
  detail::shape_gradients(dims, dq, dk, dv, d_initial_state);
  parallel_for(dims.batch * dims.heads, [&](Index bh) {
    const Index b = bh / dims.heads, h = bh % dims.heads;
    detail::HeadBackwardScratch<Scalar> scratch;
    detail::decay_powers(decays[h], dims.time, scratch.powers);
    const Matrix<Scalar> s0 = detail::head_state_or_zero(initial_state, dims, b, h);
    const Matrix<Scalar> g = detail::head_state_or_zero(d_final_state, dims, b, h);
    detail::retention_block_backward(detail::head_block(q, b, h), detail::head_block(k, b, h),
                                     detail::head_block(v, b, h), detail::head_block(d_out, b, h),
                                     s0, g, scratch.powers, scratch, detail::head_block(dq, b, h),
                                     detail::head_block(dk, b, h), detail::head_block(dv, b, h),
                                     detail::head_block(d_initial_state, b, h));
  });
}

}  // namespace retnet
