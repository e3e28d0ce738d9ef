// core/float_formats.hpp: IEEE binary16 and bfloat16 to and from float, against known bit
// patterns and against references built from the definitions of the formats:
//   decoding: every one of the 65,536 patterns against (-1)^s 2^(e-bias) (1 + m/2^p), or
//             m 2^(1-bias-p) for subnormals, computed in double;
//   encoding: a sample of a million float bit patterns against the nearest value of a sorted
//             table of every finite 16-bit value, ties to the even pattern.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "retnet/core/float_formats.hpp"

namespace {

const float kInf = std::numeric_limits<float>::infinity();

// The value of a 16-bit pattern with `mantissa_bits` mantissa bits and the rest exponent, by
// the format's definition; NaN for a NaN pattern.
double decode_by_definition(uint16_t bits, int mantissa_bits) {
  const int exponent_bits = 15 - mantissa_bits;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int sign = bits >> 15;
  const int exponent = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  double magnitude;
  if (exponent == (1 << exponent_bits) - 1)
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  else if (exponent == 0)
    magnitude = std::ldexp(double(mantissa), 1 - bias - mantissa_bits);
  else
    magnitude = std::ldexp(1.0 + std::ldexp(double(mantissa), -mantissa_bits), exponent - bias);
  return sign ? -magnitude : magnitude;
}

// Round to nearest, ties to the even pattern, over the positive finite values `table` (index =
// bit pattern, increasing); a magnitude at or past the midpoint between the largest finite
// value and the next power of two (`overflow`) becomes infinity (pattern `infinity`).
uint16_t encode_by_table(float f, const std::vector<double>& table, double overflow,
                         uint16_t infinity) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::abs(double(f));
  const double midpoint_to_infinity = (table.back() + overflow) / 2;
  if (a > midpoint_to_infinity) return sign | infinity;
  if (a == midpoint_to_infinity)  // tie: the even pattern, infinity's when the largest is odd
    return sign | ((table.size() - 1) % 2 == 0 ? uint16_t(table.size() - 1) : infinity);
  const auto above = std::lower_bound(table.begin(), table.end(), a);
  if (above == table.end()) return sign | uint16_t(table.size() - 1);
  const size_t hi = size_t(above - table.begin());
  if (*above == a || hi == 0) return sign | uint16_t(hi);
  const size_t lo = hi - 1;
  const double below = a - table[lo], over = table[hi] - a;
  if (below < over) return sign | uint16_t(lo);
  if (over < below) return sign | uint16_t(hi);
  return sign | uint16_t(lo % 2 == 0 ? lo : hi);
}

// Every positive finite value of the format, by pattern: 0 .. the largest finite pattern.
std::vector<double> positive_values(int mantissa_bits, uint16_t largest_finite) {
  std::vector<double> table;
  for (uint32_t b = 0; b <= largest_finite; ++b)
    table.push_back(decode_by_definition(uint16_t(b), mantissa_bits));
  return table;
}

// A million float patterns spread over all 2^32 (every sign, exponent, NaN and subnormal
// range), plus the exact ties and the boundaries the stride would miss.
std::vector<uint32_t> sample_float_patterns() {
  std::vector<uint32_t> bits;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 4093) bits.push_back(uint32_t(b));
  for (uint32_t special :
       {0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x33000000u,
        0x33000001u, 0x387fe000u, 0x387ff000u, 0x38800000u, 0x3f801000u, 0x3f803000u,
        0x3f808000u, 0x3f818000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x7f7f7fffu,
        0x7f7f8000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u})
    bits.push_back(special);
  return bits;
}

}  // namespace

