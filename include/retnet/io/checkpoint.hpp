// Access to the weights of a model folder (names: docs/NUMERICS.md#tensor-names; file rules:
// docs/FORMATS.md#safetensors): a single `model.safetensors` or the shards listed by
// `model.safetensors.index.json`.
//
// Callers use logical tensor names (without the torchscale / fairseq / HF prefix); the
// reader resolves them, checks shapes, and remembers what was read so that a checkpoint
// carrying tensors the model does not use is reported instead of silently ignored.
//
// Every file is opened only as a regular file inside the model folder (symbolic links are
// resolved, and one leading outside the folder is refused), the index is parsed with a bounded
// depth and no duplicate keys, and weights are refused when NaN or infinite.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"
#include "retnet/core/json.hpp"
#include "retnet/io/safetensors.hpp"

namespace retnet {

/// The two naming schemes of docs/FORMATS.md#published-checkpoint-families.
enum class TensorNaming {
  kTorchscale,  // embed_tokens.weight, layers.{i}.retention.* (torchscale, fairseq, syncdoth)
  kFla,         // model.embeddings.weight, model.layers.{i}.attn.* (flash-linear-attention)
};

class CheckpointReader {
 public:
  /// Largest model.safetensors.index.json read (a real one lists a few thousand tensors in a
  /// few hundred KB); checked before the file is read.
  static constexpr uint64_t kMaxIndexBytes = 64ull << 20;

  /// Opens the checkpoint in `dir` and validates every shard header; reads no weights.
  explicit CheckpointReader(const std::string& dir) : dir_(dir) {
    namespace fs = std::filesystem;
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    const fs::path single = fs::path(dir) / "model.safetensors";
    std::error_code ec;
    // symlink_status: a dangling link is reported as such, not skipped as absent.
    if (fs::exists(fs::symlink_status(index, ec))) {
      open_sharded(path_in_folder(dir, index.filename().string()));
    } else {
      if (!fs::exists(fs::symlink_status(single, ec)))
        throw FormatError(single.string() + ": missing (expected model.safetensors or " +
                          "model.safetensors.index.json in " + dir + ")");
      add_shard(SafetensorsFile(path_in_folder(dir, single.filename().string())));
    }
    detect_prefix();
  }

  /// A checkpoint held in one already-parsed file (e.g. from memory); `label` names it in errors.
  CheckpointReader(const std::string& label, SafetensorsFile file) : dir_(label) {
    add_shard(std::move(file));
    detect_prefix();
  }

  const std::string& dir() const { return dir_; }
  /// The detected tensor name prefix: "" (torchscale), "decoder." (fairseq) or "model." (HF,
  /// fla).
  std::string prefix() const { return prefix_; }
  /// Which family's names the tensors use, from the embedding's name.
  TensorNaming naming() const { return naming_; }
  /// Every stored tensor name, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, loc] : names_) out.push_back(name);
    return out;
  }
  /// Total size of all tensor data in bytes, over every shard.
  uint64_t total_bytes() const {
    uint64_t total = 0;
    for (const SafetensorsFile& f : shards_)
      for (const TensorInfo& t : f.tensors()) total += t.nbytes();
    return total;
  }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  /// Number of tensors over every shard.
  size_t tensor_count() const { return names_.size(); }

  /// Whether the logical tensor exists. "output_projection.weight" also matches
  /// `lm_head.weight` (HF) and an unprefixed `output_projection.weight`. With fla's naming,
  /// `lm_head.*` is looked up without the prefix (stored beside `model.`).
  bool has(const std::string& logical_name) const { return locate(logical_name) != nullptr; }

  /// The header entry of a logical tensor; throws FormatError "DIR: missing tensor NAME".
  const TensorInfo& info(const std::string& logical_name) const {
    return entry(require_location(logical_name));
  }

  /// Checks that a logical tensor exists with `expected_shape`, reading nothing, and counts it
  /// as consumed (see check_all_consumed), so that a loader can validate every tensor it will
  /// ask for before it allocates anything. Throws FormatError "DIR: missing tensor NAME" or
  /// "FILE: tensor NAME has shape [..], expected [..]".
  void expect(const std::string& logical_name, const std::vector<int64_t>& expected_shape) {
    consumed_.insert(checked_entry(logical_name, expected_shape).name);
  }

  /// Reads a logical tensor, converted to Scalar, after checking its shape (as expect()); a
  /// NaN or infinite value throws FormatError "FILE: tensor NAME: element I of N is NaN ...".
  template <typename Scalar>
  void read(const std::string& logical_name, const std::vector<int64_t>& expected_shape,
            Scalar* dst) {
    read_rows(logical_name, expected_shape, 0, expected_shape.empty() ? 1 : expected_shape[0], dst);
  }

