// The types a linear map's weights can be stored in: the model's own scalar type ("f32"),
// bfloat16, and two block formats, q8 and q4, that quantise each run of 32 values along a row of
// W (the input dimension) against a binary16 scale:
//   q8: w = scale · n, n an int8 in [-127, 127], scale = max|w| / 127;
//   q4: w = scale · (n - 8), n in [0, 15], scale = -m / 8 for the block's value m of largest |m|
//       (m gets code 0; docs/PERFORMANCE.md measures this against a scale and a minimum).
// Activations, norms and the retention state stay in the scalar type: weights are dequantised a
// tile at a time inside the products (ops/linear.hpp) and never as a whole.
//
// A q8/q4 weight has two forms, both defined here:
//  - stored (StoredRows): row-major, as a converted checkpoint holds it (docs/FORMATS.md,
//    "Quantised weights"): codes [rows][code_bytes(cols)] (q4: byte j holds the values 2j in its
//    low and 2j + 1 in its high four bits), scales [rows][blocks(cols)];
//  - panels (LinearWeight's): per panel of 48 rows and per block of 32 columns, the block's
//    codes transposed ([32][48] bytes for q8; [16][48] for q4, byte (j, r) holding columns 2j and
//    2j + 1 of row r), then its 48 scales, so that a product reads one stream.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "retnet/core/error.hpp"
#include "retnet/core/float_formats.hpp"
#include "retnet/core/tensor.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "quantised weights are read and written little-endian, as safetensors stores them");

namespace retnet {

enum class WeightType { kF32, kBF16, kQ8, kQ4 };

/// "f32", "bf16", "q8" or "q4": the names of --weights and of converted checkpoints.
inline const char* weight_type_name(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "f32";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kQ8:
      return "q8";
    case WeightType::kQ4:
      return "q4";
  }
  return "?";
}

/// The type named `name`; InvalidArgument naming the choices otherwise.
inline WeightType parse_weight_type(const std::string& name) {
  for (WeightType t : {WeightType::kF32, WeightType::kBF16, WeightType::kQ8, WeightType::kQ4})
    if (name == weight_type_name(t)) return t;
  throw InvalidArgument("unknown weight type '" + name.substr(0, 32) +
                        "' (expected f32, bf16, q8 or q4)");
}

inline bool is_block_quantised(WeightType type) {
  return type == WeightType::kQ8 || type == WeightType::kQ4;
}

/// Values of a row that share one scale.
constexpr Index kQuantBlock = 32;

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
    type = t, rows = r, cols = c;
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
  const Index blocks = quant_blocks(cols);
  for (Index r = 0; r < rows; ++r) {
    const float* w = values + r * cols;
    for (Index b = 0; b < blocks; ++b) {
      const Index c0 = b * kQuantBlock, c1 = std::min(cols, c0 + kQuantBlock);
      float extreme = 0;  // the value of largest magnitude
      for (Index c = c0; c < c1; ++c)
        if (std::abs(w[c]) > std::abs(extreme)) extreme = w[c];
      const uint16_t scale =
          float_to_half(type == WeightType::kQ8 ? std::abs(extreme) / 127 : -extreme / 8);
      const float s = half_to_float(scale);
      if (!std::isfinite(s))
        throw InvalidArgument(std::string(weight_type_name(type)) + ": values up to " +
                              std::to_string(std::abs(extreme)) +
                              " in a block are beyond a binary16 scale");
      out.scales[r * blocks + b] = scale;
      for (Index c = c0; c < c1; ++c) {
        int n = type == WeightType::kQ8 ? 0 : 8;
        if (s != 0) {
          const float level = std::nearbyint(w[c] / s);
          n = type == WeightType::kQ8 ? static_cast<int>(std::clamp(level, -127.f, 127.f))
                                      : static_cast<int>(std::clamp(level + 8, 0.f, 15.f));
        }
        out.set_code(r, c, n);
      }
    }
  }
}

namespace detail {

/// Panel geometry of a weight type: see the file comment.
struct PanelFormat {
  static constexpr Index kWidth = 48;  // rows of W per panel (LinearWeight::kPanelRows)

