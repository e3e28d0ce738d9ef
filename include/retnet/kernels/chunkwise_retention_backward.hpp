// Gradient of the chunkwise form of retention. The forward reads chunk c from the state S_c
// that the chunks before it left, S_{c+1} = gamma^len S_c + Kcᵀ diag(gamma^(len-1-j)) Vc; each
// chunk is the parallel form started from S_c (parallel_retention_backward.hpp gives its
// gradient). So the backward
//   1. recomputes the chunks' start states S_0..S_{N-1} (one dk x dv matrix per chunk: memory
//      linear in T / chunk), then
//   2. runs the chunks in reverse, carrying G = dS (the gradient of the state after the chunk,
//      d_final_state for the last): each chunk's block backward gives its dq, dk, dv and the
//      gradient of its start state, which is G for the chunk before it.
// No T x T matrix is formed: the largest is chunk x chunk per head.
#pragma once

#include <algorithm>
#include <vector>

#include "retnet/kernels/parallel_retention_backward.hpp"

namespace retnet {

/// Gradients of chunkwise_retention(q, k, v, decays, chunk_size) started from `initial_state`
/// (zero when empty): given d_out and d_final_state (empty = zero), writes dq, dk, dv and
/// d_initial_state.
template <typename Scalar>
void chunkwise_retention_backward(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                                  const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                                  Index chunk_size, const RetentionState<Scalar>& initial_state,
                                  const Tensor4<Scalar>& d_out,
                                  const RetentionState<Scalar>& d_final_state, Tensor4<Scalar>& dq,
                                  Tensor4<Scalar>& dk, Tensor4<Scalar>& dv,
                                  RetentionState<Scalar>& d_initial_state) {
  RETNET_REQUIRE(chunk_size >= 1, "chunkwise_retention_backward: chunk_size must be >= 1, found " +
                                      std::to_string(chunk_size));
  const detail::RetentionDims dims = detail::check_retention_args(q, k, v, decays);
  detail::check_backward_args(dims, d_out, initial_state, d_final_state,
                              "chunkwise_retention_backward");
  detail::shape_gradients(dims, dq, dk, dv, d_initial_state);
  const Index block = std::min(chunk_size, std::max<Index>(dims.time, 1));
  const Index chunks = (dims.time + block - 1) / block;

  parallel_for(dims.batch * dims.heads, [&](Index bh) {
    const Index b = bh / dims.heads, h = bh % dims.heads;
    const auto qh = detail::head_block(q, b, h), kh = detail::head_block(k, b, h);
    const auto vh = detail::head_block(v, b, h), doh = detail::head_block(d_out, b, h);
    auto dqh = detail::head_block(dq, b, h), dkh = detail::head_block(dk, b, h);
    auto dvh = detail::head_block(dv, b, h);
    detail::HeadBackwardScratch<Scalar> scratch;
    detail::decay_powers(decays[h], block, scratch.powers);
    const Vector<Scalar>& powers = scratch.powers;

    // 1. The start state of every chunk.
    std::vector<Matrix<Scalar>> starts(static_cast<size_t>(std::max<Index>(chunks, 1)));
    starts[0] = detail::head_state_or_zero(initial_state, dims, b, h);
    for (Index c = 0; c + 1 < chunks; ++c) {
      const Index start = c * block, len = std::min(block, dims.time - start);
      Matrix<Scalar>& next = starts[static_cast<size_t>(c + 1)];
      next = powers[len] * starts[static_cast<size_t>(c)];
      next.noalias() += kh.middleRows(start, len).transpose() *
                        (powers.head(len).reverse().asDiagonal() * vh.middleRows(start, len));
    }
    // 2. The chunks in reverse, carrying the state's gradient.
    Matrix<Scalar> g = detail::head_state_or_zero(d_final_state, dims, b, h);
    Matrix<Scalar> d_start(dims.dk, dims.dv);
    for (Index c = chunks - 1; c >= 0; --c) {
      const Index start = c * block, len = std::min(block, dims.time - start);
      detail::retention_block_backward(qh.middleRows(start, len), kh.middleRows(start, len),
                                       vh.middleRows(start, len), doh.middleRows(start, len),
                                       starts[static_cast<size_t>(c)], g, powers, scratch,
                                       dqh.middleRows(start, len), dkh.middleRows(start, len),
                                       dvh.middleRows(start, len), d_start);
      g.swap(d_start);
    }
    detail::head_block(d_initial_state, b, h) = g;
  });
}

}  // namespace retnet