TEST(FloatFormats, HalfKnownBitPatterns) {
  EXPECT_EQ(retnet::half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(retnet::half_to_float(0xC000), -2.0f);
  EXPECT_EQ(retnet::half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(retnet::half_to_float(0x0001), std::ldexp(1.0f, -24));         // smallest subnormal
  EXPECT_EQ(retnet::half_to_float(0x03FF), 1023 * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(retnet::half_to_float(0x0400), std::ldexp(1.0f, -14));         // smallest normal
  EXPECT_EQ(retnet::half_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(retnet::half_to_float(0x7C00), kInf);
  EXPECT_EQ(retnet::half_to_float(0xFC00), -kInf);
  EXPECT_TRUE(std::isnan(retnet::half_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(retnet::half_to_float(0x7C01)));  // signalling NaN stays NaN
  EXPECT_EQ(retnet::half_to_float(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(retnet::half_to_float(0x8000)));
}

TEST(FloatFormats, Bf16KnownBitPatterns) {
  EXPECT_EQ(retnet::bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(retnet::bf16_to_float(0xC000), -2.0f);
  EXPECT_EQ(retnet::bf16_to_float(0x7F80), kInf);
  EXPECT_EQ(retnet::bf16_to_float(0xFF80), -kInf);
  EXPECT_TRUE(std::isnan(retnet::bf16_to_float(0x7FC0)));
  EXPECT_EQ(retnet::bf16_to_float(0x0001), std::ldexp(1.0f, -133));  // subnormal
  EXPECT_EQ(retnet::bf16_to_float(0x7F7F), 0x1.FEp127f);             // largest finite
}

TEST(FloatFormats, FloatToHalfRoundsToNearestEven) {
  EXPECT_EQ(retnet::float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(retnet::float_to_half(-2.0f), 0xC000);
  EXPECT_EQ(retnet::float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(retnet::float_to_half(65519.0f), 0x7BFF);
  EXPECT_EQ(retnet::float_to_half(65520.0f), 0x7C00);  // tie goes to even = overflow
  EXPECT_EQ(retnet::float_to_half(1e9f), 0x7C00);
  EXPECT_EQ(retnet::float_to_half(-kInf), 0xFC00);
  EXPECT_EQ(retnet::float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(retnet::float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even
  EXPECT_EQ(retnet::float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(retnet::float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(retnet::float_to_half(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  EXPECT_EQ(retnet::float_to_half(1.5f * std::ldexp(1.0f, -24)), 0x0002);
  EXPECT_EQ(retnet::float_to_half(2.5f * std::ldexp(1.0f, -24)), 0x0002);
  EXPECT_EQ(retnet::float_to_half(1023.5f * std::ldexp(1.0f, -24)), 0x0400);  // into normals
  EXPECT_EQ(retnet::float_to_half(1e-30f), 0x0000);
  EXPECT_EQ(retnet::float_to_half(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(retnet::half_to_float(retnet::float_to_half(std::nanf("")))));
}

TEST(FloatFormats, HalfRoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = retnet::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(retnet::float_to_half(f), h) << std::hex << h;
  }
}

TEST(FloatFormats, FloatToBf16RoundsToNearestEven) {
  EXPECT_EQ(retnet::float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(retnet::float_to_bf16(retnet::bits_to_float(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(retnet::float_to_bf16(retnet::bits_to_float(0x3F818000u)), 0x3F82);  // tie -> even
  EXPECT_EQ(retnet::float_to_bf16(retnet::bits_to_float(0x3F808001u)), 0x3F81);
  EXPECT_EQ(retnet::float_to_bf16(3.4e38f), 0x7F80);  // rounds past the largest finite
  EXPECT_TRUE(std::isnan(retnet::bf16_to_float(retnet::float_to_bf16(std::nanf("")))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = retnet::bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(retnet::float_to_bf16(f), b) << std::hex << b;
  }
}

TEST(FloatFormats, HalfDecodesEveryPatternByTheDefinition) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double expected = decode_by_definition(uint16_t(h), 10);
    const float got = retnet::half_to_float(uint16_t(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      continue;
    }
    ASSERT_EQ(double(got), expected) << std::hex << h;
    ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
  }
}

TEST(FloatFormats, Bf16DecodesEveryPatternByTheDefinition) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const double expected = decode_by_definition(uint16_t(b), 7);
    const float got = retnet::bf16_to_float(uint16_t(b));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << b;
      continue;
    }
    ASSERT_EQ(double(got), expected) << std::hex << b;
    ASSERT_EQ(std::signbit(got), (b & 0x8000) != 0) << std::hex << b;
  }
}

TEST(FloatFormats, FloatToHalfIsTheNearestHalfTiesToEven) {
  const std::vector<double> table = positive_values(10, 0x7BFF);
  for (uint32_t bits : sample_float_patterns()) {
    const float f = retnet::bits_to_float(bits);
    const uint16_t got = retnet::float_to_half(f);
    if (std::isnan(f)) {  // a NaN pattern: all exponent bits set and a mantissa bit
      ASSERT_EQ(got & 0x7C00, 0x7C00) << std::hex << bits;
      ASSERT_NE(got & 0x03FF, 0) << std::hex << bits;
      ASSERT_EQ(got >> 15, bits >> 31) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(got, encode_by_table(f, table, 65536.0, 0x7C00)) << std::hex << bits;
  }
}

TEST(FloatFormats, FloatToBf16IsTheNearestBf16TiesToEven) {
  const std::vector<double> table = positive_values(7, 0x7F7F);
  for (uint32_t bits : sample_float_patterns()) {
    const float f = retnet::bits_to_float(bits);
    const uint16_t got = retnet::float_to_bf16(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got & 0x7F80, 0x7F80) << std::hex << bits;
      ASSERT_NE(got & 0x007F, 0) << std::hex << bits;
      ASSERT_EQ(got >> 15, bits >> 31) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(got, encode_by_table(f, table, std::ldexp(1.0, 128), 0x7F80)) << std::hex << bits;
  }
}

// A NaN keeps its sign and the top of its payload, and a signalling NaN comes back quiet (the
// top mantissa bit set), so that no payload truncates to infinity's pattern.
TEST(FloatFormats, NaNPayloadsSurviveAndBecomeQuiet) {
  const uint32_t signalling = 0x7F802000u;  // payload only in bits the half keeps (>> 13)
  EXPECT_EQ(retnet::float_to_half(retnet::bits_to_float(signalling)), 0x7E01);
  EXPECT_EQ(retnet::float_to_half(retnet::bits_to_float(0xFF800001u)), 0xFE00);
  EXPECT_EQ(retnet::float_to_bf16(retnet::bits_to_float(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(retnet::float_to_bf16(retnet::bits_to_float(0xFFA00000u)), 0xFFE0);
  EXPECT_EQ(retnet::float_to_bits(retnet::half_to_float(0x7E01)), 0x7FC02000u);
  EXPECT_EQ(retnet::float_to_bits(retnet::bf16_to_float(0xFFC1)), 0xFFC10000u);
}

// The block conversion (F16C's instruction where the CPU has it, the bit-pattern loop for the
// rest) equals half_to_float on every pattern, at every offset and tail length. NaNs are
// compared as NaNs of the same sign: F16C quiets a signalling NaN, half_to_float keeps it as
// it is.
TEST(FloatFormats, HalvesToFloatsEqualsHalfToFloat) {
  std::vector<uint16_t> in(0x10000 + 7);
  for (size_t i = 0; i < in.size(); ++i) in[i] = uint16_t(i * 40503u);
  for (long start : {0L, 1L, 3L}) {
    const long n = long(in.size()) - start;
    std::vector<float> out(size_t(n), -1.0f);
    retnet::halves_to_floats(in.data() + start, out.data(), n);
    for (long i = 0; i < n; ++i) {
      const float expected = retnet::half_to_float(in[size_t(start + i)]);
      const float got = out[size_t(i)];
      if (std::isnan(expected)) {
        ASSERT_TRUE(std::isnan(got)) << start << " " << i;
        ASSERT_EQ(std::signbit(got), std::signbit(expected)) << start << " " << i;
      } else {
        ASSERT_EQ(retnet::float_to_bits(got), retnet::float_to_bits(expected)) << start << " " << i;
      }
    }
  }
}
