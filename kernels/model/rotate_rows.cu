// RotateRowsCuda: rows times a D x D rotation, bit-identical to RotateRowsRef (ascending sum,
// separate round-to-nearest multiply and add: no FMA contraction).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/model/model_kernels_cuda.h"

namespace oscarkv::kernels {
namespace {

constexpr int kRowsPerBlock = 8;

// Block: D threads, one output column each, for kRowsPerBlock rows; the rows sit in shared
// memory (broadcast reads) and each thread streams its column of R (coalesced across threads,
// L1/L2-resident: 64 KB at D = 128). Ascending i per output keeps the CPU's summation order.
template <int D>
__global__ void RotateRowsKernel(RotateRowsParams p) {
  __shared__ float xs[kRowsPerBlock][D];
  const int64_t total = p.tokens * p.heads;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int j = threadIdx.x;
  for (int r = 0; r < kRowsPerBlock; ++r) {
    const int64_t row = row0 + r;
    float v = 0.0f;
    if (row < total) {
      const int64_t t = row / p.heads;
      const int h = static_cast<int>(row % p.heads);
      v = p.in[t * p.in_token_stride + static_cast<int64_t>(h) * D + j];
    }
    xs[r][j] = v;
  }
  __syncthreads();
  float acc[kRowsPerBlock];
#pragma unroll
  for (int r = 0; r < kRowsPerBlock; ++r) acc[r] = 0.0f;
  // R's column in batches of 16 independent loads: a decode step has only a few blocks, so
  // one dependent L2 round trip per term would dominate (128 per row at D = 128).
  constexpr int kBatch = 16;
  for (int i0 = 0; i0 < D; i0 += kBatch) {
    float w[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) w[u] = __ldg(p.rotation + (i0 + u) * D + j);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
#pragma unroll
      for (int r = 0; r < kRowsPerBlock; ++r) {
        acc[r] = __fadd_rn(acc[r], __fmul_rn(xs[r][i0 + u], w[u]));
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerBlock; ++r) {
    const int64_t row = row0 + r;
    if (row < total) p.out[row * D + j] = acc[r];
  }
}

}  // namespace

cudaError_t RotateRowsCuda(const RotateRowsParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.heads <= 0 || p.in == nullptr || p.out == nullptr ||
      p.rotation == nullptr || p.in_token_stride < static_cast<int64_t>(p.heads) * p.head_dim) {
    return cudaErrorInvalidValue;
  }
  if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorInvalidValue;
  const int64_t rows = p.tokens * p.heads;
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  if (p.head_dim == 128) {
    RotateRowsKernel<128><<<static_cast<unsigned>(blocks), 128, 0, stream>>>(p);
  } else {
    RotateRowsKernel<64><<<static_cast<unsigned>(blocks), 64, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace oscarkv::kernels
