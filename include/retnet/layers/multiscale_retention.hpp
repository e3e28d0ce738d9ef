// Multi-scale retention (MSR) block, docs/NUMERICS.md#multi-scale-retention:
//     Q = X Wqᵀ,  K = X Wkᵀ · dk^-0.5,  V = X Wvᵀ,  G = X Wgᵀ
//     rotate q_n, k_n by position;  O_h = retention_h(Q_h, K_h, V_h) with decay gamma_h
//     O_h = norm(O_h) per token and head;  Y = (swish(G) ⊙ concat_h O_h) Woᵀ
// The same block runs in all three forms; the form only changes the retention kernel.
#pragma once

#include <algorithm>
#include <vector>

#include "retnet/kernels/retention.hpp"
#include "retnet/layers/linear.hpp"
#include "retnet/layers/ops.hpp"
#include "retnet/layers/rotation.hpp"

namespace retnet {

enum class Form { kParallel, kChunkwise, kRecurrent };

inline const char* form_name(Form f) {
  return f == Form::kParallel ? "parallel" : f == Form::kChunkwise ? "chunkwise" : "recurrent";
}

template <typename Scalar>
struct RetentionWeights {
  LinearWeight<Scalar> q_proj, k_proj;  // [d, d]
  LinearWeight<Scalar> v_proj, g_proj;  // [Dv, d]
  LinearWeight<Scalar> out_proj;        // [d, Dv]
};

/// Where the rows of an activation matrix come from: row b·time + t is position
/// positions[b] + t of batch entry b.
template <typename Scalar>
struct SequenceLayout {
  Index batch = 0, time = 0;
  std::vector<int64_t> start;      // first position of each batch entry
  RotationTable<Scalar> rotation;  // one row per activation row

  void set(Index batch_size, Index steps, const std::vector<int64_t>& first_positions,
           Index key_head_dim) {
    batch = batch_size, time = steps, start = first_positions;
    row_positions.resize(static_cast<size_t>(batch * time));
    for (Index b = 0; b < batch; ++b)
      for (Index t = 0; t < time; ++t) row_positions[b * time + t] = start[b] + t;
    rotation.compute(row_positions, key_head_dim);
  }
  int64_t position(Index row) const { return row_positions[row]; }

 private:
  std::vector<int64_t> row_positions;
};

/// Buffers reused from call to call so that decoding allocates nothing per token.
template <typename Scalar>
struct RetentionScratch {
  Matrix<Scalar> q, k, v, g, o;
  Tensor4<Scalar> qh, kh, vh, oh;
};

/// One MSR block of a model: weights plus what the config fixes.
///
/// The state has dv + 1 columns per head: V gets a column of ones, so that the retention of
/// that column, sum_m gamma^(n-m) q_n·k_m, is the row sum that torchscale's parallel form
/// divides by (below); it rides through every form and across chunks for free.
/// See docs/NUMERICS.md#scale-factors.
template <typename Scalar>
class MultiScaleRetention {
 public:
  MultiScaleRetention(const ModelConfig& config, const RetentionWeights<Scalar>& weights)
      : w_(weights),
        heads_(config.heads),
        dk_(config.key_head_dim()),
        dv_(config.value_head_dim()),
        norm_(config.norm),
        eps_(static_cast<Scalar>(config.eps)),
        decays_(default_decays<Scalar>(config.heads)) {}

  Index state_columns() const { return dv_ + 1; }
  Index key_head_dim() const { return dk_; }

