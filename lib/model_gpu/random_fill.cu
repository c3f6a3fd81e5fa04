#include "lib/model_gpu/random_fill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/attention/decode_attention.h"

namespace oscarkv::model_gpu {
namespace {

__device__ __forceinline__ uint64_t Mix(uint64_t x) {
  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ float Uniform01(uint64_t seed, uint64_t i) {
  return static_cast<float>(Mix(seed * 0x100000001b3ull + i) >> 40) * (1.0f / 16777216.0f);
}

__global__ void FillBf16Kernel(uint16_t* out, int64_t n, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = (2.0f * Uniform01(seed, i) - 1.0f) * scale;
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

__global__ void FillF32Kernel(float* out, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = lo + (hi - lo) * Uniform01(seed, i);
  }
}

// One thread per (unit, K|V, token row): D/4 code bytes and one Int2Params (fp16 scale, min).
__global__ void FillInt2Kernel(uint8_t* units, int64_t rows, int head_dim, int64_t unit_bytes,
                               uint64_t seed) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows;
       r += int64_t{gridDim.x} * blockDim.x) {
    const int64_t unit = r / 16;
    const int kv = static_cast<int>((r / 8) % 2);
    const int row = static_cast<int>(r % 8);
    uint8_t* base = units + unit * unit_bytes + kv * (unit_bytes / 2);
    uint8_t* codes = base + row * (head_dim / 4);
    for (int j = 0; j < head_dim / 4; ++j) {
      codes[j] = static_cast<uint8_t>(Mix(seed ^ (r * 977 + j)) & 0xff);
    }
    __half* params = reinterpret_cast<__half*>(base + 8 * (head_dim / 4)) + 2 * row;
    params[0] = __float2half(0.01f + 0.09f * Uniform01(seed, 2 * r));
    params[1] = __float2half(-0.2f * Uniform01(seed, 2 * r + 1));
  }
}

int Blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<int>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

}  // namespace

cudaError_t FillRandomBf16(uint16_t* out, int64_t n, float scale, uint64_t seed,
                           cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  FillBf16Kernel<<<Blocks(n), 256, 0, stream>>>(out, n, scale, seed);
  return cudaGetLastError();
}

cudaError_t FillRandomF32(float* out, int64_t n, float lo, float hi, uint64_t seed,
                          cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  FillF32Kernel<<<Blocks(n), 256, 0, stream>>>(out, n, lo, hi, seed);
  return cudaGetLastError();
}

cudaError_t FillRandomInt2Units(uint8_t* units, int64_t num_units, int head_dim, uint64_t seed,
                                cudaStream_t stream) {
  if (num_units <= 0) return cudaSuccess;
  if (head_dim != 64 && head_dim != 128) return cudaErrorInvalidValue;
  const int64_t rows = num_units * 16;
  FillInt2Kernel<<<Blocks(rows), 256, 0, stream>>>(
      units, rows, head_dim, kernels::Int2PageUnitBytes(head_dim), seed);
  return cudaGetLastError();
}

}  // namespace oscarkv::model_gpu
