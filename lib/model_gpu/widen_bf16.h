// bf16 bits -> f32 on the GPU (exact: a bf16 is the high half of an f32). The chunked prefill
// widens stored bf16 rows so that its stored form can be rebuilt from blocks bit for bit; CPU
// reference: kvformat::Bf16BitsToFloat.
#ifndef OSCARKV_LIB_MODEL_GPU_WIDEN_BF16_H_
#define OSCARKV_LIB_MODEL_GPU_WIDEN_BF16_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace oscarkv::model_gpu {

// out[i] = the f32 value of bf16 bits in[i], i < n.
cudaError_t WidenBf16Cuda(const uint16_t* in, int64_t n, float* out, cudaStream_t stream);

}  // namespace oscarkv::model_gpu

#endif  // OSCARKV_LIB_MODEL_GPU_WIDEN_BF16_H_
