// The published checkpoint families (docs/FORMATS.md#published-checkpoint-families): fla and
// syncdoth fixtures made by each project's own code, NumPy-reference fixtures of the variants
// (scripts/fixtures/make_family_fixtures.py), the three forms on random models of every family,
// dtypes and shards, and the one-line refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "expect_error.hpp"
#include "npy.hpp"
#include "retention_reference.hpp"
#include "retnet/retnet.hpp"
#include "temp_dir.hpp"

using namespace retnet;
using nlohmann::json;
using retnet::testing::expect_error;
using retnet::testing::relative_error;
using retnet::testing::TempDir;

namespace {

const std::string kData = std::string(RETNET_TEST_DATA_DIR);

TokenMatrix load_tokens(const std::string& path) {
  const auto a = load_npy(path);
  const auto ids = a.as<int32_t>();
  return Eigen::Map<const TokenMatrix>(ids.data(), a.shape[0], a.shape[1]);
}

/// [batch, time, vocab] as [batch·time, vocab].
template <typename Scalar>
Matrix<Scalar> load_logits(const std::string& path) {
  const auto a = load_npy(path);
  const auto v = a.as<double>();
  const Matrix<double> m =
      Eigen::Map<const Matrix<double>>(v.data(), a.shape[0] * a.shape[1], a.shape[2]);
  return m.cast<Scalar>();
}

TokenMatrix random_tokens(Index batch, Index time, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TokenMatrix t(batch, time);
  for (Index i = 0; i < t.size(); ++i) t.data()[i] = static_cast<int32_t>(rng() % vocab);
  return t;
}

/// Every form and chunk size (1, 7, 64, whole) against `expected`.
template <typename Scalar>
void expect_every_form(const RetNetModel<Scalar>& model, const TokenMatrix& tokens,
                       const Matrix<Scalar>& expected, double tol) {
  EXPECT_LE(relative_error(model.forward(tokens, Form::kParallel), expected), tol) << "parallel";
  EXPECT_LE(relative_error(model.forward(tokens, Form::kRecurrent), expected), tol) << "recurrent";
  for (Index chunk : {Index(1), Index(7), Index(64), tokens.cols()})
    EXPECT_LE(relative_error(model.forward(tokens, Form::kChunkwise, chunk), expected), tol)
        << "chunkwise, chunk " << chunk;
}

}  // namespace

// --- fixtures from each project's own code (../shared/fixtures, copied into tests/data) ---

TEST(FlaFixture, DetectedAsFla) {
  const auto model = load_model<float>(kData + "/fla-tiny");
  const ModelConfig& c = model.config();
  EXPECT_EQ(c.family, Family::kFla);
  EXPECT_EQ(c.embed_dim, 64);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.key_head_dim(), 16);
  EXPECT_EQ(c.value_head_dim(), 32);
  EXPECT_EQ(c.ffn_dim, 256);  // intermediate_size null: 256 · ceil(int(64 · 2 · 2/3) / 256)
  EXPECT_FALSE(c.fused_gate_up);
  EXPECT_TRUE(c.head_norm_weight);
}

TEST(FlaFixture, EveryFormMatchesFlaLogits) {
  const auto model = load_model<float>(kData + "/fla-tiny");
  expect_every_form(model, load_tokens(kData + "/fla-tiny/tokens.npy"),
                    load_logits<float>(kData + "/fla-tiny/logits.npy"), 1e-5);
}

TEST(FlaFixture, LongSequenceMatchesFlaChunkedKernel) {
  const auto model = load_model<float>(kData + "/fla-tiny");
  const auto tokens = load_tokens(kData + "/fla-tiny/tokens_long.npy");
  ASSERT_EQ(tokens.cols(), 150);
  expect_every_form(model, tokens, load_logits<float>(kData + "/fla-tiny/logits_long.npy"), 1e-5);
}

TEST(SyncdothFixture, DetectedAsSyncdoth) {
  const auto model = load_model<float>(kData + "/syncdoth-tiny");
  EXPECT_EQ(model.config().family, Family::kSyncdoth);
  EXPECT_TRUE(model.config().scale_embedding);
  EXPECT_TRUE(model.config().layernorm_embedding);
}

TEST(SyncdothFixture, EveryFormMatchesParallelAndRecurrentLogits) {
  const auto model = load_model<float>(kData + "/syncdoth-tiny");
  const auto tokens = load_tokens(kData + "/syncdoth-tiny/tokens.npy");
  {
    SCOPED_TRACE("syncdoth parallel");
    expect_every_form(model, tokens, load_logits<float>(kData + "/syncdoth-tiny/logits.npy"), 1e-5);
  }
  {
    SCOPED_TRACE("syncdoth recurrent");
    expect_every_form(model, tokens,
                      load_logits<float>(kData + "/syncdoth-tiny/logits_recurrent.npy"), 1e-5);
  }
}

