// The per-row steps both prefill attention kernels share (prefill_attention.cu, mma.sync;
// prefill_attention_sm90.cu, wgmma): a key tile's online-softmax update of a thread's two rows,
// and the final normalisation and bf16 store. Both kernels hold S and O in the mma.sync / wgmma
// accumulator layout: element 4 n + 2 rr + e is the thread's row rr (g, g + 8), column
// 8 n + 2 t4 + e (g = lane / 4, t4 = lane % 4).
#ifndef OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_ROWS_CUH_
#define OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_ROWS_CUH_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/model/model_kernels_ref.h"

namespace oscarkv::kernels {

template <bool kFastExp>
__device__ __forceinline__ float Exp2Of(float x) {
  return kFastExp ? cuda::Exp2(x) : exp2f(x);
}

// One key tile of kKeys columns (s: the thread's scores, masked ones -inf): each row's max over
// its quad of lanes, alpha[rr] = the factor for what the row accumulated before (1 when the tile
// shows the row nothing, so that such a tile is an exact no-op: a row that has seen nothing keeps
// m = -inf and exponents use base 0, no NaN), s replaced by the weights 2^(s scale_log2 - m), and
// their sum added to row_sum after scaling it by alpha. The caller scales O by alpha. kFastExp:
// the weights by cuda::Exp2, else exp2f.
template <int kKeys, bool kFastExp>
__device__ __forceinline__ void SoftmaxTileRows(float* s, float (&row_max)[2], float (&row_sum)[2],
                                                float scale_log2, float (&alpha)[2]) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      mx = fmaxf(mx, fmaxf(s[4 * n + 2 * rr], s[4 * n + 2 * rr + 1]));
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(row_max[rr], mx);
    const float base = m_new == -INFINITY ? 0.f : m_new * scale_log2;
    // exp2f of the fused multiply-add's rounding residue need not be 1, so a tile with nothing
    // visible takes 1 outright (a chunk's rows then equal the whole prompt's bit for bit).
    alpha[rr] = mx == -INFINITY ? 1.f : exp2f(row_max[rr] * scale_log2 - base);
    row_max[rr] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      float& p0 = s[4 * n + 2 * rr];
      float& p1 = s[4 * n + 2 * rr + 1];
      p0 = Exp2Of<kFastExp>(fmaf(p0, scale_log2, -base));
      p1 = Exp2Of<kFastExp>(fmaf(p1, scale_log2, -base));
      sum += p0 + p1;
    }
    row_sum[rr] = row_sum[rr] * alpha[rr] + sum;
  }
}

// acc: the thread's output accumulators (n < kD / 8), rows[rr] their query rows. row_sum: the
// thread's part of each row's sum (the quad of lanes holding a row adds theirs). Rows >=
// num_tokens are not written.
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

#endif  // OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_ROWS_CUH_
