// W of a linear map y = x Wᵀ (PyTorch's layout, W [out, in]) as the products read it: panels of
// 48 rows of one weight type (ops/panel_format.hpp), built from full-precision rows or from a
// checkpoint's stored q8/q4 codes, and read back row by row.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "retnet/core/error.hpp"
#include "retnet/core/float_formats.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/ops/float16_decode.hpp"
#include "retnet/ops/panel_format.hpp"
#include "retnet/ops/quantize.hpp"
#include "retnet/ops/weight_type.hpp"

namespace retnet {

/// W [rows, cols] stored as panels of kPanelRows consecutive rows, each panel transposed:
///   panel p is [cols][kPanelRows], its element (q, r) = W[kPanelRows·p + r, q],
/// with the last panel padded by zero rows. A product reads a panel front to back (one sequential
/// stream per thread, which the hardware prefetcher follows) and turns each input value x[i, q]
/// into 48 multiply-adds against one panel row: the 48 outputs stay in SIMD registers, with no
/// horizontal sums, where PyTorch's row-major layout needs a sum across SIMD lanes per output
/// (benchmarks/bench_kernels.cpp compares the two: BM_DecodeProduct).
///
/// The values are of one WeightType (ops/weight_type.hpp): Scalar itself (kF32), f16 or bf16
/// panels that the products decode as they read them, or q8/q4 panels of int8 codes that the
/// products multiply by x rounded to int8 (Int8Rows, ops/quantize.hpp), block of 32 by block.
/// bf16 panels may ask for x rounded to bfloat16 as well (set_bf16_dots).
template <typename Scalar>
class LinearWeight {
 public:
  static constexpr Index kPanelRows = detail::PanelFormat::kWidth;

  LinearWeight() = default;
  LinearWeight(Index rows, Index cols, WeightType type = WeightType::kF32) {
    resize(rows, cols, type);
  }
  explicit LinearWeight(const Matrix<Scalar>& w, WeightType type = WeightType::kF32) {
    assign(w.rows(), w.cols(), type, [&](Index first, Index n, Scalar* out) {
      MatrixMap<Scalar>(out, n, w.cols()) = w.middleRows(first, n);
    });
  }

  /// Bytes that a [rows, cols] weight of `type` holds (in double: hostile shapes cannot overflow).
  static double bytes_for(Index rows, Index cols, WeightType type) {
    return double((rows + kPanelRows - 1) / kPanelRows) *
           double(detail::PanelFormat::panel_bytes(type, cols, sizeof(Scalar)));
  }

  /// Shape [rows, cols] of `type`, all zero.
  void resize(Index rows, Index cols, WeightType type = WeightType::kF32) {
    RETNET_REQUIRE(rows >= 0 && cols >= 0, "LinearWeight: negative shape");
    RETNET_REQUIRE((type == WeightType::kF32 || std::is_same_v<Scalar, float>),
                   "LinearWeight: f16, bf16, q8 and q4 weights are for float models");
    type_ = type;
    bf16_dots_ = false;
    rows_ = rows;
    cols_ = cols;
    panel_bytes_ = detail::PanelFormat::panel_bytes(type, cols, sizeof(Scalar));
    bytes_.assign(static_cast<size_t>(panels() * panel_bytes_), 0);
  }

  /// Shape [rows, cols] of `type` with the values fill(first, n, p) writes to p for rows [first,
  /// first + n), row-major: a panel's rows at a time, so that no full-precision copy of W is
  /// ever held (a checkpoint reader converts each block of rows as it goes).
  template <typename FillRows>
  void assign(Index rows, Index cols, WeightType type, FillRows&& fill) {
    resize(rows, cols, type);
    Matrix<Scalar> panel_rows(kPanelRows, cols);  // zero past the last row of W
    StoredRows codes;
    for (Index p = 0; p < panels(); ++p) {
      const Index first = p * kPanelRows, n = std::min(kPanelRows, rows - first);
      panel_rows.setZero();
      fill(first, n, panel_rows.data());
      uint8_t* panel = bytes_.data() + p * panel_bytes_;
      if (type == WeightType::kF32) {
        MatrixMap<Scalar>(reinterpret_cast<Scalar*>(panel), cols, kPanelRows) =
            panel_rows.transpose();
      } else if (is_16_bit_float(type)) {
        encode_16_bit_panel(type, panel_rows, reinterpret_cast<uint16_t*>(panel));
      } else if constexpr (std::is_same_v<Scalar, float>) {  // q8/q4 (float models only)
        quantize_rows(type, panel_rows.data(), n, cols, codes);
        detail::pack_panel(codes, panel);
      }
    }
  }

