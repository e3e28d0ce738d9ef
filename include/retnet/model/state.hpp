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
#include "retnet/kernels/retention_common.hpp"
#include "retnet/model/config.hpp"
#include "retnet/model/weights.hpp"

namespace retnet {

template <typename Scalar>
struct ModelState {
  std::vector<RetentionState<Scalar>> layers;  // each [batch, heads, dk, dv + 1]
  std::vector<int64_t> positions;              // tokens consumed, per batch entry

  Index batch() const { return static_cast<Index>(positions.size()); }

  /// Bytes held by the state (retention states and positions).
  size_t size_bytes() const {
    size_t n = positions.size() * sizeof(int64_t);
    for (const auto& s : layers) n += static_cast<size_t>(s.size()) * sizeof(Scalar);
    return n;
  }

  /// Batch entry `b` alone, as a batch of one.
  ModelState select(Index b) const {
    RETNET_REQUIRE(b >= 0 && b < batch(), "ModelState::select: batch entry " + std::to_string(b) +
                                              " is outside [0, " + std::to_string(batch()) + ")");
    ModelState out;
    out.positions = {positions[b]};
    out.layers.reserve(layers.size());  // Eigen tensors are copied, not moved, when a vector grows
    for (const auto& s : layers) {
      RetentionState<Scalar> one(1, s.dimension(1), s.dimension(2), s.dimension(3));
      const Index block = one.size();
      std::copy_n(s.data() + b * block, block, one.data());
      out.layers.push_back(std::move(one));
    }
    return out;
  }

  /// The batch entries of `parts`, in order, as one state (all must come from one model).
  static ModelState concatenate(const std::vector<ModelState>& parts) {
    RETNET_REQUIRE(!parts.empty(), "ModelState::concatenate: no states given");
    ModelState out;
    Index total = 0;
    for (const auto& p : parts) {
      RETNET_REQUIRE(p.layers.size() == parts[0].layers.size(),
                     "ModelState::concatenate: states have different numbers of layers");
      total += p.batch();
      out.positions.insert(out.positions.end(), p.positions.begin(), p.positions.end());
    }
    out.layers.reserve(parts[0].layers.size());
    for (size_t l = 0; l < parts[0].layers.size(); ++l) {
      const auto& first = parts[0].layers[l];
      RetentionState<Scalar> s(total, first.dimension(1), first.dimension(2), first.dimension(3));
      Scalar* dst = s.data();
      for (const auto& p : parts) {
        const auto& src = p.layers[l];
        RETNET_REQUIRE(src.dimension(1) == first.dimension(1) &&
                           src.dimension(2) == first.dimension(2) &&
                           src.dimension(3) == first.dimension(3),
                       "ModelState::concatenate: layer " + std::to_string(l) + " shapes differ");
        dst = std::copy_n(src.data(), src.size(), dst);
      }
      out.layers.push_back(std::move(s));
    }
    return out;
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
