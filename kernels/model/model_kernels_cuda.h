// CUDA kernels of the transformer forward on the GPU (lib/model_gpu), other than the large
// products (cuBLAS) and decode attention (kernels/attention). Every pointer is a device pointer;
// every entry is asynchronous on `stream`, checks its arguments (cudaErrorInvalidValue) and
// returns the launch error. The residual stream is f32; operands of cuBLAS are bf16 (uint16_t
// bits, round to nearest even as kvformat::RoundToBf16 does).
//
// Each entry has a CPU reference with the same name minus "Cuda" plus "Ref" in
// model_kernels_ref.h, which the GPU tests compare against.
//
// The kernels of a decode step are chained (programmatic dependent launch,
// cuda::StartChainedKernel): Embed, RmsNorm, QkvPost, SiluMul, F32ToBf16, Argmax, the BF16 page
// writes and gathers, and RotateRows. Each may be launched while the kernel before it on the
// stream drains and waits for it before touching memory, so stream order holds. QkvPost's
// rotated form and RotateRows stage their D x D matrix before that wait: a rotation must not be
// written by the kernel launched just before (in lib/model_gpu it is a weight, written at load).
#ifndef OSCARKV_KERNELS_MODEL_MODEL_KERNELS_CUDA_H_
#define OSCARKV_KERNELS_MODEL_MODEL_KERNELS_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/model/model_kernels_ref.h"

