// `retnet score --logits-out`: a float32 NumPy .npy file (format version 1.0, little-endian,
// C order) written row by row, so that the logits of a long text never have to be held in
// memory at once.
#pragma once

#include <cstdint>
#include <fstream>
#include <retnet/retnet.hpp>
#include <string>
#include <vector>

namespace retnet::cli {

class NpyWriter {
 public:
  NpyWriter(const std::string& path, const std::vector<int64_t>& shape)
      : path_(path), out_(path, std::ios::binary) {
    if (!out_) throw Error(path + ": cannot open for writing");
    std::string dims;
    remaining_ = 1;
    for (int64_t d : shape) {
      dims += std::to_string(d) + ", ";
      remaining_ *= d;
    }
    if (shape.size() > 1) dims.erase(dims.size() - 2);
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    header.append(63 - (10 + header.size()) % 64, ' ');  // data starts at a multiple of 64
    header += '\n';
    out_.write("\x93NUMPY\x01\x00", 8);
    const uint16_t len = static_cast<uint16_t>(header.size());
    out_.write(reinterpret_cast<const char*>(&len), 2);
    out_.write(header.data(), std::streamsize(header.size()));
  }

  void write(const float* data, int64_t count) {
    if (count > remaining_) throw Error(path_ + ": more values written than the shape holds");
    out_.write(reinterpret_cast<const char*>(data), std::streamsize(count * sizeof(float)));
    remaining_ -= count;
    if (!out_) throw Error(path_ + ": write failed");
  }

  /// Checks that the file holds exactly the shape's values.
  void close() {
    if (remaining_ != 0) throw Error(path_ + ": fewer values written than the shape holds");
    out_.close();
  }

 private:
  std::string path_;
  std::ofstream out_;
  int64_t remaining_ = 0;
};

}  // namespace retnet::cli
