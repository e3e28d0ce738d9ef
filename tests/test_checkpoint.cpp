// Tests of CheckpointReader: the torchscale fixture, sharded checkpoints, prefix detection
// and one test per malformed checkpoint.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "fifo.hpp"
#include "retnet/core/error.hpp"
#include "retnet/io/checkpoint.hpp"
#include "retnet/io/config_json.hpp"
#include "retnet/io/safetensors.hpp"
#include "retnet/io/safetensors_writer.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using retnet::CheckpointReader;
using retnet::DType;
using retnet::FormatError;
using retnet::SavedTensor;
using Shape = std::vector<int64_t>;

namespace {

using retnet::testing::expect_error;
using retnet::testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Tensors of a tiny model (d = 4, Dv = 8, F = 6, vocab = 5, one layer), logical names.
std::map<std::string, Shape> tiny_model() {
  return {{"embed_tokens.weight", {5, 4}},
          {"layers.0.retention_layer_norm.weight", {4}},
          {"layers.0.retention.q_proj.weight", {4, 4}},
          {"layers.0.retention.k_proj.weight", {4, 4}},
          {"layers.0.retention.v_proj.weight", {8, 4}},
          {"layers.0.retention.g_proj.weight", {8, 4}},
          {"layers.0.retention.out_proj.weight", {4, 8}},
          {"layers.0.final_layer_norm.weight", {4}},
          {"layers.0.ffn.fc1.weight", {6, 4}},
          {"layers.0.ffn.gate.weight", {6, 4}},
          {"layers.0.ffn.fc2.weight", {4, 6}},
          {"layer_norm.weight", {4}}};
}

// Writes `tensors` (physical name -> shape) to `path`. Element i of tensor t holds
// 100 * (index of t) + i so that every value identifies where it came from.
void write_tensors(const std::string& path, const std::map<std::string, Shape>& tensors,
                   DType dtype = DType::F32) {
  std::vector<std::vector<float>> storage;
  std::vector<SavedTensor> saved;
  int k = 0;
  for (const auto& [name, shape] : tensors) {
    std::vector<float> v(static_cast<size_t>(numel(shape)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(100 * k + i);
    storage.push_back(std::move(v));
    saved.push_back({name, dtype, shape, nullptr});
    ++k;
  }
  for (size_t i = 0; i < saved.size(); ++i) saved[i].data = storage[i].data();
  retnet::save_safetensors(path, saved);
}

std::map<std::string, Shape> with_prefix(const std::string& prefix,
                                         const std::map<std::string, Shape>& logical) {
  std::map<std::string, Shape> out;
  for (const auto& [name, shape] : logical) out[prefix + name] = shape;
  return out;
}

// Reads every tensor of tiny_model() through `reader`, as float and double.
void read_tiny_model(CheckpointReader& reader) {
  for (const auto& [name, shape] : tiny_model()) {
    ASSERT_TRUE(reader.has(name)) << name;
    std::vector<float> f(static_cast<size_t>(numel(shape)));
    std::vector<double> d(f.size());
    reader.read(name, shape, f.data());
    reader.read(name, shape, d.data());
    for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(static_cast<double>(f[i]), d[i]);
  }
}

}  // namespace

TEST(Checkpoint, ReadsTorchscaleFixture) {
  const std::string dir = std::string(RETNET_TEST_DATA_DIR) + "/torchscale-tiny";
  const retnet::ModelConfig c = retnet::load_config_json(dir + "/config.json");
  CheckpointReader reader(dir);
  EXPECT_EQ(reader.prefix(), "");
  EXPECT_EQ(reader.shards().size(), 1u);
  EXPECT_EQ(reader.total_bytes(), reader.shards()[0].data_size());
  EXPECT_EQ(reader.total_bytes(), 462944u - 8u - 2392u);

  const int64_t d = c.embed_dim, dv = c.value_embed_dim, f = c.ffn_dim, v = c.vocab_size;
  std::vector<std::pair<std::string, Shape>> expected = {{"embed_tokens.weight", {v, d}},
                                                         {"layer_norm.weight", {d}},
                                                         {"output_projection.weight", {v, d}}};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    expected.push_back({p + "retention_layer_norm.weight", {d}});
    expected.push_back({p + "retention.q_proj.weight", {d, d}});
    expected.push_back({p + "retention.k_proj.weight", {d, d}});
    expected.push_back({p + "retention.v_proj.weight", {dv, d}});
    expected.push_back({p + "retention.g_proj.weight", {dv, d}});
    expected.push_back({p + "retention.out_proj.weight", {d, dv}});
    expected.push_back({p + "final_layer_norm.weight", {d}});
    expected.push_back({p + "ffn.fc1.weight", {f, d}});
    expected.push_back({p + "ffn.gate.weight", {f, d}});
    expected.push_back({p + "ffn.fc2.weight", {d, f}});
  }
  EXPECT_FALSE(reader.has("layers.2.ffn.fc1.weight"));
  EXPECT_THROW(reader.check_all_consumed(), FormatError);  // nothing read yet
  for (const auto& [name, shape] : expected) {
    ASSERT_TRUE(reader.has(name)) << name;
    EXPECT_EQ(reader.info(name).shape, shape) << name;
    std::vector<float> data(static_cast<size_t>(numel(shape)));
    reader.read(name, shape, data.data());
  }
  EXPECT_NO_THROW(reader.check_all_consumed());
}

TEST(Checkpoint, ReadsValuesOfTheRightTensor) {
  TempDir dir;
  write_tensors(dir.file("model.safetensors"), tiny_model(), DType::BF16);
  CheckpointReader reader(dir.str());
  // tiny_model() is sorted by name; embed_tokens.weight is the first, layer_norm the second.
  std::vector<float> e(20), n(4);
  reader.read("embed_tokens.weight", {5, 4}, e.data());
  reader.read("layer_norm.weight", {4}, n.data());
  for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(e[i], static_cast<float>(i));
  for (size_t i = 0; i < n.size(); ++i) EXPECT_EQ(n[i], static_cast<float>(100 + i));
  EXPECT_EQ(reader.info("embed_tokens.weight").dtype, DType::BF16);
}

TEST(Checkpoint, DetectsTorchscalePrefix) {
  TempDir dir;
  auto tensors = tiny_model();
  tensors["output_projection.weight"] = {5, 4};
  write_tensors(dir.file("model.safetensors"), tensors);
  CheckpointReader reader(dir.str());
  EXPECT_EQ(reader.prefix(), "");
  read_tiny_model(reader);
  ASSERT_TRUE(reader.has("output_projection.weight"));
  std::vector<float> out(20);
  reader.read("output_projection.weight", {5, 4}, out.data());
  EXPECT_NO_THROW(reader.check_all_consumed());
}

TEST(Checkpoint, DetectsFairseqPrefix) {
  TempDir dir;
  auto tensors = with_prefix("decoder.", tiny_model());
  tensors["decoder.output_projection.weight"] = {5, 4};
  write_tensors(dir.file("model.safetensors"), tensors);
  CheckpointReader reader(dir.str());
  EXPECT_EQ(reader.prefix(), "decoder.");
  read_tiny_model(reader);
  EXPECT_EQ(reader.info("layers.0.ffn.fc2.weight").name, "decoder.layers.0.ffn.fc2.weight");
  ASSERT_TRUE(reader.has("output_projection.weight"));
  std::vector<float> out(20);
  reader.read("output_projection.weight", {5, 4}, out.data());
  EXPECT_NO_THROW(reader.check_all_consumed());
}

TEST(Checkpoint, DetectsHuggingFacePrefixWithLmHead) {
  TempDir dir;
  auto tensors = with_prefix("model.", tiny_model());
  tensors["lm_head.weight"] = {5, 4};
  write_tensors(dir.file("model.safetensors"), tensors);
  CheckpointReader reader(dir.str());
  EXPECT_EQ(reader.prefix(), "model.");
  read_tiny_model(reader);
  ASSERT_TRUE(reader.has("output_projection.weight"));
  EXPECT_EQ(reader.info("output_projection.weight").name, "lm_head.weight");
  EXPECT_FALSE(reader.has("lm_head.weight"));              // only reachable under its logical name
  EXPECT_THROW(reader.check_all_consumed(), FormatError);  // lm_head.weight not read yet
  std::vector<float> out(20);
  reader.read("output_projection.weight", {5, 4}, out.data());
  EXPECT_NO_THROW(reader.check_all_consumed());
}

TEST(Checkpoint, UnprefixedOutputProjectionWithHuggingFacePrefix) {
  TempDir dir;
  auto tensors = with_prefix("model.", tiny_model());
  tensors["output_projection.weight"] = {5, 4};
  write_tensors(dir.file("model.safetensors"), tensors);
  CheckpointReader reader(dir.str());
  EXPECT_TRUE(reader.has("output_projection.weight"));
  EXPECT_EQ(reader.info("output_projection.weight").name, "output_projection.weight");
}

TEST(Checkpoint, TiedEmbeddingsHaveNoOutputProjection) {
  TempDir dir;
  write_tensors(dir.file("model.safetensors"), with_prefix("model.", tiny_model()));
  CheckpointReader reader(dir.str());
  EXPECT_FALSE(reader.has("output_projection.weight"));
  read_tiny_model(reader);
  EXPECT_NO_THROW(reader.check_all_consumed());
}

TEST(Checkpoint, IgnoresRelPosBuffers) {
  TempDir dir;
  auto tensors = tiny_model();
  tensors["retnet_rel_pos.angle"] = {2};
  tensors["retnet_rel_pos.decay"] = {1};
  write_tensors(dir.file("model.safetensors"), tensors);
  CheckpointReader reader(dir.str());
  read_tiny_model(reader);
  EXPECT_NO_THROW(reader.check_all_consumed());
}

TEST(Checkpoint, ReadsShardedCheckpoint) {
  TempDir dir;
  std::map<std::string, Shape> first, second;
  int i = 0;
  for (const auto& [name, shape] : with_prefix("model.", tiny_model()))
    (i++ % 2 ? first : second)[name] = shape;
  second["lm_head.weight"] = {5, 4};
  write_tensors(dir.file("model-00001-of-00002.safetensors"), first, DType::F16);
  write_tensors(dir.file("model-00002-of-00002.safetensors"), second);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", {}}};
  for (const auto& [name, shape] : first)
    index["weight_map"][name] = "model-00001-of-00002.safetensors";
  for (const auto& [name, shape] : second)
    index["weight_map"][name] = "model-00002-of-00002.safetensors";
  write_text(dir.file("model.safetensors.index.json"), index.dump(2));

  CheckpointReader reader(dir.str());
  EXPECT_EQ(reader.shards().size(), 2u);
  EXPECT_EQ(reader.prefix(), "model.");
  EXPECT_EQ(reader.total_bytes(), reader.shards()[0].data_size() + reader.shards()[1].data_size());
  EXPECT_THROW(reader.check_all_consumed(), FormatError);
  read_tiny_model(reader);
  std::vector<float> out(20);
  reader.read("output_projection.weight", {5, 4}, out.data());
  EXPECT_NO_THROW(reader.check_all_consumed());
}

// ----------------------------------------------------------------------------------------
// Malformed checkpoints.

TEST(CheckpointBad, MissingTensor) {
  TempDir dir;
  write_tensors(dir.file("model.safetensors"), with_prefix("decoder.", tiny_model()));
  CheckpointReader reader(dir.str());
  EXPECT_FALSE(reader.has("layers.1.ffn.fc1.weight"));
  std::vector<float> out(24);
  expect_error<FormatError>(
      [&] {
        reader.read("layers.1.ffn.fc1.weight", {6, 4}, out.data());
      },
      {dir.str() + ": missing tensor decoder.layers.1.ffn.fc1.weight"});
  expect_error<FormatError>([&] { reader.info("layers.1.ffn.fc1.weight"); },
                            {dir.str(), "missing tensor decoder.layers.1.ffn.fc1.weight"});
}

TEST(CheckpointBad, UnexpectedTensor) {
  TempDir dir;
  auto tensors = tiny_model();
  tensors["layers.0.retention.extra.weight"] = {3};
  write_tensors(dir.file("model.safetensors"), tensors);
  CheckpointReader reader(dir.str());
  read_tiny_model(reader);
  expect_error<FormatError>(
      [&] { reader.check_all_consumed(); },
      {dir.file("model.safetensors"), "unexpected tensor layers.0.retention.extra.weight"});
}

TEST(CheckpointBad, WrongShape) {
  TempDir dir;
  write_tensors(dir.file("model.safetensors"), tiny_model());
  CheckpointReader reader(dir.str());
  std::vector<float> out(32);
  expect_error<FormatError>(
      [&] {
        reader.read("layers.0.retention.v_proj.weight", {4, 8}, out.data());
      },
      {dir.file("model.safetensors") +
       ": tensor layers.0.retention.v_proj.weight has shape [8, 4], expected [4, 8]"});
  // A failed read does not count as consumed.
  reader.read("layers.0.retention.v_proj.weight", {8, 4}, out.data());
}

TEST(CheckpointBad, MissingModelFile) {
  TempDir dir;
  expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                            {dir.file("model.safetensors"), "missing"});
}

