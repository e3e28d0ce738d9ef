// ReplacingFile and the writers built on it (save_safetensors, save_model): what lies at the
// destination's name, a symbolic link above all, is replaced, never written through; a write
// that does not complete leaves no file behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "retnet/retnet.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using retnet::ReplacingFile;
using retnet::testing::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

size_t entries(const std::string& dir) {
  return size_t(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST(ReplacingFileTest, ReplacesADanglingLinkInsteadOfCreatingItsTarget) {
  TempDir dir, elsewhere;
  fs::create_symlink(elsewhere.file("created"), dir.file("out.bin"));
  ReplacingFile out(dir.file("out.bin"));
  out.write("abc", 3);
  out.commit();
  EXPECT_FALSE(fs::exists(elsewhere.file("created")));
  EXPECT_EQ(fs::symlink_status(dir.file("out.bin")).type(), fs::file_type::regular);
  EXPECT_EQ(read_file(dir.file("out.bin")), "abc");
  EXPECT_EQ(entries(dir.str()), 1u);  // no temporary file left
}

TEST(ReplacingFileTest, LeavesTheTargetOfALinkUnchanged) {
  TempDir dir, elsewhere;
  std::ofstream(elsewhere.file("precious")) << "keep";
  fs::create_symlink(elsewhere.file("precious"), dir.file("out.bin"));
  ReplacingFile out(dir.file("out.bin"));
  out.write("new", 3);
  out.commit();
  EXPECT_EQ(read_file(elsewhere.file("precious")), "keep");
  EXPECT_EQ(read_file(dir.file("out.bin")), "new");
}

TEST(ReplacingFileTest, AnUncommittedWriteLeavesNothing) {
  TempDir dir;
  std::ofstream(dir.file("out.bin")) << "old";
  {
    ReplacingFile out(dir.file("out.bin"));
    out.write("partial", 7);
  }
  EXPECT_EQ(read_file(dir.file("out.bin")), "old");
  EXPECT_EQ(entries(dir.str()), 1u);
}

TEST(ReplacingFileTest, AFolderThatDoesNotExistIsAnError) {
  TempDir dir;
  retnet::testing::expect_error<retnet::Error>(
      [&] { ReplacingFile(dir.file("nowhere/out.bin")); },
      {dir.file("nowhere/out.bin"), "cannot create a file beside it"});
}

TEST(SaveModelTest, WritesThroughNoLink) {
  const auto model = retnet::load_model<float>(std::string(RETNET_TEST_DATA_DIR) + "/tiny-bytes");
  TempDir dir, elsewhere;
  for (const char* name : {"config.json", "model.safetensors"})
    fs::create_symlink(elsewhere.file(name), dir.file(name));
  retnet::save_model(dir.str(), model.config(), model.weights());
  EXPECT_EQ(entries(elsewhere.str()), 0u);
  for (const char* name : {"config.json", "model.safetensors"})
    EXPECT_EQ(fs::symlink_status(dir.file(name)).type(), fs::file_type::regular) << name;
  EXPECT_EQ(entries(dir.str()), 2u);
  const auto again = retnet::load_model<float>(dir.str());
  EXPECT_EQ(again.config().layers, model.config().layers);
}

}  // namespace
