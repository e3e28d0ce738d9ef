// Reads the NumPy .npy files of the test fixtures in tests/data (little-endian, C order): token
// ids and the reference implementation's logits.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "retnet/core/error.hpp"

namespace retnet {

struct NpyArray {
  std::string dtype;  // "<f4", "<f8", "<i8", "<i4"
  std::vector<int64_t> shape;
  std::vector<char> bytes;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  /// The values converted to T (float, double or an integer type).
  template <typename T>
  std::vector<T> as() const {
    std::vector<T> out(static_cast<size_t>(numel()));
    auto convert = [&](auto tag) {
      using Src = decltype(tag);
      for (size_t i = 0; i < out.size(); ++i) {
        Src v;
        std::memcpy(&v, bytes.data() + i * sizeof(Src), sizeof(Src));
        out[i] = static_cast<T>(v);
      }
    };
    if (dtype == "<f4")
      convert(float{});
    else if (dtype == "<f8")
      convert(double{});
    else if (dtype == "<i8")
      convert(int64_t{});
    else if (dtype == "<i4")
      convert(int32_t{});
    else
      throw FormatError("npy: unsupported dtype " + dtype);
    return out;
  }
};

inline NpyArray load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path + ": cannot open");
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw FormatError(path + ": not a .npy file");
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    uint16_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 2);
    header_len = n;
  } else {
    in.read(reinterpret_cast<char*>(&header_len), 4);
  }
  if (!in || header_len > (1u << 20)) throw FormatError(path + ": bad .npy header length");
  std::string header(header_len, ' ');
  in.read(header.data(), header_len);
  if (!in) throw FormatError(path + ": truncated .npy header");
  auto field = [&](const std::string& key) {
    const auto at = header.find("'" + key + "'");
    if (at == std::string::npos) throw FormatError(path + ": .npy header lacks " + key);
    return header.substr(header.find(':', at) + 1);
  };
  NpyArray a;
  const std::string descr = field("descr");
  const auto q1 = descr.find('\''), q2 = descr.find('\'', q1 + 1);
  a.dtype = descr.substr(q1 + 1, q2 - q1 - 1);
  if (field("fortran_order").find("True") < field("fortran_order").find(','))
    throw FormatError(path + ": Fortran-order .npy is not supported");
  const std::string shape = field("shape");
  const std::string dims = shape.substr(shape.find('(') + 1, shape.find(')') - shape.find('(') - 1);
  size_t pos = 0;
  while (pos < dims.size()) {
    const size_t comma = dims.find(',', pos);
    const std::string item =
        dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.find_first_of("0123456789") != std::string::npos) a.shape.push_back(std::stoll(item));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  const size_t item = a.dtype == "<f4" || a.dtype == "<i4" ? 4 : 8;
  a.bytes.resize(static_cast<size_t>(a.numel()) * item);
  in.read(a.bytes.data(), std::streamsize(a.bytes.size()));
  if (!in) throw FormatError(path + ": truncated .npy data");
  return a;
}

}  // namespace retnet
