// Tests of what load_model tells its caller besides the model: the progress it reports
// (LoadOptions::progress, and the tools' LoadProgressDisplay) and the one-line errors for a path
// that is not a model folder (a file named instead of its folder, GGUF files, PyTorch pickles).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "load_progress.hpp"
#include "retnet/io/checkpoint.hpp"
#include "retnet/io/load.hpp"
#include "retnet/io/save.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using retnet::FormatError;
using retnet::LoadOptions;
using retnet::LoadProgress;
using retnet::testing::expect_error;
using retnet::testing::TempDir;

namespace {

const std::string kData = RETNET_TEST_DATA_DIR;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// The bytes a load reads, counted from the files' headers: every stored tensor but the decay
// buffers the config derives (retnet_rel_pos.*), which the model never reads.
uint64_t bytes_read_by_a_load(const std::string& dir) {
  retnet::CheckpointReader reader(dir);
  uint64_t total = 0;
  for (const auto& shard : reader.shards())
    for (const auto& t : shard.tensors())
      if (t.name.find("retnet_rel_pos.") == std::string::npos) total += t.nbytes();
  return total;
}

std::vector<LoadProgress> progress_of(const std::string& dir, LoadOptions options = {}) {
  std::vector<LoadProgress> calls;
  options.progress = [&](const LoadProgress& p) { calls.push_back(p); };
  retnet::load_model<float>(dir, options);
  return calls;
}

}  // namespace

// ---- LoadOptions::progress --------------------------------------------------------------------

TEST(LoadProgressTest, BytesRiseFromZeroToTheTotalOfTheStoredTensors) {
  for (const char* name : {"tiny-bytes", "torchscale-tiny", "hf-f16-tied", "syncdoth-tiny"}) {
    SCOPED_TRACE(name);
    const std::string dir = kData + "/" + name;
    const std::vector<LoadProgress> calls = progress_of(dir);
    ASSERT_GE(calls.size(), 2u);
    EXPECT_EQ(calls.front().bytes_done, 0u);
    const uint64_t total = bytes_read_by_a_load(dir);
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].bytes_total, total);
      if (i > 0) {
        EXPECT_GT(calls[i].bytes_done, calls[i - 1].bytes_done);
      }
    }
    EXPECT_EQ(calls.back().bytes_done, total);
  }
}

TEST(LoadProgressTest, NamesTheStoredDtypesAndTheWeightTypeTheyBecome) {
  const auto calls = progress_of(kData + "/hf-f16-tied", LoadOptions{retnet::WeightType::kQ8});
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back().stored, "F16");
  EXPECT_EQ(calls.back().weights, retnet::WeightType::kQ8);
}

TEST(LoadProgressTest, ConvertedQuantisedFolderCountsCodesAndScales) {
  TempDir dir;
  auto model =
      retnet::load_model<float>(kData + "/torchscale-tiny", LoadOptions{retnet::WeightType::kQ8});
  retnet::save_model(dir.str(), model.config(), model.weights());
  const auto calls = progress_of(dir.str());
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back().bytes_done, bytes_read_by_a_load(dir.str()));
  EXPECT_EQ(calls.back().bytes_total, calls.back().bytes_done);
}

TEST(LoadProgressTest, DisplayOffATerminalWritesOneSummaryLine) {
  TempDir dir;
  const std::string log = dir.file("stderr.txt");
  std::FILE* out = std::fopen(log.c_str(), "w");
  ASSERT_NE(out, nullptr);
  {
    retnet::tools::LoadProgressDisplay display("models/x", out);
    LoadOptions options;
    options.progress = display.callback();
    retnet::load_model<float>(kData + "/hf-f16-tied", options);
    display.finish();
  }
  std::fclose(out);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const double mb = double(bytes_read_by_a_load(kData + "/hf-f16-tied")) / 1e6;
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MB", mb);
  EXPECT_EQ(text.rfind("loaded models/x: " + std::string(size) + " in ", 0), 0u) << text;
  EXPECT_NE(text.find(" s (F16 -> f16)\n"), std::string::npos) << text;  // kept as stored
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
}

// ---- Paths that are not a model folder ----------------------------------------------------------

TEST(ModelFolderTest, FileGivenInsteadOfItsFolderNamesTheFolder) {
  for (const char* file : {"model.safetensors", "config.json"}) {
    const std::string path = kData + "/tiny-bytes/" + file;
    const std::string message =
        expect_error<FormatError>([&] { retnet::load_model<float>(path); },
                                  {path + ": is a file, expected a model folder",
                                   "give the folder that holds it, " + kData + "/tiny-bytes"});
    EXPECT_EQ(message.find('\n'), std::string::npos);
    expect_error<FormatError>([&] { retnet::CheckpointReader reader(path); },
                              {"expected a model folder"});
  }
}

TEST(ModelFolderTest, MissingFolderIsNamed) {
  TempDir dir;
  expect_error<FormatError>([&] { retnet::load_model<float>(dir.file("nowhere")); },
                            {dir.file("nowhere") + ": no such folder"});
}

TEST(ModelFolderTest, GgufFileIsNotReadAndSaysHowToGetSafetensors) {
  TempDir dir;
  write_text(dir.file("model-Q4_K_M.gguf"), "GGUF");
  const std::string message = expect_error<FormatError>(
      [&] { retnet::load_model<float>(dir.file("model-Q4_K_M.gguf")); },
      {dir.file("model-Q4_K_M.gguf") + ": a GGUF file, a format retnet does not read",
       "Hugging Face repository", "save_pretrained(DIR, safe_serialization=True)"});
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(ModelFolderTest, PyTorchPickleFileIsNeverUnpickled) {
  TempDir dir;
  for (const char* name : {"pytorch_model.bin", "model.pt", "weights.pth"}) {
    write_text(dir.file(name), "PK");
    expect_error<FormatError>([&] { retnet::load_model<float>(dir.file(name)); },
                              {dir.file(name) + ": a PyTorch pickle, which retnet does not read",
                               "can run code", "safe_serialization=True"});
  }
}

TEST(ModelFolderTest, FolderWithOnlyPickledWeightsSaysSo) {
  for (bool with_config : {true, false}) {
    TempDir dir;
    write_text(dir.file("pytorch_model.bin"), "PK");
    if (with_config) fs::copy_file(kData + "/tiny-bytes/config.json", dir.file("config.json"));
    const std::string message = expect_error<FormatError>(
        [&] { retnet::load_model<float>(dir.str()); },
        {"model.safetensors: missing", "it holds pytorch_model.bin: a PyTorch pickle",
         "Hugging Face repository"});
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

TEST(ModelFolderTest, FolderWithAGgufFileSaysSo) {
  TempDir dir;
  write_text(dir.file("a.gguf"), "GGUF");
  fs::copy_file(kData + "/tiny-bytes/config.json", dir.file("config.json"));
  expect_error<FormatError>([&] { retnet::load_model<float>(dir.str()); },
                            {"model.safetensors: missing", "it holds a.gguf: a GGUF file"});
}
