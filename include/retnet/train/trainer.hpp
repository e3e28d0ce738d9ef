// The training loop's step: gradients of `accumulate` micro-batches summed (each scaled by
// 1 / the step's predicted tokens, so the sum is the gradient of the step's mean loss), clipped
// by their global norm, then one AdamW update at the schedule's rate. Deterministic for a seed
// and a thread count (every sum runs in a fixed order for a given number of threads).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/random.hpp"
#include "retnet/model/dense_weights.hpp"
#include "retnet/model/model_gradients.hpp"
#include "retnet/model/retnet_model.hpp"
#include "retnet/train/adamw.hpp"
#include "retnet/train/gradient_clipping.hpp"
#include "retnet/train/lr_schedule.hpp"
#include "retnet/train/token_data.hpp"

namespace retnet {

struct TrainOptions {
  Index batch = 8;            // B streams per micro-batch
  Index seq_len = 128;        // T tokens per stream and micro-batch
  Index accumulate = 1;       // micro-batches per optimiser step
  GradientOptions gradients;  // gradients.dropout.seed is drawn per micro-batch from `seed`
  AdamWOptions adamw;
  LrSchedule schedule;
  double clip = 1.0;  // the global gradient norm's bound; <= 0: no clipping
  uint64_t seed = 0;  // the data offsets (the weights' seed is the caller's)
};

/// What one step did.
struct StepReport {
  int64_t step = 0;      // steps done, this one included
  double loss = 0;       // mean cross-entropy (nats) of the step's predictions
  double grad_norm = 0;  // global gradient norm before clipping
  double lr = 0;         // the rate used
  int64_t tokens = 0;    // predicted tokens (accumulate · B · T)
};

template <typename Scalar>
class Trainer {
 public:
  /// Trains `weights` of config `c` on `tokens` (at least seq_len + 1 of them).
  Trainer(const ModelConfig& c, DenseModelWeights<Scalar> weights, std::vector<int32_t> tokens,
          const TrainOptions& o)
      : config_(c),
        options_(o),
        weights_(std::move(weights)),
        tokens_(std::move(tokens)),
        batcher_(tokens_, o.batch, o.seq_len, o.seed),
        optimiser_(c, o.adamw) {
    RETNET_REQUIRE(o.accumulate >= 1, "Trainer: accumulate must be >= 1");
    for (int32_t id : tokens_)
      RETNET_REQUIRE(id >= 0 && id < c.vocab_size,
                     "the training data has token id " + std::to_string(id) +
                         ", outside the model's vocab_size " + std::to_string(c.vocab_size));
    grads_.allocate(c);
  }
  Trainer(const Trainer&) = delete;  // the batcher points into tokens_
  Trainer& operator=(const Trainer&) = delete;

  const ModelConfig& config() const { return config_; }
  const TrainOptions& options() const { return options_; }
  const DenseModelWeights<Scalar>& weights() const { return weights_; }
  DenseModelWeights<Scalar>& weights() { return weights_; }
  AdamW<Scalar>& optimiser() { return optimiser_; }
  const AdamW<Scalar>& optimiser() const { return optimiser_; }
  TokenBatcher& batcher() { return batcher_; }
  const TokenBatcher& batcher() const { return batcher_; }
  int64_t steps_done() const { return optimiser_.step; }

  /// One optimiser step on the batcher's next `accumulate` micro-batches. A loss or gradient
  /// norm that is not finite stops before the weights change: Error "step N: loss is nan ...".
  StepReport step() {
    micro_inputs_.resize(static_cast<size_t>(options_.accumulate));
    micro_targets_.resize(static_cast<size_t>(options_.accumulate));
    for (Index i = 0; i < options_.accumulate; ++i)
      batcher_.next(micro_inputs_[static_cast<size_t>(i)], micro_targets_[static_cast<size_t>(i)]);
    const LossSum total = compute_gradients(micro_inputs_, micro_targets_);
    StepReport r;
    r.step = optimiser_.step + 1;
    r.loss = total.mean();
    r.tokens = total.count;
    const auto refuse = [&](const char* what, double x) {
      throw Error("step " + std::to_string(r.step) + ": " + what + " is " +
                  (std::isnan(x) ? "nan" : "inf") + "; the weights are left as after step " +
                  std::to_string(optimiser_.step) + " (try a lower --lr)");
    };
    if (!std::isfinite(r.loss)) refuse("loss", r.loss);
    r.grad_norm = clip_gradient_norm(config_, grads_, options_.clip);
    if (!std::isfinite(r.grad_norm)) refuse("gradient norm", r.grad_norm);
    r.lr = options_.schedule.at(optimiser_.step);
    optimiser_.update(config_, weights_, grads_, r.lr);
    return r;
  }

