// Small helpers shared by the plain (gtest-free) GPU tests and benchmarks of kernels/.
#ifndef OSCARKV_TESTS_KERNELS_GPU_TEST_UTIL_H_
#define OSCARKV_TESTS_KERNELS_GPU_TEST_UTIL_H_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

// Aborts the test binary (exit 1) with the failing call on any CUDA error.
#define GPU_CHECK(expr)                                                                  \
  do {                                                                                   \
    const cudaError_t gpu_check_err_ = (expr);                                           \
    if (gpu_check_err_ != cudaSuccess) {                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,         \
                   cudaGetErrorString(gpu_check_err_));                                  \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

namespace oscarkv::testing {

// 77 = ctest "skipped" when no device is visible.
inline bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  T* d = nullptr;
  GPU_CHECK(cudaMalloc(&d, host.size() * sizeof(T) + 16));
  GPU_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
std::vector<T> ToHost(const T* d, size_t n) {
  std::vector<T> host(n);
  GPU_CHECK(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// ||a - b|| / ||b||; +inf when a holds a non-finite value.
inline double RelErr(const float* a, const double* b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1.0));
}

}  // namespace oscarkv::testing

#endif  // OSCARKV_TESTS_KERNELS_GPU_TEST_UTIL_H_