TEST(CheckpointBad, NoEmbedTokens) {
  TempDir dir;
  auto tensors = tiny_model();
  tensors.erase("embed_tokens.weight");
  write_tensors(dir.file("model.safetensors"), tensors);
  expect_error<FormatError>(
      [&] { CheckpointReader reader(dir.str()); },
      {dir.str(), "missing the embedding tensor", ", embed_tokens.weight (torchscale)",
       "model.embed_tokens.weight (syncdoth)", "model.embeddings.weight (fla)"});
}

TEST(CheckpointBad, AmbiguousPrefix) {
  TempDir dir;
  auto tensors = tiny_model();
  tensors["model.embed_tokens.weight"] = {5, 4};
  write_tensors(dir.file("model.safetensors"), tensors);
  expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                            {dir.str(), "ambiguous tensor prefix", "model.embed_tokens.weight"});
}

TEST(CheckpointBad, CorruptShardHeader) {
  TempDir dir;
  write_text(dir.file("model.safetensors"), std::string("\x05\0\0\0\0\0\0\0[1,2]", 13));
  expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                            {dir.file("model.safetensors"), "not a JSON object"});
}

// Two valid shards, a.safetensors and b.safetensors; each test writes its own index.
void write_two_shards(const TempDir& dir) {
  write_tensors(dir.file("a.safetensors"), {{"embed_tokens.weight", {5, 4}}});
  write_tensors(dir.file("b.safetensors"), {{"layer_norm.weight", {4}}});
}

