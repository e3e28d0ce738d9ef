// Multi-scale retention (layers/multiscale_retention.hpp) for training: a forward on dense weights
// that keeps what the backward needs, and the hand-derived backward. Forward, per row n and
// head h (o the kernel's output with torchscale's column of ones, u_n = o[dv] its row sum):
//     Q = rot(X Wqᵀ),  K = rot(X Wkᵀ) dk^-1/2,  V = [X Wvᵀ, 1],  G = X Wgᵀ
//     o = retention(Q, K, V)                            (from the segment's start state)
//     p = o[0..dv) · s,   s = 1 / (c_n · clamp(|u_n| / c_n, 1, 5e4))     (torchscale; else p = o)
//     z = norm(p) ⊙ w,  Y = (swish(G) ⊙ z) Woᵀ
// Backward, in reverse:
//     dZg = dY Wo, dWo += dYᵀ (swish(G) ⊙ z);  dz = dZg ⊙ swish(G),  dG = dZg ⊙ z ⊙ swish'(G)
//     dw += dz ⊙ norm(p);  dp = norm'(dz ⊙ w)
//     do[e] = dp[e] · s  (e < dv);  ds = Σ_e dp[e] o[e]
//     the clamp: where 1 <= |u_n| / c_n <= 5e4, s = 1 / |u_n|, so do[dv] = -ds · sign(u_n) / u_n²;
//     where the clamp holds a bound, s does not depend on u_n and do[dv] = 0 (autograd's choice
//     for clamp; torchscale's own code detaches its row sums, which the library does not)
//     dQ, dK, dV, dS0 = retention_backward(do, dS)      (the ones column's gradient is dropped)
//     dX = dQ' Wq + dK' Wk + dV' Wv + dG Wg with dQ' = rotᵀ dQ, dK' = dk^-1/2 rotᵀ dK, and grouped
//     kv heads summing the gradients of the query heads that share them.
#pragma once

#include <algorithm>
#include <cmath>

#include "retnet/kernels/retention_backward.hpp"
#include "retnet/layers/multiscale_retention.hpp"
#include "retnet/ops/activation_backward.hpp"
#include "retnet/ops/norm_backward.hpp"
#include "retnet/ops/rotation_backward.hpp"

namespace retnet {

/// What multiscale_retention_backward needs of the forward of one segment.
template <typename Scalar>
struct RetentionActivations {
  RetentionWorkspace<Scalar> heads;  // qh, kh, vh (the kernel's inputs), oh (its output), g, o
  RetentionState<Scalar> start;      // the state the segment started from
  Matrix<Scalar> normed;             // z = norm(p) ⊙ w, before the gate [rows, H·dv]
};

/// y = MSR(x) on dense weights, keeping the activations in `saved`; `state` as in
/// multiscale_retention (the state before the segment in, the state after it out).
template <typename Scalar>
void multiscale_retention_train(const RetentionParams<Scalar>& p,
                                const DenseRetentionWeights<Scalar>& w, const Matrix<Scalar>& x,
                                const SequenceLayout<Scalar>& layout, Form form,
                                RetentionState<Scalar>& state, RetentionActivations<Scalar>& saved,
                                Matrix<Scalar>& y) {
  RetentionWorkspace<Scalar>& ws = saved.heads;
  ws.q.noalias() = x * w.q_proj.transpose();
  ws.k.noalias() = x * w.k_proj.transpose();
  ws.v.noalias() = x * w.v_proj.transpose();
  if (p.output_gate) ws.g.noalias() = x * w.g_proj.transpose();
  detail::split_heads(p, layout, ws);
  ws.q.resize(0, 0), ws.k.resize(0, 0), ws.v.resize(0, 0);  // kept as qh, kh, vh
  const Index rows = layout.batch * layout.time;
  detail::prepare_state(state, layout.batch, p.heads, p.key_head_dim, p.state_columns());
  saved.start = state;
  retention(form, ws.qh, ws.kh, ws.vh, p.decays, state, ws.oh);
  RetentionWeights<Scalar> head_norm;  // normalize_heads reads only the per-head norm's weight
  head_norm.head_norm_weight = w.head_norm_weight;
  detail::normalize_heads(p, head_norm, layout, ws);
  saved.normed = ws.o;
  if (p.output_gate) ws.o.array() *= ws.g.array().unaryExpr([](Scalar g) { return swish(g); });
  y.resize(rows, w.out_proj.rows());
  y.noalias() = ws.o * w.out_proj.transpose();
}

namespace detail {

/// From the gradient of z (the per-head norm's output, [rows, H·dv]) to the gradient of the
/// kernel's output d_oh [B, H, T, dv1], through the norm, its weight and torchscale's factors.
template <typename Scalar>
void normalize_heads_backward(const RetentionParams<Scalar>& p,
                              const DenseRetentionWeights<Scalar>& w,
                              const SequenceLayout<Scalar>& layout,
                              const RetentionActivations<Scalar>& saved, const Matrix<Scalar>& dz,
                              Tensor4<Scalar>& d_oh, DenseRetentionWeights<Scalar>& grad) {
  const Index batch = layout.batch, time = layout.time, heads = p.heads;
  const Index dv = p.value_head_dim, dv1 = p.state_columns();
  resize_if_needed(d_oh, batch, heads, time, dv1);
  Vector<Scalar> pre(dv), normed(dv), d_normed(dv), d_pre(dv);
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index t = 0; t < time; ++t) {
        const Index row = b * time + t, at = (b * heads + h) * time + t;
        const Scalar* o = saved.heads.oh.data() + at * dv1;
        Scalar* d_o = d_oh.data() + at * dv1;
        Scalar scale = Scalar(1), row_sum = Scalar(0);
        bool clamped = true;
        if (p.scaling == RetentionScaling::kTorchscale) {
          const Scalar c = decay_norm(p.decays[h], layout.position(row));
          row_sum = o[dv] / c;
          const Scalar bounded = std::clamp(std::abs(row_sum), Scalar(1), Scalar(5e4));
          clamped = bounded != std::abs(row_sum);
          scale = Scalar(1) / (c * bounded);
        }
        for (Index e = 0; e < dv; ++e) pre[e] = o[e] * scale;
        d_normed = dz.row(row).segment(h * dv, dv).transpose();
        if (p.head_norm_weight) {
          normed = pre;
          normalize(p.head_norm, p.eps, normed.data(), dv);
          grad.head_norm_weight.array() += d_normed.array() * normed.array();
          d_normed.array() *= w.head_norm_weight.array();
        }
        normalize_backward(p.head_norm, p.eps, pre.data(), d_normed.data(), dv, d_pre.data());
        for (Index e = 0; e < dv; ++e) d_o[e] = d_pre[e] * scale;
        if (p.scaling != RetentionScaling::kTorchscale) continue;
        // s = 1 / |u| where the clamp passes u through: ds/du = -sign(u) / u².
        const Scalar d_scale = d_pre.dot(Eigen::Map<const Vector<Scalar>>(o, dv));
        const Scalar u = o[dv];
        d_o[dv] = clamped ? Scalar(0) : -d_scale * (u > 0 ? Scalar(1) : Scalar(-1)) / (u * u);
      }
}

/// The kernel's gradients [B, H, T, ·] back into rows of the projections' gradients: rotation
/// transposed, the key scale, grouped heads summed, the ones column dropped.
template <typename Scalar>
void merge_head_gradients(const RetentionParams<Scalar>& p, const SequenceLayout<Scalar>& layout,
                          const Tensor4<Scalar>& dqh, const Tensor4<Scalar>& dkh,
                          const Tensor4<Scalar>& dvh, Matrix<Scalar>& dq, Matrix<Scalar>& dk,
                          Matrix<Scalar>& dv) {
  const Index batch = layout.batch, time = layout.time, heads = p.heads, kv = p.kv_heads();
  const Index dkh_ = p.key_head_dim, dvh_ = p.value_head_dim, dv1 = p.state_columns();
  const Index group = heads / kv;
  dq.resize(batch * time, heads * dkh_);
  dk.setZero(batch * time, kv * dkh_);
  dv.setZero(batch * time, kv * dvh_);
  const Scalar key_scale = Scalar(1) / std::sqrt(Scalar(dkh_));
  Vector<Scalar> unrotated(dkh_);
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index t = 0; t < time; ++t) {
        const Index row = b * time + t, at = (b * heads + h) * time + t, g = h / group;
        rotate_backward(layout.rotation, dqh.data() + at * dkh_, row, dkh_,
                        dq.row(row).data() + h * dkh_);
        rotate_backward(layout.rotation, dkh.data() + at * dkh_, row, dkh_, unrotated.data());
        dk.row(row).segment(g * dkh_, dkh_) += key_scale * unrotated.transpose();
        dv.row(row).segment(g * dvh_, dvh_) +=
            Eigen::Map<const RowVector<Scalar>>(dvh.data() + at * dv1, dvh_);
      }
}

}  // namespace detail

