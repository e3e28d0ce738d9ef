// Tests of the state file format (io/state_file.hpp: save_state / load_state,
// expect_end_of_state; model_fingerprint): round trips, and one test per hostile header field
// (version, shapes, sizes). Hand-made files are built field by field with StateBytes; the
// checksum tests are in test_state_checksum.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "peak_memory.hpp"
#include "retnet/io/state_file.hpp"
#include "retnet/model/retnet_model.hpp"

using retnet::FormatError;
using retnet::Index;
using retnet::Matrix;
using retnet::ModelConfig;
using retnet::ModelState;
using retnet::ModelWeights;
using retnet::RetNetModel;
using retnet::testing::expect_error;
using retnet::testing::PeakMemory;

namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 11, c.embed_dim = 16, c.value_embed_dim = 32, c.heads = 2, c.ffn_dim = 24;
  c.layers = 2;
  return c;
}

template <typename Scalar>
RetNetModel<Scalar> small_model(uint64_t seed, ModelConfig c = small_config()) {
  return RetNetModel<Scalar>(c, ModelWeights<Scalar>::random(c, seed));
}

template <typename Scalar>
uint64_t fingerprint_of(const RetNetModel<Scalar>& model) {
  return model.fingerprint();
}

// A state after reading a few tokens, so that its values and positions are not all zero.
ModelState<float> used_state(const RetNetModel<float>& model, Index batch) {
  auto state = model.new_state(batch);
  retnet::TokenMatrix tokens(batch, 5);
  for (Index i = 0; i < tokens.size(); ++i) tokens.data()[i] = static_cast<int32_t>(i % 11);
  retnet::Workspace<float> ws;
  Matrix<float> logits;
  model.forward(tokens, retnet::Form::kChunkwise, 2, state, ws, logits);
  return state;
}

// A state file written field by field (the layout of docs/FORMATS.md, "State files").
struct StateBytes {
  std::string bytes;
  template <typename T>
  StateBytes& put(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  // Magic, version, scalar size, fingerprint and the five dimensions.
  static StateBytes header(uint64_t fingerprint, const ModelState<float>& like, uint64_t batch,
                           uint32_t version = retnet::kStateVersion) {
    StateBytes s;
    s.bytes = "RETNETST";
    const auto& d = like.layers[0].dimensions();
    s.put<uint32_t>(version).put<uint32_t>(4).put<uint64_t>(fingerprint);
    s.put<uint64_t>(like.layers.size()).put<uint64_t>(batch);
    s.put<uint64_t>(d[1]).put<uint64_t>(d[2]).put<uint64_t>(d[3]);
    return s;
  }
};

// Writes the CRC-32 of a state file (`bytes` holds one model state) after an edit, so that a
// test reaches the checks behind the checksum.
void reseal(std::string& bytes) {
  const size_t end = bytes.size() - retnet::kStateChecksumBytes;
  const uint32_t crc = retnet::detail::state_crc32(bytes.data(), end);
  std::memcpy(&bytes[end], &crc, sizeof crc);
}

// A read-only stream buffer that cannot seek, as a pipe.
class UnseekableBuffer : public std::streambuf {
 public:
  explicit UnseekableBuffer(std::string data) : data_(std::move(data)) {
    setg(&data_[0], &data_[0], &data_[0] + data_.size());
  }

 private:
  std::string data_;
};

}  // namespace

TEST(StateFile, RoundTripsWithTheModelFingerprint) {
  auto model = small_model<float>(1);
  const auto state = used_state(model, 3);
  const uint64_t fp = fingerprint_of(model);
  std::stringstream buffer;
  retnet::save_state(buffer, state, fp);
  EXPECT_EQ(buffer.str().size(),
            retnet::kStateHeaderBytes + state.size_bytes() + retnet::kStateChecksumBytes);
  const auto loaded = retnet::load_state(buffer, model.new_state(1), fp, "s.bin");
  EXPECT_NO_THROW(retnet::expect_end_of_state(buffer, "s.bin"));
  EXPECT_EQ(loaded.positions, state.positions);
  ASSERT_EQ(loaded.layers.size(), state.layers.size());
  for (size_t l = 0; l < state.layers.size(); ++l)
    for (Index i = 0; i < state.layers[l].size(); ++i)
      ASSERT_EQ(loaded.layers[l].data()[i], state.layers[l].data()[i]);
}

