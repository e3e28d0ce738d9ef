// f16 and bf16 panels (ops/panel_format.hpp) decoded to float packets with the widest conversion
// the CPU has. A bfloat16 is the high half of a float, so decoding it is a widening and a shift;
// an IEEE binary16 is converted by F16C's vcvtph2ps (AVX-512F has a 16-lane form), or value by
// value from its bit pattern (core/float_formats.hpp) on a target without F16C. Every conversion
// is exact, so each path decodes the same floats.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#if defined(__AVX2__) || defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "retnet/core/float_formats.hpp"
#include "retnet/core/tensor.hpp"
#include "retnet/ops/panel_format.hpp"
#include "retnet/ops/prefetch.hpp"
#include "retnet/ops/weight_type.hpp"

namespace retnet {
namespace detail {

/// kLanes 16-bit floats of `type` (kF16 or kBF16) as a float packet, with the widest conversion
/// the target has; a plain loop otherwise.
template <WeightType type, typename Scalar = float>
struct Float16Loader {
  static_assert(type == WeightType::kF16 || type == WeightType::kBF16, "f16 or bf16 only");
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  static constexpr int kLanes = Eigen::internal::unpacket_traits<Packet>::size;

  static Packet load(const uint16_t* p) {
    if constexpr (type == WeightType::kBF16) {
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
    } else {
#if defined(__AVX512F__)
      if constexpr (kLanes == 16)
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#endif
#if defined(__AVX__) && defined(__F16C__)
      if constexpr (kLanes == 8)
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#endif
    }
    float v[kLanes];
    for (int i = 0; i < kLanes; ++i)
      v[i] = type == WeightType::kBF16 ? bf16_to_float(p[i]) : half_to_float(p[i]);
    return Eigen::internal::ploadu<Packet>(v);
  }
};

/// The rows [q0, q0 + depth) of an f16 or bf16 panel as float packets: row(q, j) is packet j
/// (panel rows j·kLanes ...) of input position q0 + q. The products call it for each panel row
/// (decoding in registers) or through unpack_float16_tile.
template <WeightType type>
struct Float16Rows {
  using Load = Float16Loader<type>;
  using Packet = typename Load::Packet;
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

/// tile[q - q0][r] = W[48·p + r, q] for q in [q0, q0 + depth), r < 48, decoded from an f16 or
/// bf16 panel.
template <WeightType type>
void unpack_float16_tile(const uint8_t* panel, Index q0, Index depth, float* tile) {
  using Rows = Float16Rows<type>;
  const Rows rows{panel, q0};
  for (Index q = 0; q < depth; ++q) {
    rows.prefetch(q);
    for (Index j = 0; j < Rows::kWidth / Rows::kLanes; ++j)
      Eigen::internal::pstoreu(tile + q * Rows::kWidth + j * Rows::kLanes, rows.row(q, j));
  }
}

}  // namespace detail
}  // namespace retnet
