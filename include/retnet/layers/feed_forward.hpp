// Feed-forward block (docs/NUMERICS.md#feed-forward), two kinds:
//   GLU (torchscale, HF use_glu: true):  fc2(act(fc1 x) ⊙ gate x), no biases
//   plain (HF use_glu: false, the paper): fc2(sub_ln(act(fc1 x + b1))) + b2, sub_ln only with subln
#pragma once

#include "retnet/layers/linear.hpp"
#include "retnet/layers/ops.hpp"

namespace retnet {

template <typename Scalar>
struct FeedForwardWeights {
  LinearWeight<Scalar> fc1, gate;     // [F, d]; gate is GLU only
  LinearWeight<Scalar> fc2;           // [d, F]
  Vector<Scalar> fc1_bias, fc2_bias;  // plain only
  Norm<Scalar> sub_norm;              // plain with subln only: LayerNorm over F
};

template <typename Scalar>
struct FeedForwardScratch {
  Matrix<Scalar> hidden, gate, normed;
};

template <typename Scalar>
class FeedForward {
 public:
  FeedForward(const ModelConfig& config, const FeedForwardWeights<Scalar>& weights)
      : w_(weights),
        activation_(config.activation),
        glu_(config.use_glu),
        subln_(!config.use_glu && config.subln),
        eps_(static_cast<Scalar>(config.eps)) {}

  void forward(const Matrix<Scalar>& x, FeedForwardScratch<Scalar>& s, Matrix<Scalar>& y) const {
    if (glu_) {
      linear<Scalar, 2>(x, {&w_.fc1, &w_.gate}, {&s.hidden, &s.gate});
      activate<Scalar>(activation_, s.hidden);
      s.hidden.array() *= s.gate.array();
      linear(s.hidden, w_.fc2, y);
      return;
    }
    linear(x, w_.fc1, s.hidden);
    s.hidden.rowwise() += w_.fc1_bias.transpose();
    activate<Scalar>(activation_, s.hidden);
    if (subln_) {
      w_.sub_norm.apply(s.hidden, eps_, s.normed);
      s.hidden.swap(s.normed);
    }
    linear(s.hidden, w_.fc2, y);
    y.rowwise() += w_.fc2_bias.transpose();
  }

 private:
  const FeedForwardWeights<Scalar>& w_;
  Activation activation_;
  bool glu_, subln_;
  Scalar eps_;
};

}  // namespace retnet
