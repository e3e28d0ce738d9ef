// The loss of a RetNet decoder on next-token prediction and its gradient with respect to every
// weight: the forward of model/retnet_model.hpp on dense weights, segment by segment as the
// inference model cuts them (parallel: one segment; chunkwise: segments of chunk_size; recurrent:
// segments of one token), keeping each segment's activations, then the backward with the
// segments in reverse and the layers in reverse, each layer's state gradient carried from the
// later segment to the earlier one.
//
//     x = E[token] (· sqrt(d)) (then norm ⊙ w_emb);  x = layer_l(x);  logits = norm(x) ⊙ w  Woutᵀ
//     loss = Σ_{counted rows} cross_entropy(logits, target)       (ops/cross_entropy.hpp)
//
// Dropout (GradientOptions::dropout, training only) masks each layer's two branch outputs
// (layers/decoder_layer_backward.hpp); the loss is then that of the masked network.
//
// The output head's backward runs in the forward pass, segment by segment, so logits are never
// kept: what a segment keeps is the gradient of its last layer's output ([rows, d]).
//
// Memory, in Scalars per token and layer (H heads of dk, dv; dv1 = dv + 1 with torchscale's
// scaling; F the FFN width): without recompute 2d (layer input and middle) + H(2dk + 2dv1)
// (the kernel's q, k, v and output) + 3·H·dv (gate, normed and gated outputs) + 4F (GLU: P,
// gate, act(P), hidden), plus one state (H·dk·dv1 per sequence) per segment and layer, which is
// per token H·dk·dv1 / chunk; with `recompute`, d per token and layer (the layer's input) and
// the same state per segment, plus one layer's activations of one segment at a time. Either way
// linear in T for the chunkwise and recurrent forms; the parallel form holds T x T scores per
// head in the forward and backward of its one segment.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "retnet/layers/decoder_layer_backward.hpp"
#include "retnet/model/dense_weights.hpp"
#include "retnet/model/retnet_model.hpp"
#include "retnet/ops/cross_entropy.hpp"

