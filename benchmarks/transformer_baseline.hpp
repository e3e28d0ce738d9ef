// The baseline the RetNet paper compares inference cost against: a decoder-only Transformer of
// matched size with softmax attention and a KV cache. Benchmarks only; built from the library's
// ops so that the two models differ in the token mixer and nothing else:
//
//     x = E[token]                                         (no embedding scale, like base.json)
//     for each layer:
//         x = x + Attn(RMSNorm(x) ⊙ w_attn_norm)
//         x = x + FFN(RMSNorm(x) ⊙ w_ffn_norm)              (retnet::feed_forward: GLU, swish)
//     logits = (RMSNorm(x) ⊙ w_final_norm) Woutᵀ
//
//     Attn(X): Q = X Wqᵀ, K = X Wkᵀ, V = X Wvᵀ (all [d, d]), split into H heads of dh = d / H,
//              rotate each head's q_n, k_n by position n (retnet::RotationTable, the same angles
//              as RetNet's rotation), O_h = softmax(Q_h K_hᵀ / sqrt(dh), causal) V_h,
//              Y = concat_h(O_h) Woᵀ
//
// The KV cache holds the rotated keys and the values of every position seen so far; it is
// allocated once for a maximum context, so decoding allocates nothing per token, and both its
// memory and the cost of a step grow linearly with the context. Batch 1 only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <retnet/retnet.hpp>
#include <string>
#include <vector>

namespace retnet_baseline {

using retnet::Index;
using retnet::LogitsMode;
using retnet::Matrix;
using retnet::Norm;

struct TransformerConfig {
  int64_t vocab_size = 0;
  int64_t embed_dim = 0;  // d
  int64_t heads = 0;      // H; head size d / H
  int64_t ffn_dim = 0;    // F of the GLU feed-forward
  int64_t layers = 0;
  double eps = 1e-6;

  int64_t head_dim() const { return embed_dim / heads; }

  /// Parameters: embedding, per layer 4 d² (attention) + 3 d F (GLU) + 2 d (norms), final norm,
  /// untied output projection.
  int64_t parameter_count() const {
    const int64_t d = embed_dim;
    return 2 * vocab_size * d + layers * (4 * d * d + 3 * d * ffn_dim + 2 * d) + d;
  }

  /// The Transformer matched to a RetNet config: same d, layers, vocab and eps, `heads` heads of
  /// d / heads, and the GLU FFN widened (to a multiple of 16) so that a layer has about as many
  /// parameters as a RetNet layer. RetNet's MSR has q, k [d, d], v, g [Dv, d] and out [d, Dv]:
  /// 2 d² + 3 d Dv; attention has 4 d², so the FFN gets the difference, 3 d ΔF = 3 d Dv - 2 d².
  static TransformerConfig matched(const retnet::ModelConfig& c, int64_t heads) {
    TransformerConfig t;
    t.vocab_size = c.vocab_size;
    t.embed_dim = c.embed_dim;
    t.heads = heads;
    t.layers = c.layers;
    t.eps = c.eps;
    const double d = double(c.embed_dim);
    const double f = double(c.ffn_dim) + (3 * d * double(c.value_embed_dim) - 2 * d * d) / (3 * d);
    t.ffn_dim = 16 * static_cast<int64_t>(std::llround(f / 16));
    return t;
  }

  void validate() const {
    RETNET_REQUIRE(vocab_size > 0 && embed_dim > 0 && heads > 0 && ffn_dim > 0 && layers > 0,
                   "TransformerConfig: every size must be > 0");
    RETNET_REQUIRE(embed_dim % heads == 0, "TransformerConfig: d must be divisible by heads");
    RETNET_REQUIRE(head_dim() % 2 == 0, "TransformerConfig: head size must be even (rotation)");
  }

  /// The FFN's parameters: GLU with swish, this eps.
  template <typename Scalar>
  retnet::FeedForwardParams<Scalar> ffn_params() const {
    retnet::FeedForwardParams<Scalar> p;
    p.activation = retnet::Activation::kSwish;
    p.glu = true;
    p.eps = static_cast<Scalar>(eps);
    return p;
  }
};

template <typename Scalar>
struct TransformerLayerWeights {
  Norm<Scalar> attn_norm;
  retnet::LinearWeight<Scalar> q_proj, k_proj, v_proj, out_proj;  // [d, d]
  Norm<Scalar> ffn_norm;
  retnet::FeedForwardWeights<Scalar> ffn;  // fc1, gate [F, d], fc2 [d, F]
};

template <typename Scalar>
struct TransformerWeights {
  Matrix<Scalar> embed;  // [vocab, d]
  std::vector<TransformerLayerWeights<Scalar>> layers;
  Norm<Scalar> final_norm;
  retnet::LinearWeight<Scalar> output;  // [vocab, d]

