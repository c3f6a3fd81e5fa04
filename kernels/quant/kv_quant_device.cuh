// Device building blocks shared by the fused quantizers (kv_quant.cu: per token; kv_quant_grouped.cu:
// channel and token groups, OScaR token norms). Each repeats KvQuantRef's float operations in the
// same order (no FMA contraction), so the kernels are bit-exact with the CPU reference.
#ifndef OSCARKV_KERNELS_QUANT_KV_QUANT_DEVICE_CUH_
#define OSCARKV_KERNELS_QUANT_KV_QUANT_DEVICE_CUH_

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/quant/third_rn.h"

namespace oscarkv::kernels::quant_device {

// y[k] (channel lane + 32k of a row of D) = sum_i x[i] * R[i][j], accumulated in double in
// increasing i as the reference does. `x` is the row in shared memory, `rot` [D][D] row-major.
template <int D>
__device__ __forceinline__ void RotateRowWarp(const float* x, const float* rot, int lane,
                                              float (&y)[D / 32]) {
  constexpr int kPer = D / 32;
  double acc[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) acc[k] = 0.0;
  for (int i = 0; i < D; ++i) {
    const double xi = static_cast<double>(x[i]);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      acc[k] = __dadd_rn(acc[k], __dmul_rn(xi, static_cast<double>(rot[i * D + lane + 32 * k])));
    }
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) y[k] = static_cast<float>(acc[k]);
}

// Clamps a warp's row (kPer values per lane) to [-tau, tau], tau = the clip_idx-th smallest |y|
// (exact order statistic: radix select over the bits of |y|, which order like the values).
template <int kPer>
__device__ __forceinline__ void ClipRowWarp(float (&y)[kPer], int clip_idx) {
  uint32_t u[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) u[k] = __float_as_uint(y[k]) & 0x7fffffffu;
  uint32_t prefix = 0, mask = 0;
  int want = clip_idx;
  for (int b = 30; b >= 0; --b) {
    const uint32_t bit = 1u << b;
    int cnt = 0;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      cnt += __popc(__ballot_sync(0xffffffffu, (u[k] & mask) == prefix && !(u[k] & bit)));
    }
    if (want >= cnt) {
      want -= cnt;
      prefix |= bit;
    }
    mask |= bit;
  }
  const float tau = __uint_as_float(prefix);
#pragma unroll
  for (int k = 0; k < kPer; ++k) y[k] = fminf(fmaxf(y[k], -tau), tau);
}

// The stored parameters of a group with minimum mn and maximum mx (ComputeInt2Params), and the
// fp16-rounded scale s and min m that codes are computed against.
struct GroupParams {
  __half s16, m16;
  float s, m;
};
// The range is clamped to ThirdRn's: above 1e30 (mx - mn may overflow to inf in the reference)
// the scale rounds to an fp16 inf either way.
__device__ __forceinline__ GroupParams ParamsOf(float mn, float mx) {
  const float range =
      fminf(fmaxf(__fsub_rn(mx, mn), int2_bounds::kThirdRnMin), int2_bounds::kThirdRnMax);
  const float scale = int2_bounds::ThirdRn(range);
  GroupParams p;
  p.s16 = __float2half_rn(scale);
  p.m16 = __float2half_rn(mn);
  p.s = __half2float(p.s16);
  p.m = __half2float(p.m16);
  return p;
}

// QuantizeInt2: clamp(floor((y - m) / s + 0.5), 0, 3), 0 when s is 0.
__device__ __forceinline__ uint8_t CodeOf(float y, const GroupParams& p) {
  if (!(p.s > 0.0f)) return 0;
  const float qf = floorf(__fadd_rn(__fdiv_rn(__fsub_rn(y, p.m), p.s), 0.5f));
  return static_cast<uint8_t>(fminf(fmaxf(qf, 0.0f), 3.0f));
}

// Little-endian Int2Params (scale, then min) at dst, which must be 2-byte aligned (params sit at
// multiples of 4 in every segment layout). 16-bit stores, as the per-token kernel does: storing
// the low byte of an fp16 register with st.global.u8 wrote wrong bytes on the H200 (sm_90a,
// CUDA 13.0; the high bytes, taken through a shift, were right).
__device__ __forceinline__ void StoreParamsDev(const GroupParams& p, uint8_t* dst) {
  uint16_t* prm = reinterpret_cast<uint16_t*>(dst);
  prm[0] = __half_as_ushort(p.s16);
  prm[1] = __half_as_ushort(p.m16);
}

}  // namespace oscarkv::kernels::quant_device

#endif  // OSCARKV_KERNELS_QUANT_KV_QUANT_DEVICE_CUH_
