// Damaged model folders and state files, table-driven: each case lays out a model folder or a state
// file, runs the loader a user would run on it, and expects a one-line FormatError containing a
// given fragment, with peak memory growth under a stated bound:
//   resident memory (VmHWM growth)          < kResidentMiB
//   address space (VmPeak growth)           < kAddressSpaceMiB
// so that a loader which allocates what a header declares before checking it fails the case
// even when it never touches the memory. Every case is its own ctest entry (own process).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fifo.hpp"
#include "peak_memory.hpp"
#include "retnet/core/file.hpp"
#include "retnet/io/load.hpp"
#include "retnet/io/safetensors.hpp"
#include "retnet/io/safetensors_writer.hpp"
#include "retnet/io/state_file.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using retnet::FormatError;
using retnet::ModelConfig;
using retnet::ModelState;
using retnet::testing::TempDir;
using Shape = std::vector<int64_t>;

namespace {

constexpr long kResidentMiB = 64;
constexpr long kAddressSpaceMiB = 256;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(&s[0], &v, 8);
  return s;
}

// A safetensors file: the header text as given, then `data_bytes` zero bytes.
std::string raw_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab_size = 8, c.embed_dim = 4, c.value_embed_dim = 8, c.heads = 1, c.ffn_dim = 6;
  c.layers = 1;
  return c;
}

// Names and shapes of every tensor `c` asks for, in checkpoint order.
std::vector<std::pair<std::string, Shape>> tensors_of(const ModelConfig& c) {
  std::vector<std::pair<std::string, Shape>> out;
  retnet::ModelWeights<float> probe;
  probe.layers.resize(static_cast<size_t>(c.layers));
  probe.visit(c, [&](const std::string& name, auto&, const Shape& shape) {
    out.emplace_back(name, shape);
  });
  return out;
}

// A model folder: config.json for `config`, and model.safetensors with the tensors of
// `weights_for` (default: the same config), all 0.01, but for `edit` applied to the values.
void write_model(const std::string& dir, const ModelConfig& config,
                 const ModelConfig* weights_for = nullptr,
                 const std::function<void(const std::string&, std::vector<float>&)>& edit = {}) {
  std::ofstream(dir + "/config.json") << config.to_json().dump();
  std::vector<std::vector<float>> storage;
  std::vector<retnet::SavedTensor> saved;
  for (const auto& [name, shape] : tensors_of(weights_for ? *weights_for : config)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    storage.emplace_back(static_cast<size_t>(n), 0.01f);
    if (edit) edit(name, storage.back());
    saved.push_back({name, retnet::DType::F32, shape, nullptr});
  }
  for (size_t i = 0; i < saved.size(); ++i) saved[i].data = storage[i].data();
  retnet::save_safetensors(dir + "/model.safetensors", saved);
}

// A model folder whose model.safetensors is `bytes` (its config is tiny_config()).
void write_model_file(const std::string& dir, const std::string& bytes) {
  std::ofstream(dir + "/config.json") << tiny_config().to_json().dump();
  write_bytes(dir + "/model.safetensors", bytes);
}

