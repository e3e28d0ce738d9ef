// Multi-scale retention (MSR) block (docs/NUMERICS.md#multi-scale-retention):
//     Q = X Wqᵀ,  K = X Wkᵀ · dk^-0.5,  V = X Wvᵀ,  G = X Wgᵀ
//     rotate q_n, k_n by position;  O_h = retention_h(Q_h, K_h, V_h) with decay gamma_h
//     O_h = norm(O_h) (⊙ w) per token and head;  Y = (swish(G) ⊙ concat_h O_h) Woᵀ
// The same block runs in all three forms; the form only changes the retention kernel.
// RetentionParams say what differs between the published families (docs/FORMATS.md): the
// rotation layout, torchscale's scale factors or plain retention, grouped key/value heads, a
// weight on the per-head norm, and whether there is an output gate.
#pragma once

#include <algorithm>
#include <vector>

#include "retnet/kernels/retention.hpp"
#include "retnet/ops/activation.hpp"
#include "retnet/ops/linear.hpp"
#include "retnet/ops/norm.hpp"
#include "retnet/ops/rotation.hpp"

namespace retnet {

/// How each head's retention output is scaled before the per-head norm.
enum class RetentionScaling {
  kTorchscale,  // divided by c_n and by clamp(|row sum|, 1, 5e4) (docs/NUMERICS.md#scale-factors)
  kNone,        // plain retention (fla)
};

/// What fixes the shape and arithmetic of an MSR block (the model derives it from its config).
template <typename Scalar>
struct RetentionParams {
  Index heads = 0, key_head_dim = 0, value_head_dim = 0;
  Index key_value_heads = 0;  // Hkv: heads of k and v (grouped heads); 0 means `heads`
  NormKind head_norm = NormKind::kRMSNorm;
  Scalar eps = Scalar(1e-6);
  bool head_norm_weight = false;  // the per-head norm has a learned [dv] weight (fla)
  bool output_gate = true;        // Y = (swish(G) ⊙ O) Woᵀ; false: Y = O Woᵀ, no g_proj
  RetentionScaling scaling = RetentionScaling::kTorchscale;
  RotationLayout rotation = RotationLayout::kPairs;
  std::vector<Scalar> decays;  // one per (query) head

  Index kv_heads() const { return key_value_heads > 0 ? key_value_heads : heads; }

  /// With torchscale's scaling the state has dv + 1 columns per head: V gets a column of ones,
  /// so that the retention of that column, sum_m gamma^(n-m) q_n·k_m, is the row sum that
  /// torchscale's parallel form divides by (docs/NUMERICS.md#scale-factors); it rides through
  /// every form and across chunks for free. Plain retention needs no such column.
  Index state_columns() const {
    return value_head_dim + (scaling == RetentionScaling::kTorchscale ? 1 : 0);
  }
};

/// The block's weights. `Linear` is LinearWeight (panels of any weight type) for inference, or a
/// dense Matrix for training and for the gradients, which have the weights' shapes.
template <typename Scalar, typename Linear = LinearWeight<Scalar>>
struct RetentionWeights {
  Linear q_proj;                    // [H·dk, d]
  Linear k_proj;                    // [Hkv·dk, d]
  Linear v_proj;                    // [Hkv·dv, d]
  Linear g_proj;                    // [H·dv, d]; only with an output gate
  Linear out_proj;                  // [d, H·dv]
  Vector<Scalar> head_norm_weight;  // [dv], shared by all heads; only with head_norm_weight
};
template <typename Scalar>
using DenseRetentionWeights = RetentionWeights<Scalar, Matrix<Scalar>>;

/// Where the rows of an activation matrix come from: row b·time + t is position start[b] + t of
/// batch entry b, with the rotation of that position.
template <typename Scalar>
struct SequenceLayout {
  Index batch = 0, time = 0;
  std::vector<int64_t> start;      // first position of each batch entry
  RotationTable<Scalar> rotation;  // one row per activation row

  void set(Index batch_size, Index steps, const std::vector<int64_t>& first_positions,
           Index key_head_dim, RotationLayout layout = RotationLayout::kPairs) {
    batch = batch_size, time = steps, start = first_positions;
    row_positions.resize(static_cast<size_t>(batch * time));
    for (Index b = 0; b < batch; ++b)
      for (Index t = 0; t < time; ++t) row_positions[b * time + t] = start[b] + t;
    rotation.compute(row_positions, key_head_dim, layout);
  }
  int64_t position(Index row) const { return row_positions[row]; }

