// Recurrent retention with a deferred fold (docs/NUMERICS.md#deferred-fold): the same function as
// recurrent_retention.hpp, at about half the state traffic per token when decoding.
//
// The plain step reads and writes the whole dk x dv state S for every token. Here the last m
// pairs (k_j, v_j) are kept beside S, which holds the state after the token before them, and
// S is written only every `capacity` tokens. With pairs j = 0..m (the current token is j = m):
//     o_n = gamma^(m+1) q_n S + sum_{j<=m} gamma^(m-j) (q_n · k_j) v_j
// and once m + 1 pairs fill the buffer, in the same pass over S:
//     S  <- gamma^(m+1) S + sum_{j<=m} gamma^(m-j) k_jᵀ v_j,      m <- 0.
// A token between two folds reads S once and writes nothing; a fold reads and writes it once.
// Results differ from the plain step by rounding only (the powers of gamma are applied in one
// product instead of one per token).
#pragma once

#include <algorithm>
#include <vector>

#include "retnet/kernels/retention_common.hpp"

namespace retnet {

/// The largest capacity PendingPairs may have.
constexpr Index kMaxPendingPairs = 256;

/// The pairs a deferred-fold state has read but not yet added into its RetentionState: per
/// batch entry, `count` pairs (fewer than capacity()), those of the tokens after the one the
/// RetentionState was last folded at.
template <typename Scalar>
struct PendingPairs {
  Tensor4<Scalar> keys;        // [batch, heads, capacity, dk]: rotated and scaled like k
  Tensor4<Scalar> values;      // [batch, heads, capacity, dv]
  std::vector<Index> count;    // per batch entry
  std::vector<Scalar> decays;  // one per head: those of the retention this state belongs to

  PendingPairs() = default;
  PendingPairs(Index batch, Index heads, Index capacity, Index dk, Index dv,
               std::vector<Scalar> head_decays)
      : keys(batch, heads, capacity, dk),
        values(batch, heads, capacity, dv),
        count(static_cast<size_t>(batch), 0),
        decays(std::move(head_decays)) {
    RETNET_REQUIRE(capacity >= 2 && capacity <= kMaxPendingPairs,
                   "PendingPairs: capacity " + std::to_string(capacity) + " outside [2, " +
                       std::to_string(kMaxPendingPairs) + "]");
    detail::check_decays(decays, heads, "PendingPairs");
    keys.setZero();
    values.setZero();
  }

