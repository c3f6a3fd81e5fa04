// Fused rotate -> clip -> INT2 -> pack on the GPU; see kv_quant_cuda.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/quant/kv_quant_cuda.h"
#include "kernels/quant/kv_quant_device.cuh"
#include "kernels/quant/kv_quant_grouped.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::kernels {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kPageTok = 8;

struct SegmentTarget {
  // Linear segments (KvQuantRef) when page_ids == nullptr, else paged.
  uint8_t* base;
  const int32_t* page_ids;
  int64_t page_stride;
  int64_t head_stride;
  int64_t seg_offset;
  int seg_tokens;  // T of a linear segment; 8 when paged
};

template <int D>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    KvQuantKernel(const KvQuantParams p, SegmentTarget tgt, int clip_idx, bool clip,
                  int64_t in_stride) {
  constexpr int kPer = D / 32;  // values per lane: channels lane + 32 k
  extern __shared__ double s_rot_dyn[];
  __shared__ float s_x[kRowsPerBlock][D];
  __shared__ uint8_t s_code[kRowsPerBlock][D];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool rotate = p.rotation != nullptr;
  float* s_rot = reinterpret_cast<float*>(s_rot_dyn);
  if (rotate) {
    for (int i = threadIdx.x; i < D * D; i += blockDim.x) s_rot[i] = p.rotation[i];
  }
  __syncthreads();
  const int64_t rows = static_cast<int64_t>(p.tokens) * p.heads;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int t = static_cast<int>(row / p.heads), h = static_cast<int>(row % p.heads);
    const int64_t src = t * in_stride + static_cast<int64_t>(h) * D;
    float y[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int i = lane + 32 * k;
      s_x[warp][i] = p.input_bf16 != nullptr
                         ? cuda::Bf16BitsToFloatDev(p.input_bf16[src + i])
                         : p.input_f32[src + i];
    }
    __syncwarp();
    if (rotate) {
      quant_device::RotateRowWarp<D>(s_x[warp], s_rot, lane, y);
    } else {
#pragma unroll
      for (int k = 0; k < kPer; ++k) y[k] = s_x[warp][lane + 32 * k];
    }
    __syncwarp();
    if (clip) quant_device::ClipRowWarp<kPer>(y, clip_idx);
    float mn = y[0], mx = y[0];
#pragma unroll
    for (int k = 1; k < kPer; ++k) {
      mn = fminf(mn, y[k]);
      mx = fmaxf(mx, y[k]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, off));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    }
    const quant_device::GroupParams gp = quant_device::ParamsOf(mn, mx);
#pragma unroll
    for (int k = 0; k < kPer; ++k) s_code[warp][lane + 32 * k] = quant_device::CodeOf(y[k], gp);
    __syncwarp();
    uint8_t* seg;
    int trow;
    if (tgt.page_ids != nullptr) {
      seg = tgt.base + static_cast<int64_t>(tgt.page_ids[t / kPageTok]) * tgt.page_stride +
            h * tgt.head_stride + tgt.seg_offset;
      trow = t % kPageTok;
    } else {
      seg = tgt.base + h * tgt.head_stride;
      trow = t;
    }
    constexpr int kM = D / 4;
    if (lane < kM) {
      const uint8_t* c = s_code[warp];
      seg[trow * kM + lane] = static_cast<uint8_t>(c[lane] | (c[lane + kM] << 2) |
                                                   (c[lane + 2 * kM] << 4) | (c[lane + 3 * kM] << 6));
    }
    if (lane == 0) {
      uint16_t* prm = reinterpret_cast<uint16_t*>(seg + tgt.seg_tokens * kM + 4 * trow);
      prm[0] = __half_as_ushort(gp.s16);
      prm[1] = __half_as_ushort(gp.m16);
    }
    __syncwarp();
  }
}

cudaError_t Launch(const KvQuantParams& p, const SegmentTarget& tgt, cudaStream_t stream) {
  if ((p.input_bf16 == nullptr) == (p.input_f32 == nullptr)) return cudaErrorInvalidValue;
  if (p.tokens <= 0 || p.heads <= 0 || !(p.clip_ratio > 0.0f)) return cudaErrorInvalidValue;
  if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorNotSupported;
  const int64_t in_stride = p.input_token_stride == 0
                                ? static_cast<int64_t>(p.heads) * p.head_dim
                                : p.input_token_stride;
  if (in_stride < static_cast<int64_t>(p.heads) * p.head_dim) return cudaErrorInvalidValue;
  const bool clip = p.clip_ratio < 1.0f;
  const int clip_idx = ClipIndex(p.clip_ratio, p.head_dim);
  if (p.kind != kvformat::SegmentKind::kInt2PerToken || p.token_norms_out != nullptr) {
    // KIVI-2 / OScaR groups and token norms: linear segments only (no paged grouped layout).
    if (tgt.page_ids != nullptr) return cudaErrorNotSupported;
    return LaunchGroupedKvQuant(p, in_stride, clip_idx, clip, tgt.head_stride, stream);
  }
  const size_t smem = p.rotation != nullptr ? sizeof(float) * p.head_dim * p.head_dim : 0;
  const int64_t rows = static_cast<int64_t>(p.tokens) * p.heads;
  int device = 0, sms = 132;
  OSCARKV_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  OSCARKV_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t blocks_needed = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int blocks = static_cast<int>(blocks_needed < 8LL * sms ? blocks_needed : 8LL * sms);
  if (p.head_dim == 128) {
    OSCARKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        KvQuantKernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
    KvQuantKernel<128><<<blocks, kRowsPerBlock * 32, smem, stream>>>(p, tgt, clip_idx, clip,
                                                                       in_stride);
  } else {
    KvQuantKernel<64><<<blocks, kRowsPerBlock * 32, smem, stream>>>(p, tgt, clip_idx, clip,
                                                                      in_stride);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t KvQuantCuda(const KvQuantParams& params, cudaStream_t stream) {
  if (params.output == nullptr) return cudaErrorInvalidValue;
  const int64_t seg = static_cast<int64_t>(
      kvformat::SegmentBytes(params.kind, params.tokens, params.head_dim));
  SegmentTarget tgt{params.output, nullptr, 0,
                    params.output_head_stride == 0 ? seg : params.output_head_stride, 0,
                    params.tokens};
  if (tgt.head_stride < seg) return cudaErrorInvalidValue;
  return Launch(params, tgt, stream);
}

cudaError_t DemoteToPagesCuda(const KvQuantParams& params, const DemotePagesTarget& target,
                              cudaStream_t stream) {
  if (target.pool == nullptr || target.page_ids == nullptr) return cudaErrorInvalidValue;
  SegmentTarget tgt{target.pool, target.page_ids, target.page_stride_bytes,
                    target.head_stride_bytes, target.segment_offset_bytes, kPageTok};
  return Launch(params, tgt, stream);
}

}  // namespace oscarkv::kernels
