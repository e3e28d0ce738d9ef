// bf16 products that round x to bfloat16 as well (LinearWeight::bf16_dots): y[i, c] = Σ_q
// bf16(x[i, q]) · W[c, q], every product of two bfloat16 values exact in float and the products
// summed in float. Where the CPU has AVX512-BF16, vdpbf16ps does two multiply-adds per float lane
// (a pair of positions q, q + 1 at once), so a prompt's products run at twice the float kernel's
// rate; elsewhere the float kernel (ops/panel_kernel.hpp) multiplies the rounded x as floats,
// the same products summed in another order. docs/NUMERICS.md defines the rounding.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>
#endif

#include "retnet/core/float_formats.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/ops/panel_format.hpp"
#include "retnet/ops/prefetch.hpp"

namespace retnet {
namespace detail {

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define RETNET_BF16_DOTS "AVX512-BF16"
constexpr bool kHasBf16Dots = true;
#else
constexpr bool kHasBf16Dots = false;
#endif

/// Rows of x rounded to bfloat16 (nearest even; NaN stays NaN), once per product for all its
/// threads: `codes` for vdpbf16ps, as pairs of positions (stride even, the pad zero), or
/// `values`, the rounded values as floats, for the float kernel.
struct Bf16Rows {
  Index rows = 0, cols = 0, stride = 0;
  std::vector<uint16_t> codes;  // [rows][stride]
  std::vector<float> values;    // [rows][cols]

  /// Rounds `rows` rows of `cols` values (row i at x + i · cols), reusing the vectors' storage.
  void assign(const float* x, Index rows_, Index cols_, bool as_floats) {
    rows = rows_;
    cols = cols_;
    stride = (cols + 1) / 2 * 2;
    codes.resize(as_floats ? 0 : static_cast<size_t>(rows * stride));
    values.resize(as_floats ? static_cast<size_t>(rows * cols) : 0);
    for (Index i = 0; i < rows; ++i)
      for (Index q = 0; q < stride; ++q) {
        const uint16_t b = q < cols ? float_to_bf16(x[i * cols + q]) : 0;
        if (as_floats) {
          if (q < cols) values[i * cols + q] = bf16_to_float(b);
        } else {
          codes[i * stride + q] = b;
        }
      }
  }
};

#ifdef RETNET_BF16_DOTS
/// The vdpbf16ps kernel: rows of x's codes times a bf16 panel (ops/panel_format.hpp) whose rows
/// are taken in pairs, so that one 32-bit lane holds W[r, q] and W[r, q + 1] as the instruction
/// reads them.
struct Bf16Product {
  static constexpr Index kWidth = PanelFormat::kWidth, kLanes = 16;
  static constexpr int kPackets = static_cast<int>(kWidth / kLanes);
  /// 8 rows x 3 accumulators, 3 panel packets and a broadcast: 28 of the 32 registers.
  static constexpr int kRows = 8;

  /// Lanes j·16 ... j·16 + 15 of panel rows q and q + 1 (zero if q + 1 is past `depth`) as
  /// pairs: the low half of lane r is W[r, q], the high half W[r, q + 1].
  static __m512i pair(const uint16_t* row_q, Index q, Index depth, int j) {
    const auto load = [&](const uint16_t* p) {
      return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    };
    const __m512i low = load(row_q + j * kLanes);
    if (q + 1 >= depth) return low;
    return _mm512_or_si512(low, _mm512_slli_epi32(load(row_q + kWidth + j * kLanes), 16));
  }

  /// Positions [q0, q0 + depth) of a panel paired as they are read: one row of x (decoding)
  /// reads each pair once, from memory, in one pass with its multiply-adds.
  struct PanelPairs {
    const uint16_t* rows;  // the panel's row q0
    Index depth;
    __m512bh row(Index t, int j) const {
      return (__m512bh)pair(rows + 2 * t * kWidth, 2 * t, depth, j);
    }
    template <int MR>
    void prefetch(Index t) const {
      prefetch_ahead<MR>(rows + 2 * t * kWidth, 2 * kWidth * 2);
    }
  };

  /// The same pairs written out once ([⌈depth / 2⌉][48] words), for many rows of x to read
  /// again from cache.
  struct TilePairs {
    const uint32_t* tile;
    __m512bh row(Index t, int j) const {
      return (__m512bh)_mm512_load_si512(tile + t * kWidth + j * kLanes);
    }
    template <int MR>
    void prefetch(Index) const {}
  };

  static TilePairs write_tile(const PanelPairs& pairs, uint32_t* tile) {
    for (Index t = 0; 2 * t < pairs.depth; ++t)
      for (int j = 0; j < kPackets; ++j)
        _mm512_store_si512(tile + t * kWidth + j * kLanes, (__m512i)pairs.row(t, j));
    return TilePairs{tile};
  }

  /// y[i, c] (+)= Σ_t x_pair[i, t] · pairs[t][c] for i < MR, c < cols (<= kWidth), t < pair
  /// count; x's row i starts at x + i · xs, at the slice's first position (even). Every row is
  /// its own chains, so its result does not depend on the other rows of x, nor on where the
  /// pairs come from.
  template <int MR, typename Pairs>
  static void block(const uint16_t* x, Index xs, const Pairs& pairs, Index count, float* y,
                    Index ys, Index cols, bool accumulate) {
    __m512 acc[MR][kPackets];
    for (auto& row : acc)
      for (auto& a : row) a = _mm512_setzero_ps();
    for (Index t = 0; t < count; ++t) {
      pairs.template prefetch<MR>(t);
      __m512bh w[kPackets];
      for (int j = 0; j < kPackets; ++j) w[j] = pairs.row(t, j);
      for (int i = 0; i < MR; ++i) {
        int32_t pair;
        std::memcpy(&pair, x + i * xs + 2 * t, sizeof pair);
        const __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
        for (int j = 0; j < kPackets; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xb, w[j]);
      }
    }
    for (int i = 0; i < MR; ++i) {
      float* yi = y + i * ys;
      if (cols == kWidth) {
        for (int j = 0; j < kPackets; ++j) {
          __m512 v = acc[i][j];
          if (accumulate) v = _mm512_add_ps(v, _mm512_loadu_ps(yi + j * kLanes));
          _mm512_storeu_ps(yi + j * kLanes, v);
        }
      } else {  // the zero-padded last panel: keep the valid columns
        alignas(64) float out[kWidth];
        for (int j = 0; j < kPackets; ++j) _mm512_store_ps(out + j * kLanes, acc[i][j]);
        for (Index c = 0; c < cols; ++c) yi[c] = accumulate ? yi[c] + out[c] : out[c];
      }
    }
  }
};
#endif

}  // namespace detail
}  // namespace retnet