/// Gradient of multiscale_retention_train at x for dy: writes dx, adds into grad (allocated like
/// w). d_state: the gradient of the state after the segment in, of the state before it out.
template <typename Scalar>
void multiscale_retention_backward(const RetentionParams<Scalar>& p,
                                   const DenseRetentionWeights<Scalar>& w, const Matrix<Scalar>& x,
                                   const SequenceLayout<Scalar>& layout, Form form,
                                   const RetentionActivations<Scalar>& saved,
                                   const Matrix<Scalar>& dy, RetentionState<Scalar>& d_state,
                                   Matrix<Scalar>& dx, DenseRetentionWeights<Scalar>& grad) {
  const RetentionWorkspace<Scalar>& ws = saved.heads;
  grad.out_proj.noalias() += dy.transpose() * ws.o;
  Matrix<Scalar> dz = dy * w.out_proj;  // the gradient of the gated output
  Matrix<Scalar> dg;
  if (p.output_gate) {
    dg = dz.cwiseProduct(saved.normed);
    for (Index i = 0; i < dg.size(); ++i) {
      dg.data()[i] *= swish_derivative(ws.g.data()[i]);
      dz.data()[i] *= swish(ws.g.data()[i]);
    }
  }
  Tensor4<Scalar> d_oh, dqh, dkh, dvh;
  RetentionState<Scalar> d_start;
  detail::normalize_heads_backward(p, w, layout, saved, dz, d_oh, grad);
  retention_backward(form, ws.qh, ws.kh, ws.vh, p.decays, Index(0), saved.start, d_oh, d_state, dqh,
                     dkh, dvh, d_start);
  d_state = d_start;  // (Eigen tensors have no swap)
  Matrix<Scalar> dq, dk, dv;
  detail::merge_head_gradients(p, layout, dqh, dkh, dvh, dq, dk, dv);
  grad.q_proj.noalias() += dq.transpose() * x;
  grad.k_proj.noalias() += dk.transpose() * x;
  grad.v_proj.noalias() += dv.transpose() * x;
  dx.noalias() = dq * w.q_proj;
  dx.noalias() += dk * w.k_proj;
  dx.noalias() += dv * w.v_proj;
  if (p.output_gate) {
    grad.g_proj.noalias() += dg.transpose() * x;
    dx.noalias() += dg * w.g_proj;
  }
}

}  // namespace retnet
