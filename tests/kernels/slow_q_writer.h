// A stand-in, for tests, for a kernel that writes q just before decode attention (the bench's
// previous call; lib/model_gpu's q rotation until session 40), made adversarial for
// DecodeAttentionParams::overlap_prior_kernel.
#ifndef OSCARKV_TESTS_KERNELS_SLOW_Q_WRITER_H_
#define OSCARKV_TESTS_KERNELS_SLOW_Q_WRITER_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace oscarkv::testing {

// Copies n floats src -> dst on `stream` after spinning for about spin_us microseconds, and lets a
// kernel launched after it with programmatic dependent launch start at once: such a kernel that
// read dst before waiting for this one would read the old contents.
cudaError_t LaunchSlowQWriter(const float* src, float* dst, int64_t n, int spin_us,
                              cudaStream_t stream);

}  // namespace oscarkv::testing

#endif  // OSCARKV_TESTS_KERNELS_SLOW_Q_WRITER_H_
