// The feed-forward block of layers/feed_forward.hpp for training: a forward that keeps what its
// backward needs, and the backward, on dense weights. With P = x W1ᵀ (+ b1), A = act(P):
//   GLU:    h = A ⊙ (x Wgᵀ),  y = h W2ᵀ
//           dh = dy W2,  dA = dh ⊙ (x Wgᵀ),  dGate = dh ⊙ A,  dP = dA ⊙ act'(P)
//           dx = dP W1 + dGate Wg;   dW1 += dPᵀ x,  dWg += dGateᵀ x,  dW2 += dyᵀ h
//   plain:  h = sub_ln(A) or A,  y = h W2ᵀ + b2
//           dh = dy W2,  dA = sub_ln'(dh) or dh,  dP = dA ⊙ act'(P)
//           dx = dP W1;  dW1 += dPᵀ x, db1 += Σ dP,  dW2 += dyᵀ h, db2 += Σ dy
// A fused GLU weight [2F, d] is fc1's rows over gate's rows: its gradient is stacked the same way.
#pragma once

#include "retnet/layers/feed_forward.hpp"
#include "retnet/ops/activation_backward.hpp"
#include "retnet/ops/norm_backward.hpp"

namespace retnet {

/// What feed_forward_backward needs of the forward: [rows, F] each.
template <typename Scalar>
struct FeedForwardActivations {
  Matrix<Scalar> pre;     // P = x W1ᵀ (+ b1), the activation's input
  Matrix<Scalar> gate;    // x Wgᵀ (GLU only)
  Matrix<Scalar> act;     // A = act(P) (the sub-norm's input, plain with subln)
  Matrix<Scalar> hidden;  // h, fc2's input
};

/// y = FFN(x) on dense weights, keeping the activations in `saved`.
template <typename Scalar>
void feed_forward_train(const FeedForwardParams<Scalar>& p,
                        const DenseFeedForwardWeights<Scalar>& w, const Matrix<Scalar>& x,
                        FeedForwardActivations<Scalar>& saved, Matrix<Scalar>& y) {
  if (p.glu) {
    const Index ffn = p.fused_gate ? w.fc1_and_gate.rows() / 2 : w.fc1.rows();
    if (p.fused_gate) {
      saved.pre.noalias() = x * w.fc1_and_gate.topRows(ffn).transpose();
      saved.gate.noalias() = x * w.fc1_and_gate.bottomRows(ffn).transpose();
    } else {
      saved.pre.noalias() = x * w.fc1.transpose();
      saved.gate.noalias() = x * w.gate.transpose();
    }
    saved.act = saved.pre;
    activate<Scalar>(p.activation, saved.act);
    saved.hidden = saved.act.cwiseProduct(saved.gate);
    y.noalias() = saved.hidden * w.fc2.transpose();
    return;
  }
  saved.pre.noalias() = x * w.fc1.transpose();
  saved.pre.rowwise() += w.fc1_bias.transpose();
  saved.act = saved.pre;
  activate<Scalar>(p.activation, saved.act);
  if (p.subln)
    w.sub_norm.apply(saved.act, p.eps, saved.hidden);
  else
    saved.hidden = saved.act;
  y.noalias() = saved.hidden * w.fc2.transpose();
  y.rowwise() += w.fc2_bias.transpose();
}

/// Gradient of feed_forward_train at x: writes dx, adds into grad (allocated like w).
template <typename Scalar>
void feed_forward_backward(const FeedForwardParams<Scalar>& p,
                           const DenseFeedForwardWeights<Scalar>& w, const Matrix<Scalar>& x,
                           const FeedForwardActivations<Scalar>& saved, const Matrix<Scalar>& dy,
                           Matrix<Scalar>& dx, DenseFeedForwardWeights<Scalar>& grad) {
  grad.fc2.noalias() += dy.transpose() * saved.hidden;
  Matrix<Scalar> dh = dy * w.fc2;
  if (p.glu) {
    const Index ffn = saved.pre.cols();
    Matrix<Scalar> d_gate = dh.cwiseProduct(saved.act);
    Matrix<Scalar>& d_pre = dh;
    d_pre.array() *= saved.gate.array();
    activation_backward<Scalar>(p.activation, saved.pre, d_pre);
    if (p.fused_gate) {
      grad.fc1_and_gate.topRows(ffn).noalias() += d_pre.transpose() * x;
      grad.fc1_and_gate.bottomRows(ffn).noalias() += d_gate.transpose() * x;
      dx.noalias() = d_pre * w.fc1_and_gate.topRows(ffn);
      dx.noalias() += d_gate * w.fc1_and_gate.bottomRows(ffn);
    } else {
      grad.fc1.noalias() += d_pre.transpose() * x;
      grad.gate.noalias() += d_gate.transpose() * x;
      dx.noalias() = d_pre * w.fc1;
      dx.noalias() += d_gate * w.gate;
    }
    return;
  }
  grad.fc2_bias += dy.colwise().sum().transpose();
  Matrix<Scalar> d_pre;
  if (p.subln)
    norm_backward(w.sub_norm, p.eps, saved.act, dh, d_pre, grad.sub_norm);
  else
    d_pre.swap(dh);
  activation_backward<Scalar>(p.activation, saved.pre, d_pre);
  grad.fc1_bias += d_pre.colwise().sum().transpose();
  grad.fc1.noalias() += d_pre.transpose() * x;
  dx.noalias() = d_pre * w.fc1;
}

}  // namespace retnet
