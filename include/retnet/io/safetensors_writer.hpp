// Writer for the safetensors format (io/safetensors.hpp reads it and describes the layout):
// tensors given as floats are encoded to their dtype, little-endian, in bounded blocks, so that
// writing a model never holds a second full copy of its weights.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/float_formats.hpp"
#include "retnet/io/output_file.hpp"
#include "retnet/io/safetensors.hpp"

namespace retnet {

namespace detail {

/// Encodes `count` floats as little-endian `dtype` into `dst`.
inline void encode(DType dtype, const float* src, size_t count, uint8_t* dst) {
  switch (dtype) {
    case DType::F32:
      for (size_t i = 0; i < count; ++i) store_le32(dst + 4 * i, float_to_bits(src[i]));
      break;
    case DType::F16:
      for (size_t i = 0; i < count; ++i) store_le16(dst + 2 * i, float_to_half(src[i]));
      break;
    case DType::BF16:
      for (size_t i = 0; i < count; ++i) store_le16(dst + 2 * i, float_to_bf16(src[i]));
      break;
    case DType::F64:
      for (size_t i = 0; i < count; ++i) {
        const double d = src[i];
        uint64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        store_le64(dst + 8 * i, bits);
      }
      break;
    case DType::I8:
    case DType::U8:
      throw InvalidArgument("safetensors: I8 and U8 tensors are written from their bytes");
  }
}

}  // namespace detail

/// A tensor to write: `data` holds numel floats, row-major; they are stored as `dtype`
/// (F16 and BF16 round to nearest even). Or `bytes` holds them already encoded as `dtype`,
/// little-endian (I8 and U8 codes, binary16 scales).
struct SavedTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const float* data = nullptr;
  const void* bytes = nullptr;
};

/// Writes a safetensors file. Tensors are laid out in the given order; the header is
/// padded with spaces to a multiple of 8 so that the data area is 8-byte aligned.
/// Throws InvalidArgument for bad tensors (duplicate/empty names, negative dims, null
/// data) and Error if the file cannot be written. The file is written beside `path` and renamed
/// over it (ReplacingFile): a symbolic link at `path` is replaced, not followed.
inline void save_safetensors(const std::string& path, const std::vector<SavedTensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<uint64_t> numels;
  uint64_t offset = 0;
  for (const SavedTensor& t : tensors) {
    const std::string where = path + ": tensor " + t.name;
    if (t.name.empty() || t.name == "__metadata__")
      throw InvalidArgument(path + ": invalid tensor name \"" + t.name + "\"");
    if (header.contains(t.name)) throw InvalidArgument(where + " is given twice");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || !detail::checked_mul(numel, static_cast<uint64_t>(d), &numel))
        throw InvalidArgument(where + ": invalid shape " + detail::shape_string(t.shape));
    }
    if (numel > 0 && t.data == nullptr && t.bytes == nullptr)
      throw InvalidArgument(where + ": data is null");
    uint64_t bytes = 0;
    if (!detail::checked_mul(numel, dtype_size(t.dtype), &bytes) ||
        bytes > std::numeric_limits<uint64_t>::max() - offset)
      throw InvalidArgument(where + ": shape " + detail::shape_string(t.shape) + " is too large");
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    numels.push_back(numel);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    throw InvalidArgument(path + ": cannot encode the header (" + e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  ReplacingFile out(path);
  uint8_t length[8];
  detail::store_le64(length, text.size());
  out.write(length, 8);
  out.write(text.data(), text.size());
  std::vector<uint8_t> block;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t esize = dtype_size(tensors[i].dtype);
    if (tensors[i].bytes) {
      out.write(tensors[i].bytes, static_cast<size_t>(numels[i] * esize));
      continue;
    }
    const size_t per_block = detail::kIoBlockBytes / esize;
    block.resize(static_cast<size_t>(std::min<uint64_t>(numels[i], per_block)) * esize);
    for (uint64_t done = 0; done < numels[i];) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(numels[i] - done, per_block));
      detail::encode(tensors[i].dtype, tensors[i].data + done, n, block.data());
      out.write(block.data(), n * esize);
      done += n;
    }
  }
  out.commit();
}

}  // namespace retnet
