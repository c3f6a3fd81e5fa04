// Per-token INT2 dequantisation on the GPU (DequantInt2PerTokenCuda, int2_dequant_cuda.h): one
// thread per 4 consecutive channels of one (token, head) row, so a warp writes 512 contiguous
// bytes of output with float4 stores (scalar stores when out is not 16-byte aligned). The four
// channels c..c+3 share quarter c / (D/4) and come from bytes c % (D/4) .. +3 of the row's codes.
//
// Bit-exact with DequantInt2PerTokenRef: the fp16 params are widened with __half2float (exact,
// subnormals included) and x_hat = code * scale + min is a separately rounded multiply and add
// (__fmul_rn / __fadd_rn), since nvcc would otherwise contract it into one FMA.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/quant/int2_dequant_cuda.h"
#include "lib/kvformat/block_layout.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1 << 16;  // grid-stride beyond this
constexpr kvformat::SegmentKind kKind = kvformat::SegmentKind::kInt2PerToken;

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    DequantInt2PerTokenKernel(const __grid_constant__ DequantInt2Params p, bool vector_store) {
  constexpr int kBytesPerRow = kHeadDim / 4;  // also the channels per quarter
  constexpr int kQuadsPerRow = kHeadDim / 4;  // groups of 4 channels, one per thread
  const size_t codes_at = kvformat::SegmentCodesOffset(kKind, p.tokens, kHeadDim);
  const size_t params_at = kvformat::SegmentParamsOffset(kKind, p.tokens, kHeadDim);
  const int64_t total = static_cast<int64_t>(p.tokens) * p.heads * kQuadsPerRow;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int quad = static_cast<int>(idx % kQuadsPerRow);
    const int64_t row = idx / kQuadsPerRow;  // t * heads + h
    const int h = static_cast<int>(row % p.heads);
    const int64_t t = row / p.heads;
    const int c0 = 4 * quad;
    const int quarter = c0 / kBytesPerRow;
    const int byte0 = c0 % kBytesPerRow;

    const uint8_t* segment = p.segments + h * p.segment_head_stride;
    const uint8_t* codes = segment + codes_at + t * kBytesPerRow + byte0;
    const uint8_t* raw = segment + params_at + t * sizeof(kvformat::Int2Params);
    // Int2Params little-endian, scale then min; byte loads, so any segment alignment works.
    const uint16_t scale_bits = static_cast<uint16_t>(__ldg(raw) | (__ldg(raw + 1) << 8));
    const uint16_t min_bits = static_cast<uint16_t>(__ldg(raw + 2) | (__ldg(raw + 3) << 8));
    const float scale = cuda::HalfBitsToFloatDev(scale_bits);
    const float mn = cuda::HalfBitsToFloatDev(min_bits);
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float code = static_cast<float>(cuda::Crumb(__ldg(codes + e), quarter));
      v[e] = __fadd_rn(__fmul_rn(code, scale), mn);
    }
    float* out = p.out + t * p.out_row_stride + static_cast<int64_t>(h) * kHeadDim + c0;
    if (vector_store) {
      *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) out[e] = v[e];
    }
  }
}

template <int kHeadDim>
cudaError_t LaunchDequantInt2PerToken(const DequantInt2Params& p, cudaStream_t stream) {
  // head offsets h * D and channel offsets 4 * quad are multiples of 4 floats, so rows are
  // 16-byte aligned when out and the row stride are.
  const bool vector_store =
      (reinterpret_cast<uintptr_t>(p.out) & 15u) == 0 && p.out_row_stride % 4 == 0;
  const int64_t threads = static_cast<int64_t>(p.tokens) * p.heads * (kHeadDim / 4);
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  DequantInt2PerTokenKernel<kHeadDim><<<grid, kThreads, 0, stream>>>(p, vector_store);
  return cudaGetLastError();
}

}  // namespace

cudaError_t DequantInt2PerTokenCuda(const DequantInt2Params& params, cudaStream_t stream) {
  const DequantInt2Params& p = params;
  if (p.tokens < 0) return cudaErrorInvalidValue;
  if (p.tokens == 0) return cudaSuccess;
  if (p.segments == nullptr || p.out == nullptr || p.heads <= 0) return cudaErrorInvalidValue;
  if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorInvalidValue;
  // Segments may sit anywhere apart, but must not overlap; output rows must not overlap either
  // (threads of different rows would race on the same floats).
  const int64_t segment_bytes =
      static_cast<int64_t>(kvformat::SegmentBytes(kKind, p.tokens, p.head_dim));
  if (p.heads > 1 && p.segment_head_stride < segment_bytes) return cudaErrorInvalidValue;
  if (p.out_row_stride < static_cast<int64_t>(p.heads) * p.head_dim) return cudaErrorInvalidValue;
  return p.head_dim == 64 ? LaunchDequantInt2PerToken<64>(p, stream)
                          : LaunchDequantInt2PerToken<128>(p, stream);
}

}  // namespace oscarkv::kernels
