// CUDA path of the fused KV quantizer (kv_quant_ref.h's KvQuantParams, every pointer a device
// pointer): rotate -> clip -> per-token asymmetric INT2 -> quartered pack, a warp per 8 tokens of
// one head (two at D = 64). Bit-exact with KvQuantRef: the rotation accumulates in double in the
// same order as the reference, the clip threshold is the exact order statistic, and codes are
// the reference's codes through exact code bounds (kernels/quant/int2_row_group.cuh).
// Output segments must start on even addresses (params are 16-bit stores), else
// cudaErrorInvalidValue; 16-byte aligned inputs and segments take the vector loads and stores.
// Supported: head_dim 64 or 128; kInt2PerToken (M1-M6) here and in paged demotion; the grouped
// kinds of KIVI-2 and OScaR (kInt2ChannelGroup K, kInt2TokenGroup V) and OScaR's token norms into
// linear segments (kv_quant_grouped.cu). kBf16Rows and paged grouped demotion return
// cudaErrorNotSupported.
#ifndef OSCARKV_KERNELS_QUANT_KV_QUANT_CUDA_H_
#define OSCARKV_KERNELS_QUANT_KV_QUANT_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant/kv_quant_ref.h"

namespace oscarkv::kernels {

// Same contract as KvQuantRef (kInt2PerToken): output segment of head h at
// output + h * output_head_stride. cudaErrorInvalidValue on bad params, and for a per-token
// segment of 4 GiB or more (over 100M tokens: not tested past 32-bit offsets into a segment).
cudaError_t KvQuantCuda(const KvQuantParams& params, cudaStream_t stream);

// Demotion straight into paged INT2 history (decode_attention.h pool layout): token t of `params`
// (params.output and output_head_stride are ignored) goes to row t % 8 of the 8-token segment at
//   pool + page_ids[t / 8] * page_stride_bytes + h * head_stride_bytes + segment_offset_bytes,
// segment_offset_bytes = Int2PageKCodesOffset(D) for K, Int2PageVCodesOffset(D) for V.
struct DemotePagesTarget {
  uint8_t* pool = nullptr;
  const int32_t* page_ids = nullptr;  // [ceil(tokens / 8)] device i32
  int64_t page_stride_bytes = 0;
  int64_t head_stride_bytes = 0;
  int64_t segment_offset_bytes = 0;
};
cudaError_t DemoteToPagesCuda(const KvQuantParams& params, const DemotePagesTarget& target,
                              cudaStream_t stream);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_QUANT_KV_QUANT_CUDA_H_
