// Feed-forward block (docs/NUMERICS.md#feed-forward), two kinds:
//   GLU (torchscale, HF use_glu: true):  fc2(act(fc1 x) ⊙ gate x), no biases
//   plain (HF use_glu: false, the paper): fc2(sub_ln(act(fc1 x + b1))) + b2, sub_ln only with subln
#pragma once

#include "retnet/ops/activation.hpp"
#include "retnet/ops/linear.hpp"
#include "retnet/ops/norm.hpp"

namespace retnet {

template <typename Scalar>
struct FeedForwardParams {
  Activation activation = Activation::kGelu;
  bool glu = true;
  bool subln = false;  // plain only
  Scalar eps = Scalar(1e-6);
};

template <typename Scalar>
struct FeedForwardWeights {
  LinearWeight<Scalar> fc1, gate;     // [F, d]; gate is GLU only
  LinearWeight<Scalar> fc2;           // [d, F]
  Vector<Scalar> fc1_bias, fc2_bias;  // plain only
  Norm<Scalar> sub_norm;              // plain with subln only: LayerNorm over F
};

template <typename Scalar>
struct FeedForwardWorkspace {
  Matrix<Scalar> hidden, gate, normed;
};

/// y = FFN(x) for x [rows, d].
template <typename Scalar>
void feed_forward(const FeedForwardParams<Scalar>& p, const FeedForwardWeights<Scalar>& w,
                  const Matrix<Scalar>& x, FeedForwardWorkspace<Scalar>& ws, Matrix<Scalar>& y) {
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
