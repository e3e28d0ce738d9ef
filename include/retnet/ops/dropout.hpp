// Dropout for training (Srivastava et al. 2014), inverted: each element is kept with
// probability 1 − rate and scaled by 1 / (1 − rate), so the expected value is unchanged and
// inference needs no rescaling. Its backward multiplies the gradient by the same mask, so one
// function serves both.
//
// The mask is not drawn from a stream but computed: element (row, column) of a sequence at an
// absolute position is kept iff
//     u = mix64(mix64(seed) + mix64(sequence ⊕ position·φ₆₄) + column) / 2⁶⁴ ≥ rate
// with mix64 SplitMix64's finaliser (core/random.hpp) and φ₆₄ = 2⁶⁴/φ, its odd constant. So the
// mask of a token does not depend on how the sequence is cut into segments, on the form, on
// recomputation or on the thread count: the forward, the recomputed forward and the backward see
// the same mask, and the three forms' gradients stay equal with dropout on.
#pragma once

#include <cstdint>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/random.hpp"
#include "retnet/core/tensor.hpp"

namespace retnet {

/// Where and how much to drop. `rate` 0 (the default) drops nothing; `seed` selects the masks
/// (a training step uses a new one); at(site) tells apart the places of one model that drop.
struct Dropout {
  double rate = 0;
  uint64_t seed = 0;

  bool active() const { return rate > 0; }
  /// The masks of another place of the model (a layer, a branch), independent of this one's.
  Dropout at(uint64_t site) const { return {rate, mix64(seed ^ mix64(site + 1))}; }
};

/// x [batch·time, d], row b·time + t holding sequence b at position start[b] + t: each element
/// kept (and scaled by 1 / (1 − rate)) or set to zero, by the mask described above.
template <typename Scalar>
void apply_dropout(const Dropout& dropout, Index time, const std::vector<int64_t>& start,
                   Matrix<Scalar>& x) {
  if (!dropout.active()) return;
  const Index batch = static_cast<Index>(start.size());
  RETNET_REQUIRE(dropout.rate < 1,
                 "dropout: the rate must be in [0, 1), found " + std::to_string(dropout.rate));
  RETNET_REQUIRE(x.rows() == batch * time, "dropout: " + std::to_string(x.rows()) + " rows for " +
                                               std::to_string(batch) + " x " +
                                               std::to_string(time) + " positions");
  // u < rate  ⇔  the 53 high bits of the hash < rate · 2⁵³
  const uint64_t threshold = static_cast<uint64_t>(dropout.rate * 9007199254740992.0);
  const Scalar keep_scale = static_cast<Scalar>(1.0 / (1.0 - dropout.rate));
  const uint64_t seed_key = mix64(dropout.seed);
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < time; ++t) {
      const uint64_t position = static_cast<uint64_t>(start[static_cast<size_t>(b)] + t);
      const uint64_t row_key = seed_key + mix64(uint64_t(b) ^ (position * 0x9e3779b97f4a7c15ull));
      Scalar* row = x.data() + (b * time + t) * x.cols();
      for (Index j = 0; j < x.cols(); ++j) {
        const bool dropped = (mix64(row_key + uint64_t(j)) >> 11) < threshold;
        row[j] = dropped ? Scalar(0) : row[j] * keep_scale;
      }
    }
}

}  // namespace retnet
