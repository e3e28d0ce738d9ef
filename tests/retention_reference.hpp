// Test helpers: random tensors and a brute-force retention written straight from the formula
//     o_n = sum_{m<=n} gamma^(n-m) (q_n · k_m) v_m,   S = sum_m gamma^(T-1-m) k_mᵀ v_m
// in long double, independent of every kernel under test.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "compare.hpp"  // relative_error
#include "retnet/kernels/retention.hpp"

namespace retnet::testing {

template <typename Scalar>
Tensor4<Scalar> random_tensor(Index a, Index b, Index c, Index d, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  Tensor4<Scalar> t(a, b, c, d);
  for (Index i = 0; i < t.size(); ++i) t.data()[i] = static_cast<Scalar>(normal(rng));
  return t;
}

/// Brute-force output and final state, starting from `initial` (zero when empty).
template <typename Scalar>
void brute_force_retention(const Tensor4<Scalar>& q, const Tensor4<Scalar>& k,
                           const Tensor4<Scalar>& v, const std::vector<Scalar>& decays,
                           const Tensor4<Scalar>& initial, Tensor4<Scalar>& out,
                           Tensor4<Scalar>& state) {
  const Index B = q.dimension(0), H = q.dimension(1), T = q.dimension(2), dk = q.dimension(3),
              dv = v.dimension(3);
  out.resize(B, H, T, dv);
  state.resize(B, H, dk, dv);
  for (Index b = 0; b < B; ++b)
    for (Index h = 0; h < H; ++h) {
      const long double g = decays[h];
      for (Index n = 0; n < T; ++n)
        for (Index e = 0; e < dv; ++e) {
          long double acc = 0;
          for (Index m = 0; m <= n; ++m) {
            long double dot = 0;
            for (Index i = 0; i < dk; ++i) dot += (long double)q(b, h, n, i) * k(b, h, m, i);
            acc += std::pow(g, (long double)(n - m)) * dot * v(b, h, m, e);
          }
          if (initial.size() > 0) {  // gamma^(n+1) q_n S_initial
            long double qs = 0;
            for (Index i = 0; i < dk; ++i) qs += (long double)q(b, h, n, i) * initial(b, h, i, e);
            acc += std::pow(g, (long double)(n + 1)) * qs;
          }
          out(b, h, n, e) = static_cast<Scalar>(acc);
        }
      for (Index i = 0; i < dk; ++i)
        for (Index e = 0; e < dv; ++e) {
          long double acc =
              initial.size() > 0 ? std::pow(g, (long double)T) * initial(b, h, i, e) : 0.0L;
          for (Index m = 0; m < T; ++m)
            acc +=
                std::pow(g, (long double)(T - 1 - m)) * (long double)k(b, h, m, i) * v(b, h, m, e);
          state(b, h, i, e) = static_cast<Scalar>(acc);
        }
    }
}

}  // namespace retnet::testing
