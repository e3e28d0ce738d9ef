// Recurrent form of retention (docs/NUMERICS.md#retention):
//     S_n = gamma S_{n-1} + k_nᵀ v_n,     o_n = q_n S_n,     S_{-1} = initial state (or 0).
// O(1) time and memory per token: the form for generating one token at a time.
#pragma once

#include "retnet/kernels/retention_common.hpp"

namespace retnet {

namespace detail {

/// One step of one head: S = gamma S + kᵀ v, o = q S. S is dk x dv row-major. Row by row, so
/// the state (dk·dv values, larger than L1) is read and written once per step:
///     S_i = gamma S_i + k_i v,   o += q_i S_i.
template <typename Scalar>
void recurrent_step_head(const Scalar* q, const Scalar* k, const Scalar* v, Scalar gamma, Index dk,
                         Index dv, Scalar* state, Scalar* out) {
  Eigen::Map<const RowVector<Scalar>> vv(v, dv);
  Eigen::Map<RowVector<Scalar>> o(out, dv);
  o.setZero();
  for (Index i = 0; i < dk; ++i) {
    Eigen::Map<RowVector<Scalar>> s(state + i * dv, dv);
    s = gamma * s + k[i] * vv;
    o += q[i] * s;
  }
}

}  // namespace detail

/// One token for every batch entry and head: q, k [batch, heads, dk], v [batch, heads, dv];
/// updates `state` [batch, heads, dk, dv] in place (zero-initialised when empty) and writes
/// `out` [batch, heads, dv]. Allocates nothing once `out` has the right shape.
template <typename Scalar>
void recurrent_retention_step(const Tensor3<Scalar>& q, const Tensor3<Scalar>& k,
                              const Tensor3<Scalar>& v, const std::vector<Scalar>& decays,
                              RetentionState<Scalar>& state, Tensor3<Scalar>& out) {
  const auto& qd = q.dimensions();
  const Index batch = qd[0], heads = qd[1], dk = qd[2], dv = v.dimension(2);
  RETNET_REQUIRE(k.dimensions() == qd, "recurrent_retention_step: k's shape differs from q's");
  RETNET_REQUIRE(v.dimension(0) == batch && v.dimension(1) == heads,
                 "recurrent_retention_step: v's [batch, heads] differ from q's");
  detail::check_decays(decays, heads, "recurrent_retention_step");
  detail::prepare_state(state, batch, heads, dk, dv);
  if (out.dimension(0) != batch || out.dimension(1) != heads || out.dimension(2) != dv)
    out.resize(batch, heads, dv);
  parallel_for(
      batch * heads,
      [&](Index bh) {
        detail::recurrent_step_head(q.data() + bh * dk, k.data() + bh * dk, v.data() + bh * dv,
                                    decays[bh % heads], dk, dv, state.data() + bh * dk * dv,
                                    out.data() + bh * dv);
      },
      2 * size_t(dk * dv) * sizeof(Scalar));
}

/// A whole sequence through the recurrence: q, k [batch, heads, T, dk], v [batch, heads, T, dv].
/// If `state` is given, it is the initial state (zero when empty) and receives the final one.
template <typename Scalar>
void recurrent_retention(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                         const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                         RetentionState<Scalar>* state, Tensor4<Scalar>& out) {
  const detail::RetentionDims dims = detail::check_retention_args(q, k, v, decays);
  RetentionState<Scalar> local;
  RetentionState<Scalar>& s = state ? *state : local;
  detail::prepare_state(s, dims.batch, dims.heads, dims.dk, dims.dv);
  detail::resize_if_needed(out, dims.batch, dims.heads, dims.time, dims.dv);

  // Each step of a head reads and writes its dk x dv state: when decoding, kilobytes a head.
  parallel_for(
      dims.batch * dims.heads,
      [&](Index bh) {
        const Index h = bh % dims.heads;
        Scalar* sh = s.data() + bh * dims.dk * dims.dv;
        for (Index n = 0; n < dims.time; ++n) {
          const Index at = bh * dims.time + n;  // position n of this batch entry and head
          detail::recurrent_step_head(q.data() + at * dims.dk, k.data() + at * dims.dk,
                                      v.data() + at * dims.dv, decays[h], dims.dk, dims.dv, sh,
                                      out.data() + at * dims.dv);
        }
      },
      2 * size_t(dims.time * dims.dk * dims.dv) * sizeof(Scalar));
}

/// As above, returning a new output tensor.
template <typename Scalar>
Tensor4<Scalar> recurrent_retention(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                                    const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                                    RetentionState<Scalar>* state = nullptr) {
  Tensor4<Scalar> out;
  recurrent_retention(q, k, v, decays, state, out);
  return out;
}

}  // namespace retnet
