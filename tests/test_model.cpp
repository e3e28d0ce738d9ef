// Model level: torchscale's logits in all three forms, agreement of the forms on random
// models of every supported kind, and states handed from one form to another.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "npy.hpp"
#include "retention_reference.hpp"
#include "retnet/retnet.hpp"
#include "temp_dir.hpp"

using namespace retnet;
using retnet::testing::relative_error;

namespace {

const std::string kFixture = std::string(RETNET_TEST_DATA_DIR) + "/torchscale-tiny";

TokenMatrix fixture_tokens() {
  const auto a = load_npy(kFixture + "/tokens.npy");
  const auto ids = a.as<int32_t>();
  return Eigen::Map<const TokenMatrix>(ids.data(), a.shape[0], a.shape[1]);
}

Matrix<float> fixture_logits() {
  const auto a = load_npy(kFixture + "/logits.npy");  // [batch, time, vocab]
  const auto v = a.as<float>();
  return Eigen::Map<const Matrix<float>>(v.data(), a.shape[0] * a.shape[1], a.shape[2]);
}

TokenMatrix random_tokens(Index batch, Index time, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TokenMatrix t(batch, time);
  for (Index i = 0; i < t.size(); ++i) t.data()[i] = static_cast<int32_t>(rng() % vocab);
  return t;
}

}  // namespace

