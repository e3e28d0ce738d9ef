// What the three retention forms share: argument checks and decay powers.
//
// Every form computes, for each batch entry and head with decay gamma,
//     o_n = sum_{m<=n} gamma^(n-m) (q_n · k_m) v_m
// on q, k [batch, heads, time, dk] and v [batch, heads, time, dv]; output
// [batch, heads, time, dv]. The state after position n is
//     S_n = sum_{m<=n} gamma^(n-m) k_mᵀ v_m            [batch, heads, dk, dv]
// and is the same object in all forms, so a prefix done by one form continues in any other.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/core/threads.hpp"

namespace retnet {

/// State of retention after some prefix: S [batch, heads, dk, dv].
template <typename Scalar>
using RetentionState = Tensor4<Scalar>;

/// The default per-head decays (docs/NUMERICS.md#retention): gamma_h = 1 - 2^(-5-h).
template <typename Scalar>
std::vector<Scalar> default_decays(Index heads) {
  std::vector<Scalar> decays(static_cast<size_t>(heads));
  for (Index h = 0; h < heads; ++h) decays[h] = Scalar(1) - std::pow(Scalar(2), Scalar(-5 - h));
  return decays;
}

/// The decays of use_lm_decay (torchscale, syncdoth; docs/NUMERICS.md#retention):
/// gamma_h = 1 - 2^(-5 - 4h/(H-1)), from 1 - 1/32 to 1 - 1/512 (1 - 1/32 for one head). The
/// exponent is computed in double, then rounded to Scalar.
template <typename Scalar>
std::vector<Scalar> lm_decays(Index heads) {
  std::vector<Scalar> decays(static_cast<size_t>(heads));
  for (Index h = 0; h < heads; ++h) {
    const double e = heads > 1 ? -5.0 - 4.0 * double(h) / double(heads - 1) : -5.0;
    decays[h] = static_cast<Scalar>(1.0 - std::pow(2.0, e));
  }
  return decays;
}

namespace detail {

/// Checks that there is one decay per head and that each lies in (0, 1].
template <typename Scalar>
void check_decays(const std::vector<Scalar>& decays, Index heads, const std::string& where) {
  RETNET_REQUIRE(static_cast<Index>(decays.size()) == heads,
                 where + ": decays has " + std::to_string(decays.size()) +
                     " entries, expected one per head (" + std::to_string(heads) + ")");
  for (size_t h = 0; h < decays.size(); ++h) {
    RETNET_REQUIRE(std::isfinite(decays[h]) && decays[h] > Scalar(0) && decays[h] <= Scalar(1),
                   where + ": decays[" + std::to_string(h) +
                       "] = " + std::to_string(double(decays[h])) + " is outside (0, 1]");
  }
}

/// The sizes of one retention call: q, k [batch, heads, time, dk], v [batch, heads, time, dv].
struct RetentionDims {
  Index batch = 0, heads = 0, time = 0, dk = 0, dv = 0;
};

/// Checks q, k, v and decays; returns their sizes.
template <typename Scalar>
RetentionDims check_retention_args(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                                   const Tensor4<Scalar>& v, const std::vector<Scalar>& decays) {
  const auto& qd = q.dimensions();
  const auto& kd = k.dimensions();
  const auto& vd = v.dimensions();
  RETNET_REQUIRE(kd == qd, "retention: k has shape " + shape_string(kd) + ", expected q's shape " +
                               shape_string(qd));
  RETNET_REQUIRE(vd[0] == qd[0] && vd[1] == qd[1] && vd[2] == qd[2],
                 "retention: v has shape " + shape_string(vd) +
                     ", expected [batch, heads, time] = [" + std::to_string(qd[0]) + ", " +
                     std::to_string(qd[1]) + ", " + std::to_string(qd[2]) + "] like q");
  check_decays(decays, qd[1], "retention");
  RetentionDims dims;
  dims.batch = qd[0];
  dims.heads = qd[1];
  dims.time = qd[2];
  dims.dk = qd[3];
  dims.dv = vd[3];
  return dims;
}

/// Checks (or, when empty, zero-initialises) a state of shape [batch, heads, dk, dv].
template <typename Scalar>
void prepare_state(RetentionState<Scalar>& state, Index batch, Index heads, Index dk, Index dv) {
  const Eigen::DSizes<Index, 4> expected(batch, heads, dk, dv);
  if (state.size() == 0) {
    state.resize(expected);
    state.setZero();
    return;
  }
  RETNET_REQUIRE(state.dimensions() == expected, "retention: state has shape " +
                                                     shape_string(state.dimensions()) +
                                                     ", expected " + shape_string(expected));
}

/// powers[i] = gamma^i for i = 0..n.
template <typename Scalar>
void decay_powers(Scalar gamma, Index n, Vector<Scalar>& powers) {
  powers.resize(n + 1);
  powers[0] = Scalar(1);
  for (Index i = 1; i <= n; ++i) powers[i] = powers[i - 1] * gamma;
}

/// A ⊙= D with D[n][m] = gamma^(n-m) for n >= m, else 0 (A is square, powers from decay_powers).
template <typename Scalar>
void apply_causal_decay(Matrix<Scalar>& a, const Vector<Scalar>& powers) {
  const Index t = a.rows();
  for (Index n = 0; n < t; ++n) {
    Scalar* row = a.data() + n * t;
    for (Index m = 0; m <= n; ++m) row[m] *= powers[n - m];
    for (Index m = n + 1; m < t; ++m) row[m] = Scalar(0);
  }
}

}  // namespace detail
}  // namespace retnet
