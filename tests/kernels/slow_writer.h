// A stand-in, for tests, for the kernel just before a chained one (programmatic dependent launch:
// cuda::LaunchOverlappingPrior): it writes that kernel's inputs late, so a chained kernel that
// read them before waiting for it would read the old contents. Used for
// DecodeAttentionParams::overlap_prior_kernel (q and the tiers) and the chained kernels of
// kernels/model/model_kernels_cuda.h.
#ifndef OSCARKV_TESTS_KERNELS_SLOW_WRITER_H_
#define OSCARKV_TESTS_KERNELS_SLOW_WRITER_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace oscarkv::testing {

// One copy of `bytes` (a multiple of 4; src and dst 4-byte aligned device memory).
struct SlowCopy {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t bytes = 0;
};
inline constexpr int kMaxSlowCopies = 4;

// One kernel on `stream` that lets a kernel launched after it with programmatic dependent launch
// start at once, spins for about spin_us microseconds, then does the copies (1..kMaxSlowCopies;
// cudaErrorInvalidValue otherwise).
cudaError_t LaunchSlowWriter(const SlowCopy* copies, int count, int spin_us, cudaStream_t stream);

}  // namespace oscarkv::testing

#endif  // OSCARKV_TESTS_KERNELS_SLOW_WRITER_H_
