// The types a linear map's weights can be stored in: the model's own scalar type ("f32"),
// bfloat16, and two block formats, q8 and q4, that quantise each run of 32 values along a row of
// W (the input dimension) against a binary16 scale:
//   q8: w = scale · n, n an int8 in [-127, 127], scale = max|w| / 127;
//   q4: w = scale · (n - 8), n in [0, 15], scale = -m / 8 for the block's value m of largest |m|
//       (m gets code 0; docs/PERFORMANCE.md measures this against a scale and a minimum).
// A q8/q4 product rounds its other operand, each row of x, the same way (Int8Rows: blocks of 32,
// int8 codes in [-127, 127] against a float scale max|x| / 127), so that a block's sum of
// products is an exact integer, computed with the CPU's int8 dot-product instructions where it
// has them (Int8Dots), and then scaled by the two scales. Activations, norms and the retention
// state are stored in the scalar type; only a product's operand is rounded, inside the product.
//
// A q8/q4 weight has two forms, both defined here:
//  - stored (StoredRows): row-major, as a converted checkpoint holds it (docs/FORMATS.md,
//    "Quantised weights"): codes [rows][code_bytes(cols)] (q4: byte j holds the values 2j in its
//    low and 2j + 1 in its high four bits), scales [rows][blocks(cols)];
//  - panels (LinearWeight's): per panel of 48 rows and per block of 32 columns, the block's codes
//    in the order an int8 dot-product instruction reads them, then its 48 scales (PanelFormat):
//    each 32-bit word holds 4 consecutive columns of one row, words run over the 48 rows, then
//    over the next 4 columns. q8 stores n + 128 (a byte), q4 stores n (column c < 16 in the low
//    four bits of a byte, c + 16 in its high four), so that a code is always an unsigned byte and
//    its value that byte minus an offset (128 or 8).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "retnet/core/error.hpp"
#include "retnet/core/float_formats.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/core/threads.hpp"

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
  const Index blocks = quant_blocks(cols), row_bytes = code_bytes(type, cols);
  // Rows are independent: each thread takes a share (loading a model quantises billions).
  const Index shares = std::min<Index>(rows, num_threads());
  parallel_for(shares, [&](Index t) {
    int levels[kQuantBlock];
    for (Index r = rows * t / shares; r < rows * (t + 1) / shares; ++r) {
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
    }
  });
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
    rows = rows_, blocks = quant_blocks(cols), stride = blocks * kQuantBlock;
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

namespace detail {

/// How far ahead of its reads a product asks for a panel's bytes. The hardware prefetcher alone
/// falls behind once a step does several rows' multiply-adds per byte it reads (batch 8 ran
/// 1.5 x slower without this; docs/PERFORMANCE.md, "Weight types: speed").
constexpr Index kPrefetchBytes = 6144;

/// Asks for the `bytes` bytes at p + kPrefetchBytes, for a step that multiplies them by kRows
/// rows of x: one row waits on nothing but the bytes, so they are asked into L1; several rows
/// have multiply-adds to overlap with the stream, and a prefetch into L1 would hold one of the
/// few L1 fill buffers that their own loads need, so the bytes are asked into L2 (batch 8, f32,
/// 2 threads: 5.2 -> 3.6 ms; docs/PERFORMANCE.md, "Batch 8"). Past the end of W this is
/// harmless: a prefetch never faults, and the address is computed as an integer.
template <int kRows = 1>
inline void prefetch_ahead(const void* p, Index bytes) {
  constexpr int kLocality = kRows == 1 ? 3 : 2;  // prefetcht0 : prefetcht1
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kPrefetchBytes;
  for (Index b = 0; b < bytes; b += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(ahead + b), 0, kLocality);
}

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

/// bfloat16s as a float packet, with the widest conversion the target has; a plain loop
/// otherwise.
template <typename Scalar>
struct Bf16Loader {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  static constexpr int kLanes = Eigen::internal::unpacket_traits<Packet>::size;