// torchscale's parallel forward on random weights (tests/data/torchscale-tiny), float32.
// Measured (max |error| / max |logit|): float 4.5e-7 (parallel) to 5.7e-7 (chunk 1), double
// 4.7e-7, which is torchscale's own float32 rounding (scripts/reference/retnet.py in float64 is
// 4.7e-7 from it too). Bounds: about 3x the measured.
TEST(TorchscaleFixture, EveryFormMatchesTorchscaleLogits) {
  auto model = load_model<float>(kFixture);
  const auto tokens = fixture_tokens();
  const auto expected = fixture_logits();
  ASSERT_EQ(tokens.rows(), 2);
  EXPECT_LE(relative_error(model.forward(tokens, Form::kParallel), expected), 2e-6);
  EXPECT_LE(relative_error(model.forward(tokens, Form::kRecurrent), expected), 2e-6);
  for (Index chunk : {1, 4, 5, 21, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    EXPECT_LE(relative_error(model.forward(tokens, Form::kChunkwise, chunk), expected), 2e-6);
  }
}

TEST(TorchscaleFixture, DoubleModelMatchesToo) {
  auto model = load_model<double>(kFixture);
  const Matrix<double> expected = fixture_logits().cast<double>();
  EXPECT_LE(relative_error(model.forward(fixture_tokens(), Form::kChunkwise, 5), expected), 1.5e-6);
}

// Fixtures made by scripts/fixtures/make_reference_fixtures.py with scripts/reference/retnet.py,
// the float64 NumPy reading of docs/NUMERICS.md:
// - hf-f16-tied: HF names + F16 + tied embeddings + layernorm_embedding + embedding scale + gelu;
// - fairseq-bf16: fairseq names + BF16 + swish + 4 heads;
// - tiny-bytes: HF names with lm_head + F32 + vocab 256 (the command-line tests' model);
// - small-qk-f32 (torchscale names), small-qk-f16 (HF, tied, gelu), small-qk-bf16 (fairseq,
//   4 heads): q and k weights 0.03x, so |row sum| / c_n < 0.003 and the row clamp stays
//   inactive. The first three have large q·k: the clamp divides out the key scale and c_n, which
//   move their logits by 1e-9 to 2.4e-5 only; on small-qk-* leaving out the key scale dk^-0.5
//   moves the logits by 31-43 % and leaving out c_n by 25-45 %.
// Measured over every form and chunk size (max |error| / max |logit|): float 2.0e-7 to 6.8e-7
// (bound 2e-6), double 3.0e-8 to 5.4e-8, which is the float32 rounding of the stored logits
// (bound 1.5e-7).
class ReferenceFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceFixture, EveryFormMatchesTheNumPyReference) {
  const std::string dir = std::string(RETNET_TEST_DATA_DIR) + "/" + GetParam();
  const auto t = load_npy(dir + "/tokens.npy");
  const auto ids = t.as<int32_t>();
  const TokenMatrix tokens = Eigen::Map<const TokenMatrix>(ids.data(), t.shape[0], t.shape[1]);
  const auto l = load_npy(dir + "/logits.npy");
  const auto values = l.as<double>();
  const Matrix<double> expected =
      Eigen::Map<const Matrix<double>>(values.data(), l.shape[0] * l.shape[1], l.shape[2]);
  ASSERT_EQ(expected.rows(), 60);
  auto model = load_model<double>(dir);
  auto model_f = load_model<float>(dir);
  for (Form form : {Form::kParallel, Form::kChunkwise, Form::kRecurrent})
    for (Index chunk : {1, 4, 7, 64}) {
      if (form != Form::kChunkwise && chunk != 7) continue;
      SCOPED_TRACE(std::string(form_name(form)) + " chunk " + std::to_string(chunk));
      EXPECT_LE(relative_error(model.forward(tokens, form, chunk), expected), 1.5e-7);
      EXPECT_LE(relative_error(model_f.forward(tokens, form, chunk), expected), 2e-6);
    }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, ReferenceFixture,
                         ::testing::Values("hf-f16-tied", "fairseq-bf16", "tiny-bytes",
                                           "small-qk-f32", "small-qk-f16", "small-qk-bf16"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

// --- random models of every kind: the three forms agree ---

struct Variant {
  std::string name;
  ModelConfig config;
};

std::vector<Variant> variants() {
  ModelConfig base;
  base.vocab_size = 53, base.embed_dim = 16, base.value_embed_dim = 24, base.heads = 2;
  base.ffn_dim = 20, base.layers = 2, base.chunk_size = 5;
  std::vector<Variant> v;
  v.push_back({"glu_swish", base});
  v.back().config.activation = Activation::kSwish;
  v.push_back({"glu_gelu_tied_scaled", base});
  v.back().config.tie_embeddings = true, v.back().config.scale_embedding = true;
  v.push_back({"plain_ffn_subln_layernorm_embedding", base});
  v.back().config.use_glu = false, v.back().config.subln = true;
  v.back().config.layernorm_embedding = true;
  v.push_back({"plain_ffn_no_subln_four_heads", base});
  v.back().config.use_glu = false, v.back().config.heads = 4, v.back().config.value_embed_dim = 40;
  v.push_back({"layernorm_model_one_head", base});
  v.back().config.norm = NormKind::kLayerNorm, v.back().config.heads = 1;
  v.back().config.layernorm_embedding = true, v.back().config.activation = Activation::kSwish;
  v.push_back({"eight_heads_dk2", base});
  v.back().config.heads = 8, v.back().config.value_embed_dim = 8 * 3;
  return v;
}

template <typename Scalar>
void expect_forms_agree(const ModelConfig& config, double tol) {
  RetNetModel<Scalar> model(config, ModelWeights<Scalar>::random(config, 5));
  for (auto [batch, time] : {std::pair<Index, Index>{1, 1}, {3, 13}, {2, 40}}) {
    SCOPED_TRACE("batch " + std::to_string(batch) + " time " + std::to_string(time));
    const auto tokens = random_tokens(batch, time, config.vocab_size, 17 + time);
    const auto parallel = model.forward(tokens, Form::kParallel);
    EXPECT_LE(relative_error(model.forward(tokens, Form::kRecurrent), parallel), tol);
    for (Index chunk : {Index(1), Index(4), Index(7), time, time + 3}) {  // 13, 40 % 7 != 0
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      EXPECT_LE(relative_error(model.forward(tokens, Form::kChunkwise, chunk), parallel), tol);
    }
  }
}

TEST(RandomModels, ThreeFormsAgreeInDouble) {
  for (const auto& v : variants()) {
    SCOPED_TRACE(v.name);
    expect_forms_agree<double>(v.config, 1e-10);
  }
}

TEST(RandomModels, ThreeFormsAgreeInFloat) {
  for (const auto& v : variants()) {
    SCOPED_TRACE(v.name);
    expect_forms_agree<float>(v.config, 1e-5);
  }
}

// The clamp of the row sums must be active somewhere for the test above to cover it: with
// large keys, |row sum| > 1 for most rows.
TEST(RandomModels, FormsAgreeWhenTheRowSumClampIsActive) {
  ModelConfig c = variants()[0].config;
  auto weights = ModelWeights<double>::random(c, 9);
  for (auto& l : weights.layers) {
    l.retention.k_proj = retnet::LinearWeight<double>(l.retention.k_proj.to_matrix() * 30.0);
    l.retention.q_proj = retnet::LinearWeight<double>(l.retention.q_proj.to_matrix() * 30.0);
  }
  RetNetModel<double> model(c, std::move(weights));
  const auto tokens = random_tokens(2, 30, c.vocab_size, 3);
  const auto parallel = model.forward(tokens, Form::kParallel);
  EXPECT_LE(relative_error(model.forward(tokens, Form::kRecurrent), parallel), 1e-10);
  EXPECT_LE(relative_error(model.forward(tokens, Form::kChunkwise, 4), parallel), 1e-10);
}

// A tied checkpoint that stores an output projection anyway: the model embeds with
// embed_tokens and projects with output_projection, as the untied model with the same tensors.
TEST(LoadModel, TiedCheckpointWithAnOutputProjectionUsesBoth) {
  ModelConfig untied = variants()[0].config;
  const auto weights = ModelWeights<float>::random(untied, 31);
  std::vector<Matrix<float>> rows;  // row-major copies that SavedTensor points into
  rows.reserve(64);
  std::vector<SavedTensor> saved;
  weights.visit(untied,
                [&](const std::string& name, const auto& t, const std::vector<int64_t>& shape) {
                  if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value)
                    rows.push_back(t.to_matrix());
                  else
                    rows.push_back(Eigen::Map<const Matrix<float>>(t.data(), t.rows(), t.cols()));
                  saved.push_back({name, DType::F32, shape, rows.back().data()});
                });
  retnet::testing::TempDir dir;
  save_safetensors(dir.file("model.safetensors"), saved);
  ModelConfig tied = untied;
  tied.tie_embeddings = true;
  std::ofstream(dir.file("config.json")) << tied.to_json().dump();
  const auto loaded = load_model<float>(dir.str());
  EXPECT_EQ(loaded.weights().embed.to_matrix(), weights.embed.to_matrix());
  EXPECT_EQ(loaded.weights().output.to_matrix(), weights.output.to_matrix());
  RetNetModel<float> reference(untied, ModelWeights<float>(weights));
  const auto tokens = random_tokens(2, 9, untied.vocab_size, 4);
  EXPECT_EQ(loaded.forward(tokens, Form::kParallel), reference.forward(tokens, Form::kParallel));
}

// --- states ---

template <typename Scalar>
Matrix<Scalar> decode_greedy_logits(const RetNetModel<Scalar>& model, ModelState<Scalar>& state,
                                    std::vector<int32_t> next, int steps) {
  Workspace<Scalar> ws;
  Matrix<Scalar> logits, all(steps * Index(next.size()), model.config().vocab_size);
  for (int s = 0; s < steps; ++s) {
    model.step(next, state, ws, logits);
    for (Index b = 0; b < logits.rows(); ++b) {
      all.row(s * logits.rows() + b) = logits.row(b);
      Index arg;
      logits.row(b).maxCoeff(&arg);
      next[b] = static_cast<int32_t>(arg);
    }
  }
  return all;
}

TEST(ModelState, PrefillInAnyFormThenRecurrentStepsEqualsRecurrentAllTheWay) {
  ModelConfig c = variants()[2].config;
  RetNetModel<double> model(c, ModelWeights<double>::random(c, 1));
  Workspace<double> ws;
  const auto prompt = random_tokens(2, 23, c.vocab_size, 8);
  Matrix<double> logits;
  auto reference_state = model.new_state(2);
  model.forward(prompt, Form::kRecurrent, 1, reference_state, ws, logits);
  const auto reference = decode_greedy_logits(model, reference_state, {1, 2}, 12);
  for (Form form : {Form::kParallel, Form::kChunkwise}) {
    SCOPED_TRACE(form_name(form));
    auto state = model.new_state(2);
    model.forward(prompt, form, 6, state, ws, logits, LogitsMode::kLast);
    EXPECT_EQ(state.positions, (std::vector<int64_t>{23, 23}));
    EXPECT_LE(relative_error(decode_greedy_logits(model, state, {1, 2}, 12), reference), 1e-10);
  }
}

TEST(ModelState, LastLogitsEqualTheLastRowOfAll) {
  ModelConfig c = variants()[0].config;
  RetNetModel<double> model(c, ModelWeights<double>::random(c, 2));
  Workspace<double> ws;
  const auto tokens = random_tokens(2, 11, c.vocab_size, 4);
  const auto all = model.forward(tokens, Form::kParallel);
  auto state = model.new_state(2);
  Matrix<double> last;
  model.forward(tokens, Form::kChunkwise, 4, state, ws, last, LogitsMode::kLast);
  ASSERT_EQ(last.rows(), 2);
  EXPECT_LE(relative_error(Matrix<double>(last.row(0)), Matrix<double>(all.row(10))), 1e-10);
  EXPECT_LE(relative_error(Matrix<double>(last.row(1)), Matrix<double>(all.row(21))), 1e-10);
}

TEST(ModelState, IsAFixedSizeCopyableValue) {
  ModelConfig c = variants()[0].config;
  RetNetModel<float> model(c, ModelWeights<float>::random(c, 3));
  Workspace<float> ws;
  auto state = model.new_state(1);
  const size_t bytes = state.size_bytes();
  // layers x heads x dk x (dv + 1) scalars + one position
  EXPECT_EQ(bytes, size_t(c.layers * c.heads * c.key_head_dim() * (c.value_head_dim() + 1)) *
                           sizeof(float) +
                       sizeof(int64_t));
  Matrix<float> logits;
  model.forward(random_tokens(1, 100, c.vocab_size, 1), Form::kChunkwise, 16, state, ws, logits);
  EXPECT_EQ(state.size_bytes(), bytes);
  // A copy branches: both continue identically, and the original is untouched by the copy.
  auto branch = state;
  Matrix<float> a, b;
  model.step({7}, state, ws, a);
  model.step({7}, branch, ws, b);
  EXPECT_EQ(a, b);
  model.step({8}, branch, ws, b);
  EXPECT_EQ(state.positions[0], 101);
  EXPECT_EQ(branch.positions[0], 102);
}

TEST(ModelState, SerialisesAndRejectsMismatches) {
  ModelConfig c = variants()[0].config;
  RetNetModel<float> model(c, ModelWeights<float>::random(c, 3));
  Workspace<float> ws;
  auto state = model.new_state(2);
  Matrix<float> logits;
  model.forward(random_tokens(2, 9, c.vocab_size, 2), Form::kChunkwise, 4, state, ws, logits);
  std::stringstream buffer;
  retnet::save_state(buffer, state, model.fingerprint());
  const auto loaded = retnet::load_state(buffer, model.new_state(1), model.fingerprint());
  EXPECT_EQ(loaded.positions, state.positions);
  for (size_t l = 0; l < state.layers.size(); ++l)
    EXPECT_EQ(relative_error(loaded.layers[l], state.layers[l]), 0.0);

  ModelConfig other = c;
  other.heads = 4;
  RetNetModel<float> other_model(other, ModelWeights<float>::random(other, 3));
  std::stringstream again(buffer.str());
  EXPECT_THROW(retnet::load_state(again, other_model.new_state(1), other_model.fingerprint()),
               FormatError);
  std::stringstream truncated(buffer.str().substr(0, buffer.str().size() - 5));
  EXPECT_THROW(retnet::load_state(truncated, model.new_state(1), model.fingerprint()), FormatError);
  std::stringstream as_double(buffer.str());
  RetNetModel<double> double_model(c, ModelWeights<double>::random(c, 3));
  EXPECT_THROW(retnet::load_state(as_double, double_model.new_state(1), double_model.fingerprint()),
               FormatError);
  std::stringstream garbage("not a state at all");
  EXPECT_THROW(retnet::load_state(garbage, model.new_state(1), model.fingerprint()), FormatError);
}

TEST(ModelState, SelectAndConcatenateKeepEachSequence) {
  ModelConfig c = variants()[0].config;
  RetNetModel<double> model(c, ModelWeights<double>::random(c, 4));
  Workspace<double> ws;
  auto a = model.new_state(1), b = model.new_state(1);
  Matrix<double> la, lb;
  model.forward(random_tokens(1, 5, c.vocab_size, 1), Form::kChunkwise, 3, a, ws, la);
  model.forward(random_tokens(1, 9, c.vocab_size, 2), Form::kChunkwise, 3, b, ws, lb);
  auto both = ModelState<double>::concatenate({a, b});
  EXPECT_EQ(both.positions, (std::vector<int64_t>{5, 9}));
  Matrix<double> batched, single_a, single_b;
  model.step({3, 4}, both, ws, batched);  // sequences at different positions in one batch
  model.step({3}, a, ws, single_a);
  model.step({4}, b, ws, single_b);
  EXPECT_LE(relative_error(Matrix<double>(batched.row(0)), single_a), 1e-12);
  EXPECT_LE(relative_error(Matrix<double>(batched.row(1)), single_b), 1e-12);
  EXPECT_EQ(both.select(1).positions, std::vector<int64_t>{10});
}

// The deferred fold (RetNetModel::defer_fold) decodes what the plain recurrence decodes: the
// same logits to rounding (double, bound 1e-12; measured about 1e-15) for 40 steps, so across
// folds, and the same state once folded; a chunkwise segment after it folds first.
TEST(DeferredFold, DecodesAsThePlainRecurrence) {
  ModelConfig fla = variants()[0].config;  // plain retention: no column of ones in the state
  fla.family = Family::kFla, fla.heads = 4, fla.value_embed_dim = 32, fla.head_norm_weight = true;
  for (const ModelConfig& c : {variants()[0].config, variants()[2].config, fla}) {
    SCOPED_TRACE(std::string(family_name(c.family)) + " heads " + std::to_string(c.heads));
    RetNetModel<double> model(c, ModelWeights<double>::random(c, 6));
    Workspace<double> ws;
    Matrix<double> logits;
    auto plain = model.new_state(2);
    model.forward(random_tokens(2, 7, c.vocab_size, 3), Form::kChunkwise, 4, plain, ws, logits);
    for (Index pairs : {2, 5, 16}) {
      SCOPED_TRACE("pairs " + std::to_string(pairs));
      auto deferred = plain;
      model.defer_fold(deferred, pairs);
      auto reference = plain;
      EXPECT_LE(relative_error(decode_greedy_logits(model, deferred, {1, 2}, 40),
                               decode_greedy_logits(model, reference, {1, 2}, 40)),
                1e-12);
      ASSERT_TRUE(deferred.defers_fold());
      EXPECT_EQ(deferred.pending[0].count, (std::vector<Index>(2, 40 % pairs)));
      EXPECT_EQ(deferred.positions, reference.positions);
      const auto folded = deferred.folded();
      EXPECT_FALSE(folded.defers_fold());
      for (size_t l = 0; l < folded.layers.size(); ++l)
        EXPECT_LE(relative_error(folded.layers[l], reference.layers[l]), 1e-12);
      const auto next = random_tokens(2, 9, c.vocab_size, 4);
      Matrix<double> a, b;
      model.forward(next, Form::kChunkwise, 4, deferred, ws, a);
      model.forward(next, Form::kChunkwise, 4, reference, ws, b);
      EXPECT_TRUE(deferred.pending[0].empty());
      EXPECT_LE(relative_error(a, b), 1e-12);
    }
  }
}

// Entries with different numbers of pending pairs travel with them through select, concatenate
// and copy_entry; a state file holds the folded state.
TEST(DeferredFold, PendingPairsTravelWithTheirEntry) {
  ModelConfig c = variants()[0].config;
  RetNetModel<double> model(c, ModelWeights<double>::random(c, 4));
  Workspace<double> ws;
  auto a = model.new_state(1), b = model.new_state(1);
  model.defer_fold(a, 4);
  model.defer_fold(b, 4);
  decode_greedy_logits(model, a, {1}, 5);
  decode_greedy_logits(model, b, {2}, 7);
  ASSERT_EQ(a.pending[0].count[0], 1);
  ASSERT_EQ(b.pending[0].count[0], 3);
  auto both = ModelState<double>::concatenate({a, b});
  ASSERT_TRUE(both.defers_fold());
  EXPECT_EQ(both.pending[0].count, (std::vector<Index>{1, 3}));
  Matrix<double> batched, single_a, single_b;
  for (int32_t t : {3, 5, 8}) {  // entry b folds at the first step, a at the third
    model.step({t, t + 1}, both, ws, batched);
    model.step({t}, a, ws, single_a);
    model.step({t + 1}, b, ws, single_b);
    EXPECT_LE(relative_error(Matrix<double>(batched.row(0)), single_a), 1e-12);
    EXPECT_LE(relative_error(Matrix<double>(batched.row(1)), single_b), 1e-12);
  }
  const auto second = both.select(1);
  EXPECT_EQ(second.pending[0].count, std::vector<Index>{2});
  auto mixed = ModelState<double>::concatenate({a, model.new_state(1)});  // one plain part
  EXPECT_FALSE(mixed.defers_fold());
  ModelState<double>::copy_entry(second, 0, both, 0);
  EXPECT_EQ(both.pending[0].count, (std::vector<Index>{2, 2}));
  EXPECT_THROW(ModelState<double>::copy_entry(second, 0, mixed, 1), InvalidArgument);

  std::stringstream deferred_file, folded_file;
  retnet::save_state(deferred_file, b, model.fingerprint());
  retnet::save_state(folded_file, b.folded(), model.fingerprint());
  EXPECT_EQ(deferred_file.str(), folded_file.str());
}

TEST(ModelArguments, RejectsBadTokensAndStates) {
  ModelConfig c = variants()[0].config;
  RetNetModel<float> model(c, ModelWeights<float>::random(c, 3));
  Workspace<float> ws;
  TokenMatrix bad(1, 2);
  bad << 1, 53;
  EXPECT_THROW(model.forward(bad, Form::kParallel), InvalidArgument);
  auto state = model.new_state(2);
  Matrix<float> logits;
  EXPECT_THROW(model.forward(random_tokens(1, 3, 53, 1), Form::kChunkwise, 2, state, ws, logits),
               InvalidArgument);
  auto used = model.new_state(1);
  model.forward(random_tokens(1, 3, 53, 1), Form::kChunkwise, 2, used, ws, logits);
  EXPECT_THROW(model.forward(random_tokens(1, 3, 53, 1), Form::kParallel, 2, used, ws, logits),
               InvalidArgument);
}

// One sequence with segments longer than 16 rows writes its logits straight into the output
// (no copy); the recurrent form goes through the per-segment path. Both must agree.
TEST(RandomModels, DirectLogitsPathAgreesWithTheSegmentPath) {
  ModelConfig c = variants()[0].config;
  RetNetModel<double> model(c, ModelWeights<double>::random(c, 12));
  const auto tokens = random_tokens(1, 45, c.vocab_size, 6);
  const auto recurrent = model.forward(tokens, Form::kRecurrent);
  EXPECT_LE(relative_error(model.forward(tokens, Form::kParallel), recurrent), 1e-10);
  EXPECT_LE(relative_error(model.forward(tokens, Form::kChunkwise, 20), recurrent), 1e-10);
}

// Sizes from user input are checked against the machine's memory before anything is allocated.
TEST(ModelArguments, RefusesSizesBeyondMemoryBeforeAllocating) {
  ModelConfig c = variants()[0].config;
  RetNetModel<float> model(c, ModelWeights<float>::random(c, 3));
  try {
    model.new_state(Index(1) << 40);
    FAIL() << "a state of batch 2^40 was allocated";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("a state of batch 1099511627776 needs"), std::string::npos)
        << e.what();
  }
  ModelConfig huge = c;
  huge.layers = 4000, huge.embed_dim = 1 << 16, huge.value_embed_dim = 1 << 16;
  huge.ffn_dim = 1 << 16;  // about 200 TB of weights
  try {
    ModelWeights<float>::random(huge, 1);
    FAIL() << "200 TB of weights were allocated";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the weights of this config needs"), std::string::npos)
        << e.what();
  }
}

// kLast with no tokens has no last position: refused instead of returning unwritten logits.
TEST(ModelArguments, LastLogitsOfNoTokensAreRefused) {
  ModelConfig c = variants()[0].config;
  RetNetModel<float> model(c, ModelWeights<float>::random(c, 3));
  auto state = model.new_state(1);
  Workspace<float> ws;
  Matrix<float> logits;
  EXPECT_THROW(
      model.forward(TokenMatrix(1, 0), Form::kChunkwise, 4, state, ws, logits, LogitsMode::kLast),
      InvalidArgument);
  model.forward(TokenMatrix(1, 0), Form::kChunkwise, 4, state, ws, logits, LogitsMode::kAll);
  EXPECT_EQ(logits.rows(), 0);
}
