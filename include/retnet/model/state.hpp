// The recurrent state of a whole model: one retention state per layer plus the number of
// tokens each batch entry has consumed (positions drive the rotation and decay factors).
// A value type: fixed size whatever the sequence length, copyable (to branch a generation).
// State files (io/state_file.hpp) store it with the fingerprint of its model
// (model_fingerprint, below), so that it cannot be loaded into another model of the same shapes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/random.hpp"
#include "retnet/kernels/deferred_recurrent_retention.hpp"
#include "retnet/kernels/retention_common.hpp"
#include "retnet/model/config.hpp"
#include "retnet/model/weights.hpp"

namespace retnet {

template <typename Scalar>
struct ModelState {
  std::vector<RetentionState<Scalar>> layers;  // each [batch, heads, dk, dv + 1]
  std::vector<int64_t> positions;              // tokens consumed, per batch entry
  // With a deferred fold (RetNetModel::defer_fold; docs/NUMERICS.md#deferred-fold), per layer the
  // pairs of the last tokens, not yet added into `layers`; empty otherwise. While any are pending
  // `layers` is not the whole state: fold() (or folded()) before reading it directly.
  std::vector<PendingPairs<Scalar>> pending;

  Index batch() const { return static_cast<Index>(positions.size()); }
  bool defers_fold() const { return !pending.empty(); }

  /// Bytes held by the state (retention states, pending pairs and positions).
  size_t size_bytes() const {
    size_t n = positions.size() * sizeof(int64_t) + pending_bytes();
    for (const auto& s : layers) n += static_cast<size_t>(s.size()) * sizeof(Scalar);
    return n;
  }

  /// Bytes of the pending pairs alone (0 without a deferred fold).
  size_t pending_bytes() const {
    size_t n = 0;
    for (const auto& p : pending)
      n += static_cast<size_t>(p.keys.size() + p.values.size()) * sizeof(Scalar);
    return n;
  }

  /// Adds every pending pair into `layers`; the fold stays deferred for the tokens to come.
  void fold() {
    for (size_t l = 0; l < pending.size(); ++l) fold_pending(layers[l], pending[l]);
  }

  /// This state with nothing pending and no deferred fold: what state files and sessions hold.
  ModelState folded() const {
    ModelState out = *this;
    out.fold();
    out.pending.clear();
    return out;
  }

  /// Batch entry `b` alone, as a batch of one (with its pending pairs, if any).
  ModelState select(Index b) const {
    RETNET_REQUIRE(b >= 0 && b < batch(), "ModelState::select: batch entry " + std::to_string(b) +
                                              " is outside [0, " + std::to_string(batch()) + ")");
    ModelState out = empty_like(1);
    copy_entry(*this, b, out, 0);
    return out;
  }

  /// The batch entries of `parts`, in order, as one state (all must come from one model). It
  /// defers its fold when every part does with the same capacity; otherwise the parts are folded.
  static ModelState concatenate(const std::vector<ModelState>& parts) {
    RETNET_REQUIRE(!parts.empty(), "ModelState::concatenate: no states given");
    Index total = 0;
    bool deferred = true;
    for (const auto& p : parts) {
      RETNET_REQUIRE(p.layers.size() == parts[0].layers.size(),
                     "ModelState::concatenate: states have different numbers of layers");
      total += p.batch();
      deferred =
          deferred && p.defers_fold() && p.pending[0].capacity() == parts[0].pending[0].capacity();
    }
    ModelState out = parts[0].empty_like(total);
    if (!deferred) out.pending.clear();
    Index row = 0;
    for (const auto& p : parts) {
      const ModelState plain = deferred || !p.defers_fold() ? ModelState{} : p.folded();
      const ModelState& src = plain.layers.empty() ? p : plain;
      for (Index b = 0; b < src.batch(); ++b) copy_entry(src, b, out, row++);
    }
    return out;
  }

  /// A state of `rows` batch entries shaped like this one (deferring its fold if this one does);
  /// values unset, positions 0.
  ModelState empty_like(Index rows) const {
    ModelState out;
    out.positions.assign(static_cast<size_t>(rows), 0);
    out.layers.reserve(layers.size());  // Eigen tensors are copied, not moved, when a vector grows
    for (const auto& s : layers)
      out.layers.emplace_back(rows, s.dimension(1), s.dimension(2), s.dimension(3));
    out.pending.reserve(pending.size());
    for (const auto& p : pending)
      out.pending.emplace_back(rows, p.keys.dimension(1), p.capacity(), p.keys.dimension(3),
                               p.values.dimension(3), p.decays);
    return out;
  }

