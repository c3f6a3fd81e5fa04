// Internal to kernels/quant: the grouped-kind / token-norm path of KvQuantCuda
// (kv_quant_grouped.cu). Arguments already checked by KvQuantCuda except the kind and shape
// rules of the grouped kinds; head_dim is 64 or 128; every pointer a device pointer.
#ifndef OSCARKV_KERNELS_QUANT_KV_QUANT_GROUPED_H_
#define OSCARKV_KERNELS_QUANT_KV_QUANT_GROUPED_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/kv_quant_ref.h"

namespace oscarkv::kernels {

// Linear segments (head h at params.output + h * out_stride). cudaErrorNotSupported for
// kBf16Rows, cudaErrorInvalidValue for channel groups with tokens % 32 != 0.
cudaError_t LaunchGroupedKvQuant(const KvQuantParams& params, int64_t in_stride, int clip_idx,
                                 bool clip, int64_t out_stride, cudaStream_t stream);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_QUANT_KV_QUANT_GROUPED_H_