std::string nested(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

void load_folder(const std::string& dir) {
  retnet::load_model<float>(dir);
}

// State files: the model is the tiny one with random weights (seed 1).
retnet::RetNetModel<float> state_model() {
  return retnet::RetNetModel<float>(tiny_config(),
                                    retnet::ModelWeights<float>::random(tiny_config(), 1));
}

uint64_t fingerprint(const retnet::RetNetModel<float>& m) {
  return retnet::model_fingerprint(m.config(), m.weights());
}

// Loads dir/state.bin as a whole state file for state_model().
void load_state(const std::string& dir) {
  const auto model = state_model();
  std::ifstream in = retnet::open_regular_file(dir + "/state.bin");
  retnet::load_state(in, model.new_state(1), fingerprint(model), dir + "/state.bin");
  retnet::expect_end_of_state(in, dir + "/state.bin");
}

// A valid state file of state_model(), batch 1, passed through `edit`.
void write_state(const std::string& dir, const std::function<void(std::string&)>& edit,
                 uint64_t fp = 0) {
  const auto model = state_model();
  std::ostringstream out;
  retnet::save_state(out, model.new_state(1), fp ? fp : fingerprint(model));
  std::string bytes = out.str();
  edit(bytes);
  write_bytes(dir + "/state.bin", bytes);
}

void put64(std::string& bytes, size_t at, uint64_t v) {
  std::memcpy(&bytes[at], &v, 8);
}

// Writes the CRC-32 that ends a state file over its edited bytes.
void reseal_state(std::string& bytes) {
  const size_t end = bytes.size() - retnet::kStateChecksumBytes;
  const uint32_t crc = retnet::detail::state_crc32(bytes.data(), end);
  std::memcpy(&bytes[end], &crc, sizeof crc);
}

struct DamagedCase {
  std::string name;
  std::function<void(const std::string&)> make;  // lays out the files in a fresh folder
  std::function<void(const std::string&)> load;  // the loader under test
  std::string fragment;                          // expected in the one-line message
};

std::vector<DamagedCase> cases() {
  const std::string entry = R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})";
  std::vector<DamagedCase> c;
  // ---- 1: nesting and unbounded quoting.
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    c.push_back({std::string("NestedSafetensors_") + key,
                 [key](const std::string& d) {
                   std::map<std::string, std::string> fields = {
                       {"dtype", "\"F32\""}, {"shape", "[1]"}, {"data_offsets", "[0, 4]"}};
                   fields[key] = nested(100000);
                   std::string e;
                   for (const auto& [k, v] : fields)
                     e += (e.empty() ? "" : ", ") + ("\"" + k + "\": " + v);
                   write_model_file(d, raw_file("{\"embed_tokens.weight\": {" + e + "}}", 4));
                 },
                 load_folder, "header nests arrays and objects deeper than 64 levels"});
  }
  c.push_back({"NestedIndexWeightMap",
               [](const std::string& d) {
                 write_model(d, tiny_config());
                 std::ofstream(d + "/model.safetensors.index.json")
                     << "{\"weight_map\": " << nested(100000) << "}";
               },
               load_folder, "the file nests arrays and objects deeper than 64 levels"});
  c.push_back({"NestedIndexEntry",
               [](const std::string& d) {
                 write_model(d, tiny_config());
                 std::ofstream(d + "/model.safetensors.index.json")
                     << R"({"weight_map": {"embed_tokens.weight": )" << nested(100000) << "}}";
               },
               load_folder, "the file nests arrays and objects deeper than 64 levels"});
  c.push_back({"NestedConfig",
               [](const std::string& d) {
                 write_model(d, tiny_config());
                 std::string text = tiny_config().to_json().dump();
                 text.insert(1, "\"extra\": " + nested(100000) + ", ");
                 std::ofstream(d + "/config.json") << text;
               },
               load_folder, "config.json: the file nests arrays and objects deeper than 64"});
  c.push_back({"LongBinaryTensorName",
               [](const std::string& d) {
                 const std::string name = "\\u001b[31m\\n" + std::string(1 << 20, 'n');
                 write_model_file(d,
                                  raw_file("{\"" + name + R"(": {"dtype": "I16", "shape": [1], )" +
                                               R"("data_offsets": [0, 2]}})",
                                           2));
               },
               load_folder, "tensor \"\\x1b[31m\\x0annnn"});
  c.push_back({"InvalidJsonWithLongToken",
               [](const std::string& d) {
                 write_model_file(d, raw_file("{\"" + std::string(1 << 20, 'k') + "\x01", 0));
               },
               load_folder, "header is not valid JSON"});
  c.push_back({"ShapeWithManyDimensions",
               [](const std::string& d) {
                 std::string shape = "[1";
                 for (int i = 1; i < 100000; ++i) shape += ",1";
                 write_model_file(
                     d, raw_file(R"({"embed_tokens.weight": {"dtype": "F32", "shape": )" + shape +
                                     R"(], "data_offsets": [0, 4]}})",
                                 4));
               },
               load_folder,
               "has shape [1, 1, 1, 1, 1, 1, 1, 1, ... (100000 dimensions)], expected [8, 4]"});
  // ---- 4: sizes of the config checked against the checkpoint before allocating.
  c.push_back({"ConfigWith2000LayersNextToA2LayerCheckpoint",
               [](const std::string& d) {
                 ModelConfig big;  // 2000 layers of ~0.9 MB: 1.9 GB if allocated
                 big.vocab_size = 64, big.embed_dim = 128, big.value_embed_dim = 256;
                 big.heads = 2, big.ffn_dim = 256, big.layers = 2;
                 ModelConfig asked = big;
                 asked.layers = 2000;
                 write_model(d, asked, &big);
               },
               load_folder, "missing tensor layers.2.retention_layer_norm.weight"});
  c.push_back({"ConfigWithATrillionLayers",
               [](const std::string& d) {
                 ModelConfig asked = tiny_config();
                 asked.layers = 1000000000000;
                 const ModelConfig small = tiny_config();
                 write_model(d, asked, &small);
               },
               load_folder, "decoder_layers = 1000000000000 is above the supported 4096"});
  c.push_back({"ConfigWithHugeVocabulary",
               [](const std::string& d) {
                 ModelConfig asked = tiny_config();
                 asked.vocab_size = int64_t{1} << 40;
                 const ModelConfig small = tiny_config();
                 write_model(d, asked, &small);
               },
               load_folder, "vocab_size = 1099511627776 is above the supported 2147483648"});
  // ---- 8: only regular files.
  c.push_back({"ConfigIsADirectory",
               [](const std::string& d) {
                 write_model(d, tiny_config());
                 fs::remove(d + "/config.json");
                 fs::create_directory(d + "/config.json");
               },
               load_folder, "config.json: is a directory, expected a regular file"});
  c.push_back({"ConfigIsAFifo",
               [](const std::string& d) {
                 write_model(d, tiny_config());
                 fs::remove(d + "/config.json");
               },
               [](const std::string& d) {
                 retnet::testing::Fifo fifo(d + "/config.json");  // unblocks a reader that opens it
                 load_folder(d);
               },
               "config.json: is a FIFO (named pipe), expected a regular file"});
  c.push_back({"IndexIsAFifo", [](const std::string& d) { write_model(d, tiny_config()); },
               [](const std::string& d) {
                 retnet::testing::Fifo fifo(d + "/model.safetensors.index.json");
                 load_folder(d);
               },
               "model.safetensors.index.json: is a FIFO"});
  c.push_back({"StateIsADirectory",
               [](const std::string& d) { fs::create_directory(d + "/state.bin"); }, load_state,
               "state.bin: is a directory"});
  // ---- 9: the safetensors reference rules.
  c.push_back({"DuplicateTensorName",
               [](const std::string& d) {
                 write_model_file(
                     d, raw_file(R"({"embed_tokens.weight": {"dtype": "F32", "shape": [1], )"
                                 R"("data_offsets": [0, 4]}, "embed_tokens.weight": {"dtype": )"
                                 R"("F32", "shape": [1], "data_offsets": [4, 8]}})",
                                 8));
               },
               load_folder, "header has the key embed_tokens.weight twice"});
  c.push_back({"HeaderStartsWithSpace",
               [entry](const std::string& d) {
                 write_model_file(d, raw_file(" {\"embed_tokens.weight\": " + entry + "}", 4));
               },
               load_folder, "expected it to begin with '{'"});
  c.push_back({"GapBetweenTensors",
               [](const std::string& d) {
                 write_model_file(
                     d,
                     raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                              R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                              12));
               },
               load_folder, "gap of 4 bytes after tensor a"});
  c.push_back({"TrailingDataBytes",
               [entry](const std::string& d) {
                 write_model_file(d, raw_file("{\"embed_tokens.weight\": " + entry + "}", 4096));
               },
               load_folder, "leaving 4092 trailing bytes"});
  c.push_back({"MetadataNotAStringMap",
               [entry](const std::string& d) {
                 write_model_file(
                     d, raw_file(R"({"__metadata__": {"format": ["pt"]}, "w": )" + entry + "}", 4));
               },
               load_folder, "__metadata__ entry format must be a string, found array"});
  // ---- 13: links out of the folder.
  c.push_back({"ShardLinksOutOfTheFolder",  // before: 8 bytes of the target in the message
               [](const std::string& d) {
                 write_model(d, tiny_config());
                 fs::remove(d + "/model.safetensors");
                 fs::create_symlink("/etc/passwd", d + "/model.safetensors");
               },
               load_folder, "resolves to \"/etc/passwd\", outside the model folder"});
  // ---- 14: non-finite weights.
  c.push_back({"NaNWeight",
               [](const std::string& d) {
                 write_model(d, tiny_config(), nullptr,
                             [](const std::string& name, std::vector<float>& v) {
                               if (name == "layers.0.ffn.fc2.weight")
                                 v[3] = std::numeric_limits<float>::quiet_NaN();
                             });
               },
               load_folder, "tensor layers.0.ffn.fc2.weight: element 3 of 24 is NaN"});
  // ---- 6 and 12: state files.
  c.push_back({"StateBatch2To20",
               [](const std::string& d) {
                 write_state(d, [](std::string& b) {
                   put64(b, 32, uint64_t{1} << 20);         // batch
                   b.resize(64 + (size_t{8} << 20), '\0');  // every position, no data
                 });
               },
               load_state, "state declares batch 1048576"});
  c.push_back({"StatePositionInt64Max",
               [](const std::string& d) {
                 write_state(d, [](std::string& b) {
                   put64(b, 64, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
                   reseal_state(b);  // past the checksum, to the position's own check
                 });
               },
               load_state, "state position 9223372036854775807 of batch entry 0 is outside"});
  c.push_back({"StateTrailingBytes",
               [](const std::string& d) { write_state(d, [](std::string& b) { b += "extra"; }); },
               load_state, "5 trailing bytes after the state"});
  c.push_back({"StateOfAnotherModel",
               [](const std::string& d) {
                 write_state(
                     d, [](std::string&) {}, 12345);
               },
               load_state, "state was saved for another model"});
  c.push_back(
      {"StatePositionMovedInRange",
       [](const std::string& d) { write_state(d, [](std::string& b) { put64(b, 64, 1000); }); },
       load_state, "checksum mismatch in the state"});
  c.push_back({"StateVersion1",
               [](const std::string& d) { write_state(d, [](std::string& b) { b[8] = 1; }); },
               load_state, "state version 1"});
  return c;
}

class DamagedInput : public ::testing::TestWithParam<DamagedCase> {};

TEST_P(DamagedInput, RefusedOnOneLineWithinMemoryBounds) {
  const DamagedCase& c = GetParam();
  TempDir dir;
  c.make(dir.str());
  std::string message;
  retnet::testing::PeakMemory memory;
  try {
    c.load(dir.str());
    ADD_FAILURE() << "no error; expected FormatError containing: " << c.fragment;
  } catch (const FormatError& e) {
    message = e.what();
  }
  const long resident = memory.resident_mib(), address_space = memory.address_space_mib();
  if (message.empty()) return;
  EXPECT_NE(message.find(c.fragment), std::string::npos)
      << "'" << c.fragment << "' not in: " << message.substr(0, 1000);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message.substr(0, 1000);
  EXPECT_LT(message.size(), 400u) << message.substr(0, 1000);
  EXPECT_LT(resident, kResidentMiB) << "resident memory taken before the error";
  EXPECT_LT(address_space, kAddressSpaceMiB) << "address space taken before the error";
}

INSTANTIATE_TEST_SUITE_P(ModelFolderAndStateFile, DamagedInput, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<DamagedCase>& info) {
                           return info.param.name;
                         });

}  // namespace