TEST(CheckpointBad, IndexNotJson) {
  TempDir dir;
  write_two_shards(dir);
  write_text(dir.file("model.safetensors.index.json"), "{\"weight_map\": {");
  expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                            {dir.file("model.safetensors.index.json"), "not valid JSON"});
}

TEST(CheckpointBad, IndexNotAnObject) {
  TempDir dir;
  write_two_shards(dir);
  write_text(dir.file("model.safetensors.index.json"), "[\"a.safetensors\"]");
  expect_error<FormatError>(
      [&] { CheckpointReader reader(dir.str()); },
      {dir.file("model.safetensors.index.json"), "expected a JSON object", "found array"});
}

TEST(CheckpointBad, IndexMissingWeightMap) {
  TempDir dir;
  write_two_shards(dir);
  write_text(dir.file("model.safetensors.index.json"), R"({"metadata": {}})");
  expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                            {dir.file("model.safetensors.index.json"), "missing \"weight_map\""});
}

TEST(CheckpointBad, IndexWeightMapNotAnObject) {
  TempDir dir;
  write_two_shards(dir);
  write_text(dir.file("model.safetensors.index.json"), R"({"weight_map": ["a.safetensors"]})");
  expect_error<FormatError>(
      [&] { CheckpointReader reader(dir.str()); },
      {dir.file("model.safetensors.index.json"), "\"weight_map\" must be a non-empty object"});
}

