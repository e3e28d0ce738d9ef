// Chunkwise form of retention (docs/NUMERICS.md#retention): parallel inside a chunk, recurrent
// across chunks. For a chunk starting at s with length len, j = n - s, and S the state after
// position s-1:
//     o_n = sum_{s<=m<=n} gamma^(n-m) (q_n · k_m) v_m  +  gamma^(j+1) q_n S
//     S'  = gamma^len S + sum_{m in chunk} gamma^(s+len-1-m) k_mᵀ v_m
// Memory is O(chunk²) per head instead of O(T²): the form for long prompts.
#pragma once

#include <algorithm>

#include "retnet/kernels/retention_common.hpp"

namespace retnet {

/// q, k [batch, heads, T, dk], v [batch, heads, T, dv] -> o [batch, heads, T, dv], in chunks of
/// `chunk_size` positions (the last chunk may be shorter). If `state` is given, it is the initial
/// state (zero when empty) and receives the state after the last position.
template <typename Scalar>
void chunkwise_retention(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                         const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                         Index chunk_size, RetentionState<Scalar>* state, Tensor4<Scalar>& out) {
  RETNET_REQUIRE(chunk_size >= 1, "chunkwise_retention: chunk_size must be >= 1, found " +
                                      std::to_string(chunk_size));
  const detail::RetentionDims dims = detail::check_retention_args(q, k, v, decays);
  RetentionState<Scalar> local;
  RetentionState<Scalar>& s = state ? *state : local;
  detail::prepare_state(s, dims.batch, dims.heads, dims.dk, dims.dv);
  detail::resize_if_needed(out, dims.batch, dims.heads, dims.time, dims.dv);
  const Index block = std::min(chunk_size, std::max<Index>(dims.time, 1));

  parallel_for(dims.batch * dims.heads, [&](Index bh) {
    const Index b = bh / dims.heads, h = bh % dims.heads;
    const auto qh = detail::head_block(q, b, h);
    const auto kh = detail::head_block(k, b, h);
    const auto vh = detail::head_block(v, b, h);
    auto oh = detail::head_block(out, b, h);
    auto sh = detail::head_block(s, b, h);
    Vector<Scalar> powers;
    detail::decay_powers(decays[h], block, powers);
    Matrix<Scalar> scores(block, block), weighted_v(block, dims.dv);

    for (Index start = 0; start < dims.time; start += block) {
      const Index len = std::min(block, dims.time - start);
      const auto qc = qh.middleRows(start, len);
      const auto kc = kh.middleRows(start, len);
      const auto vc = vh.middleRows(start, len);
      // Inside the chunk: the parallel form.
      scores.resize(len, len);
      scores.noalias() = qc * kc.transpose();
      detail::apply_causal_decay(scores, powers);
      auto oc = oh.middleRows(start, len);
      oc.noalias() = scores * vc;
      // From earlier chunks: gamma^(j+1) q_n S.
      oc.noalias() += powers.segment(1, len).asDiagonal() * (qc * sh);
      // Carry the state: S' = gamma^len S + Kcᵀ diag(gamma^(len-1-j)) Vc.
      weighted_v.resize(len, dims.dv);
      weighted_v.noalias() = powers.head(len).reverse().asDiagonal() * vc;
      sh *= powers[len];
      sh.noalias() += kc.transpose() * weighted_v;
    }
  });
}

/// As above, returning a new output tensor.
template <typename Scalar>
Tensor4<Scalar> chunkwise_retention(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                                    const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                                    Index chunk_size, RetentionState<Scalar>* state = nullptr) {
  Tensor4<Scalar> out;
  chunkwise_retention(q, k, v, decays, chunk_size, state, out);
  return out;
}

}  // namespace retnet
