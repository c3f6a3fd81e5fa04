// CUDA and cuBLAS errors as absl::Status, and an owning device allocation.
#ifndef OSCARKV_LIB_MODEL_GPU_CUDA_STATUS_H_
#define OSCARKV_LIB_MODEL_GPU_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace oscarkv::model_gpu {

// kInternal naming `what` and CUDA's message; OK for cudaSuccess. Out of memory is
// kResourceExhausted so callers can tell it from a bug.
inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat(what, ": ", cudaGetErrorString(err));
  return err == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(msg)
                                          : absl::InternalError(msg);
}

inline absl::Status CublasStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS status ", static_cast<int>(st)));
}

#define OSCARKV_CUDA_OK(expr) OSCARKV_RETURN_IF_ERROR(::oscarkv::model_gpu::CudaStatus((expr), #expr))
#define OSCARKV_CUBLAS_OK(expr) \
  OSCARKV_RETURN_IF_ERROR(::oscarkv::model_gpu::CublasStatus((expr), #expr))

// cudaMalloc'd bytes freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Allocates `bytes` (previous contents freed). kResourceExhausted names `what` and the size.
  absl::Status Allocate(size_t bytes, const char* what) {
    Reset();
    if (bytes == 0) return absl::OkStatus();
    const cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err != cudaSuccess) {
      ptr_ = nullptr;
      return CudaStatus(err, absl::StrCat("allocating ", bytes, " bytes for ", what).c_str());
    }
    bytes_ = bytes;
    return absl::OkStatus();
  }
  void Reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace oscarkv::model_gpu

#endif  // OSCARKV_LIB_MODEL_GPU_CUDA_STATUS_H_