  /// Seeded random weights drawn as retnet::ModelWeights::random draws them: matrices
  /// ~ N(0, 1/in), norm weights ~ 1 + N(0, 0.1).
  static TransformerWeights random(const TransformerConfig& c, uint64_t seed) {
    c.validate();
    std::mt19937_64 rng(seed);
    auto matrix = [&](auto& m, int64_t rows, int64_t cols) {
      std::normal_distribution<double> normal(0.0, 1.0 / std::sqrt(double(cols)));
      retnet::ModelWeights<Scalar>::write_row_major(m, {rows, cols},
                                                    [&](Index, Index n, Scalar* p) {
                                                      for (Index i = 0; i < n * cols; ++i)
                                                        p[i] = static_cast<Scalar>(normal(rng));
                                                    });
    };
    auto norm = [&](Norm<Scalar>& n, int64_t size) {
      std::normal_distribution<double> normal(1.0, 0.1);
      n.kind = retnet::NormKind::kRMSNorm;
      n.weight.resize(size);
      for (Index i = 0; i < size; ++i) n.weight[i] = static_cast<Scalar>(normal(rng));
    };
    const int64_t d = c.embed_dim, f = c.ffn_dim;
    TransformerWeights w;
    matrix(w.embed, c.vocab_size, d);
    w.layers.resize(static_cast<size_t>(c.layers));
    for (auto& l : w.layers) {
      norm(l.attn_norm, d);
      for (auto* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.out_proj}) matrix(*m, d, d);
      norm(l.ffn_norm, d);
      matrix(l.ffn.fc1, f, d);
      matrix(l.ffn.gate, f, d);
      matrix(l.ffn.fc2, d, f);
    }
    norm(w.final_norm, d);
    matrix(w.output, c.vocab_size, d);
    return w;
  }

  /// Counts the stored parameters (agrees with TransformerConfig::parameter_count).
  int64_t parameter_count() const {
    int64_t n = embed.size() + final_norm.weight.size() + output.size();
    for (const auto& l : layers)
      n += l.attn_norm.weight.size() + l.q_proj.size() + l.k_proj.size() + l.v_proj.size() +
           l.out_proj.size() + l.ffn_norm.weight.size() + l.ffn.fc1.size() + l.ffn.gate.size() +
           l.ffn.fc2.size();
    return n;
  }
};

/// Rotated keys and values of the positions seen so far, for every layer and head, in room for
/// `capacity` positions allocated up front. Layer l's keys are k[l] [heads · capacity, dh]:
/// rows h · capacity + n, n < length, hold head h at position n (contiguous per head).
template <typename Scalar>
struct KVCache {
  std::vector<Matrix<Scalar>> k, v;
  Index heads = 0, head_dim = 0, capacity = 0, length = 0;

  KVCache() = default;
  KVCache(Index layers, Index heads_, Index head_dim_, Index capacity_)
      : heads(heads_), head_dim(head_dim_), capacity(capacity_) {
    RETNET_REQUIRE(capacity_ >= 1, "KVCache: capacity must be >= 1");
    for (Index l = 0; l < layers; ++l) {
      k.emplace_back(heads * capacity, head_dim);
      v.emplace_back(heads * capacity, head_dim);
    }
  }

  /// Bytes of keys and values the `length` cached positions occupy: 2 · layers · length · d.
  size_t bytes_used() const {
    return 2 * k.size() * static_cast<size_t>(length * heads * head_dim) * sizeof(Scalar);
  }
  /// Bytes allocated (for `capacity` positions).
  size_t bytes_allocated() const {
    return 2 * k.size() * static_cast<size_t>(capacity * heads * head_dim) * sizeof(Scalar);
  }

  /// Forgets every position from `n` on (the cache then continues at position n).
  void truncate(Index n) {
    RETNET_REQUIRE(n >= 0 && n <= length, "KVCache::truncate: " + std::to_string(n) +
                                              " is outside [0, " + std::to_string(length) + "]");
    length = n;
  }