// --- NumPy-reference fixtures of the variants (scripts/fixtures/make_family_fixtures.py) ---

class FamilyVariantFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyVariantFixture, EveryFormMatchesTheNumPyReference) {
  const std::string dir = kData + "/families/" + GetParam();
  const auto tokens = load_tokens(dir + "/tokens.npy");
  expect_every_form(load_model<double>(dir), tokens, load_logits<double>(dir + "/logits.npy"),
                    1e-6);
  expect_every_form(load_model<float>(dir), tokens, load_logits<float>(dir + "/logits.npy"), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Variants, FamilyVariantFixture,
                         ::testing::Values("fla-fused-bf16", "fla-grouped-heads",
                                           "fla-no-norm-weight-no-gate", "syncdoth-lm-decay"));

// --- random models of every family: the three forms agree, and hand a state on ---

struct FamilyVariant {
  std::string name;
  ModelConfig config;
};

std::vector<FamilyVariant> family_variants() {
  ModelConfig ts;
  ts.vocab_size = 53, ts.embed_dim = 16, ts.value_embed_dim = 24, ts.heads = 2;
  ts.ffn_dim = 20, ts.layers = 2, ts.chunk_size = 5, ts.activation = Activation::kSwish;
  ModelConfig sd = ts;
  sd.family = Family::kSyncdoth, sd.heads = 4, sd.value_embed_dim = 32, sd.lm_decay = true;
  sd.scale_embedding = true, sd.layernorm_embedding = true;
  ModelConfig fla = ts;
  fla.family = Family::kFla, fla.heads = 4, fla.value_embed_dim = 32, fla.head_norm_weight = true;
  std::vector<FamilyVariant> v;
  v.push_back({"torchscale", ts});
  v.push_back({"syncdoth_lm_decay", sd});
  v.push_back({"fla_split_mlp", fla});
  v.push_back({"fla_fused_mlp_tied", fla});
  v.back().config.fused_gate_up = true, v.back().config.tie_embeddings = true;
  v.push_back({"fla_grouped_heads_expand_k", fla});
  v.back().config.kv_heads = 2, v.back().config.key_embed_dim = 32;
  v.push_back({"fla_no_norm_weight_no_gate", fla});
  v.back().config.head_norm_weight = false, v.back().config.output_gate = false;
  v.push_back({"fla_one_kv_head", fla});
  v.back().config.kv_heads = 1;
  return v;
}

template <typename Scalar>
void expect_forms_agree(const ModelConfig& config, double tol) {
  const RetNetModel<Scalar> model(config, ModelWeights<Scalar>::random(config, 5));
  for (auto [batch, time] : {std::pair<Index, Index>{1, 1}, {3, 13}, {2, 40}}) {
    SCOPED_TRACE("batch " + std::to_string(batch) + " time " + std::to_string(time));
    const auto tokens = random_tokens(batch, time, config.vocab_size, 17 + time);
    const auto parallel = model.forward(tokens, Form::kParallel);
    EXPECT_LE(relative_error(model.forward(tokens, Form::kRecurrent), parallel), tol);
    for (Index chunk : {Index(1), Index(7), Index(64), time}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      EXPECT_LE(relative_error(model.forward(tokens, Form::kChunkwise, chunk), parallel), tol);
    }
  }
}

TEST(FamilyModels, ThreeFormsAgreeInDouble) {
  for (const auto& v : family_variants()) {
    SCOPED_TRACE(v.name);
    expect_forms_agree<double>(v.config, 1e-10);
  }
}

TEST(FamilyModels, ThreeFormsAgreeInFloat) {
  for (const auto& v : family_variants()) {
    SCOPED_TRACE(v.name);
    expect_forms_agree<float>(v.config, 1e-5);
  }
}

// A prompt read by one form continues in another: the parallel, chunkwise or recurrent prefix,
// then chunkwise and recurrent continuations, equal one uninterrupted recurrent pass.
TEST(FamilyModels, APromptReadByOneFormContinuesInAnother) {
  for (const auto& v : family_variants()) {
    SCOPED_TRACE(v.name);
    const RetNetModel<double> model(v.config, ModelWeights<double>::random(v.config, 8));
    const auto tokens = random_tokens(2, 31, v.config.vocab_size, 3);
    const Index split = 12;
    const auto whole = model.forward(tokens, Form::kRecurrent);
    for (Form first : {Form::kParallel, Form::kChunkwise, Form::kRecurrent})
      for (Form second : {Form::kChunkwise, Form::kRecurrent}) {
        SCOPED_TRACE(std::string(form_name(first)) + " then " + form_name(second));
        auto state = model.new_state(2);
        Workspace<double> ws;
        Matrix<double> head, tail;
        model.forward(tokens.leftCols(split), first, 5, state, ws, head);
        model.forward(tokens.rightCols(tokens.cols() - split), second, 6, state, ws, tail);
        for (Index b = 0; b < 2; ++b) {
          EXPECT_LE(relative_error(Matrix<double>(head.middleRows(b * split, split)),
                                   Matrix<double>(whole.middleRows(b * 31, split))),
                    1e-10);
          EXPECT_LE(relative_error(Matrix<double>(tail.middleRows(b * (31 - split), 31 - split)),
                                   Matrix<double>(whole.middleRows(b * 31 + split, 31 - split))),
                    1e-10);
        }
      }
  }
}

// --- saved in each family's naming, in F32, F16 and BF16, single file or shards ---

namespace {

/// Writes `weights` as a checkpoint of the config's family: torchscale names without prefix,
/// syncdoth and fla under "model." with lm_head.weight beside it; one file, or `shards` files
/// and an index. Values are stored as `dtype` (the caller rounds them first for exact tests).
void save_checkpoint(const std::string& dir, const ModelConfig& c, const ModelWeights<float>& w,
                     DType dtype, int shards) {
  std::vector<Matrix<float>> rows;
  rows.reserve(256);
  std::vector<SavedTensor> saved;
  const std::string prefix = c.family == Family::kTorchscale ? "" : "model.";
  w.visit(c, [&](const std::string& name, const auto& t, const std::vector<int64_t>& shape) {
    if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value)
      rows.push_back(t.to_matrix());
    else
      rows.push_back(Eigen::Map<const Matrix<float>>(t.data(), t.rows(), t.cols()));
    std::string stored = name;
    if (name == "output_projection.weight" && c.family == Family::kSyncdoth)
      stored = "lm_head.weight";
    else if (name.rfind("lm_head.", 0) != 0)
      stored = prefix + name;
    saved.push_back({stored, dtype, shape, rows.back().data()});
  });
  std::ofstream(dir + "/config.json") << c.to_json().dump(2);
  if (shards == 1) {
    save_safetensors(dir + "/model.safetensors", saved);
    return;
  }
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  for (int s = 0; s < shards; ++s) {
    const std::string file =
        "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
    std::vector<SavedTensor> part;
    for (size_t i = s; i < saved.size(); i += shards) {
      part.push_back(saved[i]);
      index["weight_map"][saved[i].name] = file;
    }
    save_safetensors(dir + "/" + file, part);
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);
}

/// Rounds every weight to the nearest value of `dtype`.
void round_to(ModelWeights<float>& w, const ModelConfig& c, DType dtype) {
  auto round = [&](float x) {
    if (dtype == DType::BF16) return bf16_to_float(float_to_bf16(x));
    if (dtype == DType::F16) return half_to_float(float_to_half(x));
    return x;
  };
  w.visit(c, [&](const std::string&, auto& t, const std::vector<int64_t>&) {
    if constexpr (is_linear_weight<std::decay_t<decltype(t)>>::value) {
      Matrix<float> m = t.to_matrix();
      m = m.unaryExpr(round);
      t = LinearWeight<float>(m);
    } else {
      t = t.unaryExpr(round);
    }
  });
}

}  // namespace

