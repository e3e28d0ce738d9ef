// The gradients of the three forms of retention. They differ in memory and order of work, not in
// value: each is the gradient of the same function (tests/test_retention_gradients.cpp checks
// them against each other and against finite differences).
#pragma once

#include <algorithm>

#include "retnet/kernels/chunkwise_retention_backward.hpp"
#include "retnet/kernels/parallel_retention_backward.hpp"
#include "retnet/kernels/recurrent_retention_backward.hpp"
#include "retnet/kernels/retention.hpp"

namespace retnet {

/// Gradients of out = retention(q, k, v) in `form` from `initial_state` (zero when empty) to the
/// final state, given d_out [B,H,T,dv] and d_final_state [B,H,dk,dv] (empty = zero): writes dq,
/// dk, dv and d_initial_state. chunk_size is the chunkwise form's chunk (<= 0: all T as one).
template <typename Scalar>
void retention_backward(Form form, const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                        const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                        Index chunk_size, const RetentionState<Scalar>& initial_state,
                        const Tensor4<Scalar>& d_out, const RetentionState<Scalar>& d_final_state,
                        Tensor4<Scalar>& dq, Tensor4<Scalar>& dk, Tensor4<Scalar>& dv,
                        RetentionState<Scalar>& d_initial_state) {
  switch (form) {
    case Form::kParallel:
      parallel_retention_backward(q, k, v, decays, initial_state, d_out, d_final_state, dq, dk, dv,
                                  d_initial_state);
      break;
    case Form::kChunkwise:
      chunkwise_retention_backward(
          q, k, v, decays, chunk_size > 0 ? chunk_size : std::max<Index>(q.dimension(2), 1),
          initial_state, d_out, d_final_state, dq, dk, dv, d_initial_state);
      break;
    case Form::kRecurrent:
      recurrent_retention_backward(q, k, v, decays, initial_state, d_out, d_final_state, dq, dk, dv,
                                   d_initial_state);
      break;
  }
}

}  // namespace retnet