  /// gradients() = the gradient of the mean loss over the predictions of all the micro-batches
  /// (inputs[i], targets[i] [B_i, T_i], each read from a zero state): each call of
  /// accumulate_gradients adds grad_scale = 1 / (the total predicted tokens) times its sum.
  /// Returns the summed loss.
  LossSum compute_gradients(const std::vector<TokenMatrix>& inputs,
                            const std::vector<TokenMatrix>& targets) {
    RETNET_REQUIRE(inputs.size() == targets.size() && !inputs.empty(),
                   "compute_gradients: give as many targets as inputs, at least one");
    for (const ParameterView<Scalar>& g : parameter_views(config_, grads_))
      std::fill(g.data, g.data + g.size, Scalar(0));
    int64_t predicted = 0;
    for (const TokenMatrix& t : targets)
      for (Index i = 0; i < t.size(); ++i) predicted += t.data()[i] != options_.gradients.ignore_id;
    const Scalar grad_scale = static_cast<Scalar>(1.0 / double(std::max<int64_t>(1, predicted)));
    LossSum total;
    GradientOptions gradient_options = options_.gradients;
    for (size_t i = 0; i < inputs.size(); ++i) {
      // New dropout masks for every micro-batch of every step, the same after a resume.
      gradient_options.dropout.seed =
          mix64(options_.seed ^ mix64(uint64_t(optimiser_.step) * inputs.size() + i));
      ModelState<Scalar> state = zero_state<Scalar>(config_, inputs[i].rows());
      const LossSum part = accumulate_gradients(config_, weights_, inputs[i], targets[i],
                                                gradient_options, grad_scale, state, ws_, grads_);
      total.sum += part.sum;
      total.count += part.count;
    }
    return total;
  }
  const DenseModelWeights<Scalar>& gradients() const { return grads_; }

  /// The next-token cross-entropy of `tokens` read as one sequence in the chunkwise form
  /// (bounded memory at any length): the sum over its size − 1 predictions and their count,
  /// as `retnet score` computes them on the saved model.
  LossSum evaluate(const std::vector<int32_t>& tokens, Index chunk_size = 0) const {
    LossSum loss;
    if (tokens.size() < 2) return loss;
    const RetNetModel<Scalar> model(config_, linear_weights(config_, weights_));
    const Index time = static_cast<Index>(tokens.size());
    const Eigen::Map<const TokenMatrix> ids(tokens.data(), 1, time);
    ModelState<Scalar> state = model.new_state(1);
    Workspace<Scalar> ws;
    std::vector<int32_t> targets;
    model.forward_segments(ids, Form::kChunkwise, chunk_size, state, ws,
                           [&](Index start, Index len, const Matrix<Scalar>& logits) {
                             targets.resize(static_cast<size_t>(len));
                             for (Index r = 0; r < len; ++r)  // the last position predicts nothing
                               targets[r] =
                                   start + r + 1 < time ? tokens[start + r + 1] : kNoTarget;
                             const LossSum part = cross_entropy(logits, targets.data(), kNoTarget);
                             loss.sum += part.sum;
                             loss.count += part.count;
                           });
    return loss;
  }

 private:
  static constexpr int32_t kNoTarget = -1;

  ModelConfig config_;
  TrainOptions options_;
  DenseModelWeights<Scalar> weights_, grads_;
  std::vector<int32_t> tokens_;
  TokenBatcher batcher_;
  AdamW<Scalar> optimiser_;
  GradientWorkspace<Scalar> ws_;
  std::vector<TokenMatrix> micro_inputs_, micro_targets_;
};

}  // namespace retnet