TEST(StateFile, FingerprintIdentifiesTheModel) {
  const auto a = small_model<float>(1), a_again = small_model<float>(1), b = small_model<float>(2);
  EXPECT_EQ(fingerprint_of(a), fingerprint_of(a_again));
  EXPECT_NE(fingerprint_of(a), fingerprint_of(b));
  EXPECT_NE(fingerprint_of(a), 0u);  // 0 is never a fingerprint
  ModelConfig other_eps = small_config();
  other_eps.eps = 1e-5;  // same shapes and weights, another config
  EXPECT_NE(fingerprint_of(a), fingerprint_of(RetNetModel<float>(other_eps, a.weights())));
  // One sampled value changed (element 0 of the first tensor is always sampled).
  ModelWeights<float> edited = a.weights();
  Matrix<float> embed = edited.embed.to_matrix();
  embed(0, 0) += 1.0f;
  edited.embed = retnet::LinearWeight<float>(embed);
  EXPECT_NE(fingerprint_of(a),
            fingerprint_of(RetNetModel<float>(small_config(), std::move(edited))));
}

// Case 12: a state saved with one model does not load into another of the same shapes.
TEST(StateFile, RefusesAStateOfAnotherModelOfTheSameShapes) {
  auto a = small_model<float>(1);
  const auto b = small_model<float>(2);
  std::stringstream buffer;
  retnet::save_state(buffer, used_state(a, 1), fingerprint_of(a));
  expect_error<FormatError>(
      [&] { retnet::load_state(buffer, b.new_state(1), fingerprint_of(b), "s.bin"); },
      {"s.bin: state was saved for another model", "expected a state saved with this model"});
}

// Case 12: trailing bytes are refused.
TEST(StateFile, RefusesTrailingBytes) {
  auto model = small_model<float>(1);
  std::stringstream buffer;
  retnet::save_state(buffer, used_state(model, 1), fingerprint_of(model));
  buffer << "xyz";
  retnet::load_state(buffer, model.new_state(1), fingerprint_of(model), "s.bin");
  expect_error<FormatError>([&] { retnet::expect_end_of_state(buffer, "s.bin"); },
                            {"s.bin: 3 trailing bytes after the state"});
}

// A version 1 file (saved without a model fingerprint) is refused with a message saying so.
TEST(StateFile, RefusesVersion1) {
  auto model = small_model<float>(1);
  const auto expected = model.new_state(1);
  std::stringstream in(StateBytes::header(0, expected, 1, 1).bytes);
  expect_error<FormatError>(
      [&] { retnet::load_state(in, expected, fingerprint_of(model), "old.bin"); },
      {"old.bin: state version 1 (saved without a model fingerprint), expected 3"});
}

TEST(StateFile, RefusesMismatchedDimensions) {
  auto model = small_model<float>(1);
  const auto expected = model.new_state(1);
  const uint64_t fp = fingerprint_of(model);
  const std::string good = StateBytes::header(fp, expected, 1).bytes;
  const char* names[] = {"layers", "batch", "heads", "dk", "columns"};
  for (int field : {0, 2, 3, 4}) {
    std::string bytes = good;
    uint64_t v = 0;
    std::memcpy(&v, &bytes[24 + 8 * field], 8);
    v += 1;
    std::memcpy(&bytes[24 + 8 * field], &v, 8);
    std::stringstream in(bytes);
    expect_error<FormatError>([&] { retnet::load_state(in, expected, fp, "s"); },
                              {std::string("s: state has ") + names[field] + " = " +
                               std::to_string(v) + ", the model expects " + std::to_string(v - 1)});
  }
  std::stringstream zero(StateBytes::header(fp, expected, 0).bytes);
  expect_error<FormatError>([&] { retnet::load_state(zero, expected, fp, "s"); },
                            {"state batch 0"});
}

