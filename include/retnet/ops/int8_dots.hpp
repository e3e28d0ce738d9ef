// The int8 dot-product instructions of each CPU that q8/q4 products are compiled for: AVX512-VNNI,
// AVX-VNNI, AVX2 without VNNI, or none (the portable kernel of ops/int8_product.hpp, which needs
// no instructions of its own). The codes they multiply are ops/panel_format.hpp's.
#pragma once

#include <cstdint>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "retnet/core/tensor.hpp"

namespace retnet {
namespace detail {

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