  /// y = MSR(x) for x [batch·time, d] laid out as `layout`; `state` [batch, heads, dk, dv+1] is
  /// the state before the first row (zero when empty) and receives the state after the last.
  void forward(const Matrix<Scalar>& x, const SequenceLayout<Scalar>& layout, Form form,
               Index chunk_size, RetentionState<Scalar>& state, RetentionScratch<Scalar>& s,
               Matrix<Scalar>& y) const {
    const Index batch = layout.batch, time = layout.time, rows = x.rows();
    const Index dv1 = dv_ + 1;
    linear<Scalar, 4>(x, {&w_.q_proj, &w_.k_proj, &w_.v_proj, &w_.g_proj},
                      {&s.q, &s.k, &s.v, &s.g});

    // Split into heads [batch, heads, time, ·], rotating q and k and scaling k by dk^-0.5.
    detail::resize_if_needed(s.qh, batch, heads_, time, dk_);
    detail::resize_if_needed(s.kh, batch, heads_, time, dk_);
    detail::resize_if_needed(s.vh, batch, heads_, time, dv1);
    const Scalar key_scale = Scalar(1) / std::sqrt(Scalar(dk_));
    for (Index b = 0; b < batch; ++b)
      for (Index h = 0; h < heads_; ++h)
        for (Index t = 0; t < time; ++t) {
          const Index row = b * time + t, at = (b * heads_ + h) * time + t;
          layout.rotation.rotate(s.q.row(row).data() + h * dk_, row, dk_, s.qh.data() + at * dk_);
          Scalar* kk = s.kh.data() + at * dk_;
          layout.rotation.rotate(s.k.row(row).data() + h * dk_, row, dk_, kk);
          for (Index i = 0; i < dk_; ++i) kk[i] *= key_scale;
          Scalar* vv = s.vh.data() + at * dv1;
          std::copy_n(s.v.row(row).data() + h * dv_, dv_, vv);
          vv[dv_] = Scalar(1);
        }

    switch (form) {
      case Form::kParallel:
        RETNET_REQUIRE(state.size() == 0 || is_zero(state),
                       "MultiScaleRetention: the parallel form starts from an empty state; use the "
                       "chunkwise or recurrent form to continue a sequence");
        parallel_retention(s.qh, s.kh, s.vh, decays_, &state, s.oh);
        break;
      case Form::kChunkwise:
        chunkwise_retention(s.qh, s.kh, s.vh, decays_, chunk_size, &state, s.oh);
        break;
      case Form::kRecurrent:
        recurrent_retention(s.qh, s.kh, s.vh, decays_, &state, s.oh);
        break;
    }

    // torchscale's scale factors, then the per-head norm and the swish gate:
    //   c_n = sqrt(sum_{i<=n} gamma^i) divides row n of D, and row n of (QKᵀ ⊙ D) is divided by
    //   clamp(|row sum|, 1, 5e4); both cancel in the norm up to eps, which is why they matter.
    s.o.resize(rows, heads_ * dv_);
    for (Index b = 0; b < batch; ++b)
      for (Index h = 0; h < heads_; ++h)
        for (Index t = 0; t < time; ++t) {
          const Index row = b * time + t;
          const Scalar* o = s.oh.data() + ((b * heads_ + h) * time + t) * dv1;
          const Scalar c = decay_norm(h, layout.position(row));
          const Scalar row_sum = o[dv_] / c;
          const Scalar scale =
              Scalar(1) / (c * std::clamp(std::abs(row_sum), Scalar(1), Scalar(5e4)));
          Scalar* out = s.o.row(row).data() + h * dv_;
          for (Index e = 0; e < dv_; ++e) out[e] = o[e] * scale;
          normalize(norm_, eps_, out, dv_);
        }
    for (Index r = 0; r < rows; ++r)
      for (Index c = 0; c < heads_ * dv_; ++c) s.o(r, c) *= swish(s.g(r, c));
    linear(s.o, w_.out_proj, y);
  }

 private:
  /// sqrt(sum_{i=0}^{n} gamma^i), in closed form.
  Scalar decay_norm(Index head, int64_t n) const {
    const double g = static_cast<double>(decays_[head]);
    const double sum = g == 1.0 ? double(n + 1) : (1.0 - std::pow(g, double(n + 1))) / (1.0 - g);
    return static_cast<Scalar>(std::sqrt(sum));
  }
  static bool is_zero(const RetentionState<Scalar>& t) {
    for (Index i = 0; i < t.size(); ++i)
      if (t.data()[i] != Scalar(0)) return false;
    return true;
  }

  const RetentionWeights<Scalar>& w_;
  Index heads_, dk_, dv_;
  NormKind norm_;
  Scalar eps_;
  std::vector<Scalar> decays_;
};

}  // namespace retnet