  /// Shape [rows, cols] of a q8/q4 `type` from stored codes: read(first, n, rows) fills `rows`
  /// (already resized to n rows) with rows [first, first + n), a panel at a time.
  template <typename ReadRows>
  void assign_stored(Index rows, Index cols, WeightType type, ReadRows&& read) {
    RETNET_REQUIRE(is_block_quantised(type), "LinearWeight: stored codes are q8 or q4");
    resize(rows, cols, type);
    StoredRows codes;
    for (Index p = 0; p < panels(); ++p) {
      const Index first = p * kPanelRows, n = std::min(kPanelRows, rows - first);
      codes.resize(type, n, cols);
      read(first, n, codes);
      detail::pack_panel(codes, bytes_.data() + p * panel_bytes_);
    }
  }

  /// Rows [first, first + n) of a q8/q4 weight in their stored form (for writing a checkpoint).
  StoredRows stored_rows(Index first, Index n) const {
    RETNET_REQUIRE(is_block_quantised(type_), "LinearWeight: stored codes are q8 or q4");
    RETNET_REQUIRE(first >= 0 && n >= 0 && first + n <= rows_, "LinearWeight: rows out of range");
    StoredRows out, part;
    out.resize(type_, n, cols_);
    const Index row_bytes = code_bytes(type_, cols_), blocks = quant_blocks(cols_);
    for (Index r = first; r < first + n;) {
      const Index in_panel = std::min(first + n, (r / kPanelRows + 1) * kPanelRows) - r;
      part.resize(type_, in_panel, cols_);
      detail::unpack_panel_codes(bytes_.data() + r / kPanelRows * panel_bytes_, r % kPanelRows,
                                 part);
      std::copy(part.codes.begin(), part.codes.end(), out.codes.begin() + (r - first) * row_bytes);
      std::copy(part.scales.begin(), part.scales.end(), out.scales.begin() + (r - first) * blocks);
      r += in_panel;
    }
    return out;
  }

  WeightType type() const { return type_; }
  /// Whether the products of a bf16 weight round x to bfloat16 too (ops/bf16_dots.hpp): on CPUs
  /// with AVX512-BF16 they then run on vdpbf16ps, twice the float rate for prompts.
  bool bf16_dots() const { return bf16_dots_; }
  void set_bf16_dots(bool on) {
    RETNET_REQUIRE(!on || type_ == WeightType::kBF16, "LinearWeight: bf16 dots need bf16 weights");
    bf16_dots_ = on;
  }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  Index size() const { return rows_ * cols_; }
  Index panels() const { return (rows_ + kPanelRows - 1) / kPanelRows; }
  /// Bytes of W's rows as held (codes and scales for q8/q4): what a product reads, without the
  /// zero rows that pad the last panel.
  size_t stored_bytes() const { return static_cast<size_t>(rows_ * (panel_bytes_ / kPanelRows)); }

  /// Panel p as stored (f16 or bf16 values, or q8/q4 blocks of codes and scales:
  /// ops/panel_format.hpp).
  const uint8_t* packed_panel(Index p) const { return bytes_.data() + p * panel_bytes_; }

