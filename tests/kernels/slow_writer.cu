#include "tests/kernels/slow_writer.h"

#include "kernels/common/cuda_utils.cuh"

namespace oscarkv::testing {
namespace {

struct SlowCopies {
  SlowCopy copy[kMaxSlowCopies];
  int count;
};

__device__ uint64_t GlobalNanoseconds() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SlowCopyKernel(const __grid_constant__ SlowCopies copies, int64_t spin_ns) {
  kernels::cuda::AllowDependentLaunch();
  const uint64_t until = GlobalNanoseconds() + spin_ns;
  while (GlobalNanoseconds() < until) {
  }
  for (int c = 0; c < copies.count; ++c) {
    const auto* src = static_cast<const uint32_t*>(copies.copy[c].src);
    auto* dst = static_cast<uint32_t*>(copies.copy[c].dst);
    const int64_t n = copies.copy[c].bytes / 4;
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
         i += int64_t{gridDim.x} * blockDim.x) {
      dst[i] = src[i];
    }
  }
}

}  // namespace

cudaError_t LaunchSlowWriter(const SlowCopy* copies, int count, int spin_us, cudaStream_t stream) {
  if (copies == nullptr || count < 1 || count > kMaxSlowCopies) return cudaErrorInvalidValue;
  SlowCopies all{};
  for (int c = 0; c < count; ++c) {
    if (copies[c].bytes < 0 || copies[c].bytes % 4 != 0) return cudaErrorInvalidValue;
    all.copy[c] = copies[c];
  }
  all.count = count;
  // One small block: the kernel launched after it must find room on the SMs at once.
  SlowCopyKernel<<<1, 256, 0, stream>>>(all, int64_t{spin_us} * 1000);
  return cudaGetLastError();
}

}  // namespace oscarkv::testing