namespace retnet {

struct GradientOptions {
  Form form = Form::kChunkwise;  // which form the forward and backward use
  Index chunk_size = 0;      // chunkwise segment length; <= 0: the config's recurrent_chunk_size
  bool recompute = false;    // keep only each segment's layer inputs; recompute in the backward
  int32_t ignore_id = -100;  // targets equal to this are not predicted
  Dropout dropout;           // on each layer's two branch outputs (rate 0: none); site = the layer
};

/// What one segment keeps between the forward and the backward pass.
template <typename Scalar>
struct SegmentActivations {
  Index start = 0, len = 0;
  SequenceLayout<Scalar> layout;
  Matrix<Scalar> embedded;  // the embedding before its norm (layernorm_embedding only)
  std::vector<DecoderLayerActivations<Scalar>> layers;  // without recompute
  std::vector<Matrix<Scalar>> layer_inputs;             // with recompute
  std::vector<RetentionState<Scalar>> layer_states;     // with recompute: state before it
  Matrix<Scalar> d_top;                                 // the gradient of the last layer's output
};

/// The caller's buffers for accumulate_gradients, reused from call to call.
template <typename Scalar>
struct GradientWorkspace {
  std::vector<SegmentActivations<Scalar>> segments;
  Matrix<Scalar> x, normed, logits, d_logits, d_normed, d_embedded;
  std::vector<int32_t> targets;
  std::vector<RetentionState<Scalar>> d_states;
};

namespace detail {

/// Checks a gradient call's arguments; returns the segment length.
template <typename Scalar>
Index check_gradient_call(const ModelConfig& c, const TokenMatrix& inputs,
                          const TokenMatrix& targets, const GradientOptions& o,
                          const ModelState<Scalar>& state) {
  const Index batch = inputs.rows(), time = inputs.cols();
  RETNET_REQUIRE(targets.rows() == batch && targets.cols() == time,
                 "accumulate_gradients: targets are " + std::to_string(targets.rows()) + " x " +
                     std::to_string(targets.cols()) + ", inputs " + std::to_string(batch) + " x " +
                     std::to_string(time));
  RETNET_REQUIRE(state.batch() == batch && static_cast<int64_t>(state.layers.size()) == c.layers,
                 "accumulate_gradients: the state is not one of " + std::to_string(batch) +
                     " sequences for this model");
  for (Index i = 0; i < inputs.size(); ++i)
    RETNET_REQUIRE(inputs.data()[i] >= 0 && inputs.data()[i] < c.vocab_size,
                   "accumulate_gradients: token id " + std::to_string(inputs.data()[i]) +
                       " is outside [0, " + std::to_string(c.vocab_size) + ")");
  if (o.form == Form::kRecurrent) return 1;
  if (o.form == Form::kChunkwise) return o.chunk_size > 0 ? o.chunk_size : c.chunk_size;
  const double score_bytes = double(time) * double(time) * sizeof(Scalar) * num_threads();
  RETNET_REQUIRE(score_bytes <= RetNetModel<Scalar>::kMaxParallelScoreBytes,
                 "accumulate_gradients: the parallel form would hold " + std::to_string(time) +
                     " x " + std::to_string(time) +
                     " scores per head and thread; use the chunkwise form for long sequences");
  return std::max<Index>(time, 1);
}

/// Rows b·len + t of x = the embeddings of tokens(b, start + t), scaled, then normed.
template <typename Scalar>
void embed_segment(const ModelConfig& c, const DenseModelWeights<Scalar>& w,
                   const TokenMatrix& tokens, SegmentActivations<Scalar>& seg, Matrix<Scalar>& x) {
  const Index batch = tokens.rows(), d = c.embed_dim;
  const Matrix<Scalar>& table = c.tie_embeddings ? w.output : w.embed;
  const Scalar scale = c.scale_embedding ? std::sqrt(Scalar(d)) : Scalar(1);
  x.resize(batch * seg.len, d);
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < seg.len; ++t)
      x.row(b * seg.len + t) = scale * table.row(tokens(b, seg.start + t));
  if (!c.layernorm_embedding) return;
  seg.embedded = x;
  w.embed_norm.apply(seg.embedded, static_cast<Scalar>(c.eps), x);
}

/// The output head of one segment, forward and backward: adds the segment's loss, adds into the
/// final norm's and the output projection's gradients, and keeps d_top for the backward.
template <typename Scalar>
LossSum head_forward_backward(const ModelConfig& c, const DenseModelWeights<Scalar>& w,
                              const TokenMatrix& targets, const GradientOptions& o,
                              Scalar grad_scale, SegmentActivations<Scalar>& seg,
                              GradientWorkspace<Scalar>& ws, DenseModelWeights<Scalar>& grads) {
  const Index batch = targets.rows();
  const Scalar eps = static_cast<Scalar>(c.eps);
  ws.targets.resize(static_cast<size_t>(batch * seg.len));
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < seg.len; ++t) ws.targets[b * seg.len + t] = targets(b, seg.start + t);
  w.final_norm.apply(ws.x, eps, ws.normed);
  ws.logits.noalias() = ws.normed * w.output.transpose();
  const LossSum loss =
      cross_entropy(ws.logits, ws.targets.data(), o.ignore_id, grad_scale, &ws.d_logits);
  grads.output.noalias() += ws.d_logits.transpose() * ws.normed;
  ws.d_normed.noalias() = ws.d_logits * w.output;
  norm_backward(w.final_norm, eps, ws.x, ws.d_normed, seg.d_top, grads.final_norm);
  return loss;
}

/// The backward of one segment's layers and embedding, given seg.d_top.
template <typename Scalar>
void segment_backward(const ModelConfig& c, const DecoderLayerParams<Scalar>& params,
                      const DenseModelWeights<Scalar>& w, const TokenMatrix& inputs,
                      const GradientOptions& o, SegmentActivations<Scalar>& seg,
                      GradientWorkspace<Scalar>& ws, DenseModelWeights<Scalar>& grads) {
  Matrix<Scalar>& dx = seg.d_top;
  for (Index l = c.layers - 1; l >= 0; --l) {
    const size_t i = static_cast<size_t>(l);
    if (o.recompute) {
      Matrix<Scalar> x = seg.layer_inputs[i];
      RetentionState<Scalar> state = seg.layer_states[i];
      DecoderLayerActivations<Scalar> saved;
      decoder_layer_train(params, w.layers[i], x, seg.layout, o.form, state, saved,
                          o.dropout.at(i));
      decoder_layer_backward(params, w.layers[i], seg.layout, o.form, saved, dx, ws.d_states[i],
                             grads.layers[i], o.dropout.at(i));
    } else {
      decoder_layer_backward(params, w.layers[i], seg.layout, o.form, seg.layers[i], dx,
                             ws.d_states[i], grads.layers[i], o.dropout.at(i));
    }
  }
  if (c.layernorm_embedding) {
    norm_backward(w.embed_norm, static_cast<Scalar>(c.eps), seg.embedded, dx, ws.d_embedded,
                  grads.embed_norm);
    dx.swap(ws.d_embedded);
  }
  Matrix<Scalar>& table = c.tie_embeddings ? grads.output : grads.embed;
  const Scalar scale = c.scale_embedding ? std::sqrt(Scalar(c.embed_dim)) : Scalar(1);
  for (Index b = 0; b < inputs.rows(); ++b)
    for (Index t = 0; t < seg.len; ++t)
      table.row(inputs(b, seg.start + t)) += scale * dx.row(b * seg.len + t);
}

}  // namespace detail

