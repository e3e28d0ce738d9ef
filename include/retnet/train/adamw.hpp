// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization"), as torch.optim.AdamW
// computes it. For each value w with gradient g, at update t = 1, 2, ...:
//     m = β1 m + (1 − β1) g            v = β2 v + (1 − β2) g²
//     w = w (1 − lr·λ)                 (the decay, decoupled from the gradient; λ = 0 where
//                                       decays_weight() says no: norms, biases, embedding)
//     w = w − (lr / (1 − β1ᵗ)) · m / (sqrt(v) / sqrt(1 − β2ᵗ) + ε)
// The moments are held in Scalar, like the weights; each update is computed in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "retnet/core/error.hpp"
#include "retnet/train/parameter_views.hpp"

namespace retnet {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // λ, on the matrices only (decays_weight)
};

/// One AdamW update of n values in place. `step` counts updates, this one included (>= 1).
template <typename Scalar>
void adamw_update(Scalar* w, const Scalar* g, Scalar* m, Scalar* v, Index n, double lr,
                  double weight_decay, const AdamWOptions& o, int64_t step) {
  const double bias1 = 1 - std::pow(o.beta1, double(step));
  const double bias2_root = std::sqrt(1 - std::pow(o.beta2, double(step)));
  const double step_size = lr / bias1, keep = 1 - lr * weight_decay;
  for (Index i = 0; i < n; ++i) {
    const double grad = g[i];
    const double mi = o.beta1 * double(m[i]) + (1 - o.beta1) * grad;
    const double vi = o.beta2 * double(v[i]) + (1 - o.beta2) * grad * grad;
    m[i] = static_cast<Scalar>(mi);
    v[i] = static_cast<Scalar>(vi);
    const double denom = std::sqrt(double(v[i])) / bias2_root + o.eps;
    w[i] = static_cast<Scalar>(double(w[i]) * keep - step_size * double(m[i]) / denom);
  }
}

/// The optimiser: first and second moments shaped like the weights, and the update count.
template <typename Scalar>
struct AdamW {
  AdamWOptions options;
  DenseModelWeights<Scalar> m, v;  // zero at the start
  int64_t step = 0;                // updates done

  AdamW() = default;
  AdamW(const ModelConfig& c, const AdamWOptions& o) : options(o) {
    m.allocate(c);
    v.allocate(c);
  }

  /// weights -= one AdamW update from `grads` at learning rate `lr`.
  void update(const ModelConfig& c, DenseModelWeights<Scalar>& weights,
              DenseModelWeights<Scalar>& grads, double lr) {
    auto w = parameter_views(c, weights), g = parameter_views(c, grads);
    auto mv = parameter_views(c, m), vv = parameter_views(c, v);
    RETNET_REQUIRE(w.size() == g.size() && w.size() == mv.size() && w.size() == vv.size(),
                   "AdamW: weights, gradients and moments have different tensors");
    ++step;
    for (size_t i = 0; i < w.size(); ++i) {
      RETNET_REQUIRE(w[i].size == g[i].size && w[i].size == mv[i].size,
                     "AdamW: tensor " + w[i].name + " differs in size from its gradient");
      const double decay = decays_weight(c, w[i].name, w[i].shape) ? options.weight_decay : 0.0;
      adamw_update(w[i].data, g[i].data, mv[i].data, vv[i].data, w[i].size, lr, decay, options,
                   step);
    }
  }
};

}  // namespace retnet
