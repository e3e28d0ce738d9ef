// The q8/q4 products: rows of x, rounded to int8 (Int8Rows, ops/quantize.hpp), times the blocks
// of one q8/q4 panel (ops/panel_format.hpp), with the CPU's int8 dot products (ops/int8_dots.hpp)
// or, without them, with the float panel kernel on decoded codes.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "retnet/core/float_formats.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/ops/int8_dots.hpp"
#include "retnet/ops/panel_format.hpp"
#include "retnet/ops/panel_kernel.hpp"
#include "retnet/ops/prefetch.hpp"
#include "retnet/ops/quantize.hpp"
#include "retnet/ops/weight_type.hpp"

namespace retnet {
namespace detail {

/// The q8/q4 products, y[i, c] = Σ_b (s_w[c, b] · s_x[i, b]) · Σ_{q in block b} n_w[c, q] ·
/// n_x[i, q], with n_x, s_x the rounded rows of x (Int8Rows). A block's integer sum is exact
/// (|Σ| <= 32 · 127² < 2²⁴, so exact in float too), and each row's sum over blocks is one chain
/// y = fma(block sum, s_w · s_x, y) in block order, whatever the number of rows: the two kernels
/// below compute it bit for bit alike.
struct Int8Product {
  static constexpr Index kWidth = detail::PanelFormat::kWidth;

  /// Rows [i0, i1) of x against blocks [b0, b1) of a panel, into y (row i at y + (i - i0) · ys,
  /// `cols` <= 48 valid columns; read first when b0 > 0).
  static void run(const Int8Rows& x, Index i0, Index i1, WeightType type, const uint8_t* panel,
                  Index b0, Index b1, float* y, Index ys, Index cols, bool integer_dots) {
#ifdef RETNET_INT8_DOTS
    if (integer_dots) {
      const auto rows = [&](auto kernel) {
        using Kernel = decltype(kernel);
        for_row_blocks<Kernel::kRows>(i0, i1, [&](auto mr, Index i) {
          Kernel::template block<decltype(mr)::value>(x, i, panel, b0, b1, y + (i - i0) * ys, ys,
                                                      cols);
        });
      };
      if (type == WeightType::kQ8) return rows(IntegerKernel<WeightType::kQ8>());
      return rows(IntegerKernel<WeightType::kQ4>());
    }
#endif
    (void)integer_dots;
    portable(x, i0, i1, type, panel, b0, b1, y, ys, cols);
  }

#ifdef RETNET_INT8_DOTS
  /// With Int8Dots: a 32-bit lane of a panel's code vector holds 4 columns of one row, so each
  /// dot product adds 4 products for kLanes rows of W against 4 broadcast codes of x (one
  /// instruction with VNNI; with AVX2 alone vpmaddubsw, vpmaddwd and an add, and for q8 the
  /// signs).
  template <WeightType kType>
  struct IntegerKernel {
    using Ops = detail::Int8Dots;
    using Ints = Ops::Ints;
    using Floats = Ops::Floats;
    static constexpr Index kLanes = Ops::kLanes;
    static constexpr int kPackets = static_cast<int>(kWidth / kLanes);
    /// Code vectors loaded at a time (all three with AVX-512; half a panel row with AVX2).
    static constexpr int kChunk = std::min(kPackets, 3);
    /// Rows of x per block: MR·kPackets accumulators, kChunk code vectors (two halves each for
    /// q4), two broadcasts and q4's nibble mask fit the registers: 7 with AVX-512, 1 with AVX2.
    static constexpr int kRows = std::max(1, (kRegisters - 2 * kChunk - 3) / kPackets);
    /// What the dot products add beyond Σ n_w · n_x, per unit of Σ n_x (Int8Dots).
    static constexpr int kOffset = kType == WeightType::kQ8 ? Ops::kQ8Offset : 8;

