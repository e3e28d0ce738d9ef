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
#include <cstring>
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
#include "retnet/io/model_folder.hpp"
#include "retnet/io/safetensors.hpp"
#include "retnet/model/family.hpp"

namespace retnet {

class CheckpointReader {
 public:
  /// Largest model.safetensors.index.json read (a real one lists a few thousand tensors in a
  /// few hundred KB); checked before the file is read.
  static constexpr uint64_t kMaxIndexBytes = 64ull << 20;

  /// Opens the checkpoint in `dir` and validates every shard header; reads no weights.
  explicit CheckpointReader(const std::string& dir) : dir_(dir) {
    namespace fs = std::filesystem;
    require_model_folder(dir);
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    const fs::path single = fs::path(dir) / "model.safetensors";
    std::error_code ec;
    // symlink_status: a dangling link is reported as such, not skipped as absent.
    if (fs::exists(fs::symlink_status(index, ec))) {
      open_sharded(path_in_folder(dir, index.filename().string()));
    } else {
      if (!fs::exists(fs::symlink_status(single, ec)))
        throw FormatError(single.string() + ": missing (expected model.safetensors or " +
                          "model.safetensors.index.json in " + dir + ")" +
                          unread_weights_note(dir));
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
  /// The family the tensors' names show (model/family.hpp): the one whose embedding name, under
  /// one of its prefixes, the checkpoint holds.
  const FamilyTable& family() const { return *family_; }
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

  /// Whether the logical tensor exists. The family's output projection also matches its
  /// aliases (torchscale's: `lm_head.weight`, HF, and an unprefixed `output_projection.weight`).
  /// With fla's naming, `lm_head.*` is looked up without the prefix (stored beside `model.`).
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

  // Whether the family stores `logical_name` without the prefix (fla's lm_head.*).
  bool unprefixed(const std::string& logical_name) const {
    const char* stem = family_->unprefixed_stem;
    return stem && logical_name.rfind(stem, 0) == 0;
  }

  const Location* locate(const std::string& logical_name) const {
    if (const Location* loc = find_physical(prefix_ + logical_name)) return loc;
    if (logical_name == family_->tensors.output)
      for (const char* alias : family_->output_aliases)
        if (const Location* loc = find_physical(alias)) return loc;
    return unprefixed(logical_name) ? find_physical(logical_name) : nullptr;
  }

  const Location& require_location(const std::string& logical_name) const {
    const Location* loc = locate(logical_name);
    if (!loc)
      throw FormatError(dir_ + ": missing tensor " + (unprefixed(logical_name) ? "" : prefix_) +
                        logical_name);
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

  // Refuses the tensors of layouts no family supports (model/family.hpp, tensor_refusals).
  void refuse_tensors() const {
    for (const FamilyTable* table : family_tables())
      for (const TensorRefusal& r : table->tensor_refusals)
        for (const auto& [name, loc] : names_) {
          if (name.find(r.contains) == std::string::npos) continue;
          bool refused = r.and_any.empty();
          for (const char* part : r.and_any) refused |= name.find(part) != std::string::npos;
          if (refused)
            throw FormatError(shards_[loc.shard].path() + ": tensor " + name_excerpt(name) +
                              " is " + table->name + "'s " + r.what + ": not supported");
        }
  }

  // The family and prefix: exactly one family's embedding, under exactly one of its prefixes.
  void detect_prefix() {
    refuse_tensors();
    struct Found {
      const FamilyTable* table;
      std::string name;  // the embedding's stored name
    };
    std::vector<Found> found;
    std::string looked_for;
    for (const FamilyTable* table : family_tables())
      for (const char* p : table->prefixes) {
        const std::string name = p + std::string(table->tensors.embed);
        looked_for += (looked_for.empty() ? "" : ", ") + name + " (" + table->name + ")";
        if (find_physical(name)) found.push_back({table, name});
      }
    if (found.empty())
      throw FormatError(dir_ + ": missing the embedding tensor (looked for " + looked_for + ")");
    for (const Found& other : found) {
      if (std::string(other.table->tensors.embed) != found[0].table->tensors.embed)
        throw FormatError(dir_ + ": mixes checkpoint families: has " + found[0].name + " (" +
                          found[0].table->name + ") and " + other.name + " (" + other.table->name +
                          ")");
      if (other.name != found[0].name)
        throw FormatError(dir_ + ": ambiguous tensor prefix: both " + found[0].name + " and " +
                          other.name + " exist, expected exactly one");
    }
    family_ = found[0].table;
    prefix_ = found[0].name.substr(0, found[0].name.size() - std::strlen(family_->tensors.embed));
  }

  std::string dir_;
  std::string prefix_;
  const FamilyTable* family_ = &kTorchscaleFamily;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, Location> names_;  // physical name -> where it is stored
  std::set<std::string> consumed_;         // physical names read so far
};

}  // namespace retnet