/// Reads inputs [B, T] from `state` (zero, or carried from an earlier call: no gradient flows
/// into it; it is updated to the state after the last token, positions advanced), scores
/// targets [B, T] (ignore_id: not counted) with cross-entropy, and adds grad_scale times the
/// gradient of the sum of the losses into `grads` (allocated like the weights). Returns the sum
/// of the losses and their count.
template <typename Scalar>
LossSum accumulate_gradients(const ModelConfig& c, const DenseModelWeights<Scalar>& w,
                             const TokenMatrix& inputs, const TokenMatrix& targets,
                             const GradientOptions& o, Scalar grad_scale, ModelState<Scalar>& state,
                             GradientWorkspace<Scalar>& ws, DenseModelWeights<Scalar>& grads) {
  const Index segment = detail::check_gradient_call(c, inputs, targets, o, state);
  const DecoderLayerParams<Scalar> params = RetNetModel<Scalar>::layer_params(c);
  const Index batch = inputs.rows(), time = inputs.cols(), layers = c.layers;
  const Index count = (time + segment - 1) / segment;
  ws.segments.resize(static_cast<size_t>(count));
  LossSum loss;
  for (Index s = 0; s < count; ++s) {
    auto& seg = ws.segments[static_cast<size_t>(s)];
    seg.start = s * segment;
    seg.len = std::min(segment, time - seg.start);
    detail::embed_segment(c, w, inputs, seg, ws.x);
    seg.layout.set(batch, seg.len, state.positions, c.key_head_dim(), params.retention.rotation);
    seg.layers.resize(o.recompute ? 0 : static_cast<size_t>(layers));
    seg.layer_inputs.resize(o.recompute ? static_cast<size_t>(layers) : 0);
    seg.layer_states.resize(o.recompute ? static_cast<size_t>(layers) : 0);
    for (Index l = 0; l < layers; ++l) {
      const size_t i = static_cast<size_t>(l);
      if (o.recompute) {
        seg.layer_inputs[i] = ws.x;
        seg.layer_states[i] = state.layers[i];
        DecoderLayerActivations<Scalar> discarded;
        decoder_layer_train(params, w.layers[i], ws.x, seg.layout, o.form, state.layers[i],
                            discarded, o.dropout.at(i));
      } else {
        decoder_layer_train(params, w.layers[i], ws.x, seg.layout, o.form, state.layers[i],
                            seg.layers[i], o.dropout.at(i));
      }
    }
    for (auto& p : state.positions) p += seg.len;
    const LossSum part =
        detail::head_forward_backward(c, w, targets, o, grad_scale, seg, ws, grads);
    loss.sum += part.sum;
    loss.count += part.count;
  }
  ws.d_states.resize(static_cast<size_t>(layers));
  for (auto& d : ws.d_states) {
    d.resize(state.layers[0].dimensions());
    d.setZero();
  }
  for (Index s = count - 1; s >= 0; --s)
    detail::segment_backward(c, params, w, inputs, o, ws.segments[static_cast<size_t>(s)], ws,
                             grads);
  return loss;
}

/// One sequence: the mean next-token cross-entropy over its T-1 predictions (what `retnet score`
/// reports as nats_per_token) and its gradient (grads: allocated and overwritten).
template <typename Scalar>
double sequence_loss_and_gradients(const ModelConfig& c, const DenseModelWeights<Scalar>& w,
                                   const std::vector<int32_t>& tokens, const GradientOptions& o,
                                   DenseModelWeights<Scalar>& grads) {
  const Index time = static_cast<Index>(tokens.size()) - 1;
  RETNET_REQUIRE(time >= 1, "sequence_loss_and_gradients: give at least 2 tokens, found " +
                                std::to_string(tokens.size()));
  TokenMatrix inputs(1, time), targets(1, time);
  for (Index t = 0; t < time; ++t) inputs(0, t) = tokens[t], targets(0, t) = tokens[t + 1];
  grads.allocate(c);
  ModelState<Scalar> state = zero_state<Scalar>(c, 1);
  GradientWorkspace<Scalar> ws;
  const LossSum loss = accumulate_gradients(
      c, w, inputs, targets, o, static_cast<Scalar>(1.0 / double(time)), state, ws, grads);
  return loss.mean();
}

}  // namespace retnet
