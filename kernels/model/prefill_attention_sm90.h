// The prefill attention on Hopper warpgroup MMAs (prefill_attention_sm90.cu), which
// PrefillAttentionCuda runs when the caller passes a large enough workspace.
#ifndef OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_SM90_H_
#define OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_SM90_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/model/model_kernels_ref.h"

namespace oscarkv::kernels {

// Bytes of bf16 K and V^T the kernel stages (0 unless head_dim is 64 or 128).
int64_t PrefillAttentionSm90WorkspaceBytes(const PrefillAttentionParams& p);

// Runs it; the caller has validated p as PrefillAttentionCuda does. cudaErrorInvalidValue without
// a 16-byte-aligned workspace of PrefillAttentionSm90WorkspaceBytes(p).
cudaError_t PrefillAttentionSm90(const PrefillAttentionParams& p, cudaStream_t stream);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_MODEL_PREFILL_ATTENTION_SM90_H_
