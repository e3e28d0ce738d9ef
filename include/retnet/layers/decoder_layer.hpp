// One decoder layer (docs/NUMERICS.md#decoder), pre-norm residual:
//     x = x + MSR(norm(x) ⊙ w_retention_layer_norm)
//     x = x + FFN(norm(x) ⊙ w_final_layer_norm)
#pragma once

#include "retnet/layers/feed_forward.hpp"
#include "retnet/layers/multiscale_retention.hpp"

namespace retnet {

template <typename Scalar>
struct DecoderLayerParams {
  RetentionParams<Scalar> retention;
  FeedForwardParams<Scalar> ffn;
  Scalar eps = Scalar(1e-6);  // of the two pre-norms
};

/// `Linear`: LinearWeight for inference, a dense Matrix for training and gradients.
template <typename Scalar, typename Linear = LinearWeight<Scalar>>
struct DecoderLayerWeights {
  Norm<Scalar> retention_norm;
  RetentionWeights<Scalar, Linear> retention;
  Norm<Scalar> final_norm;
  FeedForwardWeights<Scalar, Linear> ffn;
};
template <typename Scalar>
using DenseDecoderLayerWeights = DecoderLayerWeights<Scalar, Matrix<Scalar>>;

template <typename Scalar>
struct DecoderLayerWorkspace {
  Matrix<Scalar> normed, delta;
  RetentionWorkspace<Scalar> retention;
  FeedForwardWorkspace<Scalar> ffn;
};

/// x [batch·time, d] in place; `state` is this layer's retention state, `pending` (if given)
/// its deferred pairs.
template <typename Scalar>
void decoder_layer(const DecoderLayerParams<Scalar>& p, const DecoderLayerWeights<Scalar>& w,
                   Matrix<Scalar>& x, const SequenceLayout<Scalar>& layout, Form form,
                   RetentionState<Scalar>& state, DecoderLayerWorkspace<Scalar>& ws,
                   PendingPairs<Scalar>* pending = nullptr) {
  w.retention_norm.apply(x, p.eps, ws.normed);
  multiscale_retention(p.retention, w.retention, ws.normed, layout, form, state, ws.retention,
                       ws.delta, pending);
  x += ws.delta;
  w.final_norm.apply(x, p.eps, ws.normed);
  feed_forward(p.ffn, w.ffn, ws.normed, ws.ffn, ws.delta);
  x += ws.delta;
}

}  // namespace retnet