TEST(CheckpointBad, IndexEntryNotAString) {
  TempDir dir;
  write_two_shards(dir);
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"embed_tokens.weight": 1}})");
  expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                            {dir.file("model.safetensors.index.json"),
                             "entry for tensor embed_tokens.weight must be a shard file name"});
}

TEST(CheckpointBad, IndexShardOutsideFolder) {
  TempDir dir;
  write_two_shards(dir);
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"embed_tokens.weight": "../a.safetensors"}})");
  expect_error<FormatError>(
      [&] { CheckpointReader reader(dir.str()); },
      {dir.file("model.safetensors.index.json"), "../a.safetensors", "expected a plain file name"});
}

TEST(CheckpointBad, MissingShard) {
  TempDir dir;
  write_two_shards(dir);
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"embed_tokens.weight": "a.safetensors",)"
             R"( "layer_norm.weight": "c.safetensors"}})");
  expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                            {dir.file("model.safetensors.index.json"),
                             "shard c.safetensors is missing", dir.file("c.safetensors")});
}

TEST(CheckpointBad, IndexPutsTensorInWrongShard) {
  TempDir dir;
  write_two_shards(dir);
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"embed_tokens.weight": "a.safetensors",)"
             R"( "layer_norm.weight": "a.safetensors", "x": "b.safetensors"}})");
  expect_error<FormatError>(
      [&] { CheckpointReader reader(dir.str()); },
      {dir.file("model.safetensors.index.json"), "puts tensor layer_norm.weight in a.safetensors",
       dir.file("a.safetensors") + " has no such tensor"});
}