namespace oscarkv::kernels {

// x[r, :] = float(table_bf16[tokens[r], :]) for r < rows; table is [vocab, d_model].
cudaError_t EmbedRowsCuda(const uint16_t* table_bf16, const int32_t* tokens, int64_t rows,
                          int d_model, float* x, cudaStream_t stream);

// out_bf16[r, :] = bf16(x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:]), rows of n.
cudaError_t RmsNormToBf16Cuda(const float* x, const float* weight, int64_t rows, int n, float eps,
                              uint16_t* out_bf16, cudaStream_t stream);

// In place on q, k, v rows (QkvPostParams in model_kernels_ref.h): bias add, per-head RMSNorm of
// q and k (qwen3), RoPE of q and k at positions[r].
cudaError_t QkvPostCuda(const QkvPostParams& params, cudaStream_t stream);

// A decode step's cache write fused into the QKV post-processing: bf16 of each K and V row stored
// into BF16 page units, as WriteBf16PageRowsCuda of those rows would store them (the same
// rounding): row r, KV head h to pool + page_ids[r] * page_stride_bytes + h * head_stride_bytes
// + {k,v}_segment_offset_bytes + rows_in_page[r] * D * 2. pool null = no write.
struct QkvPageWrite {
  uint8_t* pool = nullptr;
  const int32_t* page_ids = nullptr;      // [rows]
  const int32_t* rows_in_page = nullptr;  // [rows], each in [0, 8)
  int64_t page_stride_bytes = 0, head_stride_bytes = 0;
  int64_t k_segment_offset_bytes = 0, v_segment_offset_bytes = 0;
};
// QkvPostCuda, then with pages.pool set the k and v rows (as post-processed in place) written to
// their pages, in one launch: bit-identical to QkvPostCuda followed by WriteBf16PageRowsCuda of
// those rows (the unrotated tiers, e.g. the bf16 codec). The pool and its offsets need 2-byte
// alignment.
cudaError_t QkvPostCuda(const QkvPostParams& params, const QkvPageWrite& pages,
                        cudaStream_t stream);

// Rotated copies of QkvPostCuda's results, for a decode step: q and k by qk_rotation (R_K), v
// by v_rotation (R_V), each D x D f32 row-major and 16-byte aligned; outputs packed
// [rows][heads][D], null for a part not wanted (its rotation may then be null too).
struct QkvRotatedOut {
  const float* qk_rotation = nullptr;
  const float* v_rotation = nullptr;
  float* q = nullptr;  // [rows][Hq][D]
  float* k = nullptr;  // [rows][Hkv][D]
  float* v = nullptr;  // [rows][Hkv][D]
  // Optional: the k and v *copies* also written to their pages (needs k and v).
  QkvPageWrite pages;
};
// QkvPostCuda, then the rotated copies, in one launch: bit-identical to QkvPostCuda followed by
// RotateRowsCuda of each wanted part (RotateRowsRef's order), and with pages.pool set, then
// WriteBf16PageRowsCuda of the k and v copies. head_dim 64 or 128 when any copy is wanted. Each
// block stages R for at most 8 heads of one row, so it suits a decode step's few rows; a
// prefill's many rows share R better through RotateRowsCuda (8 rows a block).
cudaError_t QkvPostCuda(const QkvPostParams& params, const QkvRotatedOut& rotated,
                        cudaStream_t stream);

// out_bf16[r, i] = bf16(silu(gate_up[r, i]) * gate_up[r, d_ff + i]); gate_up is [rows, 2*d_ff].
cudaError_t SiluMulToBf16Cuda(const float* gate_up, int64_t rows, int d_ff, uint16_t* out_bf16,
                              cudaStream_t stream);

// out_bf16[i] = bf16(in[i]) for n elements.
cudaError_t F32ToBf16Cuda(const float* in, int64_t n, uint16_t* out_bf16, cudaStream_t stream);

// out[r] = index of the largest logits[r, :] (lowest index among ties), rows of vocab.
cudaError_t ArgmaxRowsCuda(const float* logits, int rows, int vocab, int32_t* out,
                           cudaStream_t stream);

// Log-probabilities of one token per row (token_logprobs.cu), what engine::ComputeLogprobs
// computes on the CPU (its production path and this kernel's reference): for row r of `logits`
// ([rows, vocab], device) and token tokens[r] (device, in [0, vocab)), with non-finite logits
// taken as -inf and the normaliser Σ exp(x - max) summed in double:
//   logprob_out[r] = x[token] - log Z (-inf for every logit -inf),
//   rank_out[r]    = 1 + the logits larger than x[token],
//   top_ids[r * top_n + j], top_logprobs[...] = the j-th most likely (larger logit first, lower id
//   on ties), for 0 <= top_n <= min(vocab, 20); top_* may be null when top_n is 0.
// One block per row, two passes over it; the top list is picked from the elements at or before
// a bound found in the first pass (kSelect), or with one more pass per entry (kPassPerEntry: the
// former method, also the fallback for rows whose candidates do not fit; the bench's baseline).
enum class TopListMethod { kSelect, kPassPerEntry };
cudaError_t TokenLogprobsRowsCuda(const float* logits, int rows, int vocab, const int32_t* tokens,
                                  int top_n, float* logprob_out, int32_t* rank_out,
                                  int32_t* top_ids, float* top_logprobs, cudaStream_t stream,
                                  TopListMethod method = TopListMethod::kSelect);

// Causal BF16 attention over one prompt, or over one chunk of it with q_offset > 0
// (PrefillAttentionParams in model_kernels_ref.h). Requires head_dim 64 or 128, Hq % Hkv == 0,
// sm_scale > 0, q_offset >= 0 and q_offset + num_tokens <= INT_MAX - 128, q/k/v 16-byte aligned
// with row strides that are multiples of 4 floats, out_bf16 4-byte aligned (else
// cudaErrorInvalidValue).
// q is rounded to bf16 for the MMAs; P is rounded to bf16 before P V.
// With a 16-byte-aligned workspace of PrefillAttentionWorkspaceBytes(params) it
// runs the Hopper (wgmma) kernel, prefill_attention_sm90.cu; otherwise the mma.sync kernel.
cudaError_t PrefillAttentionCuda(const PrefillAttentionParams& params, cudaStream_t stream);
// Workspace that selects the Hopper kernel: 4 * Hkv * D * (q_offset + num_tokens rounded up to
// 128) bytes at head_dim 64 or 128.
int64_t PrefillAttentionWorkspaceBytes(const PrefillAttentionParams& params);

// Writes rows into BF16 page units (PageRowsParams in model_kernels_ref.h).
cudaError_t WriteBf16PageRowsCuda(const PageRowsParams& params, cudaStream_t stream);
// 1..kMaxPageRowsJobs such writes in one launch (a step's K and V rows), as if each were
// launched alone; their destinations must not overlap.
constexpr int kMaxPageRowsJobs = 2;
cudaError_t WriteBf16PageRowsCuda(const PageRowsParams* params, int num_jobs,
                                  cudaStream_t stream);

// Reads rows out of BF16 page units into a contiguous bf16 buffer (PageGatherParams).
cudaError_t GatherBf16PageRowsCuda(const PageGatherParams& params, cudaStream_t stream);

// Packs / unpacks a list of pages (PagePackParams in model_kernels_ref.h); page_pack.cu.
// The page list is a device pointer.
cudaError_t PackPagesCuda(const PagePackParams& params, cudaStream_t stream);
cudaError_t UnpackPagesCuda(const PagePackParams& params, cudaStream_t stream);

// Rotates rows by a D x D matrix (RotateRowsParams), bit-identical to RotateRowsRef; rotation
// must be 16-byte aligned and exactly one of out, out_bf16 set (cudaErrorInvalidValue
// otherwise). Small and large row counts alike (a decode step's few rows, a prefill's K/V); out
// must not alias in. The second form runs 1..kMaxRotateJobs such rotations of one head_dim in
// one launch, as if each were launched alone (their outputs must not overlap any input).
constexpr int kMaxRotateJobs = 3;
cudaError_t RotateRowsCuda(const RotateRowsParams& params, cudaStream_t stream);
cudaError_t RotateRowsCuda(const RotateRowsParams* params, int num_jobs, cudaStream_t stream);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_MODEL_MODEL_KERNELS_CUDA_H_
