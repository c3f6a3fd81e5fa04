// Page packing (model_kernels_cuda.h PackPagesCuda / UnpackPagesCuda): one block per (page,
// layer) chunk, 16-byte loads and stores; a pure copy, so it should run at copy bandwidth.
#include <climits>

#include "kernels/model/model_kernels_cuda.h"

namespace oscarkv::kernels {
namespace {

template <bool kPack>
__global__ void CopyPageChunksKernel(PagePackParams p) {
  const int64_t i = blockIdx.x;
  const int64_t l = blockIdx.y;
  const int64_t pool_offset = (l * p.pool_pages + p.pages[i]) * p.chunk_bytes;
  const int64_t packed_offset = (l * p.num_pages + i) * p.chunk_bytes;
  const uint4* src = reinterpret_cast<const uint4*>(kPack ? p.pool + pool_offset
                                                          : p.packed + packed_offset);
  uint4* dst = reinterpret_cast<uint4*>(kPack ? p.packed + packed_offset : p.pool + pool_offset);
  const int64_t n = p.chunk_bytes / 16;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) dst[k] = src[k];
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

template <bool kPack>
cudaError_t LaunchCopyPageChunks(const PagePackParams& p, cudaStream_t stream) {
  if (p.num_pages < 0 || p.num_pages > INT_MAX || p.layers < 0 || p.layers > 65535) {
    return cudaErrorInvalidValue;
  }
  if (p.num_pages == 0 || p.layers == 0) return cudaSuccess;
  if (p.pool == nullptr || p.pages == nullptr || p.packed == nullptr || p.pool_pages <= 0 ||
      p.chunk_bytes <= 0 || p.chunk_bytes % 16 != 0 || !Aligned16(p.pool) ||
      !Aligned16(p.packed)) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(p.num_pages), static_cast<unsigned>(p.layers));
  CopyPageChunksKernel<kPack><<<grid, 128, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t PackPagesCuda(const PagePackParams& params, cudaStream_t stream) {
  return LaunchCopyPageChunks<true>(params, stream);
}

cudaError_t UnpackPagesCuda(const PagePackParams& params, cudaStream_t stream) {
  return LaunchCopyPageChunks<false>(params, stream);
}

}  // namespace oscarkv::kernels
