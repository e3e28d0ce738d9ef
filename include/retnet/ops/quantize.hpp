// The two block formats of q8 and q4 weights and the rounding of a product's other operand: the
// storage contract that checkpoints, the loaders and the products share. Each run of kQuantBlock
// values along a row of W (the input dimension) is quantised against a binary16 scale:
//   q8: w = scale · n, n an int8 in [-127, 127], scale = max|w| / 127;
//   q4: w = scale · (n - 8), n in [0, 15], scale = -m / 8 for the block's value m of largest |m|
//       (m gets code 0; a minimum per block as well would cost 10 % more bytes for no
//       measurable gain in held-out quality).
// A q8/q4 product rounds its other operand, each row of x, the same way (Int8Rows: blocks of 32,
// int8 codes in [-127, 127] against a float scale max|x| / 127), so that a block's sum of
// products is an exact integer, computed with the CPU's int8 dot-product instructions where it
// has them (ops/int8_dots.hpp), and then scaled by the two scales. Activations, norms and the
// retention state are stored in the scalar type; only a product's operand is rounded, inside the
// product.
//
// StoredRows is a q8/q4 weight as a converted checkpoint holds it (docs/FORMATS.md, "Quantised
// weights"): row-major codes [rows][code_bytes(cols)] (q4: byte j holds the values 2j in its low
// and 2j + 1 in its high four bits), scales [rows][blocks(cols)]. The panels that products read
// hold the same codes in another order (ops/panel_format.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/float_formats.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/core/threads.hpp"
#include "retnet/ops/weight_type.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "quantised weights are read and written little-endian, as safetensors stores them");

namespace retnet {

/// Blocks of kQuantBlock values in a row of `cols` (the last one short when 32 does not divide
/// cols).
inline Index quant_blocks(Index cols) {
  return (cols + kQuantBlock - 1) / kQuantBlock;
}

/// Bytes of one stored row of codes: cols int8 values (q8) or ⌈cols / 2⌉ bytes (q4).
inline Index code_bytes(WeightType type, Index cols) {
  return type == WeightType::kQ4 ? (cols + 1) / 2 : cols;
}

/// Rows [first, first + rows) of a q8 or q4 weight in their stored, row-major form.
struct StoredRows {
  WeightType type = WeightType::kQ8;
  Index rows = 0, cols = 0;
  std::vector<uint8_t> codes;    // [rows][code_bytes(type, cols)]
  std::vector<uint16_t> scales;  // [rows][quant_blocks(cols)], binary16