  static Index block_bytes(WeightType type) {
    return type == WeightType::kQ8 ? kQuantBlock * kWidth + 2 * kWidth
                                   : kQuantBlock / 2 * kWidth + 2 * kWidth;
  }
  /// Bytes of one panel of `cols` columns for `type`, whose full-precision scalar is
  /// `scalar_bytes` wide.
  static Index panel_bytes(WeightType type, Index cols, Index scalar_bytes) {
    switch (type) {
      case WeightType::kF32:
        return cols * kWidth * scalar_bytes;
      case WeightType::kBF16:
        return cols * kWidth * 2;
      default:
        return quant_blocks(cols) * block_bytes(type);
    }
  }
};

/// Writes rows [0, src.rows) of `src` (<= 48 rows) into a q8/q4 panel (zeroed beforehand, so the
/// missing rows and columns stay zero).
inline void pack_panel(const StoredRows& src, uint8_t* panel) {
  constexpr Index kWidth = PanelFormat::kWidth;
  const WeightType type = src.type;
  const Index blocks = quant_blocks(src.cols), block_bytes = PanelFormat::block_bytes(type);
  for (Index b = 0; b < blocks; ++b) {
    uint8_t* block = panel + b * block_bytes;
    const Index c0 = b * kQuantBlock, c1 = std::min(src.cols, c0 + kQuantBlock);
    const Index code_area =
        type == WeightType::kQ8 ? kQuantBlock * kWidth : kQuantBlock / 2 * kWidth;
    auto* scales = reinterpret_cast<uint16_t*>(block + code_area);
    for (Index r = 0; r < src.rows; ++r) {
      scales[r] = src.scales[r * blocks + b];
      for (Index c = c0; c < c1; ++c) {
        const Index q = c - c0;
        if (type == WeightType::kQ8)
          block[q * kWidth + r] = static_cast<uint8_t>(static_cast<int8_t>(src.code(r, c)));
        else
          block[(q / 2) * kWidth + r] |= static_cast<uint8_t>(src.code(r, c) << (4 * (q % 2)));
      }
    }
  }
}

/// The inverse of pack_panel for rows [first, first + out.rows) of the panel (out already resized).
inline void unpack_panel_codes(const uint8_t* panel, Index first, StoredRows& out) {
  constexpr Index kWidth = PanelFormat::kWidth;
  const WeightType type = out.type;
  const Index blocks = quant_blocks(out.cols), block_bytes = PanelFormat::block_bytes(type);
  for (Index b = 0; b < blocks; ++b) {
    const uint8_t* block = panel + b * block_bytes;
    const Index c0 = b * kQuantBlock, c1 = std::min(out.cols, c0 + kQuantBlock);
    const Index code_area =
        type == WeightType::kQ8 ? kQuantBlock * kWidth : kQuantBlock / 2 * kWidth;
    const auto* scales = reinterpret_cast<const uint16_t*>(block + code_area);
    for (Index r = 0; r < out.rows; ++r) {
      const Index pr = first + r;
      out.scales[r * blocks + b] = scales[pr];
      for (Index c = c0; c < c1; ++c) {
        const Index q = c - c0;
        out.set_code(r, c,
                     type == WeightType::kQ8
                         ? static_cast<int8_t>(block[q * kWidth + pr])
                         : (block[(q / 2) * kWidth + pr] >> (4 * (q % 2))) & 0xf);
      }
    }
  }
}

/// kLanes codes as a float packet: int8 values (q8), the four bits at `shift` of bytes (q4), or
/// bfloat16s. With the widest integer-to-float conversions the target has; a plain loop
/// otherwise.
template <typename Scalar>
struct CodeLoader {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  static constexpr int kLanes = Eigen::internal::unpacket_traits<Packet>::size;

  static Packet int8s(const uint8_t* p) {
#if defined(__AVX512F__)
    if constexpr (kLanes == 16)
      return _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#endif
#if defined(__AVX2__)
    if constexpr (kLanes == 8)
      return _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#endif
    float v[kLanes];
    for (int i = 0; i < kLanes; ++i) v[i] = float(static_cast<int8_t>(p[i]));
    return Eigen::internal::ploadu<Packet>(v);
  }

  /// The low (high = false) or the high four bits of kLanes bytes: a row of q4 codes.
  static Packet nibbles(const uint8_t* p, bool high) {
#if defined(__AVX512F__)
    if constexpr (kLanes == 16) {
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm512_cvtepi32_ps(high ? _mm512_srli_epi32(b, 4)
                                     : _mm512_and_si512(b, _mm512_set1_epi32(0xf)));
    }
#endif
#if defined(__AVX2__)
    if constexpr (kLanes == 8) {
      const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      return _mm256_cvtepi32_ps(high ? _mm256_srli_epi32(b, 4)
                                     : _mm256_and_si256(b, _mm256_set1_epi32(0xf)));
    }
#endif
    float v[kLanes];
    for (int i = 0; i < kLanes; ++i) v[i] = float(high ? p[i] >> 4 : p[i] & 0xf);
    return Eigen::internal::ploadu<Packet>(v);
  }