TEST(CheckpointBad, TensorInTwoShards) {
  TempDir dir;
  write_tensors(dir.file("a.safetensors"), {{"embed_tokens.weight", {5, 4}}});
  write_tensors(dir.file("b.safetensors"),
                {{"embed_tokens.weight", {5, 4}}, {"layer_norm.weight", {4}}});
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"embed_tokens.weight": "a.safetensors",)"
             R"( "layer_norm.weight": "b.safetensors"}})");
  expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                            {"tensor embed_tokens.weight also appears in",
                             dir.file("a.safetensors"), dir.file("b.safetensors")});
}

// ----------------------------------------------------------------------------------------
// Hostile checkpoints: each refused with one line naming the problem.

// Case 1: the index parsed with a bounded depth; no part of it dumped unbounded.
TEST(CheckpointBad, IndexDeeplyNested) {
  TempDir dir;
  write_two_shards(dir);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& text : {R"({"weight_map": )" + deep + "}",
                                  R"({"weight_map": {"embed_tokens.weight": )" + deep + "}}"}) {
    write_text(dir.file("model.safetensors.index.json"), text);
    const std::string message =
        expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                                  {dir.file("model.safetensors.index.json"),
                                   "nests arrays and objects deeper than 64 levels"});
    EXPECT_LT(message.size(), 400u);
  }
  // Shallow but large: the message quotes a bounded excerpt.
  std::string wide = R"({"weight_map": [)";
  for (int i = 0; i < 100000; ++i) wide += (i ? ",\"" : "\"") + std::to_string(i) + "\"";
  write_text(dir.file("model.safetensors.index.json"), wide + "]}");
  const std::string message = expect_error<FormatError>(
      [&] { CheckpointReader reader(dir.str()); },
      {"\"weight_map\" must be a non-empty object", "found [\"0\",\"1\",\"2\""});
  EXPECT_LT(message.size(), 400u);
}

TEST(CheckpointBad, IndexDuplicateTensor) {
  TempDir dir;
  write_two_shards(dir);
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"embed_tokens.weight": "a.safetensors",)"
             R"( "layer_norm.weight": "b.safetensors", "embed_tokens.weight": "b.safetensors"}})");
  expect_error<FormatError>(
      [&] { CheckpointReader reader(dir.str()); },
      {dir.file("model.safetensors.index.json"), "has the key embed_tokens.weight twice"});
}

// Case 8: only regular files are opened; the error names the path.
TEST(CheckpointBad, IndexOrShardNotARegularFile) {
  {
    TempDir dir;
    write_two_shards(dir);
    fs::create_directory(dir.file("model.safetensors.index.json"));
    expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                              {dir.file("model.safetensors.index.json"), "is a directory"});
  }
  {
    TempDir dir;
    retnet::testing::Fifo fifo(dir.file("model.safetensors.index.json"));
    ASSERT_TRUE(fifo.ok());
    expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                              {dir.file("model.safetensors.index.json"), "is a FIFO"});
  }
  {
    TempDir dir;
    retnet::testing::Fifo fifo(dir.file("model.safetensors"));
    ASSERT_TRUE(fifo.ok());
    expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                              {dir.file("model.safetensors"), "is a FIFO"});
  }
  {
    TempDir dir;
    write_two_shards(dir);
    fs::create_directory(dir.file("c.safetensors"));
    write_text(dir.file("model.safetensors.index.json"),
               R"({"weight_map": {"embed_tokens.weight": "a.safetensors",)"
               R"( "layer_norm.weight": "c.safetensors"}})");
    expect_error<FormatError>([&] { CheckpointReader reader(dir.str()); },
                              {dir.file("c.safetensors"), "is a directory"});
  }
}

