// Tests of the state files' CRC-32 (io/state_file.hpp): damage that leaves every field in range
// (a position moved, a value scaled, another pending token) is refused as a checksum mismatch,
// so is any flipped bit, and so is a file of the version without a checksum. A generation state
// ends in two checksums: the model state's and that of its own fields.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "retnet/io/state_file.hpp"
#include "retnet/model/retnet_model.hpp"

using retnet::FormatError;
using retnet::GenerationState;
using retnet::Index;
using retnet::Matrix;
using retnet::ModelConfig;
using retnet::ModelWeights;
using retnet::RetNetModel;
using retnet::testing::expect_error;

namespace {

RetNetModel<float> small_model() {
  ModelConfig c;
  c.vocab_size = 11, c.embed_dim = 16, c.value_embed_dim = 32, c.heads = 2, c.ffn_dim = 24;
  c.layers = 2;
  return RetNetModel<float>(c, ModelWeights<float>::random(c, 1));
}

// A generation after reading a few tokens: positions, values and tokens not all zero.
GenerationState<float> used_generation(const RetNetModel<float>& model) {
  GenerationState<float> g;
  g.model = model.new_state(1);
  retnet::TokenMatrix tokens(1, 5);
  for (Index i = 0; i < tokens.size(); ++i) tokens.data()[i] = static_cast<int32_t>(i + 3);
  retnet::Workspace<float> ws;
  Matrix<float> logits;
  model.forward(tokens, retnet::Form::kChunkwise, 2, g.model, ws, logits);
  g.pending = 4;
  g.recent = {3, 4, 5, 6, 7};
  return g;
}

std::string saved(const RetNetModel<float>& model, const GenerationState<float>& g) {
  std::stringstream out;
  retnet::save_generation_state(out, g, model.fingerprint());
  return out.str();
}

GenerationState<float> load(const RetNetModel<float>& model, const std::string& bytes) {
  std::stringstream in(bytes);
  return retnet::load_generation_state(in, model, "g.state");
}

// Where the fields of a generation state of batch 1 lie.
struct Offsets {
  size_t position = retnet::kStateHeaderBytes;
  size_t data = retnet::kStateHeaderBytes + 8;
  size_t pending;  // after the model state's checksum
};

Offsets offsets_of(const GenerationState<float>& g) {
  Offsets o;
  o.pending = retnet::kStateHeaderBytes + g.model.size_bytes() + retnet::kStateChecksumBytes;
  return o;
}

}  // namespace

TEST(StateChecksum, GenerationRoundTrips) {
  const auto model = small_model();
  const auto g = used_generation(model);
  const std::string bytes = saved(model, g);
  EXPECT_EQ(bytes.size(), offsets_of(g).pending + 4 + 8 + 4 * g.recent.size() + 4);
  const auto loaded = load(model, bytes);
  EXPECT_EQ(loaded.model.positions, g.model.positions);
  EXPECT_EQ(loaded.pending, g.pending);
  EXPECT_EQ(loaded.recent, g.recent);
  for (size_t l = 0; l < g.model.layers.size(); ++l)
    for (Index i = 0; i < g.model.layers[l].size(); ++i)
      ASSERT_EQ(loaded.model.layers[l].data()[i], g.model.layers[l].data()[i]);
}

// Issue 25, cause 17: three kinds of damage that keep every field in range, each of which
// loaded and changed the generated text, are refused.
TEST(StateChecksum, RefusesDamageThatStaysInRange) {
  const auto model = small_model();
  const auto g = used_generation(model);
  const std::string good = saved(model, g);
  const Offsets at = offsets_of(g);

  std::string moved = good;  // position + 1000
  int64_t position = 0;
  std::memcpy(&position, &moved[at.position], 8);
  position += 1000;
  std::memcpy(&moved[at.position], &position, 8);
  expect_error<FormatError>([&] { load(model, moved); },
                            {"g.state: checksum mismatch in the state", "the file is damaged"});

  std::string scaled = good;  // the first non-zero value x 2^64, still finite
  size_t value_at = at.data;
  float value = 0;
  for (;; value_at += 4) {
    ASSERT_LT(value_at, at.pending);
    std::memcpy(&value, &scaled[value_at], 4);
    if (value != 0) break;
  }
  value = std::ldexp(value, 64);
  ASSERT_TRUE(std::isfinite(value));
  std::memcpy(&scaled[value_at], &value, 4);
  expect_error<FormatError>([&] { load(model, scaled); },
                            {"g.state: checksum mismatch in the state"});

  std::string other_pending = good;  // another token of the vocabulary
  const int32_t pending = 9;
  std::memcpy(&other_pending[at.pending], &pending, 4);
  expect_error<FormatError>([&] { load(model, other_pending); },
                            {"g.state: checksum mismatch in the generation fields"});
}

// A flipped bit anywhere in the file is refused: in the header by its own check, elsewhere by a
// checksum; never loaded, never more than one line.
TEST(StateChecksum, RefusesAFlippedBitAnywhere) {
  const auto model = small_model();
  const std::string good = saved(model, used_generation(model));
  size_t checksum_refusals = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bytes = good;
      bytes[i] = static_cast<char>(bytes[i] ^ (1 << bit));
      try {
        load(model, bytes);
        ADD_FAILURE() << "bit " << bit << " of byte " << i << " flipped: loaded";
      } catch (const FormatError& e) {
        const std::string message = e.what();
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        if (message.find("checksum mismatch") != std::string::npos) ++checksum_refusals;
      }
    }
  }
  // Every bit after the header is caught by a checksum (the header's by its own checks).
  EXPECT_GE(checksum_refusals, (good.size() - retnet::kStateHeaderBytes - 8 - 4) * 8);
}

TEST(StateChecksum, RefusesAMissingChecksum) {
  const auto model = small_model();
  const auto g = used_generation(model);
  std::stringstream out;
  retnet::save_state(out, g.model, model.fingerprint());
  const std::string bytes = out.str();
  std::stringstream in(bytes.substr(0, bytes.size() - 2));
  expect_error<FormatError>(
      [&] { retnet::load_state(in, model.new_state(1), model.fingerprint(), "s"); },
      {"s: state declares batch 1", "4-byte checksum, but only"});
  const std::string generation = saved(model, g);
  expect_error<FormatError>([&] { load(model, generation.substr(0, generation.size() - 1)); },
                            {"g.state: truncated generation fields: its checksum is missing"});
}

// Version 2 files (the same layout without the checksums) are refused, saying why.
TEST(StateChecksum, RefusesVersion2) {
  const auto model = small_model();
  std::string bytes = saved(model, used_generation(model));
  const uint32_t version = 2;
  std::memcpy(&bytes[8], &version, 4);
  expect_error<FormatError>(
      [&] { load(model, bytes); },
      {"g.state: state version 2 (saved without a checksum), expected 3", "save the state again"});
}
