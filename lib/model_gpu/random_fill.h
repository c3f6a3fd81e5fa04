// Deterministic device-side random fills for speed-only runs (random weights, a synthetic KV
// cache): no cuRAND dependency, a counter-based hash per element.
#ifndef OSCARKV_LIB_MODEL_GPU_RANDOM_FILL_H_
#define OSCARKV_LIB_MODEL_GPU_RANDOM_FILL_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace oscarkv::model_gpu {

// out[i] = bf16 bits of a uniform value in [-scale, scale).
cudaError_t FillRandomBf16(uint16_t* out, int64_t n, float scale, uint64_t seed,
                           cudaStream_t stream);
// out[i] = uniform float in [lo, hi).
cudaError_t FillRandomF32(float* out, int64_t n, float lo, float hi, uint64_t seed,
                          cudaStream_t stream);
// Every INT2 page unit of `units` units (kernels/attention/decode_attention.h layout, head_dim
// d): random code bytes and valid fp16 params (scale in [0.01, 0.1), min in [-0.2, 0)).
cudaError_t FillRandomInt2Units(uint8_t* units, int64_t num_units, int head_dim, uint64_t seed,
                                cudaStream_t stream);

}  // namespace oscarkv::model_gpu

#endif  // OSCARKV_LIB_MODEL_GPU_RANDOM_FILL_H_
