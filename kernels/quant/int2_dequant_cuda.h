// CUDA entry of the per-token INT2 dequantisation (int2_dequant.h's DequantInt2Params, every
// pointer a device pointer), bit-exact with DequantInt2PerTokenRef and quant::DecodePerTokenRow.
#ifndef OSCARKV_KERNELS_QUANT_INT2_DEQUANT_CUDA_H_
#define OSCARKV_KERNELS_QUANT_INT2_DEQUANT_CUDA_H_

#include <cuda_runtime.h>

#include "kernels/quant/int2_dequant.h"

namespace oscarkv::kernels {

// Dequantises `tokens` rows of every head into params.out on `stream` (asynchronous). tokens == 0
// launches nothing. cudaErrorInvalidValue when a pointer is null, heads <= 0, tokens < 0,
// head_dim is not 64 or 128, heads > 1 with segment_head_stride below one segment's bytes, or
// out_row_stride < heads * head_dim; otherwise the launch error, if any.
cudaError_t DequantInt2PerTokenCuda(const DequantInt2Params& params, cudaStream_t stream);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_QUANT_INT2_DEQUANT_CUDA_H_