  /// Rows [first, first + n) of a logical tensor (row-major, rows along its first dimension),
  /// as read() reads them: a loader converts a large matrix a block of rows at a time.
  template <typename Scalar>
  void read_rows(const std::string& logical_name, const std::vector<int64_t>& expected_shape,
                 int64_t first, int64_t n, Scalar* dst) {
    const TensorInfo& t = checked_entry(logical_name, expected_shape);
    if (!is_floating(t.dtype))
      throw FormatError(shards_[require_location(logical_name).shard].path() + ": tensor " +
                        name_excerpt(t.name) + " has dtype " + dtype_name(t.dtype) +
                        ", expected floating-point weights (a quantised folder's config.json "
                        "names its format in quantization_config)");
    const uint64_t row =
        expected_shape.size() < 2
            ? 1
            : static_cast<uint64_t>(t.numel() / std::max<int64_t>(expected_shape[0], 1));
    shards_[require_location(logical_name).shard].read(t, static_cast<uint64_t>(first) * row,
                                                       static_cast<uint64_t>(n) * row, dst,
                                                       /*require_finite=*/true);
    consumed_.insert(t.name);
  }

  /// Bytes [first, first + count) of a logical tensor stored as `dtype` with `expected_shape`,
  /// as stored: the codes and scales of a quantised weight.
  void read_bytes(const std::string& logical_name, const std::vector<int64_t>& expected_shape,
                  DType dtype, uint64_t first, uint64_t count, uint8_t* dst) {
    const TensorInfo& t = checked_entry(logical_name, expected_shape);
    if (t.dtype != dtype)
      throw FormatError(shards_[require_location(logical_name).shard].path() + ": tensor " +
                        name_excerpt(t.name) + " has dtype " + dtype_name(t.dtype) + ", expected " +
                        dtype_name(dtype));
    shards_[require_location(logical_name).shard].read_bytes(t, first, count, dst);
    consumed_.insert(t.name);
  }

  /// The stored dtype of a logical tensor.
  DType dtype(const std::string& logical_name) const { return info(logical_name).dtype; }