// Case 6: a state declaring batch 2^20 is refused before anything is allocated. Before, the
// loader read the 2^20 positions and then allocated 2^20 x the state of a sequence per layer
// (1.1 GB here, 78 GB for the demo model) before finding the data missing.
TEST(StateFile, HugeBatchIsRefusedBeforeAllocating) {
  auto model = small_model<float>(1);
  const auto expected = model.new_state(1);
  const uint64_t fp = fingerprint_of(model);
  const uint64_t batch = uint64_t{1} << 20;
  StateBytes s = StateBytes::header(fp, expected, batch);
  s.bytes.append(batch * 8, '\0');  // every position, then no state data
  std::stringstream in(s.bytes);
  PeakMemory memory;
  expect_error<FormatError>(
      [&] { retnet::load_state(in, expected, fp, "big.bin"); },
      {"big.bin: state declares batch 1048576", "but only 8388608 bytes follow the header"});
  EXPECT_LT(memory.resident_mib(), 64);
  EXPECT_LT(memory.address_space_mib(), 256);
}

// Case 5 (state part): the size a header declares is checked against a stated limit when the
// stream cannot tell its length, naming the real cause.
TEST(StateFile, SizeLimitOnAStreamOfUnknownLength) {
  auto model = small_model<float>(1);
  const auto expected = model.new_state(1);
  const uint64_t fp = fingerprint_of(model);
  for (uint64_t batch : {uint64_t{1} << 40, std::numeric_limits<uint64_t>::max()}) {
    UnseekableBuffer buffer(StateBytes::header(fp, expected, batch).bytes);
    std::istream in(&buffer);
    PeakMemory memory;
    expect_error<FormatError>([&] { retnet::load_state(in, expected, fp, "pipe"); },
                              {"pipe: state declares batch " + std::to_string(batch),
                               "GiB of positions and state, more than the limit of 16 GiB"});
    EXPECT_LT(memory.address_space_mib(), 256);
  }
  // Within the limit, memory follows the bytes that arrive, not the header: batch 2^20 declares
  // 1.1 GB per layer here, the stream holds 8 MB of positions.
  const uint64_t batch = uint64_t{1} << 20;
  StateBytes s = StateBytes::header(fp, expected, batch);
  s.bytes.append(batch * 8, '\0');
  UnseekableBuffer buffer(s.bytes);
  std::istream in(&buffer);
  PeakMemory memory;
  expect_error<FormatError>([&] { retnet::load_state(in, expected, fp, "pipe"); },
                            {"pipe: state declares batch 1048576", "stream ended after 8388608"});
  EXPECT_LT(memory.address_space_mib(), 256);
}

TEST(StateFile, RoundTripsThroughAnUnseekableStream) {
  auto model = small_model<float>(1);
  const auto state = used_state(model, 2);
  std::stringstream out;
  retnet::save_state(out, state, fingerprint_of(model));
  UnseekableBuffer buffer(out.str() + "x");
  std::istream in(&buffer);
  const auto loaded = retnet::load_state(in, model.new_state(1), fingerprint_of(model), "p");
  EXPECT_EQ(loaded.positions, state.positions);
  EXPECT_EQ(loaded.layers[1].data()[7], state.layers[1].data()[7]);
  EXPECT_THROW(retnet::expect_end_of_state(in, "p"), FormatError);
}