// Case 13: a shard that is a symbolic link out of the folder is refused, and nothing of the
// target leaks into the message (before: its first 8 bytes appeared as the "header length").
TEST(CheckpointBad, ShardLinkOutsideTheFolder) {
  TempDir outside, dir;
  write_text(outside.file("secret"), "SECRET!!and the rest of a private file");
  write_two_shards(dir);
  fs::create_symlink(outside.file("secret"), dir.file("c.safetensors"));
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"embed_tokens.weight": "a.safetensors",)"
             R"( "layer_norm.weight": "c.safetensors"}})");
  uint64_t as_length = 0;
  std::memcpy(&as_length, "SECRET!!", 8);
  for (int variant = 0; variant < 2; ++variant) {
    if (variant == 1) {  // the same as a single-file checkpoint
      fs::remove(dir.file("model.safetensors.index.json"));
      fs::create_symlink(outside.file("secret"), dir.file("model.safetensors"));
    }
    const std::string message = expect_error<FormatError>(
        [&] { CheckpointReader reader(dir.str()); },
        {variant ? dir.file("model.safetensors") : dir.file("c.safetensors"), "resolves to",
         outside.file("secret"), "outside the model folder"});
    EXPECT_EQ(message.find("SECRET"), std::string::npos) << message;
    EXPECT_EQ(message.find(std::to_string(as_length)), std::string::npos) << message;
  }
}

TEST(Checkpoint, LinksInsideTheFolderAreFollowed) {
  TempDir dir;
  fs::create_directory(dir.file("blobs"));
  write_tensors(dir.file("blobs/weights"), tiny_model());
  fs::create_symlink("blobs/weights", dir.file("model.safetensors"));
  CheckpointReader reader(dir.str());
  read_tiny_model(reader);
  EXPECT_NO_THROW(reader.check_all_consumed());
}

// A model downloaded into the Hugging Face hub's cache: REPO/snapshots/REV/ links every file to
// REPO/blobs/. Those links are followed; a link from a folder not named like that is not.
TEST(Checkpoint, HubCacheSnapshotsReadTheirBlobs) {
  TempDir repo;
  fs::create_directories(repo.file("snapshots/0123abcd"));
  fs::create_directory(repo.file("blobs"));
  write_tensors(repo.file("blobs/5f3e"), tiny_model());
  fs::create_symlink("../../blobs/5f3e", repo.file("snapshots/0123abcd/model.safetensors"));
  CheckpointReader reader(repo.file("snapshots/0123abcd"));
  read_tiny_model(reader);
  EXPECT_NO_THROW(reader.check_all_consumed());

  fs::create_directories(repo.file("elsewhere/0123abcd"));
  fs::create_symlink("../../blobs/5f3e", repo.file("elsewhere/0123abcd/model.safetensors"));
  expect_error<FormatError>([&] { CheckpointReader again(repo.file("elsewhere/0123abcd")); },
                            {"outside the model folder"});
}

// Case 14: NaN or infinite weights are refused at load, naming the tensor.
TEST(CheckpointBad, NonFiniteWeights) {
  TempDir dir;
  std::vector<float> embed(20, 0.5f);
  embed[7] = -std::numeric_limits<float>::infinity();
  const std::vector<float> norm(4, 1.0f);
  retnet::save_safetensors(dir.file("model.safetensors"),
                           {{"embed_tokens.weight", DType::F16, {5, 4}, embed.data()},
                            {"layer_norm.weight", DType::F32, {4}, norm.data()}});
  CheckpointReader reader(dir.str());
  std::vector<float> out(20);
  const std::string message = expect_error<FormatError>(
      [&] {
        reader.read("embed_tokens.weight", {5, 4}, out.data());
      },
      {dir.file("model.safetensors"), "tensor embed_tokens.weight: element 7 of 20 is -inf",
       "expected finite weights"});
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

// expect() checks a tensor's presence and shape from the header alone.
TEST(Checkpoint, ExpectChecksShapesWithoutReading) {
  TempDir dir;
  write_tensors(dir.file("model.safetensors"), tiny_model());
  CheckpointReader reader(dir.str());
  expect_error<FormatError>(
      [&] {
        reader.expect("layers.0.ffn.fc1.weight", {4, 6});
      },
      {"tensor layers.0.ffn.fc1.weight has shape [6, 4], expected [4, 6]"});
  expect_error<FormatError>(
      [&] {
        reader.expect("layers.7.ffn.fc1.weight", {6, 4});
      },
      {"missing tensor layers.7.ffn.fc1.weight"});
  for (const auto& [name, shape] : tiny_model()) reader.expect(name, shape);
  EXPECT_NO_THROW(reader.check_all_consumed());
}
