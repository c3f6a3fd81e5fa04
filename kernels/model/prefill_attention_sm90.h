// The prefill attention on Hopper warpgroup MMAs (prefill_attention_sm90.cu), which
// PrefillAttentionCuda runs when the caller passes a large enough workspace.
#ifndef OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_SM90_H_
#define OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_SM90_H_

#include <cuda_runtime.h>

#include "kernels/model/model_kernels_ref.h"

namespace oscarkv::kernels {

// Runs it. The caller (PrefillAttentionCuda) has validated p, head_dim is 64 or 128, and p holds
// a 16-byte-aligned workspace of at least PrefillAttentionWorkspaceBytes(p) (model_kernels_cuda.h,
// defined in prefill_attention_sm90.cu).
cudaError_t PrefillAttentionSm90(const PrefillAttentionParams& p, cudaStream_t stream);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_SM90_H_
