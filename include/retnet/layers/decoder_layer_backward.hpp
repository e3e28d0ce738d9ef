// The decoder layer (layers/decoder_layer.hpp) for training. Forward, pre-norm residual:
//     m = x + MSR(norm1(x)),   y = m + FFN(norm2(m))
// Backward, for dy:
//     dm = dy + norm2'(FFN'(dy)),   dx = dm + norm1'(MSR'(dm))
// The norms' outputs are recomputed in the backward from the kept x and m (one row pass each).
// With dropout (training only), each branch's output is masked before its residual add:
//     m = x + D₁ ⊙ MSR(norm1(x)),   y = m + D₂ ⊙ FFN(norm2(m))
// and each branch's backward starts from the masked gradient D ⊙ dy; the masks are computed
// again from their keys (ops/dropout.hpp), not kept.
#pragma once

#include "retnet/layers/decoder_layer.hpp"
#include "retnet/layers/feed_forward_backward.hpp"
#include "retnet/layers/multiscale_retention_backward.hpp"
#include "retnet/ops/dropout.hpp"

namespace retnet {

/// What decoder_layer_backward needs of the forward of one segment.
template <typename Scalar>
struct DecoderLayerActivations {
  Matrix<Scalar> input, middle;  // x and m
  RetentionActivations<Scalar> retention;
  FeedForwardActivations<Scalar> ffn;
};

/// The dropout sites of one layer's two branches.
enum DecoderLayerSite : uint64_t { kRetentionBranch = 0, kFeedForwardBranch = 1 };

/// x [rows, d] in place, on dense weights, keeping the activations in `saved`; `dropout` (this
/// layer's: Dropout::at(layer)) masks the branches' outputs.
template <typename Scalar>
void decoder_layer_train(const DecoderLayerParams<Scalar>& p,
                         const DenseDecoderLayerWeights<Scalar>& w, Matrix<Scalar>& x,
                         const SequenceLayout<Scalar>& layout, Form form,
                         RetentionState<Scalar>& state, DecoderLayerActivations<Scalar>& saved,
                         const Dropout& dropout = {}) {
  Matrix<Scalar> normed, delta;
  saved.input = x;
  w.retention_norm.apply(x, p.eps, normed);
  multiscale_retention_train(p.retention, w.retention, normed, layout, form, state, saved.retention,
                             delta);
  apply_dropout(dropout.at(kRetentionBranch), layout.time, layout.start, delta);
  x += delta;
  saved.middle = x;
  w.final_norm.apply(x, p.eps, normed);
  feed_forward_train(p.ffn, w.ffn, normed, saved.ffn, delta);
  apply_dropout(dropout.at(kFeedForwardBranch), layout.time, layout.start, delta);
  x += delta;
}

/// Gradient of decoder_layer_train: dx holds the gradient of the layer's output and receives
/// that of its input; d_state as in multiscale_retention_backward; adds into grad. `dropout` is
/// the forward's.
template <typename Scalar>
void decoder_layer_backward(const DecoderLayerParams<Scalar>& p,
                            const DenseDecoderLayerWeights<Scalar>& w,
                            const SequenceLayout<Scalar>& layout, Form form,
                            const DecoderLayerActivations<Scalar>& saved, Matrix<Scalar>& dx,
                            RetentionState<Scalar>& d_state, DenseDecoderLayerWeights<Scalar>& grad,
                            const Dropout& dropout = {}) {
  Matrix<Scalar> normed, d_normed, d_branch, d_masked;
  // The gradient a branch's output receives: dx, or D ⊙ dx with dropout.
  const auto branch_gradient = [&](DecoderLayerSite site) -> const Matrix<Scalar>& {
    if (!dropout.active()) return dx;
    d_masked = dx;
    apply_dropout(dropout.at(site), layout.time, layout.start, d_masked);
    return d_masked;
  };
  w.final_norm.apply(saved.middle, p.eps, normed);
  feed_forward_backward(p.ffn, w.ffn, normed, saved.ffn, branch_gradient(kFeedForwardBranch),
                        d_normed, grad.ffn);
  norm_backward(w.final_norm, p.eps, saved.middle, d_normed, d_branch, grad.final_norm);
  dx += d_branch;  // dm
  w.retention_norm.apply(saved.input, p.eps, normed);
  multiscale_retention_backward(p.retention, w.retention, normed, layout, form, saved.retention,
                                branch_gradient(kRetentionBranch), d_state, d_normed,
                                grad.retention);
  norm_backward(w.retention_norm, p.eps, saved.input, d_normed, d_branch, grad.retention_norm);
  dx += d_branch;
}

}  // namespace retnet