  static Packet bf16s(const uint16_t* p) {
#if defined(__AVX512F__)
    if constexpr (kLanes == 16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
#endif
#if defined(__AVX2__)
    if constexpr (kLanes == 8)
      return _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
#endif
    float v[kLanes];
    for (int i = 0; i < kLanes; ++i) v[i] = bits_to_float(static_cast<uint32_t>(p[i]) << 16);
    return Eigen::internal::ploadu<Packet>(v);
  }
};

/// The rows [q0, q0 + depth) of a bf16, q8 or q4 panel as float packets: row(q, j) is packet j
/// (panel rows 48·p + j·kLanes ...) of input position q0 + q. The one place these types turn into
/// floats: q8 as scale · n, q4 as scale · n - 8 · scale (exact, fused or not), bf16 by shifting.
/// The products call it for each panel row (decoding in registers) or through unpack_tile.
template <WeightType kType>
struct PackedRows {
  using Load = CodeLoader<float>;
  using Packet = typename Load::Packet;
  static constexpr Index kWidth = PanelFormat::kWidth, kLanes = Load::kLanes;
  static constexpr Index kMaxDepth = 128;  // the products' depth slice

  PackedRows(const uint8_t* panel, Index q0, Index depth) : panel_(panel), q0_(q0) {
    if constexpr (kType != WeightType::kBF16) {
      constexpr Index kCodeBytes =
          kType == WeightType::kQ8 ? kQuantBlock * kWidth : kQuantBlock / 2 * kWidth;
      for (Index b = 0; b * kQuantBlock < depth; ++b) {
        const uint8_t* block = this->block(b * kQuantBlock);
        halves_to_floats(reinterpret_cast<const uint16_t*>(block + kCodeBytes), scale_[b], kWidth);
        for (Index r = 0; r < kWidth; ++r) offset_[b][r] = -8 * scale_[b][r];
      }
    }
  }

  Packet row(Index q, Index j) const {
    namespace ei = Eigen::internal;
    if constexpr (kType == WeightType::kBF16) {
      return Load::bf16s(reinterpret_cast<const uint16_t*>(panel_) + (q0_ + q) * kWidth +
                         j * kLanes);
    } else {
      const Index b = q / kQuantBlock, in_block = (q0_ + q) % kQuantBlock;
      const Packet s = ei::pload<Packet>(scale_[b] + j * kLanes);
      if constexpr (kType == WeightType::kQ8)
        return ei::pmul(s, Load::int8s(block(q) + in_block * kWidth + j * kLanes));
      return ei::pmadd(s,
                       Load::nibbles(block(q) + in_block / 2 * kWidth + j * kLanes, in_block % 2),
                       ei::pload<Packet>(offset_[b] + j * kLanes));
    }
  }

 private:
  const uint8_t* block(Index q) const {
    return panel_ + (q0_ + q) / kQuantBlock * PanelFormat::block_bytes(kType);
  }

  const uint8_t* panel_;
  Index q0_;
  alignas(64) float scale_[kMaxDepth / kQuantBlock][kWidth];
  alignas(64) float offset_[kMaxDepth / kQuantBlock][kWidth];
};

/// Calls f(rows) with the PackedRows of a bf16, q8 or q4 panel's rows [q0, q0 + depth).
template <typename F>
void with_packed_rows(WeightType type, const uint8_t* panel, Index q0, Index depth, F&& f) {
  switch (type) {
    case WeightType::kBF16:
      return f(PackedRows<WeightType::kBF16>(panel, q0, depth));
    case WeightType::kQ8:
      return f(PackedRows<WeightType::kQ8>(panel, q0, depth));
    case WeightType::kQ4:
      return f(PackedRows<WeightType::kQ4>(panel, q0, depth));
    case WeightType::kF32:
      break;
  }
  throw InvalidArgument("with_packed_rows: bf16, q8 or q4 only");
}

/// tile[q - q0][r] = W[48·p + r, q] for q in [q0, q0 + depth), r < 48, decoded from a bf16, q8
/// or q4 panel (PackedRows); q0 is a multiple of kQuantBlock, depth at most 128.
template <typename Scalar>
void unpack_tile(WeightType type, const uint8_t* panel, Index q0, Index depth, Scalar* tile) {
  static_assert(std::is_same_v<Scalar, float> || std::is_same_v<Scalar, double>);
  if constexpr (std::is_same_v<Scalar, float>) {
    with_packed_rows(type, panel, q0, depth, [&](const auto& rows) {
      using Rows = std::decay_t<decltype(rows)>;
      for (Index q = 0; q < depth; ++q)
        for (Index j = 0; j < Rows::kWidth / Rows::kLanes; ++j)
          Eigen::internal::pstoreu(tile + q * Rows::kWidth + j * Rows::kLanes, rows.row(q, j));
    });
  } else {  // double models hold f32 weights only (LinearWeight::resize); never reached
    (void)type, (void)panel, (void)q0, (void)depth, (void)tile;
    throw InvalidArgument("LinearWeight: bf16, q8 and q4 weights are for float models");
  }
}

}  // namespace detail
}  // namespace retnet
