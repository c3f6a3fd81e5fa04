// Fused quantizer for the grouped segment kinds (KIVI-2 / OScaR: K in 32-token channel groups, V
// in 32-channel token groups) and for OScaR's omni-token K norms; the per-token kind without
// norms is kv_quant.cu. Bit-exact with KvQuantRef: the same float operations in the same order
// (kv_quant_device.cuh), min and max as std::min / std::max.
//
// Two kernels on the caller's stream: with token norms, TokenNormsKernel (one warp per token:
// rotate every head's row, then one lane sums the squares in double in the reference's order)
// writes params.token_norms_out; then GroupedQuantKernel, one block per (32-token group, head):
// rows rotated, divided by their token norm, clipped, staged in shared memory, then quantised
// per group and packed into the linear segment layout of lib/kvformat.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/quant/kv_quant_device.cuh"
#include "kernels/quant/kv_quant_grouped.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::kernels {
namespace {

using kvformat::SegmentKind;
namespace qd = quant_device;

constexpr int kGroupTokens = kvformat::kChannelGroupTokens;    // 32
constexpr int kGroupChannels = kvformat::kTokenGroupChannels;  // 32
constexpr int kWarps = 8;

template <int D>
__device__ __forceinline__ void LoadRowWarp(const KvQuantParams& p, int64_t in_stride, int t, int h,
                                            int lane, float* s_in) {
  const int64_t src = t * in_stride + static_cast<int64_t>(h) * D;
#pragma unroll
  for (int k = 0; k < D / 32; ++k) {
    const int i = lane + 32 * k;
    s_in[i] = p.input_bf16 != nullptr ? cuda::Bf16BitsToFloatDev(p.input_bf16[src + i])
                                      : p.input_f32[src + i];
  }
  __syncwarp();
}

// The row of (t, h) after rotation (identity when p.rotation is null).
template <int D>
__device__ __forceinline__ void RotatedRowWarp(const KvQuantParams& p, int64_t in_stride, int t,
                                               int h, int lane, float* s_in, float (&y)[D / 32]) {
  LoadRowWarp<D>(p, in_stride, t, h, lane, s_in);
  if (p.rotation != nullptr) {
    qd::RotateRowWarp<D>(s_in, p.rotation, lane, y);
  } else {
#pragma unroll
    for (int k = 0; k < D / 32; ++k) y[k] = s_in[lane + 32 * k];
  }
  __syncwarp();
}

template <int D>
__global__ void __launch_bounds__(32) TokenNormsKernel(const KvQuantParams p, int64_t in_stride) {
  extern __shared__ float s_rows[];  // [heads][D]
  __shared__ float s_in[D];
  const int t = blockIdx.x, lane = threadIdx.x;
  for (int h = 0; h < p.heads; ++h) {
    float y[D / 32];
    RotatedRowWarp<D>(p, in_stride, t, h, lane, s_in, y);
#pragma unroll
    for (int k = 0; k < D / 32; ++k) s_rows[h * D + lane + 32 * k] = y[k];
  }
  __syncwarp();
  if (lane == 0) {
    double sum = 0.0;
    for (int i = 0; i < p.heads * D; ++i) {
      const double v = static_cast<double>(s_rows[i]);
      sum = __dadd_rn(sum, __dmul_rn(v, v));
    }
    p.token_norms_out[t] = __double2float_rn(__dsqrt_rn(sum));
  }
}

// Sequential min / max exactly as std::min(mn, v) / std::max(mx, v).
__device__ __forceinline__ void MinMax(float v, float& mn, float& mx) {
  mn = v < mn ? v : mn;
  mx = mx < v ? v : mx;
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    GroupedQuantKernel(const KvQuantParams p, int64_t in_stride, int clip_idx, bool clip,
                       int64_t out_stride) {
  constexpr int kPer = D / 32;
  __shared__ float s_in[kWarps][D];
  __shared__ float s_y[kGroupTokens][D];
  __shared__ uint8_t s_code[kGroupTokens][D];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = blockIdx.x, h = blockIdx.y;
  const int t0 = g * kGroupTokens;
  const int rows = min(kGroupTokens, p.tokens - t0);
  for (int r = warp; r < rows; r += kWarps) {
    const int t = t0 + r;
    float y[kPer];
    RotatedRowWarp<D>(p, in_stride, t, h, lane, s_in[warp], y);
    if (p.token_norms_out != nullptr) {
      const float n = p.token_norms_out[t];
      const float inv = n > 0.0f ? __fdiv_rn(1.0f, n) : 0.0f;
#pragma unroll
      for (int k = 0; k < kPer; ++k) y[k] = __fmul_rn(y[k], inv);
    }
    if (clip) qd::ClipRowWarp<kPer>(y, clip_idx);
#pragma unroll
    for (int k = 0; k < kPer; ++k) s_y[r][lane + 32 * k] = y[k];
  }
  __syncthreads();
  uint8_t* seg = p.output + h * out_stride;
  if (p.kind == SegmentKind::kInt2ChannelGroup) {
    // Group g: codes [D][8] (channel c's 32 tokens, quartered with m = 8), then params [D].
    uint8_t* codes_out = seg + static_cast<int64_t>(g) * (D * (kGroupTokens / 4) + D * 4);
    uint8_t* params_out = codes_out + D * (kGroupTokens / 4);
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
      float mn = s_y[0][c], mx = s_y[0][c];
      for (int r = 1; r < kGroupTokens; ++r) MinMax(s_y[r][c], mn, mx);
      const qd::GroupParams gp = qd::ParamsOf(mn, mx);
      qd::StoreParamsDev(gp, params_out + 4 * c);
      for (int j = 0; j < kGroupTokens / 4; ++j) {
        codes_out[c * (kGroupTokens / 4) + j] = static_cast<uint8_t>(
            qd::CodeOf(s_y[j][c], gp) | (qd::CodeOf(s_y[j + 8][c], gp) << 2) |
            (qd::CodeOf(s_y[j + 16][c], gp) << 4) | (qd::CodeOf(s_y[j + 24][c], gp) << 6));
      }
    }
    return;
  }
  // Per token (group = D) or token groups (group = 32 channels): codes [T][D/4] quartered over
  // the whole row, params [T][D / group].
  const int group = p.kind == SegmentKind::kInt2PerToken ? D : kGroupChannels;
  const int per_row = D / group;
  uint8_t* params_base = seg + static_cast<int64_t>(p.tokens) * (D / 4);
  for (int idx = threadIdx.x; idx < rows * per_row; idx += blockDim.x) {
    const int r = idx / per_row, q = idx % per_row;
    const float* x = s_y[r] + q * group;
    float mn = x[0], mx = x[0];
    for (int i = 1; i < group; ++i) MinMax(x[i], mn, mx);
    const qd::GroupParams gp = qd::ParamsOf(mn, mx);
    qd::StoreParamsDev(gp, params_base + (static_cast<int64_t>(t0 + r) * per_row + q) * 4);
    for (int i = 0; i < group; ++i) s_code[r][q * group + i] = qd::CodeOf(x[i], gp);
  }
  __syncthreads();
  constexpr int kM = D / 4;
  for (int idx = threadIdx.x; idx < rows * kM; idx += blockDim.x) {
    const int r = idx / kM, j = idx % kM;
    const uint8_t* c = s_code[r];
    seg[static_cast<int64_t>(t0 + r) * kM + j] = static_cast<uint8_t>(
        c[j] | (c[j + kM] << 2) | (c[j + 2 * kM] << 4) | (c[j + 3 * kM] << 6));
  }
}

template <int D>
cudaError_t LaunchFor(const KvQuantParams& p, int64_t in_stride, int clip_idx, bool clip,
                      int64_t out_stride, cudaStream_t stream) {
  if (p.token_norms_out != nullptr) {
    const size_t smem = sizeof(float) * static_cast<size_t>(p.heads) * D;
    if (smem > 48 * 1024) return cudaErrorNotSupported;
    TokenNormsKernel<D><<<p.tokens, 32, smem, stream>>>(p, in_stride);
    OSCARKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  const dim3 grid((p.tokens + kGroupTokens - 1) / kGroupTokens, p.heads);
  GroupedQuantKernel<D><<<grid, kWarps * 32, 0, stream>>>(p, in_stride, clip_idx, clip, out_stride);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGroupedKvQuant(const KvQuantParams& p, int64_t in_stride, int clip_idx,
                                 bool clip, int64_t out_stride, cudaStream_t stream) {
  if (p.kind != SegmentKind::kInt2PerToken && p.kind != SegmentKind::kInt2TokenGroup &&
      p.kind != SegmentKind::kInt2ChannelGroup) {
    return cudaErrorNotSupported;  // kBf16Rows stays on the CPU path
  }
  if (p.kind == SegmentKind::kInt2ChannelGroup && p.tokens % kGroupTokens != 0) {
    return cudaErrorInvalidValue;
  }
  if (p.heads > 65535) return cudaErrorInvalidValue;
  return p.head_dim == 128 ? LaunchFor<128>(p, in_stride, clip_idx, clip, out_stride, stream)
                           : LaunchFor<64>(p, in_stride, clip_idx, clip, out_stride, stream);
}

}  // namespace oscarkv::kernels