  void resize(WeightType t, Index r, Index c) {
    type = t;
    rows = r;
    cols = c;
    codes.assign(static_cast<size_t>(r * code_bytes(t, c)), 0);
    scales.assign(static_cast<size_t>(r * quant_blocks(c)), 0);
  }
  /// Code of value (r, c): the int8 of q8 (as its byte) or the four bits of q4.
  int code(Index r, Index c) const {
    const uint8_t* row = codes.data() + r * code_bytes(type, cols);
    if (type == WeightType::kQ8) return static_cast<int8_t>(row[c]);
    return (row[c / 2] >> (4 * (c % 2))) & 0xf;
  }
  void set_code(Index r, Index c, int value) {
    uint8_t* row = codes.data() + r * code_bytes(type, cols);
    if (type == WeightType::kQ8) {
      row[c] = static_cast<uint8_t>(static_cast<int8_t>(value));
    } else {
      const int shift = 4 * static_cast<int>(c % 2);
      row[c / 2] = static_cast<uint8_t>((row[c / 2] & ~(0xf << shift)) | (value << shift));
    }
  }
};

/// Quantises `rows` rows of `cols` values (row-major, float) into `out`, resized. Throws
/// InvalidArgument when a block's scale is beyond binary16's range (|w| > 8.3e6 for q8, 5.2e5 for
/// q4): no trained weight is, so it names a damaged tensor.
inline void quantize_rows(WeightType type, const float* values, Index rows, Index cols,
                          StoredRows& out) {
  RETNET_REQUIRE(is_block_quantised(type), "quantize_rows: q8 or q4 only");
  out.resize(type, rows, cols);
  const Index blocks = quant_blocks(cols), row_bytes = code_bytes(type, cols);
  const auto quantize_row = [&](Index r) {
    int levels[kQuantBlock];
    const float* w = values + r * cols;
    uint8_t* codes = out.codes.data() + r * row_bytes;
    for (Index b = 0; b < blocks; ++b) {
      const Index c0 = b * kQuantBlock, n = std::min(kQuantBlock, cols - c0);
      float extreme = 0;  // the value of largest magnitude
      for (Index c = 0; c < n; ++c)
        if (std::abs(w[c0 + c]) > std::abs(extreme)) extreme = w[c0 + c];
      const uint16_t scale =
          float_to_half(type == WeightType::kQ8 ? std::abs(extreme) / 127 : -extreme / 8);
      const float s = half_to_float(scale);
      if (!std::isfinite(s))
        throw InvalidArgument(std::string(weight_type_name(type)) + ": values up to " +
                              std::to_string(std::abs(extreme)) +
                              " in a block are beyond a binary16 scale");
      out.scales[r * blocks + b] = scale;
      if (type == WeightType::kQ8) {
        for (Index c = 0; c < n; ++c)
          levels[c] = s != 0 ? int(std::clamp(std::nearbyint(w[c0 + c] / s), -127.f, 127.f)) : 0;
        for (Index c = 0; c < n; ++c) codes[c0 + c] = uint8_t(int8_t(levels[c]));
      } else {
        for (Index c = 0; c < n; ++c)
          levels[c] = s != 0 ? int(std::clamp(std::nearbyint(w[c0 + c] / s) + 8, 0.f, 15.f)) : 8;
        for (Index c = 0; c < n; c += 2)  // column 2j low, 2j + 1 high
          codes[(c0 + c) / 2] = uint8_t(levels[c] | (c + 1 < n ? levels[c + 1] << 4 : 0));
      }
    }
  };
  // Rows are independent: the threads share them (loading a model quantises billions), each
  // reading cols floats.
  parallel_for(rows, quantize_row, size_t(cols) * sizeof(float));
}

/// A q8/q4 product's other operand: rows of x rounded to int8 per block of 32 columns, as the
/// weights are: scale = max|x| / 127 (float), code = round(x / scale) in [-127, 127] (0 for an
/// all-zero block), zero past the last column. A block holding a NaN or an infinity gets a NaN
/// scale, so the product's outputs are NaN rather than silently finite.
struct Int8Rows {
  Index rows = 0, blocks = 0, stride = 0;  // stride = 32 · blocks
  std::vector<int8_t> codes;               // [rows][stride]
  std::vector<float> scales;               // [rows][blocks]
  std::vector<int32_t> sums;               // [rows][blocks]: Σ codes, for the codes' offsets
  std::vector<float> values;               // [rows][stride]: the codes as floats, when asked

  /// Rounds `rows` rows of `cols` values (row i at x + i · cols). Reuses the vectors' storage, so
  /// a product of the same or a smaller shape allocates nothing.
  void assign(const float* x, Index rows_, Index cols, bool with_values) {
    rows = rows_;
    blocks = quant_blocks(cols);
    stride = blocks * kQuantBlock;
    codes.resize(static_cast<size_t>(rows * stride));
    scales.resize(static_cast<size_t>(rows * blocks));
    sums.resize(static_cast<size_t>(rows * blocks));
    values.resize(with_values ? static_cast<size_t>(rows * stride) : 0);
    for (Index i = 0; i < rows; ++i)
      for (Index b = 0; b < blocks; ++b) {
        const Index c0 = b * kQuantBlock, n = std::min(kQuantBlock, cols - c0);
        const float* v = x + i * cols + c0;
        float amax = 0;
        bool finite = true;
        for (Index c = 0; c < n; ++c) {
          amax = std::max(amax, std::abs(v[c]));
          finite &= std::isfinite(v[c]);
        }
        const float scale = finite ? amax / 127 : std::numeric_limits<float>::quiet_NaN();
        int8_t* code = codes.data() + i * stride + c0;
        int32_t sum = 0;
        for (Index c = 0; c < kQuantBlock; ++c) {
          float level = 0;
          if (c < n && amax > 0 && finite)
            level = std::clamp(std::nearbyint(v[c] / scale), -127.f, 127.f);
          code[c] = static_cast<int8_t>(level);
          sum += code[c];
        }
        scales[i * blocks + b] = scale;
        sums[i * blocks + b] = sum;
        if (with_values)
          for (Index c = 0; c < kQuantBlock; ++c) values[i * stride + c0 + c] = code[c];
      }
  }
};

}  // namespace retnet
