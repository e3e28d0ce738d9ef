// A full RetNet decoder (docs/NUMERICS.md#decoder), for every checkpoint family: what differs
// between them is in the layers' parameters, derived from the config by layer_params():
//     x = E[token] · (sqrt(d) if scale_embedding);  x = norm(x) ⊙ w_emb if layernorm_embedding
//     x = layer_i(x) for each layer
//     logits = (norm(x) ⊙ w_layer_norm) Woutᵀ            (Wout = E when tied)
//
// The model (config + weights) is immutable once built and may be shared by any number of
// threads. Everything a call writes belongs to the caller: the state (what the sequences have
// read) and a Workspace (scratch buffers, reused from call to call so that decoding allocates
// nothing per token). One workspace per thread.
//
// The model decides the segments (docs/NUMERICS.md#segments): every form reads a sequence in
// segments that go through all layers, parallel = one segment of the whole sequence, chunkwise =
// segments of `chunk_size`, recurrent = segments of one token. Memory is bounded by the segment.
#pragma once

#include <algorithm>
#include <utility>

#include "retnet/core/memory.hpp"
#include "retnet/model/state.hpp"
#include "retnet/model/weights.hpp"

namespace retnet {

/// Which logits a forward pass computes: every position, only each sequence's last, or none.
enum class LogitsMode { kAll, kLast, kNone };

/// The caller's scratch buffers for RetNetModel calls. Sized by the first call, reused after.
template <typename Scalar>
struct Workspace {
  Matrix<Scalar> x;       // [batch·len, d]: the segment's activations
  Matrix<Scalar> normed;  // [batch·len, d]
  Matrix<Scalar> last_rows, logits;
  DecoderLayerWorkspace<Scalar> layer;  // layers run one after another: one set of buffers
  SequenceLayout<Scalar> layout;
  TokenMatrix step_tokens;
};

template <typename Scalar>
class RetNetModel {
 public:
  /// The parallel form holds a [T, T] score matrix per head and thread; longer segments are
  /// refused before allocating (the chunkwise form reads any length in bounded memory).
  static constexpr double kMaxParallelScoreBytes = 4.0 * (1 << 30);

