// Training batches from one long token sequence. B streams start at seeded random offsets; each
// batch takes the next T tokens of every stream as inputs (t .. t+T−1) and the tokens one
// further as targets (t+1 .. t+T). A stream that has no T+1 tokens left jumps to a new random
// offset. Every batch starts from a zero recurrent state (the state is not carried from one
// batch to the next), so a stream is T-token windows read in order. The whole position (the
// generator's state and the streams' cursors) is a few integers that a training checkpoint
// stores, so that a resumed run draws the same batches.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/random.hpp"
#include "retnet/core/tensor.hpp"

namespace retnet {

/// The tokens of a text split into training and held-out parts.
struct TokenSplit {
  std::vector<int32_t> train, heldout;
};

/// The last `fraction` (in [0, 1)) of `tokens` held out, the rest for training.
inline TokenSplit split_heldout(std::vector<int32_t> tokens, double fraction) {
  RETNET_REQUIRE(fraction >= 0 && fraction < 1,
                 "split_heldout: the fraction must be in [0, 1), got " + std::to_string(fraction));
  const size_t held = static_cast<size_t>(double(tokens.size()) * fraction);
  TokenSplit s;
  s.heldout.assign(tokens.end() - static_cast<std::ptrdiff_t>(held), tokens.end());
  tokens.resize(tokens.size() - held);
  s.train = std::move(tokens);
  return s;
}

/// Where the batches stand: what a checkpoint stores to draw the same batches again.
struct BatchPosition {
  uint64_t rng = 0;              // the SplitMix64 state
  std::vector<int64_t> cursors;  // per stream: the offset of its next input token
};

class TokenBatcher {
 public:
  /// `tokens` must outlive the batcher and hold at least seq_len + 1 tokens.
  TokenBatcher(const std::vector<int32_t>& tokens, Index batch, Index seq_len, uint64_t seed)
      : tokens_(&tokens), batch_(batch), seq_len_(seq_len) {
    RETNET_REQUIRE(batch >= 1 && seq_len >= 1, "TokenBatcher: batch and seq_len must be >= 1");
    RETNET_REQUIRE(static_cast<Index>(tokens.size()) >= seq_len + 1,
                   "the training data has " + std::to_string(tokens.size()) +
                       " tokens, fewer than one sequence of --seq-len " + std::to_string(seq_len) +
                       " plus 1 (the last target)");
    position_.rng = seed;
    position_.cursors.resize(static_cast<size_t>(batch));
    for (int64_t& c : position_.cursors) c = random_offset();
  }

  Index batch() const { return batch_; }
  Index seq_len() const { return seq_len_; }
  const BatchPosition& position() const { return position_; }

  /// Continues from a stored position (checked against this batcher's shape and data).
  void set_position(const BatchPosition& p) {
    RETNET_REQUIRE(static_cast<Index>(p.cursors.size()) == batch_,
                   "the stored data position has " + std::to_string(p.cursors.size()) +
                       " streams, the batch is " + std::to_string(batch_));
    for (int64_t c : p.cursors)
      RETNET_REQUIRE(c >= 0 && c + seq_len_ < static_cast<int64_t>(tokens_->size()),
                     "the stored data position " + std::to_string(c) +
                         " lies outside the training data (another --data or --seq-len?)");
    position_ = p;
  }

  /// The next batch: inputs and targets [batch, seq_len].
  void next(TokenMatrix& inputs, TokenMatrix& targets) {
    inputs.resize(batch_, seq_len_);
    targets.resize(batch_, seq_len_);
    const int64_t n = static_cast<int64_t>(tokens_->size());
    for (Index b = 0; b < batch_; ++b) {
      int64_t& c = position_.cursors[static_cast<size_t>(b)];
      if (c + seq_len_ + 1 > n) c = random_offset();
      for (Index t = 0; t < seq_len_; ++t) {
        inputs(b, t) = (*tokens_)[static_cast<size_t>(c + t)];
        targets(b, t) = (*tokens_)[static_cast<size_t>(c + t + 1)];
      }
      c += seq_len_;
    }
  }

 private:
  /// Uniform over the starts that leave seq_len + 1 tokens (the modulo bias is below 2^-35 for any
  /// file read).
  int64_t random_offset() {
    const uint64_t starts = tokens_->size() - static_cast<uint64_t>(seq_len_);
    return static_cast<int64_t>(splitmix64(position_.rng) % starts);
  }

  const std::vector<int32_t>* tokens_;
  Index batch_, seq_len_;
  BatchPosition position_;
};

}  // namespace retnet
