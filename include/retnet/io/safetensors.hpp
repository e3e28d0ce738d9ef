// Reader for the safetensors format (io/safetensors_writer.hpp writes it): an 8-byte little-endian
// header length N, N bytes of JSON describing each tensor (dtype, shape, byte range), then the raw
// data.
//
// The reader trusts nothing in the file: every field is validated before it is used, and
// every failure throws a one-line FormatError naming the file, the tensor and what was
// expected, quoting file content only as a bounded, escaped excerpt. It follows the reference
// implementation's rules (docs/FORMATS.md, "What the loaders check"): the header is a JSON
// object beginning with '{', no key appears twice, each tensor spans exactly dtype size x
// elements bytes, and the tensors tile the data area: contiguous, without gap, overlap or
// trailing bytes. Only the header is held in memory; tensor data is streamed on demand in
// bounded blocks so that loading a model never holds a second full copy of its weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/file.hpp"
#include "retnet/core/float_formats.hpp"
#include "retnet/core/json.hpp"

namespace retnet {

/// Element types the library can read (and write). The floating types hold weights; the
/// bytes I8 and U8 hold the codes of quantised weights (ops/quantize.hpp), read raw. Other
/// safetensors dtypes (wider integers, FP8, ...) are rejected with a FormatError.
enum class DType { F32, F16, BF16, F64, I8, U8 };

inline bool is_floating(DType dtype) {
  return dtype != DType::I8 && dtype != DType::U8;
}

/// Bytes per element.
inline size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::F64:
      return 8;
    case DType::I8:
    case DType::U8:
      return 1;
  }
  return 0;
}

/// The name safetensors uses for the dtype ("F32", "F16", "BF16", "F64").
inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F64:
      return "F64";
    case DType::I8:
      return "I8";
    case DType::U8:
      return "U8";
  }
  return "?";
}

