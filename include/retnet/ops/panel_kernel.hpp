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
  /// A step of the loop below takes one panel row (P packets of it) and MR values of x, one per
  /// row, each broadcast to a packet. The operands either come panel first (the P panel packets
  /// held, x broadcast one row at a time) or x first (the MR broadcasts held, the panel loaded a
  /// packet at a time); the order that holds more rows in the registers is used. Rows of x per
  /// block: the most that fit, rounded down to a power of two, so that a batch of 8 and a
  /// prompt's 256-row block split into whole blocks.
  template <int P>
  struct Shape {
    static constexpr int kRowsPanelFirst = (kRegisters - P - 1) / P;
    static constexpr int kRowsXFirst = (kRegisters - 1) / (P + 1);
    static constexpr bool kPanelFirst = kRowsPanelFirst >= kRowsXFirst;
    static constexpr int kRows = floor_power_of_two(std::max({1, kRowsPanelFirst, kRowsXFirst}));
  };
  /// All of a panel row at once: AVX-512 (32 registers, 3 packets) holds 8 rows, panel first;
  /// AVX2 (16, 6 packets) 2, x first.
  static constexpr int kRows = Shape<kPackets>::kRows;
  /// The packets a pass over a prompt's block of rows takes. AVX2's 2 rows x 6 packets load 14
  /// operands for 12 multiply-adds, more than the loads keep up with; half a panel row at a time
  /// holds 4 rows against 3 packets, 7 loads for 12, and the block passes the slice (in L1)
  /// twice. Decoding (bound by reading W once) keeps whole rows.
  static constexpr int kPromptPackets = kPackets > 3 && kPackets % 2 == 0 ? kPackets / 2 : kPackets;

  /// y[i, c] (+)= Σ_{q < k} x[i, q] · panel[q, c] for i < MR and the columns c < cols (<= kWidth)
  /// of packets [J0, J0 + P): each step multiplies P packets of one panel row by MR broadcast
  /// values of x. Every output is one chain of multiply-adds in q order, whatever MR and the
  /// packets of the pass, so a row's result never depends on the other rows of x (a server's
  /// batch relies on it). Three or more chains per row (one per packet) keep enough
  /// multiply-adds in flight at MR = 1, where reading W, not the adds, sets the pace.
  template <int MR, typename Rows, int J0 = 0, int P = kPackets>
  static void block(const Scalar* x, Index xs, const Rows& panel, Index k, Scalar* y, Index ys,
                    Index cols, bool accumulate) {
    namespace ei = Eigen::internal;
    static_assert(J0 >= 0 && P > 0 && J0 + P <= kPackets, "packets within a panel row");
    Packet acc[MR][P];
    for (auto& row : acc)
      for (auto& a : row) a = ei::pset1<Packet>(Scalar(0));
    for (Index q = 0; q < k; ++q) {
      panel.template prefetch<MR>(q);
      if constexpr (Shape<P>::kPanelFirst) {
        Packet w[P];
        for (int j = 0; j < P; ++j) w[j] = panel.row(q, J0 + j);
        for (int i = 0; i < MR; ++i) {
          const Packet xb = ei::pset1<Packet>(x[i * xs + q]);
          for (int j = 0; j < P; ++j) acc[i][j] = ei::pmadd(xb, w[j], acc[i][j]);
        }
      } else {
        Packet xb[MR];
        for (int i = 0; i < MR; ++i) xb[i] = ei::pset1<Packet>(x[i * xs + q]);
        for (int j = 0; j < P; ++j) {
          const Packet w = panel.row(q, J0 + j);
          for (int i = 0; i < MR; ++i) acc[i][j] = ei::pmadd(xb[i], w, acc[i][j]);
        }
      }
    }
    constexpr Index c0 = J0 * kLanes, width = P * kLanes;
    for (int i = 0; i < MR; ++i) {
      Scalar* yi = y + i * ys + c0;
      if (cols >= c0 + width) {
        for (int j = 0; j < P; ++j) {
          Packet v = acc[i][j];
          if (accumulate) v = ei::padd(v, ei::ploadu<Packet>(yi + j * kLanes));
          ei::pstoreu(yi + j * kLanes, v);
        }
      } else {  // the zero-padded last panel: keep the valid columns
        Scalar out[width];
        for (int j = 0; j < P; ++j) ei::pstoreu(out + j * kLanes, acc[i][j]);
        for (Index c = 0; c < cols - c0; ++c) yi[c] = accumulate ? yi[c] + out[c] : out[c];
      }
    }
  }

  /// block() for rows [0, rows) of x in blocks of the shape's rows: whole panel rows (decoding),
  /// or kPromptPackets at a time (`prompt`).
  template <typename Rows>
  static void rows_times_panel(const Scalar* x, Index xs, Index rows, const Rows& panel, Index k,
                               Scalar* y, Index ys, Index cols, bool accumulate, bool prompt) {
    const auto pass = [&](auto first, auto packets) {
      constexpr int J0 = decltype(first)::value, P = decltype(packets)::value;
      for_row_blocks<Shape<P>::kRows>(0, rows, [&](auto mr, Index i) {
        block<decltype(mr)::value, Rows, J0, P>(x + i * xs, xs, panel, k, y + i * ys, ys, cols,
                                                accumulate);
      });
    };
    using Whole = std::integral_constant<int, kPackets>;
    using Half = std::integral_constant<int, kPromptPackets>;
    if constexpr (kPromptPackets == kPackets) {
      pass(std::integral_constant<int, 0>(), Whole());
    } else {
      if (!prompt) return pass(std::integral_constant<int, 0>(), Whole());
      pass(std::integral_constant<int, 0>(), Half());
      if (cols > kPromptPackets * kLanes) pass(Half(), Half());
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
