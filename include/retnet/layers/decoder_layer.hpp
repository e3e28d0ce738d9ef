// One decoder layer (docs/NUMERICS.md#decoder), pre-norm residual:
//     x = x + MSR(norm(x) ⊙ w_retention_layer_norm)
//     x = x + FFN(norm(x) ⊙ w_final_layer_norm)
#pragma once

#include "retnet/layers/feed_forward.hpp"
#include "retnet/layers/multiscale_retention.hpp"

namespace retnet {

template <typename Scalar>
struct DecoderLayerWeights {
  Norm<Scalar> retention_norm;
  RetentionWeights<Scalar> retention;
  Norm<Scalar> final_norm;
  FeedForwardWeights<Scalar> ffn;
};

template <typename Scalar>
struct DecoderLayerScratch {
  Matrix<Scalar> normed, delta;
  RetentionScratch<Scalar> retention;
  FeedForwardScratch<Scalar> ffn;
};

template <typename Scalar>
class DecoderLayer {
 public:
  DecoderLayer(const ModelConfig& config, const DecoderLayerWeights<Scalar>& weights)
      : w_(weights),
        retention_(config, weights.retention),
        ffn_(config, weights.ffn),
        eps_(static_cast<Scalar>(config.eps)) {}

  const MultiScaleRetention<Scalar>& retention() const { return retention_; }

  /// x [batch·time, d] in place; `state` is this layer's retention state.
  void forward(Matrix<Scalar>& x, const SequenceLayout<Scalar>& layout, Form form, Index chunk_size,
               RetentionState<Scalar>& state, DecoderLayerScratch<Scalar>& s) const {
    w_.retention_norm.apply(x, eps_, s.normed);
    retention_.forward(s.normed, layout, form, chunk_size, state, s.retention, s.delta);
    x += s.delta;
    w_.final_norm.apply(x, eps_, s.normed);
    ffn_.forward(s.normed, s.ffn, s.delta);
    x += s.delta;
  }

 private:
  const DecoderLayerWeights<Scalar>& w_;
  MultiScaleRetention<Scalar> retention_;
  FeedForward<Scalar> ffn_;
  Scalar eps_;
};

}  // namespace retnet
