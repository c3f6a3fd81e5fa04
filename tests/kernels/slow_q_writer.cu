#include "tests/kernels/slow_q_writer.h"

#include "kernels/common/cuda_utils.cuh"

namespace oscarkv::testing {
namespace {

__device__ uint64_t GlobalNanoseconds() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SlowCopyKernel(const float* src, float* dst, int64_t n, int64_t spin_ns) {
  kernels::cuda::AllowDependentLaunch();
  const uint64_t until = GlobalNanoseconds() + spin_ns;
  while (GlobalNanoseconds() < until) {
  }
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = src[i];
  }
}

}  // namespace

cudaError_t LaunchSlowQWriter(const float* src, float* dst, int64_t n, int spin_us,
                              cudaStream_t stream) {
  // One small block: the attention launched after it must find room on the SMs at once.
  SlowCopyKernel<<<1, 256, 0, stream>>>(src, dst, n, int64_t{spin_us} * 1000);
  return cudaGetLastError();
}

}  // namespace oscarkv::testing