  /// The tensor map of a model.safetensors.index.json held in `text` (tensor name -> shard file
  /// name), validated: a JSON object of bounded depth without duplicate keys, whose
  /// "weight_map" is a non-empty object of plain file names. `label` names it in errors.
  static std::map<std::string, std::string> parse_index(std::string_view text,
                                                        const std::string& label) {
    const nlohmann::json index = parse_json(text, label);
    if (!index.is_object())
      throw FormatError(label + ": expected a JSON object, found " +
                        std::string(index.type_name()));
    if (!index.contains("weight_map")) throw FormatError(label + ": missing \"weight_map\"");
    const nlohmann::json& map = index["weight_map"];
    if (!map.is_object() || map.empty())
      throw FormatError(label + ": \"weight_map\" must be a non-empty object of " +
                        "tensor name -> shard file, found " + json_excerpt(map));
    std::map<std::string, std::string> weight_map;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it.value().is_string())
        throw FormatError(label + ": weight_map entry for tensor " + name_excerpt(it.key()) +
                          " must be a shard file name, found " + json_excerpt(it.value()));
      const std::string shard = it.value().get<std::string>();
      // Shards live next to the index; a path would let a checkpoint read arbitrary files.
      if (shard.empty() || shard == "." || shard == ".." ||
          shard.find_first_of(std::string("/\\\0", 3)) != std::string::npos)
        throw FormatError(label + ": weight_map entry for tensor " + name_excerpt(it.key()) +
                          " names shard " + excerpt(shard, 80) + ", expected a plain file name");
      weight_map[it.key()] = shard;
    }
    return weight_map;
  }

  /// Throws FormatError naming the first tensor (by name) that was never read, so that
  /// a checkpoint for a different architecture is not half-loaded silently. The
  /// `retnet_rel_pos.*` buffers are derived data and are ignored.
  void check_all_consumed() const {
    for (const auto& [name, loc] : names_) {
      if (consumed_.count(name) || name.find("retnet_rel_pos.") != std::string::npos) continue;
      throw FormatError(shards_[loc.shard].path() + ": unexpected tensor " + name_excerpt(name) +
                        " (not used by the model for this config)");
    }
  }

 private:
  struct Location {
    size_t shard;
    size_t index;  // into shards_[shard].tensors()
  };

  const TensorInfo& entry(const Location& loc) const {
    return shards_[loc.shard].tensors()[loc.index];
  }

  const Location* find_physical(const std::string& name) const {
    auto it = names_.find(name);
    return it == names_.end() ? nullptr : &it->second;
  }

  const Location* locate(const std::string& logical_name) const {
    if (const Location* loc = find_physical(prefix_ + logical_name)) return loc;
    if (logical_name == "output_projection.weight") {
      for (const char* alt : {"output_projection.weight", "lm_head.weight"})
        if (const Location* loc = find_physical(alt)) return loc;
    }
    if (naming_ == TensorNaming::kFla && logical_name.rfind("lm_head.", 0) == 0)
      return find_physical(logical_name);
    return nullptr;
  }

  const Location& require_location(const std::string& logical_name) const {
    const Location* loc = locate(logical_name);
    if (!loc) {
      const bool unprefixed =
          naming_ == TensorNaming::kFla && logical_name.rfind("lm_head.", 0) == 0;
      throw FormatError(dir_ + ": missing tensor " + (unprefixed ? "" : prefix_) + logical_name);
    }
    return *loc;
  }

  const TensorInfo& checked_entry(const std::string& logical_name,
                                  const std::vector<int64_t>& expected_shape) const {
    const Location& loc = require_location(logical_name);
    const TensorInfo& t = entry(loc);
    if (t.shape != expected_shape)
      throw FormatError(shards_[loc.shard].path() + ": tensor " + name_excerpt(t.name) +
                        " has shape " + detail::shape_string(t.shape) + ", expected " +
                        detail::shape_string(expected_shape));
    return t;
  }

  void add_shard(SafetensorsFile file) {
    const size_t shard = shards_.size();
    for (size_t i = 0; i < file.tensors().size(); ++i) {
      const std::string& name = file.tensors()[i].name;
      auto [it, inserted] = names_.emplace(name, Location{shard, i});
      if (!inserted)
        throw FormatError(file.path() + ": tensor " + name_excerpt(name) + " also appears in " +
                          shards_[it->second.shard].path() + ": expected each tensor in one shard");
    }
    shards_.push_back(std::move(file));
  }

  void open_sharded(const std::string& index_path) {
    namespace fs = std::filesystem;
    const std::map<std::string, std::string> weight_map = parse_index(
        read_regular_file(index_path, kMaxIndexBytes, "model.safetensors.index.json"), index_path);
    std::set<std::string> shard_names;
    for (const auto& [name, shard] : weight_map) shard_names.insert(shard);
    std::map<std::string, size_t> shard_index;
    for (const std::string& shard : shard_names) {
      const fs::path p = fs::path(dir_) / shard;
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(p, ec)))
        throw FormatError(index_path + ": shard " + name_excerpt(shard) + " is missing (expected " +
                          excerpt(p.string(), 200) + ")");
      shard_index[shard] = shards_.size();
      add_shard(SafetensorsFile(path_in_folder(dir_, shard)));
    }
    // The index must agree with the shards it names.
    for (const auto& [name, shard] : weight_map) {
      const Location* loc = find_physical(name);
      if (!loc || loc->shard != shard_index[shard])
        throw FormatError(index_path + ": weight_map puts tensor " + name_excerpt(name) + " in " +
                          name_excerpt(shard) + ", but " + shards_[shard_index[shard]].path() +
                          " has no such tensor");
    }
  }

  void detect_prefix() {
    // syncdoth's layout of September 2023 and earlier: another model, whatever its embedding.
    for (const auto& [name, loc] : names_)
      if (name.find("blocks.") != std::string::npos &&
          (name.find(".msr.") != std::string::npos || name.find(".ln1.") != std::string::npos))
        throw FormatError(shards_[loc.shard].path() + ": tensor " + name +
                          " is syncdoth's layout of September 2023 or earlier (blocks.{i}.msr, "
                          "ln1/ln2), a different model: not supported");
    std::vector<std::string> found;
    for (const char* p : {"", "decoder.", "model."})
      if (find_physical(std::string(p) + "embed_tokens.weight")) found.push_back(p);
    const bool fla = find_physical("model.embeddings.weight") != nullptr;
    if (fla && !found.empty())
      throw FormatError(dir_ +
                        ": mixes checkpoint families: has model.embeddings.weight (fla) and " +
                        found[0] + "embed_tokens.weight (torchscale, syncdoth)");
    if (fla) {
      prefix_ = "model.", naming_ = TensorNaming::kFla;
      return;
    }
    if (found.empty())
      throw FormatError(dir_ + ": missing tensor embed_tokens.weight (looked for " +
                        "embed_tokens.weight, decoder.embed_tokens.weight, " +
                        "model.embed_tokens.weight and fla's model.embeddings.weight)");
    if (found.size() > 1)
      throw FormatError(dir_ + ": ambiguous tensor prefix: both " + found[0] +
                        "embed_tokens.weight and " + found[1] +
                        "embed_tokens.weight exist, expected exactly one");
    prefix_ = found[0];
  }

  std::string dir_;
  std::string prefix_;
  TensorNaming naming_ = TensorNaming::kTorchscale;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, Location> names_;  // physical name -> where it is stored
  std::set<std::string> consumed_;         // physical names read so far
};

}  // namespace retnet
