// Bit-exact conversions between float and the 16-bit formats of the block format (IEEE fp16 for
// INT2 scale/min, bf16 for BF16 rows). Round-to-nearest-even; NaN stays NaN. Header-only and
// usable on host and device (kernels use the CUDA intrinsics instead where faster).
#ifndef OSCARKV_LIB_KVFORMAT_FLOAT16_H_
#define OSCARKV_LIB_KVFORMAT_FLOAT16_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define OSCARKV_HOST_DEVICE __host__ __device__
#else
#define OSCARKV_HOST_DEVICE
#endif

namespace oscarkv::kvformat {

OSCARKV_HOST_DEVICE inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
OSCARKV_HOST_DEVICE inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

OSCARKV_HOST_DEVICE inline uint16_t FloatToBf16Bits(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
OSCARKV_HOST_DEVICE inline float Bf16BitsToFloat(uint16_t b) {
  return BitsFloat(static_cast<uint32_t>(b) << 16);
}
// Rounds a float to the nearest bf16 value and back.
OSCARKV_HOST_DEVICE inline float RoundToBf16(float f) { return Bf16BitsToFloat(FloatToBf16Bits(f)); }

OSCARKV_HOST_DEVICE inline uint16_t FloatToHalfBits(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                                // subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);            // < half of min subnormal
    const uint32_t mant = (abs & 0x007fffffu) | 0x00800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 + (113 - exp) ... in [14, 24]
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t result = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1u);
    if (rest > halfway || (rest == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  uint32_t result = ((abs - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}
OSCARKV_HOST_DEVICE inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Subnormal: mant * 2^-24, exact in float.
    const float value = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -value : value;
  }
  if (exp == 31) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}
OSCARKV_HOST_DEVICE inline float RoundToHalf(float f) { return HalfBitsToFloat(FloatToHalfBits(f)); }

}  // namespace oscarkv::kvformat

#endif  // OSCARKV_LIB_KVFORMAT_FLOAT16_H_