  /// Fills positions [0, n) with N(0, 1/dh) keys and N(0, 1) values and sets length = n: a
  /// stand-in for a prefill when only the cost of attending over n positions matters.
  void fill_random(Index n, uint64_t seed) {
    RETNET_REQUIRE(n >= 0 && n <= capacity, "KVCache::fill_random: " + std::to_string(n) +
                                                " positions do not fit in capacity " +
                                                std::to_string(capacity));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> key(0.f, 1.f / std::sqrt(float(head_dim))), value(0.f, 1.f);
    for (size_t l = 0; l < k.size(); ++l)
      for (Index h = 0; h < heads; ++h)
        for (Index i = 0; i < n * head_dim; ++i) {
          k[l].data()[h * capacity * head_dim + i] = static_cast<Scalar>(key(rng));
          v[l].data()[h * capacity * head_dim + i] = static_cast<Scalar>(value(rng));
        }
    length = n;
  }
};

template <typename Scalar>
class TransformerModel {
 public:
  TransformerModel(const TransformerConfig& config, TransformerWeights<Scalar> weights)
      : config_(config),
        weights_(std::make_unique<const TransformerWeights<Scalar>>(std::move(weights))) {
    config_.validate();
    const int64_t d = config_.embed_dim;
    RETNET_REQUIRE(weights_->embed.rows() == config_.vocab_size && weights_->embed.cols() == d &&
                       static_cast<int64_t>(weights_->layers.size()) == config_.layers &&
                       weights_->output.rows() == config_.vocab_size &&
                       weights_->output.cols() == d,
                   "TransformerModel: weights do not match the config");
    ffn_params_ = config_.template ffn_params<Scalar>();
  }
  TransformerModel(const TransformerModel&) = delete;
  TransformerModel& operator=(const TransformerModel&) = delete;

  const TransformerConfig& config() const { return config_; }
  const TransformerWeights<Scalar>& weights() const { return *weights_; }

  /// An empty cache with room for `capacity` positions.
  KVCache<Scalar> new_cache(Index capacity) const {
    return KVCache<Scalar>(config_.layers, config_.heads, config_.head_dim(), capacity);
  }

  /// Appends `tokens` (positions cache.length, cache.length + 1, …) to the cache and writes
  /// logits: kAll -> [time, vocab], kLast -> [1, vocab], kNone -> nothing. Each new position
  /// attends over every cached position and the new ones up to itself.
  void forward(const std::vector<int32_t>& tokens, KVCache<Scalar>& cache, Matrix<Scalar>& logits,
               LogitsMode mode = LogitsMode::kAll) {
    const Index time = static_cast<Index>(tokens.size()), start = cache.length;
    const Index d = config_.embed_dim, heads = config_.heads, dh = config_.head_dim();
    const Index len = start + time;
    // Checks throw like retnet::require but build their message only when they fail, so that
    // a decoding step allocates nothing.
    if (cache.heads != heads || cache.head_dim != dh ||
        static_cast<int64_t>(cache.k.size()) != config_.layers)
      throw retnet::InvalidArgument(
          "TransformerModel::forward: the cache belongs to another config");
    if (len > cache.capacity)
      throw retnet::InvalidArgument("TransformerModel::forward: " + std::to_string(len) +
                                    " positions do not fit in the cache's capacity " +
                                    std::to_string(cache.capacity));
    for (int32_t t : tokens)
      if (t < 0 || t >= config_.vocab_size)
        throw retnet::InvalidArgument("TransformerModel::forward: token id " + std::to_string(t) +
                                      " is outside [0, " + std::to_string(config_.vocab_size) +
                                      ")");
    const auto& w = *weights_;
    const Scalar eps = static_cast<Scalar>(config_.eps);
    auto& s = scratch_;

    s.x.resize(time, d);
    for (Index t = 0; t < time; ++t) s.x.row(t) = w.embed.row(tokens[t]);
    s.positions.resize(static_cast<size_t>(time));
    for (Index t = 0; t < time; ++t) s.positions[t] = start + t;
    s.rotation.compute(s.positions, dh);
    // Scores of one head: [time, len]. Sized for the cache's capacity so that decoding (time 1)
    // never reallocates as the context grows.
    const Index score_size = time * cache.capacity;
    s.scores.resize(static_cast<size_t>(heads));
    for (auto& buf : s.scores)
      if (buf.size() < score_size) buf.resize(score_size);

    for (size_t l = 0; l < w.layers.size(); ++l) {
      const auto& lw = w.layers[l];
      lw.attn_norm.apply(s.x, eps, s.normed);
      retnet::linear(s.normed, lw.q_proj, s.q);
      retnet::linear(s.normed, lw.k_proj, s.k);
      retnet::linear(s.normed, lw.v_proj, s.v);
      // Rotate q in place; rotate k into the cache and copy v there.
      Scalar* kc = cache.k[l].data();
      Scalar* vc = cache.v[l].data();
      for (Index h = 0; h < heads; ++h)
        for (Index t = 0; t < time; ++t) {
          Scalar* q = s.q.row(t).data() + h * dh;
          const Index at = (h * cache.capacity + start + t) * dh;
          s.rotation.rotate(q, t, dh, q);
          s.rotation.rotate(s.k.row(t).data() + h * dh, t, dh, kc + at);
          std::copy_n(s.v.row(t).data() + h * dh, dh, vc + at);
        }
      s.attn.resize(time, d);
      attend(s, cache, l, start, time, len);
      retnet::linear(s.attn, lw.out_proj, s.delta);
      s.x += s.delta;
      lw.ffn_norm.apply(s.x, eps, s.normed);
      retnet::feed_forward(ffn_params_, lw.ffn, s.normed, s.ffn, s.delta);
      s.x += s.delta;
    }
    cache.length = len;

    if (mode == LogitsMode::kNone || time == 0) return;
    if (mode == LogitsMode::kLast) {
      s.last = s.x.bottomRows(1);
      w.final_norm.apply(s.last, eps, s.normed);
    } else {
      w.final_norm.apply(s.x, eps, s.normed);
    }
    retnet::linear(s.normed, w.output, logits);
  }