/// Parses a safetensors dtype name; false if it is not one of the supported dtypes.
inline bool dtype_from_name(const std::string& name, DType* out) {
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8, DType::U8}) {
    if (name == dtype_name(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

namespace detail {

inline uint16_t load_le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}
inline uint32_t load_le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline uint64_t load_le64(const uint8_t* p) {
  return static_cast<uint64_t>(load_le32(p)) | (static_cast<uint64_t>(load_le32(p + 4)) << 32);
}
inline void store_le16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void store_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void store_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

/// Decodes `count` little-endian elements of `dtype` from `src` into `dst`.
template <typename Scalar>
void decode(DType dtype, const uint8_t* src, size_t count, Scalar* dst) {
  static_assert(std::is_same<Scalar, float>::value || std::is_same<Scalar, double>::value,
                "tensors can be read as float or double");
  switch (dtype) {
    case DType::F32:
      for (size_t i = 0; i < count; ++i)
        dst[i] = static_cast<Scalar>(bits_to_float(load_le32(src + 4 * i)));
      break;
    case DType::F16:
      for (size_t i = 0; i < count; ++i)
        dst[i] = static_cast<Scalar>(half_to_float(load_le16(src + 2 * i)));
      break;
    case DType::BF16:
      for (size_t i = 0; i < count; ++i)
        dst[i] = static_cast<Scalar>(bf16_to_float(load_le16(src + 2 * i)));
      break;
    case DType::F64:
      for (size_t i = 0; i < count; ++i) {
        const uint64_t bits = load_le64(src + 8 * i);
        double d;
        std::memcpy(&d, &bits, sizeof d);
        dst[i] = static_cast<Scalar>(d);
      }
      break;
    case DType::I8:
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<Scalar>(static_cast<int8_t>(src[i]));
      break;
    case DType::U8:
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<Scalar>(src[i]);
      break;
  }
}

/// a * b, or false on uint64 overflow.
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

// At most 8 dimensions are written: a file may declare a shape of a million ones.
inline std::string shape_string(const std::vector<int64_t>& shape) {
  constexpr size_t kShown = 8;
  std::string s = "[";
  for (size_t i = 0; i < shape.size() && i < kShown; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() > kShown) s += ", ... (" + std::to_string(shape.size()) + " dimensions)";
  return s + "]";
}

inline std::string range_string(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Transfer block size: reads and writes go through a buffer of at most this many bytes.
// A multiple of every element size, so no element straddles two blocks.
constexpr size_t kIoBlockBytes = size_t{1} << 20;

}  // namespace detail

// ---------------------------------------------------------------------------------------

/// One tensor's entry in a safetensors header.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets relative to the start of the data area

  /// Number of elements (1 for a scalar of shape []). Validated not to overflow.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  uint64_t nbytes() const { return end - begin; }
};

/// A validated safetensors header plus the means to stream tensor data: from a file on
/// disk, or from a caller-owned memory buffer (see parse()).
class SafetensorsFile {
 public:
  /// Safetensors' own upper bound on the header; checked before anything is allocated.
  static constexpr uint64_t kMaxHeaderBytes = 100000000;

  /// Opens `path` and reads and validates its header (not the tensor data).
  explicit SafetensorsFile(const std::string& path) : path_(path) {
    uint64_t file_size = 0;
    std::ifstream in = open_regular_file(path, &file_size);
    if (file_size < 8)
      throw FormatError(path + ": truncated: expected at least 8 bytes (header length), found " +
                        std::to_string(file_size));
    uint8_t prefix[8];
    if (!in.read(reinterpret_cast<char*>(prefix), 8))
      throw FormatError(path + ": truncated: could not read the 8-byte header length");
    const uint64_t header_bytes = detail::load_le64(prefix);
    check_header_length(header_bytes, file_size);
    std::string header(static_cast<size_t>(header_bytes), '\0');
    if (!in.read(&header[0], static_cast<std::streamsize>(header_bytes)))
      throw FormatError(path + ": truncated: could not read the " + std::to_string(header_bytes) +
                        "-byte header");
    data_start_ = 8 + header_bytes;
    data_size_ = file_size - data_start_;
    parse_header(header.data(), header.size());
  }

  /// Parses a whole safetensors file held in memory. `label` names it in error messages.
  /// The buffer is not copied: it must outlive the returned object (read() uses it).
  static SafetensorsFile parse(const std::string& label, const uint8_t* data, size_t size) {
    SafetensorsFile file;
    file.path_ = label;
    file.memory_ = data;
    if (size < 8 || data == nullptr)
      throw FormatError(label + ": truncated: expected at least 8 bytes (header length), found " +
                        std::to_string(data ? size : 0));
    const uint64_t header_bytes = detail::load_le64(data);
    file.check_header_length(header_bytes, size);
    file.data_start_ = 8 + header_bytes;
    file.data_size_ = size - file.data_start_;
    file.parse_header(reinterpret_cast<const char*>(data + 8), static_cast<size_t>(header_bytes));
    return file;
  }

  /// The file path (or the label given to parse()).
  const std::string& path() const { return path_; }
  /// All tensors, sorted by name.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /// The optional `__metadata__` string map.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Absolute offset of the data area (8 + header length) and its size in bytes.
  uint64_t data_start() const { return data_start_; }
  uint64_t data_size() const { return data_size_; }

  bool contains(const std::string& name) const { return find(name) != nullptr; }

  /// The tensor's header entry; throws FormatError "PATH: missing tensor NAME".
  const TensorInfo& info(const std::string& name) const {
    const TensorInfo* t = find(name);
    if (!t) throw FormatError(path_ + ": missing tensor " + name);
    return *t;
  }

  /// Reads tensor `name` into dst[0 .. numel), converting to Scalar (float or double).
  template <typename Scalar>
  void read(const std::string& name, Scalar* dst) const {
    read(info(name), dst);
  }

  /// As above, for an entry of tensors(). With `require_finite`, a NaN or infinite value (after
  /// the conversion to Scalar, so an F64 beyond float's range counts) throws FormatError naming
  /// the tensor and the element; the check runs on each block as it is converted.
  template <typename Scalar>
  void read(const TensorInfo& t, Scalar* dst, bool require_finite = false) const {
    read(t, 0, static_cast<uint64_t>(t.numel()), dst, require_finite);
  }

  /// Elements [first, first + count) of tensor t (a block of rows, say), as read() does.
  template <typename Scalar>
  void read(const TensorInfo& t, uint64_t first, uint64_t count, Scalar* dst,
            bool require_finite = false) const {
    RETNET_REQUIRE(first <= static_cast<uint64_t>(t.numel()) &&
                       count <= static_cast<uint64_t>(t.numel()) - first,
                   "safetensors: element range out of bounds");
    const size_t esize = dtype_size(t.dtype);
    stream(t, t.begin + first * esize, count * esize,
           [&](const uint8_t* bytes, size_t n, uint64_t done) {
             detail::decode(t.dtype, bytes, n / esize, dst + done / esize);
             if (require_finite)
               check_finite(t, dst + done / esize, n / esize, first + done / esize);
           });
  }

  /// Bytes [first, first + count) of tensor t's data, as stored (the codes of a quantised weight).
  void read_bytes(const TensorInfo& t, uint64_t first, uint64_t count, uint8_t* dst) const {
    RETNET_REQUIRE(first <= t.nbytes() && count <= t.nbytes() - first,
                   "safetensors: byte range out of bounds");
    stream(t, t.begin + first, count, [&](const uint8_t* bytes, size_t n, uint64_t done) {
      std::copy_n(bytes, n, dst + done);
    });
  }

 private:
  SafetensorsFile() = default;

  /// Calls take(bytes, n, done) on consecutive blocks of the `total` bytes at data offset
  /// `start` (from memory, or read from the file a block at a time).
  template <typename Take>
  void stream(const TensorInfo& t, uint64_t start, uint64_t total, Take&& take) const {
    if (total == 0) return;
    if (memory_) {  // whole buffer is in memory and bounds were validated against it
      take(memory_ + data_start_ + start, static_cast<size_t>(total), 0);
      return;
    }
    std::ifstream in = open_regular_file(path_);
    in.seekg(static_cast<std::streamoff>(data_start_ + start));
    std::vector<uint8_t> block(
        static_cast<size_t>(std::min<uint64_t>(total, detail::kIoBlockBytes)));
    uint64_t done = 0;
    while (done < total) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(total - done, block.size()));
      in.read(reinterpret_cast<char*>(block.data()), static_cast<std::streamsize>(n));
      if (!in || static_cast<size_t>(in.gcount()) != n)
        throw FormatError(path_ + ": file ended while reading tensor " + t.name + ": expected " +
                          std::to_string(total) + " bytes at data offset " + std::to_string(start) +
                          ", found " + std::to_string(done + in.gcount()) +
                          " (was the file changed after it was opened?)");
      take(block.data(), n, done);
      done += n;
    }
  }

  template <typename Scalar>
  void check_finite(const TensorInfo& t, const Scalar* values, size_t count, uint64_t first) const {
    for (size_t i = 0; i < count; ++i) {
      if (std::isfinite(values[i])) continue;
      const char* what = std::isnan(values[i]) ? "NaN" : values[i] > 0 ? "+inf" : "-inf";
      throw FormatError(path_ + ": tensor " + name_excerpt(t.name) + ": element " +
                        std::to_string(first + i) + " of " + std::to_string(t.numel()) + " is " +
                        what + " (as " + (sizeof(Scalar) == 4 ? "float" : "double") +
                        "): expected finite weights");
    }
  }

  const TensorInfo* find(const std::string& name) const {
    auto it =
        std::lower_bound(tensors_.begin(), tensors_.end(), name,
                         [](const TensorInfo& t, const std::string& n) { return t.name < n; });
    return it != tensors_.end() && it->name == name ? &*it : nullptr;
  }

  // Rejects a header length that does not fit the file before it is used to allocate.
  void check_header_length(uint64_t header_bytes, uint64_t total_size) const {
    if (header_bytes > total_size - 8)
      throw FormatError(path_ + ": header length " + std::to_string(header_bytes) +
                        " runs past the end of the file: expected at most " +
                        std::to_string(total_size - 8) + " bytes after the 8-byte length");
    if (header_bytes > kMaxHeaderBytes)
      throw FormatError(path_ + ": header length " + std::to_string(header_bytes) +
                        " exceeds the safetensors limit of " + std::to_string(kMaxHeaderBytes));
  }

  void parse_header(const char* text, size_t size) {
    // The reference implementation refuses a header that does not begin with '{' (no leading
    // whitespace); trailing spaces are its padding.
    if (size == 0 || text[0] != '{')
      throw FormatError(path_ + ": header is not a JSON object: expected it to begin with '{', " +
                        "found " + excerpt(std::string_view(text, std::min<size_t>(size, 16)), 16));
    const nlohmann::json header = parse_json(std::string_view(text, size), path_, "header");
    if (!header.is_object())  // e.g. "{}x" is caught by the parser; kept as a guard
      throw FormatError(path_ + ": header is not a JSON object: expected object, found " +
                        std::string(header.type_name()));
    try {
      for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__")
          parse_metadata(it.value());
        else
          tensors_.push_back(parse_entry(it.key(), it.value()));
      }
    } catch (const nlohmann::json::exception& e) {  // a type check missed above
      throw FormatError(path_ + ": malformed header (" + e.what() + ")");
    }
    check_layout();
    std::sort(tensors_.begin(), tensors_.end(),
              [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  }

  void parse_metadata(const nlohmann::json& m) {
    if (!m.is_object())
      throw FormatError(path_ + ": __metadata__ must be an object of strings, found " +
                        std::string(m.type_name()));
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_string())
        throw FormatError(path_ + ": __metadata__ entry " + name_excerpt(it.key()) +
                          " must be a string, found " + std::string(it.value().type_name()));
      metadata_[it.key()] = it.value().get<std::string>();
    }
  }

  // Reads a non-negative JSON integer, or throws naming `what`.
  uint64_t non_negative(const nlohmann::json& v, const std::string& where, const char* what) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      if (i >= 0) return static_cast<uint64_t>(i);
      throw FormatError(where + ": " + what + " must be >= 0, found " + std::to_string(i));
    }
    throw FormatError(where + ": " + what + " must be an integer, found " + json_excerpt(v));
  }

  TensorInfo parse_entry(const std::string& name, const nlohmann::json& e) const {
    const std::string where = path_ + ": tensor " + name_excerpt(name);
    if (!e.is_object())
      throw FormatError(where + ": entry must be a JSON object, found " +
                        std::string(e.type_name()));
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!e.contains(key)) throw FormatError(where + ": missing \"" + key + "\"");
    TensorInfo t;
    t.name = name;

    const nlohmann::json& dtype = e["dtype"];
    if (!dtype.is_string())
      throw FormatError(where + ": \"dtype\" must be a string, found " + json_excerpt(dtype));
    if (!dtype_from_name(dtype.get<std::string>(), &t.dtype))
      throw FormatError(where + ": unknown dtype " + excerpt(dtype.get<std::string>(), 16) +
                        " (expected F32, F16, BF16, F64, I8 or U8)");

    const nlohmann::json& shape = e["shape"];
    if (!shape.is_array())
      throw FormatError(where + ": \"shape\" must be an array, found " + json_excerpt(shape));
    uint64_t numel = 1;
    for (const nlohmann::json& d : shape) {
      const uint64_t dim = non_negative(d, where, "shape dimension");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          !detail::checked_mul(numel, dim, &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw FormatError(where + ": element count of shape " + json_excerpt(shape) +
                          " overflows 64 bits");
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t expected_bytes = 0;
    if (!detail::checked_mul(numel, dtype_size(t.dtype), &expected_bytes))
      throw FormatError(where + ": byte size of shape " + json_excerpt(shape) +
                        " overflows 64 bits");

    const nlohmann::json& offsets = e["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2)
      throw FormatError(where + ": \"data_offsets\" must be an array [begin, end], found " +
                        json_excerpt(offsets));
    t.begin = non_negative(offsets[0], where, "data_offsets begin");
    t.end = non_negative(offsets[1], where, "data_offsets end");
    if (t.begin > t.end)
      throw FormatError(where + ": data_offsets " + detail::range_string(t.begin, t.end) +
                        " have begin > end");
    if (t.end > data_size_)
      throw FormatError(
          where + ": data_offsets " + detail::range_string(t.begin, t.end) +
          " lie outside the data area: expected end <= " + std::to_string(data_size_));
    if (t.end - t.begin != expected_bytes)
      throw FormatError(
          where + ": data_offsets " + detail::range_string(t.begin, t.end) + " span " +
          std::to_string(t.end - t.begin) + " bytes, expected " + std::to_string(expected_bytes) +
          " (shape " + detail::shape_string(t.shape) + " x " + std::to_string(dtype_size(t.dtype)) +
          " bytes of " + dtype_name(t.dtype) + ")");
    return t;
  }

  // The reference rule: ordered by (begin, end), each tensor begins where the previous one
  // ended, the first at 0, and the last ends at the end of the data area. So no two tensors
  // share bytes (one would alias the other), no bytes lie between them and none trail them.
  // An empty tensor occupies no bytes but must still sit at such a boundary.
  void check_layout() const {
    std::vector<const TensorInfo*> order;
    order.reserve(tensors_.size());
    for (const TensorInfo& t : tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
      if (a->begin != b->begin) return a->begin < b->begin;
      if (a->end != b->end) return a->end < b->end;
      return a->name < b->name;
    });
    uint64_t covered = 0;
    const TensorInfo* prev = nullptr;
    for (const TensorInfo* cur : order) {
      const std::string where = path_ + ": tensor " + name_excerpt(cur->name) + ": data_offsets " +
                                detail::range_string(cur->begin, cur->end);
      if (cur->begin < covered)
        throw FormatError(where + " overlap tensor " + name_excerpt(prev->name) + " at " +
                          detail::range_string(prev->begin, prev->end) +
                          ": expected disjoint byte ranges");
      if (cur->begin > covered)
        throw FormatError(where + " leave a gap of " + std::to_string(cur->begin - covered) +
                          " bytes after " +
                          (prev ? "tensor " + name_excerpt(prev->name) + " at " +
                                      detail::range_string(prev->begin, prev->end)
                                : std::string("the start of the data area")) +
                          ": expected contiguous byte ranges");
      covered = cur->end;
      prev = cur;
    }
    if (covered != data_size_)
      throw FormatError(path_ + ": the tensors cover " + std::to_string(covered) +
                        " bytes of the " + std::to_string(data_size_) +
                        "-byte data area, leaving " + std::to_string(data_size_ - covered) +
                        " trailing bytes: expected the tensors to cover it exactly");
  }

  std::string path_;
  const uint8_t* memory_ = nullptr;  // set for parse(): the caller's whole-file buffer
  uint64_t data_start_ = 0;
  uint64_t data_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace retnet
