// fp16/bf16 conversions (float16.h) against the compiler's _Float16 and a float64 reference.
#include "lib/kvformat/float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace oscarkv::kvformat {
namespace {

uint16_t Float16Bits(_Float16 h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
_Float16 BitsFloat16(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return h;
}
bool IsHalfNan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool IsBf16Nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

TEST(Float16, EveryHalfRoundTripsExactly) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = HalfBitsToFloat(h);
    // Widening agrees with the compiler's (hardware/libgcc) conversion, NaNs as NaNs.
    const float expected = static_cast<float>(BitsFloat16(h));
    if (IsHalfNan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(IsHalfNan(FloatToHalfBits(f))) << std::hex << h;
      EXPECT_EQ(FloatToHalfBits(f) & 0x8000u, h & 0x8000u) << "NaN keeps its sign";
      continue;
    }
    EXPECT_EQ(FloatBits(f), FloatBits(expected)) << std::hex << h;
    EXPECT_EQ(FloatToHalfBits(f), h) << std::hex << h;
  }
}

TEST(Float16, NarrowingMatchesCompilerOnRandomFloats) {
  std::mt19937_64 rng(20261129);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> small(-70000.0f, 70000.0f);
  std::uniform_int_distribution<int> exp(-30, 17);
  for (int i = 0; i < 2'000'000; ++i) {
    float f;
    switch (i % 3) {
      case 0: f = BitsFloat(bits(rng)); break;          // any bit pattern
      case 1: f = small(rng); break;                    // the finite fp16 range and a bit beyond
      default: f = std::ldexp(small(rng) / 70000.0f, exp(rng)); break;  // subnormals, tiny
    }
    const uint16_t ours = FloatToHalfBits(f);
    const uint16_t ref = Float16Bits(static_cast<_Float16>(f));
    if (std::isnan(f)) {
      EXPECT_TRUE(IsHalfNan(ours));
      continue;
    }
    ASSERT_EQ(ours, ref) << "f=" << f << " bits=" << std::hex << FloatBits(f);
  }
}

TEST(Float16, HalfwayCasesRoundToEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even mantissa (1.0).
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00u);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even).
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02u);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bffu);
  EXPECT_EQ(FloatToHalfBits(65519.99f), 0x7bffu);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00u);  // halfway to 2^16 rounds to even = inf
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000u);  // half the min subnormal: tie to 0
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.5f, -25)), 0x0001u);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000u);
}

// float64 reference for float -> bf16 with round-to-nearest-even (finite inputs).
uint16_t ReferenceBf16(float f) {
  const uint32_t u = FloatBits(f);
  const auto down = static_cast<uint16_t>(u >> 16);  // truncation toward zero
  const auto up = static_cast<uint16_t>(down + 1);   // next magnitude (0x7f80 = inf acts as 2^128)
  const double x = std::fabs(static_cast<double>(f));
  auto magnitude = [](uint16_t b) {
    if ((b & 0x7fffu) == 0x7f80u) return std::ldexp(1.0, 128);
    return std::fabs(static_cast<double>(Bf16BitsToFloat(b)));
  };
  const double dd = x - magnitude(down);
  const double du = magnitude(up) - x;
  if (dd < du) return down;
  if (du < dd) return up;
  return (down & 1u) ? up : down;
}

TEST(Bf16, MatchesFloat64ReferenceOnRandomFloats) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = BitsFloat(bits(rng));
    const uint16_t ours = FloatToBf16Bits(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(IsBf16Nan(ours)) << std::hex << FloatBits(f);
      continue;
    }
    if (std::isinf(f)) {
      EXPECT_EQ(ours, FloatBits(f) >> 16);
      continue;
    }
    ASSERT_EQ(ours, ReferenceBf16(f)) << std::hex << FloatBits(f);
  }
}

TEST(Bf16, RoundToNearestEvenCases) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80u);
  EXPECT_EQ(FloatToBf16Bits(BitsFloat(0x3f808000u)), 0x3f80u);  // tie, even stays
  EXPECT_EQ(FloatToBf16Bits(BitsFloat(0x3f818000u)), 0x3f82u);  // tie, odd rounds up
  EXPECT_EQ(FloatToBf16Bits(BitsFloat(0x3f808001u)), 0x3f81u);  // just above the tie
  EXPECT_EQ(FloatToBf16Bits(BitsFloat(0x3f807fffu)), 0x3f80u);  // just below the tie
  EXPECT_EQ(FloatToBf16Bits(BitsFloat(0x7f7fffffu)), 0x7f80u);  // FLT_MAX overflows to inf
  EXPECT_EQ(FloatToBf16Bits(BitsFloat(0x00018000u)), 0x0002u);  // subnormal tie, odd up
  EXPECT_EQ(FloatToBf16Bits(-0.0f), 0x8000u);
  EXPECT_TRUE(IsBf16Nan(FloatToBf16Bits(BitsFloat(0x7f800001u))));  // signalling NaN stays NaN
  // Every bf16 value round-trips.
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    if (IsBf16Nan(b)) continue;
    EXPECT_EQ(FloatToBf16Bits(Bf16BitsToFloat(b)), b);
  }
}

}  // namespace
}  // namespace oscarkv::kvformat