  /// One token at position cache.length: logits [1, vocab]. Allocates nothing after the first
  /// call with a given cache capacity.
  void step(int32_t token, KVCache<Scalar>& cache, Matrix<Scalar>& logits) {
    scratch_.step_token.assign(1, token);
    forward(scratch_.step_token, cache, logits, LogitsMode::kAll);
  }

 private:
  struct Scratch {
    Matrix<Scalar> x, normed, q, k, v, attn, delta, last;
    retnet::FeedForwardWorkspace<Scalar> ffn;
    retnet::RotationTable<Scalar> rotation;
    std::vector<int64_t> positions;
    std::vector<retnet::Vector<Scalar>> scores;  // one buffer per head
    std::vector<int32_t> step_token;
  };

  /// attn[:, head h] = softmax(q_h K_hᵀ / sqrt(dh), causal) V_h for every head, over the
  /// cache's first `len` positions; new row t sits at position start + t.
  void attend(Scratch& s, const KVCache<Scalar>& cache, size_t layer, Index start, Index time,
              Index len) const {
    const Index heads = config_.heads, dh = config_.head_dim();
    const Scalar scale = Scalar(1) / std::sqrt(Scalar(dh));
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (Index h = 0; h < heads; ++h) {
      retnet::ConstMatrixMap<Scalar> k(cache.k[layer].data() + h * cache.capacity * dh, len, dh);
      retnet::ConstMatrixMap<Scalar> v(cache.v[layer].data() + h * cache.capacity * dh, len, dh);
      retnet::MatrixMap<Scalar> p(s.scores[h].data(), time, len);
      p.noalias() = s.q.middleCols(h * dh, dh) * k.transpose();  // scaled in the softmax
      for (Index t = 0; t < time; ++t) {
        const Index visible = start + t + 1;  // positions 0 .. start + t
        auto row = p.row(t);
        auto seen = row.head(visible).array();
        seen = ((seen - seen.maxCoeff()) * scale).exp();
        seen /= seen.sum();
        row.tail(len - visible).setZero();
      }
      s.attn.middleCols(h * dh, dh).noalias() = p * v;
    }
  }

  TransformerConfig config_;
  std::unique_ptr<const TransformerWeights<Scalar>> weights_;
  retnet::FeedForwardParams<Scalar> ffn_params_;
  Scratch scratch_;
};

}  // namespace retnet_baseline
