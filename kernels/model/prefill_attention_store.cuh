// The last step both prefill attention kernels share (prefill_attention.cu, mma.sync;
// prefill_attention_sm90.cu, wgmma): normalise a thread's two output rows by their softmax sums
// and write them as bf16.
#ifndef OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_STORE_CUH_
#define OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_STORE_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/model/model_kernels_ref.h"

namespace oscarkv::kernels {

// acc holds the thread's accumulators in the mma.sync / wgmma layout: acc[4 n + 2 rr + e] is
// query row rows[rr], column 8 n + 2 t4 + e (t4 = lane % 4), n < kD / 8. row_sum: the thread's
// part of each row's sum (the quad of lanes holding a row adds theirs). Rows >= num_tokens are
// not written.
template <int kD>
__device__ __forceinline__ void StoreNormalisedRows(const float* acc, const float (&row_sum)[2],
                                                    const int (&rows)[2], int num_tokens,
                                                    const PrefillAttentionParams& p, int head,
                                                    int t4) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float sum = row_sum[rr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (rows[rr] >= num_tokens) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    uint16_t* out = p.out_bf16 + (static_cast<int64_t>(rows[rr]) * p.num_q_heads + head) * kD;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(out + 8 * n + 2 * t4) =
          cuda::PackBf16x2(acc[4 * n + 2 * rr] * inv, acc[4 * n + 2 * rr + 1] * inv);
    }
  }
}

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_STORE_CUH_