    template <int MR>
    static void block(const Int8Rows& x, Index i0, const uint8_t* panel, Index b0, Index b1,
                      float* y, Index ys, Index cols) {
      namespace ei = Eigen::internal;
      using Format = detail::PanelFormat;
      alignas(64) float out[MR][kWidth];
      for (int i = 0; i < MR; ++i)
        for (Index c = 0; c < kWidth; ++c) out[i][c] = b0 > 0 && c < cols ? y[i * ys + c] : 0.f;
      for (Index b = b0; b < b1; ++b) {
        const uint8_t* codes = panel + b * Format::block_bytes(kType);
        const int8_t* xb = x.codes.data() + i0 * x.stride + b * kQuantBlock;
        const auto x4 = [&](int i, Index q) {  // codes q..q+3 of row i, in every lane
          int32_t v;
          std::memcpy(&v, xb + i * x.stride + q, 4);
          return Ops::set1(v);
        };
        Ints acc[MR][kPackets];
        for (auto& row : acc)
          for (auto& a : row) a = Ops::zero();
        if constexpr (kType == WeightType::kQ8) {
          for (Index g = 0; g < kQuantBlock / 4; ++g) {
            detail::prefetch_ahead<MR>(codes + g * kWidth * 4, kWidth * 4);
            for (int j0 = 0; j0 < kPackets; j0 += kChunk) {
              Ints w[kChunk];
              for (int j = 0; j < kChunk; ++j)
                w[j] = Ops::load(codes + (g * kWidth + (j0 + j) * kLanes) * 4);
              for (int i = 0; i < MR; ++i) {
                const Ints xi = x4(i, 4 * g);
                for (int j = 0; j < kChunk; ++j)
                  acc[i][j0 + j] = Ops::dot_q8(acc[i][j0 + j], w[j], xi);
              }
            }
          }
        } else {  // a byte holds column q (low four bits) and q + 16 (high four)
          for (Index g = 0; g < kQuantBlock / 8; ++g) {
            detail::prefetch_ahead<MR>(codes + g * kWidth * 4, kWidth * 4);
            for (int j0 = 0; j0 < kPackets; j0 += kChunk) {
              Ints low[kChunk], high[kChunk];
              for (int j = 0; j < kChunk; ++j) {
                const Ints w = Ops::load(codes + (g * kWidth + (j0 + j) * kLanes) * 4);
                low[j] = Ops::low_nibbles(w);
                high[j] = Ops::high_nibbles(w);
              }
              for (int i = 0; i < MR; ++i) {
                const Ints xl = x4(i, 4 * g), xh = x4(i, 16 + 4 * g);
                for (int j = 0; j < kChunk; ++j) {
                  acc[i][j0 + j] = Ops::dot(acc[i][j0 + j], low[j], xl);
                  acc[i][j0 + j] = Ops::dot(acc[i][j0 + j], high[j], xh);
                }
              }
            }
          }
        }
        // Σ n_w · n_x = (the dot products) - offset · Σ n_x, then scaled into the row's chain.
        const uint16_t* scales = Format::scales(kType, codes);
        Floats s[kPackets];
        for (int j = 0; j < kPackets; ++j) s[j] = Ops::halves(scales + j * kLanes);
        for (int i = 0; i < MR; ++i) {
          const Index at = (i0 + i) * x.blocks + b;
          const Ints correction = Ops::set1(kOffset * x.sums[at]);
          const Floats sx = ei::pset1<Floats>(x.scales[at]);
          for (int j = 0; j < kPackets; ++j) {
            float* o = out[i] + j * kLanes;
            const Floats sum = Ops::to_float(Ops::sub(acc[i][j], correction));
            ei::pstore(o, ei::pmadd(sum, ei::pmul(s[j], sx), ei::pload<Floats>(o)));
          }
        }
      }
      for (int i = 0; i < MR; ++i)
        for (Index c = 0; c < cols; ++c) y[i * ys + c] = out[i][c];
    }
  };
#endif

  /// Without Int8Dots: each block's codes decoded to floats once ([32][48]), the float panel
  /// kernel's exact block sums, then the same chain.
  static void portable(const Int8Rows& x, Index i0, Index i1, WeightType type, const uint8_t* panel,
                       Index b0, Index b1, float* y, Index ys, Index cols) {
    namespace ei = Eigen::internal;
    using Format = detail::PanelFormat;
    using Kernel = PanelKernel<float>;
    using Packet = Kernel::Packet;
    constexpr Index kLanes = Kernel::kLanes;
    alignas(64) float tile[kQuantBlock * kWidth], scales[kWidth];
    for (Index b = b0; b < b1; ++b) {
      const uint8_t* block = panel + b * Format::block_bytes(type);
      detail::unpack_block_codes(type, block, tile);
      halves_to_floats(Format::scales(type, block), scales, kWidth);
      for_row_blocks<Kernel::kRows>(i0, i1, [&](auto mr, Index i) {
        constexpr int MR = decltype(mr)::value;
        alignas(64) float sums[MR][kWidth], out[MR][kWidth];
        Kernel::block<MR>(x.values.data() + i * x.stride + b * kQuantBlock, x.stride,
                          Kernel::ScalarRows<false>{tile}, kQuantBlock, &sums[0][0], kWidth, kWidth,
                          false);
        for (int r = 0; r < MR; ++r) {
          float* yr = y + (i - i0 + r) * ys;
          for (Index c = 0; c < kWidth; ++c) out[r][c] = b > 0 && c < cols ? yr[c] : 0.f;
          const Packet sx = ei::pset1<Packet>(x.scales[(i + r) * x.blocks + b]);
          for (Index c = 0; c < kWidth; c += kLanes)
            ei::pstore(out[r] + c, ei::pmadd(ei::pload<Packet>(sums[r] + c),
                                             ei::pmul(ei::pload<Packet>(scales + c), sx),
                                             ei::pload<Packet>(out[r] + c)));
          for (Index c = 0; c < cols; ++c) yr[c] = out[r][c];
        }
      });
    }
  }
};

}  // namespace detail
}  // namespace retnet