  /// Batch entry `from` of `src` into entry `to` of `dst` (states of one model). A destination
  /// that defers its fold takes the source's pending pairs (none if the source does not defer);
  /// one that does not needs a source entry with nothing pending.
  static void copy_entry(const ModelState& src, Index from, ModelState& dst, Index to) {
    RETNET_REQUIRE(src.layers.size() == dst.layers.size() && from >= 0 && from < src.batch() &&
                       to >= 0 && to < dst.batch(),
                   "ModelState::copy_entry: states or entries do not match");
    dst.positions[to] = src.positions[from];
    for (size_t l = 0; l < src.layers.size(); ++l) {
      const auto& s = src.layers[l];
      auto& d = dst.layers[l];
      RETNET_REQUIRE(s.dimension(1) == d.dimension(1) && s.dimension(2) == d.dimension(2) &&
                         s.dimension(3) == d.dimension(3),
                     "ModelState::copy_entry: layer " + std::to_string(l) + " shapes differ");
      const Index block = s.size() / src.batch();
      std::copy_n(s.data() + from * block, block, d.data() + to * block);
    }
    const Index waiting = src.defers_fold() ? src.pending[0].count[from] : 0;
    if (!dst.defers_fold()) {
      RETNET_REQUIRE(waiting == 0,
                     "ModelState::copy_entry: the source entry has pending pairs "
                     "and the destination does not defer its fold");
      return;
    }
    for (size_t l = 0; l < dst.pending.size(); ++l) {
      auto& d = dst.pending[l];
      d.count[to] = waiting;
      if (waiting == 0) continue;
      const auto& s = src.pending[l];
      RETNET_REQUIRE(s.capacity() == d.capacity() && s.keys.dimension(1) == d.keys.dimension(1) &&
                         s.keys.dimension(3) == d.keys.dimension(3) &&
                         s.values.dimension(3) == d.values.dimension(3),
                     "ModelState::copy_entry: pending pairs of different shapes");
      const Index keys = s.keys.size() / src.batch(), values = s.values.size() / src.batch();
      std::copy_n(s.keys.data() + from * keys, keys, d.keys.data() + to * keys);
      std::copy_n(s.values.data() + from * values, values, d.values.data() + to * values);
    }
  }
};

/// Where a generation stands: the model state that has read every token before `pending`, and
/// the tokens so far (for the repetition penalty); enough to continue it later, in this process
/// or another (io/state_file.hpp writes and reads it).
template <typename Scalar>
struct GenerationState {
  ModelState<Scalar> model;     // has read every token before `pending`
  int32_t pending = 0;          // the next token to read
  std::vector<int32_t> recent;  // tokens so far, for the repetition penalty
  // How the last prompt (or continuation) was read; not saved.
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;
};

namespace detail {

inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

template <typename T>
uint64_t fnv1a_value(uint64_t h, T v) {
  return fnv1a(h, &v, sizeof v);
}

template <typename Scalar>
float weight_at(const LinearWeight<Scalar>& w, Index r, Index c) {
  return static_cast<float>(w.at(r, c));
}
template <typename T>
float weight_at(const T& m, Index r, Index c) {
  return static_cast<float>(m(r, c));
}

}  // namespace detail

/// Values sampled from each tensor by model_fingerprint().
constexpr Index kFingerprintSamples = 1024;

/// A 64-bit fingerprint of a model, stored in its state files (never 0, the value of "none").
/// It hashes (FNV-1a, then a 64-bit mixer) the config as JSON and, for every tensor in
/// checkpoint order, its name, shape and up to kFingerprintSamples values at evenly spaced
/// positions (as float, so a float and a double copy of one checkpoint agree). Cheap: a few
/// thousand values a tensor whatever the model size, so it is computed on every save and load.
/// Two checkpoints trained or fine-tuned apart differ in essentially every value and so in the
/// fingerprint; an edit confined to values between the samples is not seen. A guard against
/// using a state with the wrong model, not a cryptographic hash.
template <typename Scalar>
uint64_t model_fingerprint(const ModelConfig& config, const ModelWeights<Scalar>& weights) {
  uint64_t h = 0xcbf29ce484222325ull;
  const std::string tag = "retnet model fingerprint 1";
  h = detail::fnv1a(h, tag.data(), tag.size());
  const std::string json = config.to_json().dump();
  h = detail::fnv1a(h, json.data(), json.size());
  auto tensor = [&](const std::string& name, const auto& t) {
    const Index rows = t.rows(), cols = t.cols(), n = rows * cols;
    h = detail::fnv1a(h, name.data(), name.size() + 1);  // with the terminating NUL
    h = detail::fnv1a_value<int64_t>(h, rows);
    h = detail::fnv1a_value<int64_t>(h, cols);
    const Index k = std::min<Index>(n, kFingerprintSamples);
    for (Index j = 0; j < k; ++j) {
      const Index i = static_cast<Index>(static_cast<long double>(n) * j / k);
      h = detail::fnv1a_value<float>(h, detail::weight_at(t, i / cols, i % cols));
    }
  };
  weights.visit(config, [&](const std::string& name, const auto& t, const std::vector<int64_t>&) {
    tensor(name, t);
  });
  if (weights.embed.size() && config.tie_embeddings)
    tensor("embed_tokens.weight (apart)", weights.embed);
  h = mix64(h);  // so that similar models do not get similar fingerprints
  return h == 0 ? 1 : h;
}

}  // namespace retnet
