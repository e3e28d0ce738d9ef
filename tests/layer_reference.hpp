// Test helper: the layers of docs/NUMERICS.md written straight from its formulas, in long
// double, one position at a time, with no code shared with the library (its own rotation,
// norms, activations and retention sum). Weights are plain matrices in PyTorch's [out, in]
// layout; every sequence starts at position 0, so a test that runs a layer on a later part of a
// sequence compares against the rows of the whole sequence here.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "retnet/core/tensor.hpp"

namespace retnet::testing {

using Row = std::vector<long double>;

/// x Wᵀ for one row x.
inline Row times_transposed(const Row& x, const Matrix<double>& w) {
  Row y(w.rows(), 0.0L);
  for (Index o = 0; o < w.rows(); ++o)
    for (Index i = 0; i < w.cols(); ++i) y[o] += x[i] * w(o, i);
  return y;
}

/// RMSNorm x / sqrt(mean(x²) + eps), or LayerNorm (x - mean) / sqrt(var + eps), of x[from,
/// from + n), in place; then ⊙ weight and + bias where given (empty: none).
inline void norm_in_place(bool layer_norm, long double eps, Row& x, Index from, Index n,
                          const Vector<double>& weight = {}, const Vector<double>& bias = {}) {
  long double mean = 0, squares = 0;
  for (Index i = from; i < from + n; ++i) mean += x[i];
  mean = layer_norm ? mean / n : 0.0L;
  for (Index i = from; i < from + n; ++i) squares += (x[i] - mean) * (x[i] - mean);
  const long double denominator = std::sqrt(squares / n + eps);
  for (Index i = from; i < from + n; ++i) {
    x[i] = (x[i] - mean) / denominator;
    if (weight.size() > 0) x[i] *= weight[i - from];
    if (bias.size() > 0) x[i] += bias[i - from];
  }
}

inline long double gelu_by_formula(long double x) {
  return 0.5L * x * (1.0L + std::erf(x / std::sqrt(2.0L)));
}
inline long double swish_by_formula(long double x) {
  return x / (1.0L + std::exp(-x));
}

/// A multi-scale retention block: shapes, options and weights.
struct MsrSpec {
  Index heads = 1, kv_heads = 1, dk = 2, dv = 1;
  bool layer_norm = false;         // per-head norm: LayerNorm instead of RMSNorm
  bool gate = true;                // Y = (swish(G) ⊙ O) Woᵀ; false: Y = O Woᵀ
  bool torchscale_scaling = true;  // divide by c_n and clamp(|u_n| / c_n, 1, 5e4)
  bool halves = false;             // rotation pairs (i, i + dk/2) instead of (2i, 2i+1)
  double eps = 1e-6;
  std::vector<double> decays;  // one per head
  Matrix<double> wq, wk, wv, wg, wo;
  Vector<double> head_weight;  // [dv] or empty
};

/// The rotation of one head's dk values at position n, from the angle formulas.
inline void rotate_by_formula(const MsrSpec& s, long double n, long double* z) {
  const Index pairs = s.dk / 2;
  for (Index i = 0; i < pairs; ++i) {
    const long double angle =
        s.halves ? std::pow(10000.0L, -2.0L * i / s.dk)
                 : (pairs == 1 ? 1.0L : 1.0L / std::pow(10000.0L, (long double)i / (pairs - 1)));
    const Index first = s.halves ? i : 2 * i, second = s.halves ? i + pairs : 2 * i + 1;
    const long double a = z[first], b = z[second];
    const long double c = std::cos(n * angle), sn = std::sin(n * angle);
    z[first] = a * c - b * sn;
    z[second] = b * c + a * sn;
  }
}

/// MSR of one sequence x [T, d] from position 0: rows [T, d]. `clamped`, when given, counts the
/// (position, head) pairs where the row clamp divides by more than 1.
inline Matrix<double> msr_by_formula(const MsrSpec& s, const Matrix<double>& x,
                                     Index* clamped = nullptr) {
  const Index T = x.rows(), H = s.heads, dk = s.dk, dv = s.dv, group = s.heads / s.kv_heads;
  std::vector<Row> q, k, v, g;
  for (Index n = 0; n < T; ++n) {
    const Row xn(x.row(n).data(), x.row(n).data() + x.cols());
    q.push_back(times_transposed(xn, s.wq));
    k.push_back(times_transposed(xn, s.wk));
    v.push_back(times_transposed(xn, s.wv));
    g.push_back(s.gate ? times_transposed(xn, s.wg) : Row());
    for (long double& e : k[n]) e /= std::sqrt((long double)dk);
    for (Index h = 0; h < H; ++h) rotate_by_formula(s, n, q[n].data() + h * dk);
    for (Index h = 0; h < s.kv_heads; ++h) rotate_by_formula(s, n, k[n].data() + h * dk);
  }
  Matrix<double> y(T, s.wo.rows());
  for (Index n = 0; n < T; ++n) {
    Row o(H * dv, 0.0L);
    for (Index h = 0; h < H; ++h) {
      const long double gamma = s.decays[h];
      const Index kv = h / group;
      long double u = 0;  // sum_m gamma^(n-m) q_n · k_m
      for (Index m = 0; m <= n; ++m) {
        long double dot = 0;
        for (Index i = 0; i < dk; ++i) dot += q[n][h * dk + i] * k[m][kv * dk + i];
        const long double weight = std::pow(gamma, (long double)(n - m)) * dot;
        u += weight;
        for (Index e = 0; e < dv; ++e) o[h * dv + e] += weight * v[m][kv * dv + e];
      }
      if (s.torchscale_scaling) {
        const long double c = std::sqrt((1 - std::pow(gamma, (long double)(n + 1))) / (1 - gamma));
        const long double clamp = std::min(std::max(std::abs(u) / c, 1.0L), 5e4L);
        if (clamped && clamp > 1) ++*clamped;
        for (Index e = 0; e < dv; ++e) o[h * dv + e] /= c * clamp;
      }
      norm_in_place(s.layer_norm, s.eps, o, h * dv, dv, s.head_weight);
    }
    if (s.gate)
      for (Index e = 0; e < H * dv; ++e) o[e] *= swish_by_formula(g[n][e]);
    const Row yn = times_transposed(o, s.wo);
    for (Index c = 0; c < y.cols(); ++c) y(n, c) = double(yn[c]);
  }
  return y;
}

/// A feed-forward block: GLU (fc1, gate, fc2) or plain (fc1 + b1, optional subln, fc2 + b2).
struct FfnSpec {
  bool glu = true, swish = false, subln = false;
  double eps = 1e-6;
  Matrix<double> fc1, gate, fc2;
  Vector<double> fc1_bias, fc2_bias, subln_weight, subln_bias;
};

inline Matrix<double> ffn_by_formula(const FfnSpec& s, const Matrix<double>& x) {
  Matrix<double> y(x.rows(), s.fc2.rows());
  for (Index r = 0; r < x.rows(); ++r) {
    const Row xr(x.row(r).data(), x.row(r).data() + x.cols());
    Row h = times_transposed(xr, s.fc1);
    for (Index i = 0; i < Index(h.size()); ++i) {
      if (!s.glu) h[i] += s.fc1_bias[i];
      h[i] = s.swish ? swish_by_formula(h[i]) : gelu_by_formula(h[i]);
    }
    if (s.glu) {
      const Row gated = times_transposed(xr, s.gate);
      for (Index i = 0; i < Index(h.size()); ++i) h[i] *= gated[i];
    } else if (s.subln) {
      norm_in_place(true, s.eps, h, 0, Index(h.size()), s.subln_weight, s.subln_bias);
    }
    const Row out = times_transposed(h, s.fc2);
    for (Index c = 0; c < y.cols(); ++c) y(r, c) = double(out[c] + (s.glu ? 0.0 : s.fc2_bias[c]));
  }
  return y;
}

/// Random matrices and vectors of normal(0, spread) values.
inline Matrix<double> random_matrix(Index rows, Index cols, double spread, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, spread);
  Matrix<double> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}
inline Vector<double> random_vector(Index n, double mean, double spread, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(mean, spread);
  Vector<double> v(n);
  for (Index i = 0; i < n; ++i) v[i] = normal(rng);
  return v;
}

}  // namespace retnet::testing
