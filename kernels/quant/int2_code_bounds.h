// Exact INT2 code boundaries: for the stored params (s, m) of a per-token row, the smallest float
// y whose code QuantizeInt2(y) (kv_quant_ref.h) is >= j, j = 1, 2, 3. A kernel then codes a value
// with three compares instead of the reference's subtract, IEEE divide, add and floor, and gets
// the same code bit for bit.
//
// Why this is exact: code(y) = clamp(floor(fl(fl(fl(y - m) / s) + 0.5)), 0, 3) is a composition of
// non-decreasing maps of y (s > 0), so {y : code(y) >= j} = {y : y >= Y_j}. Y_j is found through
// the three roundings in turn (each "fl(x) >= F" is "x beyond the midpoint below F", ties to even),
// with exact double arithmetic, then checked with the reference's own float operations.
// Header-only, host and device (the host build is what tests check it with).
#ifndef OSCARKV_KERNELS_QUANT_INT2_CODE_BOUNDS_H_
#define OSCARKV_KERNELS_QUANT_INT2_CODE_BOUNDS_H_

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

#include "lib/kvformat/float16.h"

// `#pragma unroll 1` for nvcc; host compilers do not know it.
#if defined(__CUDACC__)
#define OSCARKV_INT2_BOUNDS_NO_UNROLL _Pragma("unroll 1")
#else
#define OSCARKV_INT2_BOUNDS_NO_UNROLL
#endif

namespace oscarkv::kernels::int2_bounds {

using kvformat::BitsFloat;
using kvformat::FloatBits;

inline constexpr float kInf = __builtin_huge_valf();

// Bits of the smallest float q with fl(q + 0.5f) >= j, for j = 1, 2, 3 (checked by the GPU test's
// host part): 0.5 - 2^-25 (0.5 - 2^-25 + 0.5 is a tie that rounds up to 1.0), 1.5, 2.5.
OSCARKV_HOST_DEVICE constexpr uint32_t RoundHalfUpBits(int j) {
  return j == 1 ? 0x3effffffu : j == 2 ? 0x3fc00000u : 0x40200000u;
}

// Arithmetic with round-to-nearest and no contraction, on both sides.
OSCARKV_HOST_DEVICE inline float SubRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
OSCARKV_HOST_DEVICE inline float AddFloatRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
OSCARKV_HOST_DEVICE inline float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
OSCARKV_HOST_DEVICE inline double ToDouble(float f) { return static_cast<double>(f); }
OSCARKV_HOST_DEVICE inline double AddRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
OSCARKV_HOST_DEVICE inline double MulRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
OSCARKV_HOST_DEVICE inline float ToFloatRn(double d) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(d);
#else
  return static_cast<float>(d);
#endif
}

// Neighbouring floats by value (NaN and the infinity in the direction of travel stay put).
OSCARKV_HOST_DEVICE inline float NextUp(float f) {
  if (!(f < kInf)) return f;
  if (f == 0.0f) return BitsFloat(1u);
  const uint32_t u = FloatBits(f);
  return BitsFloat(f > 0.0f ? u + 1u : u - 1u);
}
OSCARKV_HOST_DEVICE inline float NextDown(float f) { return -NextUp(-f); }

// "fl(x) >= f" for a positive normal float f is "x > at", or "x >= at" when `inclusive`: `at` is
// the midpoint between f and the float below it (exact in double), and a tie rounds to the
// neighbour with the even significand.
struct RoundsUpTo {
  double at;
  bool inclusive;
};
OSCARKV_HOST_DEVICE inline RoundsUpTo RoundsUpToFloat(float f) {
  const uint32_t u = FloatBits(f);
  const double below = ToDouble(BitsFloat(u - 1u));
  return {MulRn(AddRn(below, ToDouble(f)), 0.5), (u & 1u) == 0u};
}

// Smallest float x with x > at (x >= at when `inclusive`), for `at` inside the float range.
OSCARKV_HOST_DEVICE inline float CeilToFloat(double at, bool inclusive) {
  float f = ToFloatRn(at);
  const double fd = ToDouble(f);
  if (fd < at || (!inclusive && fd == at)) f = NextUp(f);
  return f;
}

