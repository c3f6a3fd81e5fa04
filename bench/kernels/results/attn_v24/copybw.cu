// Scratch: copy bandwidth by several methods (bytes read + written per second).
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
__global__ void CopyKernel(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) y[i] = x[i];
}
template <int U>
__global__ void CopyUnrolled(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = x[i + u * stride];
#pragma unroll
    for (int u = 0; u < U; ++u) y[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) y[i] = x[i];
}
__global__ void ReadKernel(const uint4* __restrict__ x, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) { uint4 v = x[i]; acc ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (acc == 0x9e3779b9u) *sink = acc;
}
int main() {
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  for (size_t gib : {1, 2, 4}) {
    size_t bytes = gib << 30; void *x, *y; uint32_t* sink;
    CK(cudaMalloc(&x, bytes)); CK(cudaMalloc(&y, bytes)); CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(x, 1, bytes)); CK(cudaMemset(y, 2, bytes));
    auto time = [&](const char* name, auto fn, double mult) {
      for (int i = 0; i < 3; ++i) fn();
      std::vector<float> t;
      for (int i = 0; i < 20; ++i) { cudaEventRecord(a, s); fn(); cudaEventRecord(b, s); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms); }
      std::sort(t.begin(), t.end());
      printf("%zu GiB %-28s median %8.3f ms  min %8.3f ms  %7.1f GB/s (median)  %7.1f (best)\n", gib, name, t[10], t[0], mult * bytes / (t[10] * 1e6), mult * bytes / (t[0] * 1e6));
    };
    int64_t n = bytes / 16;
    time("kernel 1056x512 (bench)", [&] { CopyKernel<<<132 * 8, 512, 0, s>>>((uint4*)x, (uint4*)y, n); }, 2.0);
    time("kernel 132x4x1024", [&] { CopyKernel<<<132 * 4, 1024, 0, s>>>((uint4*)x, (uint4*)y, n); }, 2.0);
    time("kernel unroll4 1056x512", [&] { CopyUnrolled<4><<<132 * 8, 512, 0, s>>>((uint4*)x, (uint4*)y, n); }, 2.0);
    time("kernel unroll8 528x512", [&] { CopyUnrolled<8><<<132 * 4, 512, 0, s>>>((uint4*)x, (uint4*)y, n); }, 2.0);
    time("kernel 1 elem/thread", [&] { CopyKernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((uint4*)x, (uint4*)y, n); }, 2.0);
    time("cudaMemcpyAsync D2D", [&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s); }, 2.0);
    time("read only 1056x512", [&] { ReadKernel<<<132 * 8, 512, 0, s>>>((uint4*)x, n, sink); }, 1.0);
    time("read only 1 elem/thread", [&] { ReadKernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((uint4*)x, n, sink); }, 1.0);
    CK(cudaGetLastError());
    CK(cudaFree(x)); CK(cudaFree(y)); CK(cudaFree(sink));
  }
  return 0;
}
