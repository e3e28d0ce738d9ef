// Feed-forward block (docs/NUMERICS.md#feed-forward), two kinds:
//   GLU (torchscale, HF use_glu: true):  fc2(act(fc1 x) ⊙ gate x), no biases
//   plain (HF use_glu: false, the paper): fc2(sub_ln(act(fc1 x + b1))) + b2, sub_ln only with subln
// fla's SwiGLU MLP is the GLU kind under other names (gate_proj = fc1, up_proj = gate,
// down_proj = fc2); its files from before 2025 store fc1 and gate as one [2F, d] weight, fc1's
// rows first, which `fused_gate` reads as it is.
#pragma once

#include "retnet/ops/activation.hpp"
#include "retnet/ops/linear.hpp"
#include "retnet/ops/norm.hpp"

namespace retnet {

template <typename Scalar>
struct FeedForwardParams {
  Activation activation = Activation::kGelu;
  bool glu = true;
  bool fused_gate = false;  // GLU only: fc1 and gate are one weight, fc1_and_gate
  bool subln = false;       // plain only
  Scalar eps = Scalar(1e-6);
};

/// `Linear`: LinearWeight for inference, a dense Matrix for training and gradients.
template <typename Scalar, typename Linear = LinearWeight<Scalar>>
struct FeedForwardWeights {
  Linear fc1, gate;                   // [F, d]; gate is GLU only
  Linear fc1_and_gate;                // [2F, d]: fused GLU only, instead of fc1 and gate
  Linear fc2;                         // [d, F]
  Vector<Scalar> fc1_bias, fc2_bias;  // plain only
  Norm<Scalar> sub_norm;              // plain with subln only: LayerNorm over F
};
template <typename Scalar>
using DenseFeedForwardWeights = FeedForwardWeights<Scalar, Matrix<Scalar>>;

template <typename Scalar>
struct FeedForwardWorkspace {
  Matrix<Scalar> hidden, gate, normed;  // fused GLU: gate holds [fc1 x, gate x]
};

/// y = FFN(x) for x [rows, d].
template <typename Scalar>
void feed_forward(const FeedForwardParams<Scalar>& p, const FeedForwardWeights<Scalar>& w,
                  const Matrix<Scalar>& x, FeedForwardWorkspace<Scalar>& ws, Matrix<Scalar>& y) {
  if (p.glu && p.fused_gate) {
    linear(x, w.fc1_and_gate, ws.gate);
    const Index ffn = w.fc1_and_gate.rows() / 2;
    ws.hidden = ws.gate.leftCols(ffn);
    activate<Scalar>(p.activation, ws.hidden);
    ws.hidden.array() *= ws.gate.rightCols(ffn).array();
    linear(ws.hidden, w.fc2, y);
    return;
  }
  if (p.glu) {
    linear<Scalar, 2>(x, {&w.fc1, &w.gate}, {&ws.hidden, &ws.gate});
    activate<Scalar>(p.activation, ws.hidden);
    ws.hidden.array() *= ws.gate.array();
    linear(ws.hidden, w.fc2, y);
    return;
  }
  linear(x, w.fc1, ws.hidden);
  ws.hidden.rowwise() += w.fc1_bias.transpose();
  activate<Scalar>(p.activation, ws.hidden);
  if (p.subln) {
    w.sub_norm.apply(ws.hidden, p.eps, ws.normed);
    ws.hidden.swap(ws.normed);
  }
  linear(ws.hidden, w.fc2, y);
  y.rowwise() += w.fc2_bias.transpose();
}

}  // namespace retnet