// Smallest float y with code(y) >= j (j = 1..3) against params s (> 0, finite) and m, both
// already widened from fp16.
OSCARKV_HOST_DEVICE inline float CodeLowerBound(int j, float s, float m) {
  // fl(d / s) >= q_min  <=>  d / s beyond the rounding midpoint  <=>  d beyond s * midpoint. The
  // product is exact in double (11 + 26 significant bits), so d_min is exact.
  const RoundsUpTo q = RoundsUpToFloat(BitsFloat(RoundHalfUpBits(j)));
  const float d_min = CeilToFloat(MulRn(ToDouble(s), q.at), q.inclusive);
  // fl(y - m) >= d_min  <=>  y beyond m + midpoint below d_min. The sum is exact in double for an
  // fp16 m unless |m| exceeds d_min by ~2^28 (rows whose range is below 2^-27 of their minimum,
  // out of reach of bf16 rows); the checks below then walk the last float steps with the
  // reference's own subtraction, so the bound holds whatever the double sum did.
  const RoundsUpTo d = RoundsUpToFloat(d_min);
  float y = CeilToFloat(AddRn(ToDouble(m), d.at), d.inclusive);
  // (Bounded, so that a NaN row cannot hang a kernel; not unrolled: they never iterate.)
  OSCARKV_INT2_BOUNDS_NO_UNROLL
  for (int i = 0; i < 64 && !(SubRn(y, m) >= d_min); ++i) y = NextUp(y);
  OSCARKV_INT2_BOUNDS_NO_UNROLL
  for (int i = 0; i < 64 && SubRn(NextDown(y), m) >= d_min; ++i) y = NextDown(y);
  return y;
}

// The step part of CodeLowerBound in closed form: the smallest float d with fl(fl(d / s) + 0.5)
// >= j for an fp16-valued scale s > 0 (finite). With s = sigma 2^e (sigma in [1, 2), at most 11
// significant bits), s * at_j is exact in double and lies within one float step below:
//   j = 2, 3: at_j = 1.5 - 2^-24, 2.5 - 2^-23 (inclusive), and s 2^-24 (s 2^-23) is less than the
//             gap below 1.5 s (2.5 s), both exact floats and never powers of two: d = 1.5 s, 2.5 s;
//   j = 1:    at_1 = 0.5 - 3 2^-26 (strict): s at_1 = s/2 - 0.75 sigma gap(s/2), so d is s/2 unless
//             that reaches past the float below s/2, i.e. sigma > 4/3 (mantissa field of s/2 above
//             2^23 / 3), or sigma = 1 (the gap below a power of two is half as wide).
// Checked against CodeLowerBound's double derivation for every fp16 scale by the GPU test's host
// part.
OSCARKV_HOST_DEVICE inline float CodeStepMin(int j, float s) {
  const float d = MulRn(s, j == 1 ? 0.5f : j == 2 ? 1.5f : 2.5f);  // exact
  const uint32_t f = FloatBits(d) & 0x7fffffu;
  return j == 1 && (f == 0u || f > 0x2aaaaau) ? BitsFloat(FloatBits(d) - 1u) : d;
}

// The float guess of the smallest y with fl(y - m) >= d: y0 = fl(fl(m + d) - h), h = half the gap
// below d (so m + d - h is the rounding midpoint the bound sits on; d is never a power of two,
// whose gap below is half as wide). The fast bounds below prove or reject it.
OSCARKV_HOST_DEVICE inline float CodeLowerBoundGuess(float d, float m) {
  const uint32_t hb = (FloatBits(d) & 0x7f800000u) - (24u << 23);
  return SubRn(AddFloatRn(m, d), BitsFloat(hb));
}

// CodeLowerBound's final step in float arithmetic, checked on the spot: the answer is the guess
// y0 (CodeLowerBoundGuess) or the float above it when
// the reference's own subtraction says so: fl(y - m) >= d holds for y and not for the float below
// y (it is non-decreasing in y, so y is the smallest). The check is what makes it exact: a poor
// y0 only costs the fallback. Returns false (and the caller takes CodeLowerBound) when neither is
// proven, or y0 is zero or not finite. d is a positive normal float (CodeStepMin), m any float.
OSCARKV_HOST_DEVICE inline bool FastCodeLowerBound(float d, float m, float* y) {
  const float y0 = CodeLowerBoundGuess(d, m);
  const uint32_t u = FloatBits(y0);
  const uint32_t toward_up = (u >> 31) != 0u ? 0xffffffffu : 1u;  // +1 ulp in bits
  const float up = BitsFloat(u + toward_up);
  const float down = BitsFloat(u - toward_up);
  const bool at = SubRn(y0, m) >= d;
  const bool at_up = SubRn(up, m) >= d;
  const bool at_down = SubRn(down, m) >= d;
  *y = at ? y0 : up;
  const bool finite_nonzero = (u & 0x7fffffffu) != 0u && (u & 0x7f800000u) != 0x7f800000u;
  return finite_nonzero & ((at & !at_down) | (!at & at_up));
}

