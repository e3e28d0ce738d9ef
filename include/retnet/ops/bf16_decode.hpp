// bf16 panels (ops/panel_format.hpp) decoded to float packets with the widest conversion the
// CPU has: a bfloat16 is the high half of a float, so decoding is a widening and a shift.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "retnet/core/float_formats.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/ops/panel_format.hpp"
#include "retnet/ops/prefetch.hpp"

namespace retnet {
namespace detail {

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

}  // namespace detail
}  // namespace retnet
