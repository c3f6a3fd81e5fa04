#include "lib/model_gpu/widen_bf16.h"

#include <algorithm>

namespace oscarkv::model_gpu {
namespace {

__global__ void WidenBf16Kernel(const uint16_t* in, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __uint_as_float(static_cast<uint32_t>(in[i]) << 16);
  }
}

}  // namespace

cudaError_t WidenBf16Cuda(const uint16_t* in, int64_t n, float* out, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (in == nullptr || out == nullptr))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 4096);
  WidenBf16Kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(in, n, out);
  return cudaGetLastError();
}

}  // namespace oscarkv::model_gpu