 private:
  std::vector<int64_t> row_positions;
};

/// The caller's buffers for one MSR block, reused from call to call so that decoding allocates
/// nothing per token.
template <typename Scalar>
struct RetentionWorkspace {
  Matrix<Scalar> q, k, v, g, o;    // [rows, ·]: projections, then the gated head outputs
  Tensor4<Scalar> qh, kh, vh, oh;  // [batch, heads, time, ·]: the kernel's operands
};

namespace detail {

/// sqrt(sum_{i=0}^{n} gamma^i), in closed form: the decay normaliser c_n.
template <typename Scalar>
Scalar decay_norm(Scalar gamma, int64_t n) {
  const double g = static_cast<double>(gamma);
  const double sum = g == 1.0 ? double(n + 1) : (1.0 - std::pow(g, double(n + 1))) / (1.0 - g);
  return static_cast<Scalar>(std::sqrt(sum));
}

/// Splits the projections into heads [batch, heads, time, ·]: q and k rotated by position, k
/// scaled by dk^-0.5, and v given its column of ones (torchscale's scaling only). Query head h
/// reads key/value head h / (H / Hkv), so grouped heads are repeated here.
template <typename Scalar>
void split_heads(const RetentionParams<Scalar>& p, const SequenceLayout<Scalar>& layout,
                 RetentionWorkspace<Scalar>& ws) {
  const Index batch = layout.batch, time = layout.time, heads = p.heads;
  const Index dk = p.key_head_dim, dv = p.value_head_dim, dv1 = p.state_columns();
  const Index group = heads / p.kv_heads();
  resize_if_needed(ws.qh, batch, heads, time, dk);
  resize_if_needed(ws.kh, batch, heads, time, dk);
  resize_if_needed(ws.vh, batch, heads, time, dv1);
  const Scalar key_scale = Scalar(1) / std::sqrt(Scalar(dk));
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index t = 0; t < time; ++t) {
        const Index row = b * time + t, at = (b * heads + h) * time + t, kv = h / group;
        layout.rotation.rotate(ws.q.row(row).data() + h * dk, row, dk, ws.qh.data() + at * dk);
        Scalar* k = ws.kh.data() + at * dk;
        layout.rotation.rotate(ws.k.row(row).data() + kv * dk, row, dk, k);
        for (Index i = 0; i < dk; ++i) k[i] *= key_scale;
        Scalar* v = ws.vh.data() + at * dv1;
        std::copy_n(ws.v.row(row).data() + kv * dv, dv, v);
        if (dv1 > dv) v[dv] = Scalar(1);
      }
}

/// Head outputs back into rows [rows, heads·dv], each scaled by torchscale's factors (when the
/// params ask for them) and then normalised: row n of head h is divided by c_n and by
/// clamp(|row sum|, 1, 5e4), where the row sum is the extra column of the state
/// (docs/NUMERICS.md#scale-factors); then the per-head norm, times its weight if it has one.
template <typename Scalar>
void normalize_heads(const RetentionParams<Scalar>& p, const RetentionWeights<Scalar>& w,
                     const SequenceLayout<Scalar>& layout, RetentionWorkspace<Scalar>& ws) {
  const Index batch = layout.batch, time = layout.time, heads = p.heads;
  const Index dv = p.value_head_dim, dv1 = p.state_columns();
  ws.o.resize(batch * time, heads * dv);
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index t = 0; t < time; ++t) {
        const Index row = b * time + t;
        const Scalar* o = ws.oh.data() + ((b * heads + h) * time + t) * dv1;
        Scalar* out = ws.o.row(row).data() + h * dv;
        if (p.scaling == RetentionScaling::kTorchscale) {
          const Scalar c = decay_norm(p.decays[h], layout.position(row));
          const Scalar row_sum = o[dv] / c;
          const Scalar scale =
              Scalar(1) / (c * std::clamp(std::abs(row_sum), Scalar(1), Scalar(5e4)));
          for (Index e = 0; e < dv; ++e) out[e] = o[e] * scale;
        } else {
          std::copy_n(o, dv, out);
        }
        normalize(p.head_norm, p.eps, out, dv);
        if (p.head_norm_weight)
          for (Index e = 0; e < dv; ++e) out[e] *= w.head_norm_weight[e];
      }
}

}  // namespace detail

/// y = MSR(x) for x [batch·time, d] laid out as `layout`; `state` [batch, heads, dk,
/// p.state_columns()] is the state before the first row (zero when empty) and receives the state
/// after the last; `pending`, when given, holds its deferred pairs (kernels/retention.hpp).
template <typename Scalar>
void multiscale_retention(const RetentionParams<Scalar>& p, const RetentionWeights<Scalar>& w,
                          const Matrix<Scalar>& x, const SequenceLayout<Scalar>& layout, Form form,
                          RetentionState<Scalar>& state, RetentionWorkspace<Scalar>& ws,
                          Matrix<Scalar>& y, PendingPairs<Scalar>* pending = nullptr) {
  if (p.output_gate)
    linear<Scalar, 4>(x, {&w.q_proj, &w.k_proj, &w.v_proj, &w.g_proj},
                      {&ws.q, &ws.k, &ws.v, &ws.g});
  else
    linear<Scalar, 3>(x, {&w.q_proj, &w.k_proj, &w.v_proj}, {&ws.q, &ws.k, &ws.v});
  detail::split_heads(p, layout, ws);
  retention(form, ws.qh, ws.kh, ws.vh, p.decays, state, pending, ws.oh);
  detail::normalize_heads(p, w, layout, ws);
  if (p.output_gate) ws.o.array() *= ws.g.array().unaryExpr([](Scalar g) { return swish(g); });
  linear(ws.o, w.out_proj, y);
}

}  // namespace retnet