// Case 6: positions are bounded, so position arithmetic cannot overflow later.
TEST(StateFile, RefusesPositionsOutOfRange) {
  auto model = small_model<float>(1);
  const auto state = used_state(model, 2);
  const uint64_t fp = fingerprint_of(model);
  for (int64_t bad : {std::numeric_limits<int64_t>::max(), retnet::kMaxStatePosition + 1,
                      int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
    std::stringstream good;
    retnet::save_state(good, state, fp);
    std::string bytes = good.str();
    std::memcpy(&bytes[retnet::kStateHeaderBytes + 8], &bad, 8);  // batch entry 1
    reseal(bytes);
    std::stringstream in(bytes);
    expect_error<FormatError>(
        [&] { retnet::load_state(in, model.new_state(1), fp, "s"); },
        {"s: state position " + std::to_string(bad) + " of batch entry 1 is outside [0, 2^40]"});
  }
  auto far = state;
  far.positions[0] = std::numeric_limits<int64_t>::max();
  std::stringstream out;
  EXPECT_THROW(retnet::save_state(out, far, fp), retnet::InvalidArgument);
}

TEST(StateFile, RefusesNonFiniteValues) {
  auto model = small_model<float>(1);
  const auto state = used_state(model, 1);
  const uint64_t fp = fingerprint_of(model);
  std::stringstream good;
  retnet::save_state(good, state, fp);
  std::string bytes = good.str();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const size_t layer1 = retnet::kStateHeaderBytes + 8 + state.layers[0].size() * 4;
  std::memcpy(&bytes[layer1 + 4 * 5], &nan, 4);
  reseal(bytes);
  std::stringstream in(bytes);
  expect_error<FormatError>([&] { retnet::load_state(in, model.new_state(1), fp, "s"); },
                            {"s: state value 5 of layer 1 is not finite"});
}

TEST(StateFile, RefusesTruncationAndGarbage) {
  auto model = small_model<float>(1);
  const uint64_t fp = fingerprint_of(model);
  std::stringstream good;
  retnet::save_state(good, used_state(model, 1), fp);
  const std::string bytes = good.str();
  for (size_t cut :
       {size_t{0}, size_t{7}, size_t{20}, size_t{63}, size_t{64}, size_t{70}, bytes.size() - 1}) {
    std::stringstream in(bytes.substr(0, cut));
    EXPECT_THROW(retnet::load_state(in, model.new_state(1), fp, "s"), FormatError) << cut;
  }
  std::stringstream garbage("not a state at all");
  expect_error<FormatError>([&] { retnet::load_state(garbage, model.new_state(1), fp, "g"); },
                            {"g: not a retnet state file (bad magic)"});
  auto double_model = small_model<double>(1);
  std::stringstream as_double(bytes);
  expect_error<FormatError>(
      [&] {
        retnet::load_state(as_double, double_model.new_state(1), fingerprint_of(double_model), "s");
      },
      {"state scalar size 4 bytes, expected 8"});
}

namespace {

// A float state saved with bfloat16 values: half the value bytes, each value read back as its
// bfloat16 rounding (checked against float_to_bf16, element by element), from a file and from a
// pipe; a double state cannot be saved so, and a damaged bfloat16 file is refused by its
// checksum like any other.
TEST(StateFile, BFloat16ValuesHalveTheBytesAndReadBackAsTheirRounding) {
  const auto model = small_model<float>(7);
  const auto state = used_state(model, 2);
  std::ostringstream f32, bf16;
  retnet::save_state(f32, state, model.fingerprint());
  retnet::save_state(bf16, state, model.fingerprint(), retnet::StatePrecision::kBFloat16);
  Index values = 0;
  for (const auto& l : state.layers) values += l.size();
  EXPECT_EQ(f32.str().size() - bf16.str().size(), size_t(values) * 2);
  for (const bool pipe : {false, true}) {
    std::istringstream file(bf16.str());
    UnseekableBuffer unseekable(bf16.str());
    std::istream piped(&unseekable);
    const auto back =
        retnet::load_state(pipe ? piped : file, model.new_state(1), model.fingerprint(), "s");
    ASSERT_EQ(back.positions, state.positions);
    for (size_t l = 0; l < state.layers.size(); ++l)
      for (Index i = 0; i < state.layers[l].size(); ++i)
        ASSERT_EQ(back.layers[l].data()[i],
                  retnet::bf16_to_float(retnet::float_to_bf16(state.layers[l].data()[i])))
            << "layer " << l << " value " << i << (pipe ? " (pipe)" : "");
  }
  std::string damaged = bf16.str();
  damaged[damaged.size() / 2] ^= 0x10;
  std::istringstream in(damaged);
  expect_error<FormatError>(
      [&] { retnet::load_state(in, model.new_state(1), model.fingerprint()); },
      {"checksum mismatch"});
  const auto dmodel = small_model<double>(7);
  std::ostringstream out;
  EXPECT_THROW(retnet::save_state(out, dmodel.new_state(1), dmodel.fingerprint(),
                                  retnet::StatePrecision::kBFloat16),
               retnet::InvalidArgument);
}

}  // namespace
