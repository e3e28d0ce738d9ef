// The panels a LinearWeight stores W in, per weight type: W [rows, cols] cut into panels of
// PanelFormat::kWidth (48) consecutive rows, each panel holding its rows transposed, so that a
// product reads one panel front to back (ops/linear_weight.hpp says why).
//  - f32, f16 and bf16: [cols][48] values, element (q, r) = W[48·p + r, q];
//  - q8 and q4: per block of kQuantBlock (32) columns, the block's codes in the order an int8
//    dot-product instruction reads them, then its 48 binary16 scales: each 32-bit word holds 4
//    consecutive columns of one row, words run over the 48 rows, then over the next 4 columns.
//    q8 stores n + 128 (a byte), q4 stores n (column c < 16 in the low four bits of a byte,
//    c + 16 in its high four), so that a code is always an unsigned byte and its value that byte
//    minus an offset (128 or 8). The codes and scales are those of the stored form (StoredRows,
//    ops/quantize.hpp), reordered.
#pragma once

#include <algorithm>
#include <cstdint>

#include "retnet/core/tensor.hpp"
#include "retnet/ops/quantize.hpp"
#include "retnet/ops/weight_type.hpp"

namespace retnet {
namespace detail {

/// Panel geometry of a weight type: see the file comment.
struct PanelFormat {
  static constexpr Index kWidth = 48;  // rows of W per panel (LinearWeight::kPanelRows)

  /// Bytes of a q8/q4 block's codes, before its 48 binary16 scales.
  static Index code_area(WeightType type) {
    return (type == WeightType::kQ8 ? kQuantBlock : kQuantBlock / 2) * kWidth;
  }
  static Index block_bytes(WeightType type) { return code_area(type) + 2 * kWidth; }
  /// Bytes of one panel of `cols` columns for `type`, whose full-precision scalar is
  /// `scalar_bytes` wide.
  static Index panel_bytes(WeightType type, Index cols, Index scalar_bytes) {
    switch (type) {
      case WeightType::kF32:
        return cols * kWidth * scalar_bytes;
      case WeightType::kF16:
      case WeightType::kBF16:
        return cols * kWidth * 2;
      default:
        return quant_blocks(cols) * block_bytes(type);
    }
  }
  /// A code's value is its unsigned form (the byte of q8, the four bits of q4) minus this.
  static constexpr int offset(WeightType type) { return type == WeightType::kQ8 ? 128 : 8; }
  /// The byte of a block's code area holding column q (< 32) of row r (< 48).
  static Index byte_of(WeightType type, Index r, Index q) {
    const Index column = type == WeightType::kQ8 ? q : q % 16;
    return (column / 4 * kWidth + r) * 4 + column % 4;
  }
  /// The unsigned code of column q of row r in a block.
  static int code(WeightType type, const uint8_t* block, Index r, Index q) {
    const int byte = block[byte_of(type, r, q)];
    if (type == WeightType::kQ8) return byte;
    return q < 16 ? byte & 0xf : byte >> 4;
  }
  static const uint16_t* scales(WeightType type, const uint8_t* block) {
    return reinterpret_cast<const uint16_t*>(block + code_area(type));
  }
};

/// Writes rows [0, src.rows) of `src` (<= 48 rows) into a q8/q4 panel (zeroed beforehand). The
/// missing rows and columns get the code of value 0 and scale 0.
inline void pack_panel(const StoredRows& src, uint8_t* panel) {
  const WeightType type = src.type;
  const Index blocks = quant_blocks(src.cols), block_bytes = PanelFormat::block_bytes(type);
  const Index area = PanelFormat::code_area(type);
  for (Index b = 0; b < blocks; ++b) {
    uint8_t* block = panel + b * block_bytes;
    std::fill(block, block + area, type == WeightType::kQ8 ? 0x80 : 0x88);
    auto* scales = reinterpret_cast<uint16_t*>(block + area);
    const Index c0 = b * kQuantBlock, c1 = std::min(src.cols, c0 + kQuantBlock);
    for (Index r = 0; r < src.rows; ++r) {
      scales[r] = src.scales[r * blocks + b];
      for (Index c = c0; c < c1; ++c) {
        const Index q = c - c0;
        uint8_t& byte = block[PanelFormat::byte_of(type, r, q)];
        if (type == WeightType::kQ8) {
          byte = static_cast<uint8_t>(src.code(r, c) + 128);
        } else {
          const int shift = q < 16 ? 0 : 4;
          byte = static_cast<uint8_t>((byte & ~(0xf << shift)) | (src.code(r, c) << shift));
        }
      }
    }
  }
}

/// The inverse of pack_panel for rows [first, first + out.rows) of the panel (out already resized).
inline void unpack_panel_codes(const uint8_t* panel, Index first, StoredRows& out) {
  const WeightType type = out.type;
  const Index blocks = quant_blocks(out.cols), block_bytes = PanelFormat::block_bytes(type);
  for (Index b = 0; b < blocks; ++b) {
    const uint8_t* block = panel + b * block_bytes;
    const Index c0 = b * kQuantBlock, c1 = std::min(out.cols, c0 + kQuantBlock);
    for (Index r = 0; r < out.rows; ++r) {
      out.scales[r * blocks + b] = PanelFormat::scales(type, block)[first + r];
      for (Index c = c0; c < c1; ++c) {
        const int code = PanelFormat::code(type, block, first + r, c - c0);
        out.set_code(r, c, type == WeightType::kQ8 ? code - 128 : code);
      }
    }
  }
}

/// tile[q][r] = the value of code (q, r) of a q8/q4 block (n, or n - 8), unscaled, for q < 32
/// and r < 48: the portable kernel's operand.
inline void unpack_block_codes(WeightType type, const uint8_t* block, float* tile) {
  constexpr Index kWidth = PanelFormat::kWidth;
  const int offset = PanelFormat::offset(type);
  for (Index q = 0; q < kQuantBlock; ++q)
    for (Index r = 0; r < kWidth; ++r)
      tile[q * kWidth + r] = float(PanelFormat::code(type, block, r, q) - offset);
}

}  // namespace detail
}  // namespace retnet
