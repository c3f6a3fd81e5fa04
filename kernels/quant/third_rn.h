// x / 3 rounded to the nearest float, without the IEEE division's range check and slow path:
// the per-token quantizers' scale (max(mx - mn, 1e-8) / 3, kv_quant_ref.cc) in the kernels.
// Header-only, host and device (the host build is what tests check it with).
#ifndef OSCARKV_KERNELS_QUANT_THIRD_RN_H_
#define OSCARKV_KERNELS_QUANT_THIRD_RN_H_

#include <cmath>

#include "lib/kvformat/float16.h"

namespace oscarkv::kernels::int2_bounds {

// The range ThirdRn is exact on.
inline constexpr float kThirdRnMin = 1e-8f;
inline constexpr float kThirdRnMax = 1e30f;

// x / 3 for kThirdRnMin <= x <= kThirdRnMax: q0 = x c with c = fl(1/3), r = x - 3 q0 (exact in
// an fma), q = q0 + r c, rounded once (Markstein's correction step). Every step scales by powers
// of two in this range (no intermediate is subnormal or overflows), so checking every mantissa
// of one binade checks them all (tests/kernels/quant/third_rn_test.cc). The CUDA division
// computes the same three steps, plus a range check (FCHK) and a branch to its slow path.
OSCARKV_HOST_DEVICE inline float ThirdRn(float x) {
  constexpr float kThird = 0x1.555556p-2f;  // fl(1/3)
#if defined(__CUDA_ARCH__)
  const float q0 = __fmul_rn(x, kThird);
  return __fmaf_rn(__fmaf_rn(-3.0f, q0, x), kThird, q0);
#else
  const float q0 = x * kThird;
  return std::fma(std::fma(-3.0f, q0, x), kThird, q0);
#endif
}

}  // namespace oscarkv::kernels::int2_bounds

#endif  // OSCARKV_KERNELS_QUANT_THIRD_RN_H_