  static Packet load(const uint16_t* p) {
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

/// The rows [q0, q0 + depth) of a bf16 panel as float packets: row(q, j) is packet j (panel rows
/// j·kLanes ...) of input position q0 + q. The products call it for each panel row (decoding in
/// registers) or through unpack_bf16_tile.
struct Bf16Rows {
  using Load = Bf16Loader<float>;
  using Packet = Load::Packet;
  static constexpr Index kWidth = PanelFormat::kWidth, kLanes = Load::kLanes;

  const uint8_t* panel;
  Index q0;
  Packet row(Index q, Index j) const {
    return Load::load(reinterpret_cast<const uint16_t*>(panel) + (q0 + q) * kWidth + j * kLanes);
  }
  template <int kRows = 1>
  void prefetch(Index q) const {
    prefetch_ahead<kRows>(panel + (q0 + q) * kWidth * 2, kWidth * 2);
  }
};

/// tile[q - q0][r] = W[48·p + r, q] for q in [q0, q0 + depth), r < 48, decoded from a bf16 panel.
inline void unpack_bf16_tile(const uint8_t* panel, Index q0, Index depth, float* tile) {
  const Bf16Rows rows{panel, q0};
  for (Index q = 0; q < depth; ++q) {
    rows.prefetch(q);
    for (Index j = 0; j < Bf16Rows::kWidth / Bf16Rows::kLanes; ++j)
      Eigen::internal::pstoreu(tile + q * Bf16Rows::kWidth + j * Bf16Rows::kLanes, rows.row(q, j));
  }
}

/// Integer dot products of 4 bytes per 32-bit lane, with the best instructions the target has:
///   dot(acc, u, s):    acc + the four products of the lane's unsigned bytes of u (below 16:
///                      q4's codes) with its signed bytes of s;
///   dot_q8(acc, u, s): the same for q8's stored bytes u = n + 128, less kQ8Offset · Σ s: the
///                      VNNI instructions multiply u itself (kQ8Offset = 128; the caller
///                      subtracts 128 · Σ s), AVX2's vpmaddubsw would saturate on it, so there
///                      the sign of n moves onto s and |n| is multiplied (kQ8Offset = 0).
/// Every sum is exact. AVX512-VNNI works on 512-bit registers, AVX-VNNI and AVX2 on 256-bit.
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define RETNET_INT8_DOTS "AVX512-VNNI"
struct Int8Dots {
  using Ints = __m512i;
  using Floats = __m512;
  static constexpr Index kLanes = 16;
  static constexpr int kQ8Offset = 128;
  static Ints zero() { return _mm512_setzero_si512(); }
  static Ints load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static Ints dot(Ints acc, Ints u, Ints s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static Ints dot_q8(Ints acc, Ints u, Ints s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static Ints set1(int32_t v) { return _mm512_set1_epi32(v); }
  static Ints sub(Ints a, Ints b) { return _mm512_sub_epi32(a, b); }
  static Ints low_nibbles(Ints v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
  static Ints high_nibbles(Ints v) {
    return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
  }
  static Floats to_float(Ints v) { return _mm512_cvtepi32_ps(v); }
  static Floats halves(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};
#elif defined(__AVX2__) && defined(__F16C__)
#ifdef __AVXVNNI__
#define RETNET_INT8_DOTS "AVX-VNNI"
#else
#define RETNET_INT8_DOTS "AVX2"
#endif
struct Int8Dots {
  using Ints = __m256i;
  using Floats = __m256;
  static constexpr Index kLanes = 8;
#ifdef __AVXVNNI__
  static constexpr int kQ8Offset = 128;
  static Ints dot(Ints acc, Ints u, Ints s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  }
  static Ints dot_q8(Ints acc, Ints u, Ints s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  }
#else
  static constexpr int kQ8Offset = 0;
  // Pairs of u·s in 16 bits (at most 2 · 127 · 127 here, no saturation), then pairs of those.
  static Ints dot(Ints acc, Ints u, Ints s) {
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  static Ints dot_q8(Ints acc, Ints u, Ints s) {
    const Ints n = _mm256_xor_si256(u, _mm256_set1_epi8(char(0x80)));  // n + 128 -> n
    return dot(acc, _mm256_sign_epi8(n, n), _mm256_sign_epi8(s, n));   // |n| · (sign(n) s)
  }
#endif
  static Ints zero() {
    return _mm256_setzero_si256();
  }
  static Ints load(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const Ints*>(p));
  }
  static Ints set1(int32_t v) {
    return _mm256_set1_epi32(v);
  }
  static Ints sub(Ints a, Ints b) {
    return _mm256_sub_epi32(a, b);
  }
  static Ints low_nibbles(Ints v) {
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
  }
  static Ints high_nibbles(Ints v) {
    return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
  }
  static Floats to_float(Ints v) {
    return _mm256_cvtepi32_ps(v);
  }
  static Floats halves(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};
#endif

/// Whether q8/q4 products use Int8Dots (else the portable kernel: the same sums in float).
#ifdef RETNET_INT8_DOTS
constexpr bool kHasInt8Dots = true;
#else
constexpr bool kHasInt8Dots = false;
#endif

}  // namespace detail

/// The instructions q8/q4 products are compiled to use: "AVX512-VNNI", "AVX-VNNI", "AVX2" or
/// "none" (the portable kernel).
inline const char* int8_dot_instructions() {
#ifdef RETNET_INT8_DOTS
  return RETNET_INT8_DOTS;
#else
  return "none";
#endif
}
}  // namespace retnet
