// CUDA path of decode attention over the paged three-tier cache. Implements the contract of
// decode_attention.h on the device: same DecodeAttentionParams, same plan, same partial buffers,
// every pointer a device pointer (work, seq_work_indptr, page tables, pools, q, out, scratch).
//
//   stage 1, one launch for both tiers: a CTA per (work item, KV head, group of <= 4 query
//   heads); 4 warps stream the split's pages (INT2 through an 8-tile cp.async ring per warp, BF16
//   straight into registers; a launch of at most 2 CTAs per SM adds a fifth warp that takes the
//   BF16 share of fused splits, Stage1Cta), each K/V tile is loaded once for all query heads of
//   the GQA group; scores and P.V run on tensor cores (INT2 scores: mma.sync m16n8k32 u8 x s8 on
//   the masked code bytes and an integer q; P.V and BF16: m16n8k16). INT2 codes become MMA
//   operands in registers by one AND each, the per-token scale/min are applied to the 16x8
//   score tile and folded into P; BF16 history is never materialised. BF16 pages use the same
//   kernel template with a BF16 loader. A Tier::kInt2WithBf16 item (fused plan) attends its
//   share of the BF16 tier with register loads, on the fifth warp, or else first on every warp
//   while the first INT2 tiles are in flight.
//   stage 2: log-sum-exp merge of each sequence's splits into out / out_lse, all of a thread's
//   splits loaded at once (one block per query head and channel group; at D = 64 with more
//   splits than one round of those takes, one block per query head); not launched when
//   params.one_split_per_seq: stage 1 then writes out itself, nor when params.merge_counters is
//   set at D = 128 with 2 or more sequences of fewer query rows than SMs: the last stage-1 CTA of
//   each (sequence, KV head) then merges its splits.
// Numerics: q is rounded to an integer grid of ~15 bits per head (INT2 scores, exact int32 sums)
// or to bf16 (BF16 scores); P is rounded to fp16 (INT2) or bf16 (BF16) for the P.V MMA, whose
// accumulation is fp32. Expected error vs the CPU reference: ~1e-3 relative.
#ifndef OSCARKV_KERNELS_ATTENTION_DECODE_ATTENTION_CUDA_H_
#define OSCARKV_KERNELS_ATTENTION_DECODE_ATTENTION_CUDA_H_

#include <cuda_runtime.h>

#include "kernels/attention/decode_attention.h"

namespace oscarkv::kernels {

// Warps of a stage-1 CTA. kBf16Warp: 4 INT2 warps and one that attends the BF16 share of a
// fused split (Tier::kInt2WithBf16) at the same time (2 CTAs per SM; H200, B=32 8k D=128: 72.2
// -> 59.9 us with the other v14 changes, bench/NOTES.md "v14"); kBf16Warp3: the same warps in
// 128 registers (3 CTAs per SM); kPlain: 4 warps that take the share first, then INT2 tiles
// (kDecodeStage1CtasPerSm per SM). kAuto: kBf16Warp when the grid fits in 2 CTAs per SM, else
// kBf16Warp3 when it fits in 3, else kPlain. All compute the same result for every plan; tests
// force each.
enum class Stage1Cta { kAuto, kPlain, kBf16Warp, kBf16Warp3 };

// Runs both stages on `stream`. head_dim 64 or 128 (cudaErrorNotSupported otherwise); invalid
// params give cudaErrorInvalidValue. Asynchronous; no host synchronisation, graph-capturable.
cudaError_t DecodeAttentionCuda(const DecodeAttentionParams& params, cudaStream_t stream,
                                Stage1Cta cta = Stage1Cta::kAuto);

// Stage-1 CTAs per SM (its __launch_bounds__): more registers and 3 CTAs per SM beat 128
// registers and 4 (H200, same runs, plan at 3 and 4: D=128 B=1 128k 36.7 -> 35.3 us, B=32 8k
// 76.9 -> 73.7 us; D=64 B=32 8k 23.95 -> 21.6 us; bench/NOTES.md "v13").
constexpr int kDecodeStage1CtasPerSm = 3;

// A plan config that fills the GPU in one wave of stage-1 CTAs. ctas_per_sm = 0 (the default): a
// wave of 2 CTAs per SM (run with the BF16 warp) when the plan fills >= 90% of it, else of
// kDecodeStage1CtasPerSm (Stage1Cta::kBf16Warp3); > 0: a wave of that many per SM (bench sweeps).
// With few (sequence, KV head) pairs (batch 1-3 at long context: >= 16 splits each) the wave has
// about min(ctas_per_sm, 3) * num_sms INT2 CTAs (fewer, longer splits repay their fixed costs); the
// BF16 tier (sink + recent, <= 2 splits of 256 tokens) gets splits of its own, or, in a wave of 2
// per SM, is fused into the INT2 splits unless those read about as many bytes as a BF16 split would
// (decided from head_dim and max_int2_tokens, the longest INT2 tier of the batch). With many pairs
// the wave has about ctas_per_sm * num_sms CTAs and the BF16 tier is fused into the INT2 splits
// (fuse_bf16_into_int2).
DecodePlanConfig GpuDecodePlanConfig(int num_seqs, int num_kv_heads, int num_q_heads,
                                     int head_dim, int max_int2_tokens, int num_sms,
                                     int ctas_per_sm = 0);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_ATTENTION_DECODE_ATTENTION_CUDA_H_
