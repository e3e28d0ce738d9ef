// A full RetNet decoder (docs/NUMERICS.md#decoder):
//     x = E[token] · (sqrt(d) if scale_embedding);  x = norm(x) ⊙ w_emb if layernorm_embedding
//     x = layer_i(x) for each layer
//     logits = (norm(x) ⊙ w_layer_norm) Woutᵀ            (Wout = E when tied)
// Every form reads a sequence in segments and runs each segment through all layers
// (docs/NUMERICS.md#segments):
// parallel = one segment of the whole sequence, chunkwise = segments of `chunk_size`,
// recurrent = segments of one token. Memory is bounded by the segment, not the sequence.
#pragma once

#include <algorithm>
#include <memory>
#include <utility>

#include "retnet/model/state.hpp"
#include "retnet/model/weights.hpp"

namespace retnet {

/// Token ids, row-major [batch, time].
using TokenMatrix = Eigen::Matrix<int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Which logits a forward pass computes: every position, only each sequence's last, or none.
enum class LogitsMode { kAll, kLast, kNone };

template <typename Scalar>
class RetNetModel {
 public:
  RetNetModel(const ModelConfig& config, ModelWeights<Scalar> weights)
      : config_(config),
        weights_(std::make_shared<const ModelWeights<Scalar>>(std::move(weights))) {
    config_.validate();
    check_shapes();
    for (const auto& l : weights_->layers) layers_.emplace_back(config_, l);
  }
  RetNetModel(const RetNetModel& other) : RetNetModel(other.config_, other.weights_) {}
  RetNetModel& operator=(const RetNetModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const ModelWeights<Scalar>& weights() const { return *weights_; }

  /// A zero state for `batch` sequences at position 0.
  ModelState<Scalar> new_state(Index batch) const {
    RETNET_REQUIRE(batch >= 1, "new_state: batch must be >= 1, found " + std::to_string(batch));
    ModelState<Scalar> s;
    s.positions.assign(static_cast<size_t>(batch), 0);
    s.layers.reserve(layers_.size());  // Eigen tensors are copied, not moved, when a vector grows
    for (const auto& layer : layers_) {
      RetentionState<Scalar> t(batch, config_.heads, config_.key_head_dim(),
                               layer.retention().state_columns());
      t.setZero();
      s.layers.push_back(std::move(t));
    }
    return s;
  }

  /// Reads `tokens` [batch, time] from `state` (updated in place) in the given form and writes
  /// logits: kAll -> [batch·time, vocab] (row b·time + t), kLast -> [batch, vocab].
  /// `chunk_size` <= 0 means the config's recurrent_chunk_size. The parallel form needs a fresh
  /// state; chunkwise and recurrent continue any state.
  void forward(const TokenMatrix& tokens, Form form, Index chunk_size, ModelState<Scalar>& state,
               Matrix<Scalar>& logits, LogitsMode mode = LogitsMode::kAll) {
    const Index batch = tokens.rows(), time = tokens.cols();
    const Index vocab = config_.vocab_size;
    if (mode == LogitsMode::kAll) logits.resize(batch * time, vocab);
    if (mode == LogitsMode::kLast) logits.resize(batch, vocab);
    if (form == Form::kParallel) {
      for (int64_t p : state.positions)
        RETNET_REQUIRE(p == 0, "forward: the parallel form starts from a fresh state (position " +
                                   std::to_string(p) +
                                   " given); use chunkwise or recurrent to continue");
    }
    run_segments(
        tokens, form, chunk_size, state,
        [&](Index start, Index len, const Matrix<Scalar>& chunk_logits) {
          if (mode == LogitsMode::kAll) {
            for (Index b = 0; b < batch; ++b)
              logits.middleRows(b * time + start, len) = chunk_logits.middleRows(b * len, len);
          } else if (mode == LogitsMode::kLast) {
            logits = chunk_logits;
          }
        },
        mode, &logits);
  }

  /// Convenience: a fresh state, all logits.
  Matrix<Scalar> forward(const TokenMatrix& tokens, Form form, Index chunk_size = 0) {
    auto state = new_state(tokens.rows());
    Matrix<Scalar> logits;
    forward(tokens, form, chunk_size, state, logits);
    return logits;
  }

  /// One token per batch entry through the recurrent form: logits [batch, vocab].
  /// Allocates nothing once the buffers have been sized by a first call of the same batch.
  void step(const std::vector<int32_t>& tokens, ModelState<Scalar>& state, Matrix<Scalar>& logits) {
    const Index batch = static_cast<Index>(tokens.size());
    scratch_.step_tokens.resize(batch, 1);
    for (Index b = 0; b < batch; ++b) scratch_.step_tokens(b, 0) = tokens[b];
    forward(scratch_.step_tokens, Form::kRecurrent, 1, state, logits, LogitsMode::kAll);
  }

  /// The engine under `forward`: reads `tokens` segment by segment (whole sequence for
  /// parallel, chunk_size for chunkwise, 1 for recurrent) and calls
  /// on_logits(start, len, logits [batch·len, vocab]) after each, so that a long sequence can
  /// be scored in bounded memory. With kLast, only the last position's logits are computed and
  /// passed as on_logits(time - 1, 1, [batch, vocab]); with kNone, on_logits is never called.
  template <typename OnLogits>
  void forward_segments(const TokenMatrix& tokens, Form form, Index chunk_size,
                        ModelState<Scalar>& state, OnLogits&& on_logits,
                        LogitsMode mode = LogitsMode::kAll) {
    run_segments(tokens, form, chunk_size, state, on_logits, mode, nullptr);
  }

 private:
  /// forward_segments, except that with `all_logits` (batch 1, kAll) each segment's logits are
  /// written straight into their rows of *all_logits instead of going through on_logits: a long
  /// sequence's [T, vocab] logits are then never copied.
  template <typename OnLogits>
  void run_segments(const TokenMatrix& tokens, Form form, Index chunk_size,
                    ModelState<Scalar>& state, OnLogits&& on_logits, LogitsMode mode,
                    Matrix<Scalar>* all_logits) {
    const Index batch = tokens.rows(), time = tokens.cols();
    check_state(state, batch);
    for (Index i = 0; i < tokens.size(); ++i)
      RETNET_REQUIRE(tokens.data()[i] >= 0 && tokens.data()[i] < config_.vocab_size,
                     "forward: token id " + std::to_string(tokens.data()[i]) + " is outside [0, " +
                         std::to_string(config_.vocab_size) + ")");
    if (chunk_size <= 0) chunk_size = config_.chunk_size;
    const Index segment = form == Form::kParallel    ? std::max<Index>(time, 1)
                          : form == Form::kRecurrent ? 1
                                                     : chunk_size;
    for (Index start = 0; start < time; start += segment) {
      const Index len = std::min(segment, time - start);
      run_segment(tokens.middleCols(start, len), form, state);
      if (mode == LogitsMode::kAll && all_logits && batch == 1 && len > 16) {
        const auto& w = *weights_;
        w.final_norm.apply(scratch_.x, static_cast<Scalar>(config_.eps), scratch_.normed);
        linear(scratch_.normed, w.output,
               Eigen::Ref<Matrix<Scalar>>(all_logits->middleRows(start, len)));
      } else if (mode == LogitsMode::kAll) {
        compute_logits(batch, len, false);
        on_logits(start, len, scratch_.logits);
      } else if (mode == LogitsMode::kLast && start + len == time) {
        compute_logits(batch, len, true);  // [batch, vocab]: position time - 1 only
        on_logits(time - 1, 1, scratch_.logits);
      }
    }
  }

  RetNetModel(const ModelConfig& config, std::shared_ptr<const ModelWeights<Scalar>> weights)
      : config_(config), weights_(std::move(weights)) {
    for (const auto& l : weights_->layers) layers_.emplace_back(config_, l);
  }

  struct Scratch {
    Matrix<Scalar> x, normed, logits, last_rows;
    DecoderLayerScratch<Scalar> layer;  // layers run one after another: one set of buffers
    SequenceLayout<Scalar> layout;
    TokenMatrix step_tokens;
  };

  /// One segment [batch, len] of every sequence through every layer; leaves x in scratch.
  template <typename Tokens>
  void run_segment(const Tokens& tokens, Form form, ModelState<Scalar>& state) {
    const Index batch = tokens.rows(), len = tokens.cols(), d = config_.embed_dim;
    const auto& w = *weights_;
    const Scalar scale = config_.scale_embedding ? std::sqrt(Scalar(d)) : Scalar(1);
    auto& x = scratch_.x;
    x.resize(batch * len, d);
    for (Index b = 0; b < batch; ++b)
      for (Index t = 0; t < len; ++t) {
        w.embedding(tokens(b, t), x.row(b * len + t).data());
        x.row(b * len + t) *= scale;
      }
    const Scalar eps = static_cast<Scalar>(config_.eps);
    if (config_.layernorm_embedding) {
      w.embed_norm.apply(x, eps, scratch_.normed);
      x.swap(scratch_.normed);
    }
    scratch_.layout.set(batch, len, state.positions, config_.key_head_dim());
    // The kernel's chunk is the whole segment: chunkwise segments are exactly one chunk.
    for (size_t l = 0; l < layers_.size(); ++l)
      layers_[l].forward(x, scratch_.layout, form, std::max<Index>(len, 1), state.layers[l],
                         scratch_.layer);
    for (auto& p : state.positions) p += len;
  }

  /// Logits of the segment in scratch: every row, or (last_only) the last row of each sequence.
  void compute_logits(Index batch, Index len, bool last_only) {
    const auto& w = *weights_;
    if (last_only && len > 1) {
      scratch_.last_rows.resize(batch, config_.embed_dim);
      for (Index b = 0; b < batch; ++b)
        scratch_.last_rows.row(b) = scratch_.x.row(b * len + len - 1);
      scratch_.x.swap(scratch_.last_rows);
    }
    w.final_norm.apply(scratch_.x, static_cast<Scalar>(config_.eps), scratch_.normed);
    linear(scratch_.normed, w.output, scratch_.logits);
  }

  void check_state(const ModelState<Scalar>& state, Index batch) const {
    RETNET_REQUIRE(state.batch() == batch, "forward: state has batch " +
                                               std::to_string(state.batch()) +
                                               ", tokens have batch " + std::to_string(batch));
    RETNET_REQUIRE(state.layers.size() == layers_.size(),
                   "forward: state has " + std::to_string(state.layers.size()) +
                       " layers, model has " + std::to_string(layers_.size()));
    for (size_t l = 0; l < layers_.size(); ++l) {
      const auto& dims = state.layers[l].dimensions();
      RETNET_REQUIRE(
          dims[0] == batch && dims[1] == config_.heads && dims[2] == config_.key_head_dim() &&
              dims[3] == layers_[l].retention().state_columns(),
          "forward: state of layer " + std::to_string(l) + " has shape " +
              detail::shape_string(dims) + ", expected [" + std::to_string(batch) + ", " +
              std::to_string(config_.heads) + ", " + std::to_string(config_.key_head_dim()) + ", " +
              std::to_string(layers_[l].retention().state_columns()) + "]");
    }
  }

  void check_shapes() const {
    RETNET_REQUIRE(static_cast<int64_t>(weights_->layers.size()) == config_.layers,
                   "RetNetModel: weights have " + std::to_string(weights_->layers.size()) +
                       " layers, config says " + std::to_string(config_.layers));
    weights_->visit(
        config_, [](const std::string& name, const auto& t, const std::vector<int64_t>& shape) {
          const int64_t rows = shape[0], cols = shape.size() == 2 ? shape[1] : 1;
          RETNET_REQUIRE(t.rows() == rows && t.cols() == cols,
                         "RetNetModel: weight " + name + " is " + std::to_string(t.rows()) + "x" +
                             std::to_string(t.cols()) + ", expected " + std::to_string(rows) + "x" +
                             std::to_string(cols));
        });
    RETNET_REQUIRE(weights_->output.rows() == config_.vocab_size &&
                       weights_->output.cols() == config_.embed_dim,
                   "RetNetModel: output projection has the wrong shape");
    if (config_.tie_embeddings && weights_->embed.size())
      RETNET_REQUIRE(weights_->embed.rows() == config_.vocab_size &&
                         weights_->embed.cols() == config_.embed_dim,
                     "RetNetModel: embedding has the wrong shape");
  }

  ModelConfig config_;
  std::shared_ptr<const ModelWeights<Scalar>> weights_;
  std::vector<DecoderLayer<Scalar>> layers_;
  Scratch scratch_;
};

}  // namespace retnet