  /// Panel p's rows [q0, q0 + depth) as Scalars, [depth][kPanelRows], of an f32, f16 or bf16
  /// weight: the panel itself for kF32, else decoded into `scratch` (room for depth·kPanelRows
  /// values).
  const Scalar* tile(Index p, Index q0, Index depth, Scalar* scratch) const {
    const uint8_t* panel = bytes_.data() + p * panel_bytes_;
    if (type_ == WeightType::kF32) return reinterpret_cast<const Scalar*>(panel) + q0 * kPanelRows;
    RETNET_REQUIRE(is_16_bit_float(type_), "LinearWeight::tile: f32, f16 or bf16 weights only");
    if constexpr (std::is_same_v<Scalar, float>) {
      if (type_ == WeightType::kF16)
        detail::unpack_float16_tile<WeightType::kF16>(panel, q0, depth, scratch);
      else
        detail::unpack_float16_tile<WeightType::kBF16>(panel, q0, depth, scratch);
    }
    return scratch;
  }

  /// out[q] = W[r, q] for q < cols (a row of an embedding).
  void copy_row(Index r, Scalar* out) const {
    RETNET_REQUIRE(r >= 0 && r < rows_, "LinearWeight: row out of range");
    for (Index q = 0; q < cols_; ++q) out[q] = value(r, q);
  }

  /// W[r, q].
  Scalar at(Index r, Index q) const {
    RETNET_REQUIRE(r >= 0 && r < rows_ && q >= 0 && q < cols_, "LinearWeight: out of range");
    return value(r, q);
  }

  Matrix<Scalar> to_matrix() const {
    Matrix<Scalar> w(rows_, cols_);
    std::vector<Scalar> row(static_cast<size_t>(cols_));
    for (Index r = 0; r < rows_; ++r) {
      copy_row(r, row.data());
      w.row(r) = Eigen::Map<const RowVector<Scalar>>(row.data(), cols_);
    }
    return w;
  }

 private:
  Scalar value(Index r, Index q) const {
    using Format = detail::PanelFormat;
    const uint8_t* panel = bytes_.data() + r / kPanelRows * panel_bytes_;
    const Index pr = r % kPanelRows;
    switch (type_) {
      case WeightType::kF32:
        return reinterpret_cast<const Scalar*>(panel)[q * kPanelRows + pr];
      case WeightType::kF16:
        return half_to_float(reinterpret_cast<const uint16_t*>(panel)[q * kPanelRows + pr]);
      case WeightType::kBF16:
        return bf16_to_float(reinterpret_cast<const uint16_t*>(panel)[q * kPanelRows + pr]);
      default: {
        const uint8_t* block = panel + q / kQuantBlock * Format::block_bytes(type_);
        const int code = Format::code(type_, block, pr, q % kQuantBlock) - Format::offset(type_);
        return half_to_float(Format::scales(type_, block)[pr]) * Scalar(code);  // exact
      }
    }
  }

  /// out[q·kPanelRows + r] = rows(r, q) as f16 or bf16, rounded to nearest even (a value of the
  /// type is kept as it is). InvalidArgument for a finite value beyond f16's range (65504), which
  /// would become infinite.
  static void encode_16_bit_panel(WeightType type, const Matrix<Scalar>& rows, uint16_t* out) {
    const auto encode_all = [&](auto encode) {  // one loop per type, the conversion inlined
      for (Index q = 0; q < rows.cols(); ++q)
        for (Index r = 0; r < kPanelRows; ++r)
          out[q * kPanelRows + r] = encode(static_cast<float>(rows(r, q)));
    };
    if (type == WeightType::kBF16) return encode_all([](float v) { return float_to_bf16(v); });
    encode_all([](float v) {
      const uint16_t h = float_to_half(v);
      if ((h & 0x7fffu) == 0x7c00u && std::isfinite(v))
        throw InvalidArgument("f16: a weight of " + std::to_string(v) +
                              " is beyond binary16's range (largest 65504)");
      return h;
    });
  }

  WeightType type_ = WeightType::kF32;
  bool bf16_dots_ = false;
  Index rows_ = 0, cols_ = 0, panel_bytes_ = 0;
  std::vector<uint8_t, Eigen::aligned_allocator<uint8_t>> bytes_;
};

}  // namespace retnet