TEST(FamilyCheckpoints, EveryFamilyLoadsFromEveryDtypeAndFromShards) {
  for (const auto& v : family_variants())
    for (DType dtype : {DType::F32, DType::F16, DType::BF16})
      for (int shards : {1, 3}) {
        SCOPED_TRACE(v.name + " " + dtype_name(dtype) + " shards " + std::to_string(shards));
        auto weights = ModelWeights<float>::random(v.config, 21);
        round_to(weights, v.config, dtype);
        TempDir dir;
        save_checkpoint(dir.str(), v.config, weights, dtype, shards);
        const auto loaded = load_model<float>(dir.str());
        EXPECT_EQ(loaded.config().family, v.config.family);
        EXPECT_EQ(loaded.config().fused_gate_up, v.config.fused_gate_up);
        const RetNetModel<float> reference(v.config, std::move(weights));
        const auto tokens = random_tokens(2, 9, v.config.vocab_size, 4);
        EXPECT_EQ(loaded.forward(tokens, Form::kChunkwise, 4),
                  reference.forward(tokens, Form::kChunkwise, 4));
      }
}

// --- refusals: one line, naming what is not supported ---

namespace {

json read_json(const std::string& path) {
  return json::parse(std::ifstream(path));
}

/// A copy of fixture `name` in a temporary folder, with `edit` applied to its config.json.
template <typename Edit>
void with_config(const TempDir& dir, const std::string& name, Edit&& edit) {
  namespace fs = std::filesystem;
  for (const auto& f : fs::directory_iterator(kData + "/" + name))
    fs::copy_file(f.path(), dir.file(f.path().filename().string()));
  json c = read_json(dir.file("config.json"));
  edit(c);
  std::ofstream(dir.file("config.json")) << c.dump();
}

void expect_refused(const std::string& fixture, const std::function<void(json&)>& edit,
                    const std::vector<std::string>& snippets) {
  TempDir dir;
  with_config(dir, fixture, edit);
  const std::string message =
      expect_error<FormatError>([&] { load_model<float>(dir.str()); }, snippets);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

}  // namespace

TEST(FamilyRefusals, FlaSettingsThatAreNotSupported) {
  expect_refused("fla-tiny", [](json& c) { c["feature_map"] = "elu"; }, {"fla", "feature_map"});
  expect_refused("fla-tiny", [](json& c) { c["use_short_conv"] = true; },
                 {"fla", "use_short_conv"});
  expect_refused("fla-tiny",
                 [](json& c) {
                   c["attn"] = {{"layers", {1}}, {"num_heads", 4}};
                 },
                 {"fla", "hybrid attention", "attn"});
  expect_refused("fla-tiny", [](json& c) { c["attnres_block_size"] = 4; }, {"attnres_block_size"});
  expect_refused("fla-tiny", [](json& c) { c["hidden_act"] = "relu"; }, {"hidden_act", "relu"});
}

TEST(FamilyRefusals, SyncdothSettingsThatAreNotSupported) {
  expect_refused("syncdoth-tiny", [](json& c) { c["deepnorm"] = true; }, {"syncdoth", "deepnorm"});
  expect_refused("syncdoth-tiny", [](json& c) { c["decoder_normalize_before"] = false; },
                 {"syncdoth", "post-norm"});
  expect_refused("syncdoth-tiny", [](json& c) { c["tensor_parallel"] = true; },
                 {"tensor_parallel"});
  // The stored decay buffer says the model was made without use_lm_decay.
  expect_refused("syncdoth-tiny", [](json& c) { c["use_lm_decay"] = true; },
                 {"retnet_rel_pos.decay", "use_lm_decay true"});
}

TEST(FamilyRefusals, SyncdothDecayProjAndOldLayout) {
  const ModelConfig c = family_variants()[1].config;
  auto weights = ModelWeights<float>::random(c, 2);
  {
    TempDir dir;
    save_checkpoint(dir.str(), c, weights, DType::F32, 1);
    // Append a decay_proj tensor as a second shard.
    const std::vector<float> zeros(16, 0.0f);
    save_safetensors(
        dir.file("extra.safetensors"),
        {{"model.layers.0.retention.decay_proj.weight", DType::F32, {4, 4}, zeros.data()}});
    json index = {{"weight_map", json::object()}};
    SafetensorsFile main(dir.file("model.safetensors"));
    for (const auto& t : main.tensors()) index["weight_map"][t.name] = "model.safetensors";
    index["weight_map"]["model.layers.0.retention.decay_proj.weight"] = "extra.safetensors";
    std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();
    expect_error<FormatError>([&] { load_model<float>(dir.str()); },
                              {"decay_proj", "not supported"});
  }
  {
    TempDir dir;
    const std::vector<float> values(64 * 4, 0.5f);
    save_safetensors(dir.file("model.safetensors"),
                     {{"model.embed_tokens.weight", DType::F32, {4, 64}, values.data()},
                      {"model.blocks.0.msr.qkv.weight", DType::F32, {4, 64}, values.data()}});
    std::ofstream(dir.file("config.json")) << R"({"vocab_size": 4, "hidden_size": 64})";
    expect_error<FormatError>([&] { load_model<float>(dir.str()); },
                              {"model.blocks.0.msr.qkv.weight", "September 2023", "not supported"});
  }
}

TEST(FamilyRefusals, MixedFamilyFolders) {
  {  // an fla config beside torchscale-named tensors
    TempDir dir;
    with_config(dir, "syncdoth-tiny", [](json&) {});
    std::filesystem::copy_file(kData + "/fla-tiny/config.json", dir.file("config.json"),
                               std::filesystem::copy_options::overwrite_existing);
    expect_error<FormatError>([&] { load_model<float>(dir.str()); },
                              {"mixes checkpoint families", "fla's (hidden_size, num_heads)",
                               "syncdoth's (model.embed_tokens.weight)"});
  }
  {  // a syncdoth config beside fla tensors
    TempDir dir;
    with_config(dir, "fla-tiny", [](json&) {});
    std::filesystem::copy_file(kData + "/syncdoth-tiny/config.json", dir.file("config.json"),
                               std::filesystem::copy_options::overwrite_existing);
    expect_error<FormatError>([&] { load_model<float>(dir.str()); },
                              {"mixes checkpoint families", "fla's (model.embeddings.weight)"});
  }
  {  // a config with the keys of both
    expect_refused("fla-tiny", [](json& c) { c["decoder_embed_dim"] = 64; },
                   {"mixes checkpoint families", "decoder_embed_dim", "hidden_size"});
  }
  {  // shards of both families in one folder
    TempDir dir;
    with_config(dir, "fla-tiny", [](json&) {});
    const std::vector<float> values(97 * 64, 0.5f);
    save_safetensors(dir.file("other.safetensors"),
                     {{"model.embed_tokens.weight", DType::F32, {97, 64}, values.data()}});
    json index = {{"weight_map", json::object()}};
    for (const char* f : {"model.safetensors", "other.safetensors"}) {
      const SafetensorsFile file(dir.file(f));
      for (const auto& t : file.tensors()) index["weight_map"][t.name] = f;
    }
    std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();
    expect_error<FormatError>(
        [&] { load_model<float>(dir.str()); },
        {"mixes checkpoint families", "model.embeddings.weight", "model.embed_tokens.weight"});
  }
}

// --- config keys of each family ---

TEST(FamilyConfig, FlaSizesFollowItsKeys) {
  json j = read_json(kData + "/fla-tiny/config.json");
  j["hidden_size"] = 512;
  ModelConfig c = retnet::read_config_json(j);
  EXPECT_EQ(c.family, Family::kFla);
  EXPECT_EQ(c.ffn_dim, 768);  // 256 · ceil(int(512 · 2 · 2/3) / 256)
  EXPECT_EQ(c.value_embed_dim, 1024);
  EXPECT_EQ(c.key_head_dim(), 128);
  j["hidden_ratio"] = nullptr;  // fla's GatedMLP then takes 4
  EXPECT_EQ(retnet::read_config_json(j).ffn_dim, 1536);
  j.erase("hidden_ratio");  // RetNetConfig's default, 2
  EXPECT_EQ(retnet::read_config_json(j).ffn_dim, 768);
  j["intermediate_size"] = 1000;
  EXPECT_EQ(retnet::read_config_json(j).ffn_dim, 1000);
  j["expand_k"] = 0.5, j["num_kv_heads"] = 2;
  c = retnet::read_config_json(j);
  EXPECT_EQ(c.key_dim(), 256);
  EXPECT_EQ(c.key_head_dim(), 64);
  EXPECT_EQ(c.key_value_heads(), 2);
  j.erase("norm_eps");
  j["rms_norm_eps"] = 1e-5;
  EXPECT_DOUBLE_EQ(retnet::read_config_json(j).eps, 1e-5);
  j["num_kv_heads"] = 3;
  expect_error<FormatError>([&] { retnet::read_config_json(j); },
                            {"num_heads 4", "not a multiple of num_kv_heads 3"});
  // to_json writes an fla config that reads back to the same values.
  c = retnet::read_config_json(read_json(kData + "/fla-tiny/config.json"));
  EXPECT_EQ(retnet::read_config_json(c.to_json()).to_json(), c.to_json());
}

TEST(FamilyConfig, TorchscaleAndSyncdothKeys) {
  json j = read_json(kData + "/torchscale-tiny/config.json");
  EXPECT_EQ(retnet::read_config_json(j).family, Family::kTorchscale);
  j["use_lm_decay"] = true;
  EXPECT_TRUE(retnet::read_config_json(j).lm_decay);
  const ModelConfig s = retnet::read_config_json(read_json(kData + "/syncdoth-tiny/config.json"));
  EXPECT_EQ(s.family, Family::kSyncdoth);
  EXPECT_EQ(retnet::read_config_json(s.to_json()).to_json(), s.to_json());
  const auto decays = lm_decays<double>(4);
  EXPECT_DOUBLE_EQ(decays[0], 1 - std::pow(2.0, -5));
  EXPECT_DOUBLE_EQ(decays[3], 1 - std::pow(2.0, -9));
  EXPECT_DOUBLE_EQ(lm_decays<double>(1)[0], 1 - std::pow(2.0, -5));
}
