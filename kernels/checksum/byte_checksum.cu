// ByteChecksumCuda: a grid-stride pass where each thread sums the terms of its 16-byte chunks
// (two words per load), then a warp shuffle and a shared-memory reduction per block and one
// 64-bit atomicAdd per block. Addition mod 2^64 is associative and commutative, so the order
// does not matter and the value equals the CPU reference exactly.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/checksum/byte_checksum.h"
#include "kernels/checksum/byte_checksum_cuda.h"
#include "kernels/common/cuda_utils.cuh"

namespace oscarkv::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 4;

__global__ void __launch_bounds__(kThreads)
    ByteChecksumKernel(const unsigned char* __restrict__ data, uint64_t bytes,
                       unsigned long long* __restrict__ sum_out) {
  const uint64_t words = bytes / 8;
  const uint64_t pairs = words / 2;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const bool aligned16 = (reinterpret_cast<uintptr_t>(data) & 15) == 0;
  const uint64_t* w64 = reinterpret_cast<const uint64_t*>(data);
  uint64_t sum = 0;
  if (aligned16) {
    const ulonglong2* w128 = reinterpret_cast<const ulonglong2*>(data);
    for (uint64_t p = first; p < pairs; p += stride) {
      const ulonglong2 v = __ldg(w128 + p);
      sum += ByteChecksumTerm(v.x, 2 * p) + ByteChecksumTerm(v.y, 2 * p + 1);
    }
  } else {
    for (uint64_t p = first; p < pairs; p += stride) {
      sum += ByteChecksumTerm(__ldg(w64 + 2 * p), 2 * p) +
             ByteChecksumTerm(__ldg(w64 + 2 * p + 1), 2 * p + 1);
    }
  }
  if (first == 0) {
    if (words % 2 != 0) sum += ByteChecksumTerm(__ldg(w64 + words - 1), words - 1);
    if (const unsigned tail = bytes % 8; tail != 0) {
      uint64_t w = 0;
      for (int b = static_cast<int>(tail) - 1; b >= 0; --b) w = (w << 8) | data[8 * words + b];
      sum += ByteChecksumTerm(w, words);
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ uint64_t warp_sums[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t block_sum = 0;
    for (int w = 0; w < kThreads / 32; ++w) block_sum += warp_sums[w];
    atomicAdd(sum_out, static_cast<unsigned long long>(block_sum));
  }
}

}  // namespace

cudaError_t ByteChecksumCuda(const void* data, size_t bytes, uint64_t* scratch,
                             cudaStream_t stream, uint64_t* out) {
  if (scratch == nullptr || out == nullptr) return cudaErrorInvalidValue;
  if (bytes > 0 && (data == nullptr || (reinterpret_cast<uintptr_t>(data) & 7) != 0)) {
    return cudaErrorInvalidValue;
  }
  if (cudaError_t e = cudaMemsetAsync(scratch, 0, sizeof(uint64_t), stream); e != cudaSuccess) {
    return e;
  }
  if (bytes > 0) {
    int sms = 0;
    if (cudaError_t e = cuda::CurrentDeviceSms(&sms); e != cudaSuccess) return e;
    const uint64_t pairs = bytes / 16;
    const uint64_t wanted = (pairs + kThreads - 1) / kThreads;
    const int blocks =
        static_cast<int>(wanted < 1 ? 1 : wanted < uint64_t(sms) * kBlocksPerSm ? wanted
                                                                                : uint64_t(sms) * kBlocksPerSm);
    ByteChecksumKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const unsigned char*>(data), bytes,
        reinterpret_cast<unsigned long long*>(scratch));
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  uint64_t sum = 0;
  if (cudaError_t e = cudaMemcpyAsync(&sum, scratch, sizeof(sum), cudaMemcpyDeviceToHost, stream);
      e != cudaSuccess) {
    return e;
  }
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return e;
  *out = ByteChecksumFinish(sum, bytes);
  return cudaSuccess;
}

}  // namespace oscarkv::kernels