  Index batch() const { return static_cast<Index>(count.size()); }
  Index capacity() const { return keys.dimension(2); }
  bool empty() const {
    return std::all_of(count.begin(), count.end(), [](Index c) { return c == 0; });
  }
};

namespace detail {

/// Checks that `pending` fits `state` [batch, heads, dk, dv] and the given decays.
template <typename Scalar>
void check_pending(const RetentionState<Scalar>& state, const PendingPairs<Scalar>& pending,
                   const std::vector<Scalar>& decays) {
  const auto& s = state.dimensions();
  const auto& k = pending.keys.dimensions();
  const auto& v = pending.values.dimensions();
  RETNET_REQUIRE(k[0] == s[0] && k[1] == s[1] && k[3] == s[2] && v[0] == s[0] && v[1] == s[1] &&
                     v[2] == k[2] && v[3] == s[3] && pending.batch() == s[0],
                 "retention: pending pairs of shape " + shape_string(k) + " / " + shape_string(v) +
                     " do not fit a state of shape " + shape_string(s));
  RETNET_REQUIRE(pending.decays == decays, "retention: pending pairs of other decays");
  RETNET_REQUIRE(pending.capacity() >= 2 && pending.capacity() <= kMaxPendingPairs,
                 "retention: pending pair capacity " + std::to_string(pending.capacity()) +
                     " outside [2, " + std::to_string(kMaxPendingPairs) + "]");
  for (Index c : pending.count)
    RETNET_REQUIRE(c >= 0 && c < pending.capacity(), "retention: pending pair count " +
                                                         std::to_string(c) + " outside [0, " +
                                                         std::to_string(pending.capacity()) + ")");
}

/// S <- gamma^age S + sum_{j<pairs} coefficient_j k_jᵀ v_j, then out = q S when q is given,
/// row by row so that S is read and written once.
template <typename Scalar>
void fold_head(const Scalar* q, const Scalar* keys, const Scalar* values, const Scalar* coefficient,
               Index pairs, Scalar state_decay, Index dk, Index dv, Scalar* state, Scalar* out) {
  Eigen::Map<const Matrix<Scalar>> v(values, pairs, dv);
  Eigen::Map<RowVector<Scalar>> o(out, q ? dv : 0);
  o.setZero();
  // Row i gains a V with a_j = coefficient_j k_j[i]: a product of one row by the pairs' values,
  // which Eigen blocks in registers (a loop of axpys would store the row once per pair).
  Eigen::Matrix<Scalar, 1, Eigen::Dynamic, Eigen::RowMajor, 1, kMaxPendingPairs> a(pairs);
  for (Index i = 0; i < dk; ++i) {
    Eigen::Map<RowVector<Scalar>> s(state + i * dv, dv);
    for (Index j = 0; j < pairs; ++j) a[j] = coefficient[j] * keys[j * dk + i];
    s *= state_decay;
    s.noalias() += a * v;
    if (q) o += q[i] * s;
  }
}

/// One token of one head; `m` pairs are pending before it. Returns the pairs pending after it.
/// powers[i] = gamma^i for i = 0..capacity.
template <typename Scalar>
Index deferred_step_head(const Scalar* q, const Scalar* k, const Scalar* v, const Scalar* powers,
                         Index m, Index capacity, Index dk, Index dv, Scalar* state, Scalar* keys,
                         Scalar* values, Scalar* out) {
  std::copy_n(k, dk, keys + m * dk);
  std::copy_n(v, dv, values + m * dv);
  Scalar coefficient[kMaxPendingPairs];  // gamma^(m-j) for the pairs j = 0..m
  for (Index j = 0; j <= m; ++j) coefficient[j] = powers[m - j];
  if (m + 1 == capacity) {
    fold_head(q, keys, values, coefficient, m + 1, powers[m + 1], dk, dv, state, out);
    return 0;
  }
  Eigen::Map<RowVector<Scalar>> o(out, dv);
  o.setZero();
  for (Index i = 0; i < dk; ++i)
    o += q[i] * Eigen::Map<const RowVector<Scalar>>(state + i * dv, dv);
  o *= powers[m + 1];
  Eigen::Map<const RowVector<Scalar>> qv(q, dk);
  for (Index j = 0; j <= m; ++j) {
    const Scalar score =
        coefficient[j] * qv.dot(Eigen::Map<const RowVector<Scalar>>(keys + j * dk, dk));
    o += score * Eigen::Map<const RowVector<Scalar>>(values + j * dv, dv);
  }
  return m + 1;
}

}  // namespace detail

/// Folds every pending pair into `state` (count -> 0): afterwards the state is the one the plain
/// recurrence would hold.
template <typename Scalar>
void fold_pending(RetentionState<Scalar>& state, PendingPairs<Scalar>& pending) {
  detail::check_pending(state, pending, pending.decays);
  const Index heads = state.dimension(1), dk = state.dimension(2), dv = state.dimension(3);
  const Index cap = pending.capacity();
  parallel_for(pending.batch() * heads, [&](Index bh) {
    const Index b = bh / heads, m = pending.count[b];
    if (m == 0) return;
    Scalar coefficient[kMaxPendingPairs];  // gamma^(m-1-j) for the pairs j = 0..m-1
    Scalar power = 1;
    for (Index j = m - 1; j >= 0; --j, power *= pending.decays[bh % heads]) coefficient[j] = power;
    detail::fold_head<Scalar>(nullptr, pending.keys.data() + bh * cap * dk,
                              pending.values.data() + bh * cap * dv, coefficient, m, power, dk, dv,
                              state.data() + bh * dk * dv, nullptr);
  });
  std::fill(pending.count.begin(), pending.count.end(), 0);
}

/// recurrent_retention (q, k [batch, heads, T, dk], v [batch, heads, T, dv]) on a state whose
/// last pairs are pending: `state` and `pending` are updated, `out` [batch, heads, T, dv]
/// written. Allocates nothing once `out` has the right shape.
template <typename Scalar>
void deferred_recurrent_retention(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                                  const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                                  RetentionState<Scalar>& state, PendingPairs<Scalar>& pending,
                                  Tensor4<Scalar>& out) {
  const detail::RetentionDims dims = detail::check_retention_args(q, k, v, decays);
  detail::prepare_state(state, dims.batch, dims.heads, dims.dk, dims.dv);
  detail::check_pending(state, pending, decays);
  detail::resize_if_needed(out, dims.batch, dims.heads, dims.time, dims.dv);
  const Index cap = pending.capacity();
  parallel_for(
      dims.batch * dims.heads,
      [&](Index bh) {
        Scalar powers[kMaxPendingPairs + 1];  // gamma^0 .. gamma^cap
        powers[0] = Scalar(1);
        for (Index i = 1; i <= cap; ++i) powers[i] = powers[i - 1] * decays[bh % dims.heads];
        Index m = pending.count[bh / dims.heads];
        for (Index n = 0; n < dims.time; ++n) {
          const Index at = bh * dims.time + n;
          m = detail::deferred_step_head(
              q.data() + at * dims.dk, k.data() + at * dims.dk, v.data() + at * dims.dv, powers, m,
              cap, dims.dk, dims.dv, state.data() + bh * dims.dk * dims.dv,
              pending.keys.data() + bh * cap * dims.dk, pending.values.data() + bh * cap * dims.dv,
              out.data() + at * dims.dv);
        }
      },
      size_t(dims.time * dims.dk * dims.dv) * sizeof(Scalar));
  for (Index& c : pending.count) c = (c + dims.time) % cap;
}

}  // namespace retnet