  RetNetModel(const ModelConfig& config, ModelWeights<Scalar> weights)
      : config_(config), weights_(std::move(weights)) {
    config_.validate();
    check_shapes();
    layer_params_ = layer_params(config_);
    fingerprint_ = model_fingerprint(config_, weights_);
  }
  RetNetModel(RetNetModel&&) = default;
  RetNetModel(const RetNetModel&) = delete;  // weights are large: share one model instead
  RetNetModel& operator=(const RetNetModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const ModelWeights<Scalar>& weights() const { return weights_; }
  /// model_fingerprint() of this model, stored in its state files so that a state is never
  /// continued by another model of the same shapes.
  uint64_t fingerprint() const { return fingerprint_; }

  /// A zero state for `batch` sequences at position 0.
  ModelState<Scalar> new_state(Index batch) const {
    RETNET_REQUIRE(batch >= 1, "new_state: batch must be >= 1, found " + std::to_string(batch));
    require_fits_in_memory(double(batch) * double(config_.layers) * double(config_.heads) *
                               double(config_.key_head_dim()) * double(state_columns()) *
                               sizeof(Scalar),
                           [&] { return "a state of batch " + std::to_string(batch); });
    ModelState<Scalar> s;
    s.positions.assign(static_cast<size_t>(batch), 0);
    s.layers.reserve(static_cast<size_t>(config_.layers));  // Eigen tensors copy when moved
    for (int64_t l = 0; l < config_.layers; ++l) {
      RetentionState<Scalar> t(batch, config_.heads, config_.key_head_dim(), state_columns());
      t.setZero();
      s.layers.push_back(std::move(t));
    }
    return s;
  }

  /// Defers the fold of `state`'s recurrent steps (docs/NUMERICS.md#deferred-fold): from now on
  /// the recurrent form keeps the last pairs beside each layer's state and adds them in every
  /// `pairs` tokens, so that a decoded token reads the state once and writes it only then. The
  /// logits are those of the plain recurrence to rounding. The other forms fold first; state
  /// files and sessions hold state.folded(). No-op if `state` already defers with `pairs`.
  void defer_fold(ModelState<Scalar>& state, Index pairs = kDeferredFoldPairs) const {
    check_state(state, state.batch());
    if (state.defers_fold() && state.pending[0].capacity() == pairs) return;
    if (state.defers_fold()) state = state.folded();
    state.pending.reserve(state.layers.size());
    for (size_t l = 0; l < state.layers.size(); ++l)
      state.pending.emplace_back(state.batch(), config_.heads, pairs, config_.key_head_dim(),
                                 state_columns(), layer_params_.retention.decays);
  }

  /// The capacity defer_fold() gives by default: the state is written once per 16 tokens
  /// (state traffic per token (1 + 1/16) / 2 of the plain recurrence's), and the pairs cost
  /// 16 (dk + dv) values per head beside its dk·dv. Not the default of generate and serve: on
  /// the CPU measured it was no faster (docs/PERFORMANCE.md, "Deferred fold").
  static constexpr Index kDeferredFoldPairs = 16;

  /// Reads `tokens` [batch, time] from `state` (updated in place) in the given form and calls
  /// on_logits(start, len, logits [batch·len, vocab]) after each segment, so that a long
  /// sequence can be scored in bounded memory. With kLast only the last position's logits are
  /// computed, passed as on_logits(time - 1, 1, [batch, vocab]); with kNone on_logits is never
  /// called. `chunk_size` <= 0 means the config's recurrent_chunk_size. The parallel form
  /// needs a fresh (zero) state; chunkwise and recurrent continue any state.
  template <typename OnLogits>
  void forward_segments(const TokenMatrix& tokens, Form form, Index chunk_size,
                        ModelState<Scalar>& state, Workspace<Scalar>& ws, OnLogits&& on_logits,
                        LogitsMode mode = LogitsMode::kAll) const {
    const Index batch = tokens.rows(), time = tokens.cols();
    read(tokens, form, chunk_size, state, ws, mode, [&](Index start, Index len) {
      if (mode == LogitsMode::kAll) {
        ws.logits.resize(batch * len, config_.vocab_size);
        project_logits(ws.x, ws, ws.logits);
        on_logits(start, len, ws.logits);
      } else if (mode == LogitsMode::kLast && start + len == time) {
        ws.logits.resize(batch, config_.vocab_size);
        project_logits(last_rows(batch, len, ws), ws, ws.logits);
        on_logits(time - 1, 1, ws.logits);
      }
    });
  }

  /// As forward_segments, collecting the logits: kAll -> [batch·time, vocab] (row b·time + t),
  /// kLast -> [batch, vocab], kNone -> untouched. With batch 1 each segment's logits are written
  /// straight into their rows, so a long sequence's [T, vocab] logits are never copied.
  void forward(const TokenMatrix& tokens, Form form, Index chunk_size, ModelState<Scalar>& state,
               Workspace<Scalar>& ws, Matrix<Scalar>& logits,
               LogitsMode mode = LogitsMode::kAll) const {
    const Index batch = tokens.rows(), time = tokens.cols(), vocab = config_.vocab_size;
    if (mode == LogitsMode::kAll) {
      require_fits_in_memory(double(batch) * double(time) * double(vocab) * sizeof(Scalar), [&] {
        return "the logits of " + std::to_string(batch * time) + " tokens";
      });
      logits.resize(batch * time, vocab);
    }
    if (mode == LogitsMode::kLast) logits.resize(batch, vocab);
    read(tokens, form, chunk_size, state, ws, mode, [&](Index start, Index len) {
      if (mode == LogitsMode::kAll && batch == 1) {
        project_logits(ws.x, ws, logits.middleRows(start, len));
      } else if (mode == LogitsMode::kAll) {
        ws.logits.resize(batch * len, vocab);
        project_logits(ws.x, ws, ws.logits);
        for (Index b = 0; b < batch; ++b)
          logits.middleRows(b * time + start, len) = ws.logits.middleRows(b * len, len);
      } else if (mode == LogitsMode::kLast && start + len == time) {
        project_logits(last_rows(batch, len, ws), ws, logits);
      }
    });
  }

  /// Convenience for tests and one-off calls: a fresh state and workspace, all logits.
  Matrix<Scalar> forward(const TokenMatrix& tokens, Form form, Index chunk_size = 0) const {
    auto state = new_state(tokens.rows());
    Workspace<Scalar> ws;
    Matrix<Scalar> logits;
    forward(tokens, form, chunk_size, state, ws, logits);
    return logits;
  }

  /// One token per batch entry through the recurrent form: logits [batch, vocab]. Allocates
  /// nothing once `ws` has been sized by a first call of the same batch.
  void step(const std::vector<int32_t>& tokens, ModelState<Scalar>& state, Workspace<Scalar>& ws,
            Matrix<Scalar>& logits) const {
    const Index batch = static_cast<Index>(tokens.size());
    ws.step_tokens.resize(batch, 1);
    for (Index b = 0; b < batch; ++b) ws.step_tokens(b, 0) = tokens[b];
    forward(ws.step_tokens, Form::kRecurrent, 1, state, ws, logits, LogitsMode::kAll);
  }

 private:
  Index state_columns() const { return layer_params_.retention.state_columns(); }

 public:
  /// What the layers compute, derived from the config: the one place where the families'
  /// differences (docs/FORMATS.md#published-checkpoint-families) become layer parameters.
  static DecoderLayerParams<Scalar> layer_params(const ModelConfig& c) {
    const bool fla = c.family == Family::kFla;
    DecoderLayerParams<Scalar> p;
    p.eps = static_cast<Scalar>(c.eps);
    p.retention.heads = c.heads;
    p.retention.key_value_heads = c.key_value_heads();
    p.retention.key_head_dim = c.key_head_dim();
    p.retention.value_head_dim = c.value_head_dim();
    p.retention.head_norm = c.norm;
    p.retention.eps = p.eps;
    // torchscale and syncdoth: pairs, torchscale's factors, no weight on the per-head norm, an
    // output gate. fla: halves, plain retention, and its own switches.
    p.retention.rotation = fla ? RotationLayout::kHalves : RotationLayout::kPairs;
    p.retention.scaling = fla ? RetentionScaling::kNone : RetentionScaling::kTorchscale;
    p.retention.head_norm_weight = fla && c.head_norm_weight;
    p.retention.output_gate = !fla || c.output_gate;
    p.retention.decays = c.lm_decay ? lm_decays<Scalar>(c.heads) : default_decays<Scalar>(c.heads);
    p.ffn.activation = c.activation;
    p.ffn.glu = c.use_glu;
    p.ffn.fused_gate = fla && c.fused_gate_up;
    p.ffn.subln = !c.use_glu && c.subln;
    p.ffn.eps = p.eps;
    return p;
  }

 private:
  Index segment_length(Form form, Index time, Index chunk_size) const {
    if (form == Form::kParallel) return std::max<Index>(time, 1);
    if (form == Form::kRecurrent) return 1;
    return chunk_size > 0 ? chunk_size : config_.chunk_size;
  }

  /// Reads `tokens` segment by segment, calling after_segment(start, len) with the segment's
  /// final activations in ws.x.
  template <typename AfterSegment>
  void read(const TokenMatrix& tokens, Form form, Index chunk_size, ModelState<Scalar>& state,
            Workspace<Scalar>& ws, LogitsMode mode, AfterSegment&& after_segment) const {
    const Index time = tokens.cols();
    check_call(tokens, form, state, mode);
    const Index segment = segment_length(form, time, chunk_size);
    // A segment holds a few activation rows per token, and its logits unless there are none.
    const int64_t widest = std::max({config_.embed_dim, config_.value_embed_dim, config_.ffn_dim});
    require_fits_in_memory(
        double(tokens.rows()) * double(std::min(segment, time)) *
            (8.0 * double(widest) + (mode == LogitsMode::kAll ? double(config_.vocab_size) : 0.0)) *
            sizeof(Scalar),
        [&] {
          return "a segment of " + std::to_string(tokens.rows()) + " x " +
                 std::to_string(std::min(segment, time)) + " tokens";
        });
    for (Index start = 0; start < time; start += segment) {
      const Index len = std::min(segment, time - start);
      read_segment(tokens.middleCols(start, len), form, state, ws);
      after_segment(start, len);
    }
  }

  /// One segment [batch, len] of every sequence through every layer; leaves x in ws.x.
  template <typename Tokens>
  void read_segment(const Tokens& tokens, Form form, ModelState<Scalar>& state,
                    Workspace<Scalar>& ws) const {
    embed(tokens, ws);
    ws.layout.set(tokens.rows(), tokens.cols(), state.positions, config_.key_head_dim(),
                  layer_params_.retention.rotation);
    for (size_t l = 0; l < weights_.layers.size(); ++l)
      decoder_layer(layer_params_, weights_.layers[l], ws.x, ws.layout, form, state.layers[l],
                    ws.layer, state.defers_fold() ? &state.pending[l] : nullptr);
    for (auto& p : state.positions) p += tokens.cols();
  }

  template <typename Tokens>
  void embed(const Tokens& tokens, Workspace<Scalar>& ws) const {
    const Index batch = tokens.rows(), len = tokens.cols(), d = config_.embed_dim;
    const Scalar scale = config_.scale_embedding ? std::sqrt(Scalar(d)) : Scalar(1);
    ws.x.resize(batch * len, d);
    for (Index b = 0; b < batch; ++b)
      for (Index t = 0; t < len; ++t) {
        weights_.embedding(tokens(b, t), ws.x.row(b * len + t).data());
        ws.x.row(b * len + t) *= scale;
      }
    if (config_.layernorm_embedding) {
      weights_.embed_norm.apply(ws.x, static_cast<Scalar>(config_.eps), ws.normed);
      ws.x.swap(ws.normed);
    }
  }

  /// The last row of each sequence of the segment in ws.x, as [batch, d].
  const Matrix<Scalar>& last_rows(Index batch, Index len, Workspace<Scalar>& ws) const {
    if (len == 1) return ws.x;
    ws.last_rows.resize(batch, config_.embed_dim);
    for (Index b = 0; b < batch; ++b) ws.last_rows.row(b) = ws.x.row(b * len + len - 1);
    return ws.last_rows;
  }

  /// logits = (norm(x) ⊙ w) Woutᵀ, into an output of x.rows() rows.
  void project_logits(const Matrix<Scalar>& x, Workspace<Scalar>& ws,
                      Eigen::Ref<Matrix<Scalar>> logits) const {
    weights_.final_norm.apply(x, static_cast<Scalar>(config_.eps), ws.normed);
    linear(ws.normed, weights_.output, logits);
  }

  void check_call(const TokenMatrix& tokens, Form form, const ModelState<Scalar>& state,
                  LogitsMode mode) const {
    const Index batch = tokens.rows(), time = tokens.cols();
    check_state(state, batch);
    RETNET_REQUIRE(time > 0 || mode != LogitsMode::kLast,
                   "forward: no tokens given, so there is no last position to give logits for");
    for (Index i = 0; i < tokens.size(); ++i)
      RETNET_REQUIRE(tokens.data()[i] >= 0 && tokens.data()[i] < config_.vocab_size,
                     "forward: token id " + std::to_string(tokens.data()[i]) + " is outside [0, " +
                         std::to_string(config_.vocab_size) + ")");
    if (form != Form::kParallel) return;  // (the kernel refuses a parallel form that continues)
    const double score_bytes = double(time) * double(time) * sizeof(Scalar) * num_threads();
    RETNET_REQUIRE(score_bytes <= kMaxParallelScoreBytes,
                   "forward: the parallel form would hold " + std::to_string(time) + " x " +
                       std::to_string(time) + " scores per head and thread (" +
                       std::to_string(int64_t(score_bytes / (1 << 20))) +
                       " MiB, limit 4096 MiB); use the chunkwise form for long sequences");
  }

  void check_state(const ModelState<Scalar>& state, Index batch) const {
    RETNET_REQUIRE(state.batch() == batch, "forward: state has batch " +
                                               std::to_string(state.batch()) +
                                               ", tokens have batch " + std::to_string(batch));
    RETNET_REQUIRE(static_cast<int64_t>(state.layers.size()) == config_.layers,
                   "forward: state has " + std::to_string(state.layers.size()) +
                       " layers, model has " + std::to_string(config_.layers));
    const Eigen::DSizes<Index, 4> expected(batch, config_.heads, config_.key_head_dim(),
                                           state_columns());
    for (size_t l = 0; l < state.layers.size(); ++l)
      RETNET_REQUIRE(state.layers[l].dimensions() == expected,
                     "forward: state of layer " + std::to_string(l) + " has shape " +
                         detail::shape_string(state.layers[l].dimensions()) + ", expected " +
                         detail::shape_string(expected));
    RETNET_REQUIRE(state.pending.empty() || state.pending.size() == state.layers.size(),
                   "forward: state has pending pairs for " + std::to_string(state.pending.size()) +
                       " layers, and " + std::to_string(state.layers.size()) + " layers");
    for (const auto& p : state.pending)
      RETNET_REQUIRE(p.batch() == batch && p.keys.dimension(1) == config_.heads &&
                         p.keys.dimension(3) == config_.key_head_dim() &&
                         p.values.dimension(3) == state_columns() &&
                         p.decays == layer_params_.retention.decays,
                     "forward: the state's pending pairs do not fit this model");
  }

  void check_shapes() const {
    RETNET_REQUIRE(static_cast<int64_t>(weights_.layers.size()) == config_.layers,
                   "RetNetModel: weights have " + std::to_string(weights_.layers.size()) +
                       " layers, config says " + std::to_string(config_.layers));
    weights_.visit(
        config_, [](const std::string& name, const auto& t, const std::vector<int64_t>& shape) {
          const int64_t rows = shape[0], cols = shape.size() == 2 ? shape[1] : 1;
          RETNET_REQUIRE(t.rows() == rows && t.cols() == cols,
                         "RetNetModel: weight " + name + " is " + std::to_string(t.rows()) + "x" +
                             std::to_string(t.cols()) + ", expected " + std::to_string(rows) + "x" +
                             std::to_string(cols));
        });
    RETNET_REQUIRE(
        weights_.output.rows() == config_.vocab_size && weights_.output.cols() == config_.embed_dim,
        "RetNetModel: output projection has the wrong shape");
    if (config_.tie_embeddings && weights_.embed.size())
      RETNET_REQUIRE(
          weights_.embed.rows() == config_.vocab_size && weights_.embed.cols() == config_.embed_dim,
          "RetNetModel: embedding has the wrong shape");
  }

  ModelConfig config_;
  ModelWeights<Scalar> weights_;
  DecoderLayerParams<Scalar> layer_params_;
  uint64_t fingerprint_ = 0;
};

}  // namespace retnet
