// The float panel kernel: rows of x times one panel of W (ops/panel_format.hpp), in SIMD
// registers through Eigen's packets. It reads f32 panels as stored, f16 and bf16 panels through
// ops/float16_decode.hpp, and, on a CPU without int8 dot products, q8/q4 blocks decoded to floats
// (ops/int8_product.hpp).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <type_traits>

#include "retnet/core/tensor.hpp"
#include "retnet/ops/panel_format.hpp"
#include "retnet/ops/prefetch.hpp"

namespace retnet {
namespace detail {

/// f(std::integral_constant<int, R>(), i) for blocks of rows [i, i + R) that cover [first, m):
/// blocks of MR rows, then the remainder by halves of MR.
template <int MR, typename F>
void for_row_blocks(Index first, Index m, F&& f) {
  Index i = first;
  for (; i + MR <= m; i += MR) f(std::integral_constant<int, MR>(), i);
  if constexpr (MR > 1) {
    if (i < m) for_row_blocks<MR / 2>(i, m, f);
  }
}

/// The SIMD registers of the target (32 with AVX-512, 16 with AVX2).
constexpr int kRegisters = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS;

/// The largest power of two <= n (n >= 1).
constexpr int floor_power_of_two(int n) {
  return n < 2 ? 1 : 2 * floor_power_of_two(n / 2);
}

template <typename Scalar>
struct PanelKernel {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  static constexpr Index kLanes = Eigen::internal::unpacket_traits<Packet>::size;
  static constexpr Index kWidth = PanelFormat::kWidth;
  static_assert(kWidth % kLanes == 0, "a panel row must be whole SIMD packets");
  static constexpr int kPackets = static_cast<int>(kWidth / kLanes);
  /// A step of the loop below takes one panel row (kPackets packets) and MR values of x, one per
  /// row, each broadcast to a packet. The operands either come panel first (the kPackets panel
  /// packets held, x broadcast one row at a time) or x first (the MR broadcasts held, the panel
  /// loaded a packet at a time); the order that holds more rows in the registers is used:
  /// AVX-512 (32 registers, 3 packets) holds 9 rows panel first, 7 x first; AVX2 (16, 6) 1 panel
  /// first, 2 x first.
  static constexpr int kRowsPanelFirst = (kRegisters - kPackets - 1) / kPackets;
  static constexpr int kRowsXFirst = (kRegisters - 1) / (kPackets + 1);
  static constexpr bool kPanelFirst = kRowsPanelFirst >= kRowsXFirst;
  /// Rows of x per block: the most that fit, rounded down to a power of two, so that a batch of
  /// 8 and a prompt's 256-row block split into whole blocks (8 with AVX-512, 2 with AVX2).
  static constexpr int kRows = floor_power_of_two(std::max({1, kRowsPanelFirst, kRowsXFirst}));

  /// y[i, c] (+)= Σ_{q < k} x[i, q] · panel[q, c] for i < MR, c < cols (<= kWidth): each step
  /// multiplies one panel row by MR broadcast values of x. Every row is one chain of
  /// multiply-adds in q order, whatever MR is, so a row's result never depends on the other rows
  /// of x (a server's batch relies on it). Three chains per row (one per packet) keep enough
  /// multiply-adds in flight at MR = 1, where reading W, not the adds, sets the pace.
  template <int MR, typename Rows>
  static void block(const Scalar* x, Index xs, const Rows& panel, Index k, Scalar* y, Index ys,
                    Index cols, bool accumulate) {
    namespace ei = Eigen::internal;
    Packet acc[MR][kPackets];
    for (auto& row : acc)
      for (auto& a : row) a = ei::pset1<Packet>(Scalar(0));
    for (Index q = 0; q < k; ++q) {
      panel.template prefetch<MR>(q);
      if constexpr (kPanelFirst) {
        Packet w[kPackets];
        for (int j = 0; j < kPackets; ++j) w[j] = panel.row(q, j);
        for (int i = 0; i < MR; ++i) {
          const Packet xb = ei::pset1<Packet>(x[i * xs + q]);
          for (int j = 0; j < kPackets; ++j) acc[i][j] = ei::pmadd(xb, w[j], acc[i][j]);
        }
      } else {
        Packet xb[MR];
        for (int i = 0; i < MR; ++i) xb[i] = ei::pset1<Packet>(x[i * xs + q]);
        for (int j = 0; j < kPackets; ++j) {
          const Packet w = panel.row(q, j);
          for (int i = 0; i < MR; ++i) acc[i][j] = ei::pmadd(xb[i], w, acc[i][j]);
        }
      }
    }
    for (int i = 0; i < MR; ++i) {
      Scalar* yi = y + i * ys;
      if (cols == kWidth) {
        for (int j = 0; j < kPackets; ++j) {
          Packet v = acc[i][j];
          if (accumulate) v = ei::padd(v, ei::ploadu<Packet>(yi + j * kLanes));
          ei::pstoreu(yi + j * kLanes, v);
        }
      } else {  // the zero-padded last panel: keep the valid columns
        Scalar out[kWidth];
        for (int j = 0; j < kPackets; ++j) ei::pstoreu(out + j * kLanes, acc[i][j]);
        for (Index c = 0; c < cols; ++c) yi[c] = accumulate ? yi[c] + out[c] : out[c];
      }
    }
  }

  /// Panel rows of Scalars as stored ([k][kWidth]): an f32 panel, or a decoded tile. Streamed
  /// rows are read once, from memory (decoding), and ask for their bytes ahead; the others are
  /// read again and again from cache (a prompt's blocks of rows, a decoded tile).
  template <bool kStreamed>
  struct ScalarRows {
    const Scalar* rows;
    Packet row(Index q, Index j) const {
      return Eigen::internal::ploadu<Packet>(rows + q * kWidth + j * kLanes);
    }
    template <int kRows>
    void prefetch(Index q) const {
      if constexpr (kStreamed) prefetch_ahead<kRows>(rows + q * kWidth, kWidth * sizeof(Scalar));
    }
  };
};

}  // namespace detail
}  // namespace retnet
