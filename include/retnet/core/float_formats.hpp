// The 16-bit float formats of checkpoints and quantised weights (IEEE binary16 and bfloat16),
// converted on their bit patterns so that they do not depend on compiler support for _Float16 /
// __bf16 and handle subnormals, infinities and NaN exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace retnet {

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

/// IEEE binary16 -> float (exact: every half value is representable as a float).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f)  // inf / NaN: keep the payload so NaNs stay NaNs
    return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)  // normal: rebias the exponent from 15 to 127
    return bits_to_float(sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  return sign ? -magnitude : magnitude;
}

/// bfloat16 -> float: bf16 is the top half of a float, so this is exact for every value.
inline float bf16_to_float(uint16_t b) {
  return bits_to_float(static_cast<uint32_t>(b) << 16);
}

/// float -> IEEE binary16 with round-to-nearest-even; overflow gives inf, NaN stays NaN.
inline uint16_t float_to_half(float f) {
  const uint32_t x = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf or NaN (force a quiet-NaN bit so the payload is not lost)
    const uint16_t nan_bits = a > 0x7f800000u ? (0x200u | ((a >> 13) & 0x3ffu)) : 0u;
    return static_cast<uint16_t>(sign | 0x7c00u | nan_bits);
  }
  // 65520 is halfway between the largest half (65504) and 65536; ties-to-even goes up.
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // normal half (>= 2^-14): rebias, then round away 13 bits
    uint32_t v = a - ((127u - 15u) << 23);
    v += 0xfffu + ((v >> 13) & 1u);
    return static_cast<uint16_t>(sign | (v >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25: ties-to-even rounds to zero
  // Subnormal half: value in units of 2^-24 is m * 2^(e - 126), a right shift by 126 - e.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24 here
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // may carry into the normal range
  return static_cast<uint16_t>(sign | q);
}

/// float -> bfloat16 with round-to-nearest-even; NaN stays (quiet) NaN.
inline uint16_t float_to_bf16(float f) {
  const uint32_t x = float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

/// out[i] = half_to_float(in[i]) for i < n, eight at a time with the CPU's conversion
/// instruction where it has one (F16C: exact, as is the bit-pattern version).
inline void halves_to_floats(const uint16_t* in, float* out, long n) {
  long i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
#endif
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

}  // namespace retnet