// The bound a raw (unclipped) value is compared with when the row is clipped to [-tau, tau]
// first: clamp(y) >= b  <=>  tau >= b and (y >= b or -tau >= b). No clip: b itself.
OSCARKV_HOST_DEVICE inline float ClippedBound(float b, bool clip, float tau) {
  if (!clip) return b;
  if (!(tau >= b)) return kInf;
  if (-tau >= b) return -kInf;
  return b;
}

// Bound j of a row whose params, widened from fp16, are s and m, and whose clip threshold is tau
// (ignored when !clip): the code of a raw value y is sum_j [y >= RowCodeBound(j, ...)]. A zero
// (or non-finite) scale codes everything 0.
OSCARKV_HOST_DEVICE inline float RowCodeBound(int j, float s, float m, bool clip, float tau) {
  if (!(s > 0.0f) || !(s < kInf)) return kInf;
  float y;
  if (!FastCodeLowerBound(CodeStepMin(j, s), m, &y)) y = CodeLowerBound(j, s, m);
  return ClippedBound(y, clip, tau);
}

// ---- Bounds for bf16 values ----
// A bf16 y is >= a float bound b iff it is >= the smallest bf16 value >= b, so bf16 rows compare
// with that one; it can be found and proven at bf16 granularity directly, which is cheaper than
// proving the float bound first (FastCodeLowerBound checks two float neighbours).

// Bits of the smallest bf16 value >= x, as float bits (low 16 bits zero); NaN stays NaN.
OSCARKV_HOST_DEVICE inline uint32_t CeilToBf16Bits(float x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_ru(x))) << 16;
#else
  const uint32_t u = FloatBits(x);
  if (x != x || (u & 0xffffu) == 0u) return u;
  return (u >> 31) != 0u ? u & 0xffff0000u : (u & 0xffff0000u) + 0x10000u;  // to +inf
#endif
}

// Whether the bf16 value c (float bits, not +0: see below) is the smallest with fl(c - m) >= d:
// the reference's subtraction says c passes and the bf16 value below it does not (the test is
// non-decreasing in the value, so no smaller one passes).
OSCARKV_HOST_DEVICE inline bool IsSmallestPassingBf16(uint32_t c, float d, float m) {
  const uint32_t below = static_cast<int32_t>(c) > 0 ? c - 0x10000u : c + 0x10000u;
  return SubRn(BitsFloat(c), m) >= d && !(SubRn(BitsFloat(below), m) >= d);
}

// The smallest bf16 value c with fl(c - m) >= d, as float bits: c = the bf16 ceiling of
// CodeLowerBoundGuess, when IsSmallestPassingBf16 proves it; returns false otherwise. +0 is taken
// as -0 (equal values), whose value below is the negative subnormal.
OSCARKV_HOST_DEVICE inline bool FastBf16CodeLowerBound(float d, float m, uint32_t* bits) {
  const uint32_t c = CeilToBf16Bits(CodeLowerBoundGuess(d, m));
  *bits = c == 0u ? 0x80000000u : c;
  return IsSmallestPassingBf16(*bits, d, m);
}

// The smallest bf16 value with code >= j (j = 1..3) against params s (> 0, finite) and m, as a
// float: the bf16 ceiling of CodeLowerBound, by FastBf16CodeLowerBound where it answers.
OSCARKV_HOST_DEVICE inline float Bf16CodeLowerBound(int j, float s, float m) {
  uint32_t c;
  if (!FastBf16CodeLowerBound(CodeStepMin(j, s), m, &c))
    c = CeilToBf16Bits(CodeLowerBound(j, s, m));
  return BitsFloat(c);
}

// RowCodeBound for bf16 values: a bf16-valued float (or +-inf), [y >= it] = [y >= RowCodeBound]
// for every bf16 y. The clip commutes with the ceiling: tau is a bf16 value.
OSCARKV_HOST_DEVICE inline float RowCodeBoundBf16(int j, float s, float m, bool clip, float tau) {
  if (!(s > 0.0f) || !(s < kInf)) return kInf;
  return ClippedBound(Bf16CodeLowerBound(j, s, m), clip, tau);
}

}  // namespace oscarkv::kernels::int2_bounds

#endif  // OSCARKV_KERNELS_QUANT_INT2_CODE_BOUNDS_H_
