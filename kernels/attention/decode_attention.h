// Decode attention over the paged three-tier KV cache (ARCHITECTURE.md §4, quant.md A.7-A.9).
//
// One decode step: every sequence b of a batch has one new query token with Hq query heads and
// attends over all its cached tokens, which live in two paged tiers:
//   * BF16 pages: the sink (first 64 tokens) and the recent window (last 256..263 tokens), rows
//     already rotated (K by R_K, V by R_V), stored as bf16;
//   * INT2 pages: the quantised history of the per-token codecs (M1-M6, kvformat
//     SegmentKind::kInt2PerToken): per token and head, D/4 packed code bytes and one Int2Params.
// Softmax is permutation invariant and decode has no causal mask inside the cache, so the order of
// tiers does not matter: each tier is split along the sequence into work items ("splits"), each
// split produces a partial (normalised output o_i, log-sum-exp lse_i) per query head, and a merge
// stage combines them exactly: out = sum_i exp(lse_i - lse*) o_i / sum_i exp(lse_i - lse*).
//
// Caller contract (the rotations are NOT applied here):
//   * the query is already rotated: q~ = q R_K (R_K of this layer), so q~.k~ = q.k;
//   * the output is in the R_V-rotated basis: the caller computes o = o~ R_V^T;
//   * score = sm_scale * (q~ . k~), sm_scale = 1/sqrt(D) by default.
// GQA: Hq = g * Hkv; query head h reads KV head h / g.
//
// Paged pool layout (see kernels/attention/README.md for the reasoning). A page holds
// kPageTokens = 8 consecutive tokens of one sequence (OSCAR demotes 8 at a time, so one demotion
// frees exactly one BF16 page and fills exactly one INT2 page). For one layer, page p and KV head
// h own one contiguous "page unit" at  pool + p * page_stride_bytes + h * head_stride_bytes:
//   INT2 unit (Int2PageUnitBytes(D) = 4*D + 64 bytes):
//     [K codes  [8][D/4] u8][K params [8] Int2Params][V codes [8][D/4] u8][V params [8] Int2Params]
//     i.e. a kvformat kInt2PerToken segment of 8 tokens for K, then one for V.
//   BF16 unit (Bf16PageUnitBytes(D) = 32*D bytes):
//     [K [8][D] bf16][V [8][D] bf16]  (two kvformat kBf16Rows segments of 8 tokens).
// The default pool is [L][num_pages][Hkv][unit] (page_stride = Hkv*unit, head_stride = unit, and
// the caller passes the base of layer l); any strides that are multiples of 16 bytes work.
// Tokens of a tier fill its pages front to back (block table order); only a tier's last page may
// be partial. Unused rows of a partial page are never read.
//
// Packing and dequantisation follow lib/kvformat/int2_block.h: byte j of a row holds channels
// j, j+D/4, j+D/2, j+3D/4 in bits [1:0],[3:2],[5:4],[7:6]; x_hat = code * scale + min with scale
// and min fp16.
//
// Plain C++ (no Abseil); safe to include from .cu files. The Params struct holds only raw
// pointers, sizes and strides, so a CUDA kernel takes it unchanged (pointers then point to device
// memory). Errors are reported as a static message (nullptr on success).
#ifndef OSCARKV_KERNELS_ATTENTION_DECODE_ATTENTION_H_
#define OSCARKV_KERNELS_ATTENTION_DECODE_ATTENTION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "lib/kvformat/int2_block.h"

namespace oscarkv::kernels {

inline constexpr int kPageTokens = 8;

// Bytes of one (page, layer, KV head) unit of each tier.
constexpr int64_t Int2PageUnitBytes(int head_dim) {
  return 2 * static_cast<int64_t>(kvformat::SegmentBytes(kvformat::SegmentKind::kInt2PerToken,
                                                         kPageTokens, head_dim));
}
constexpr int64_t Bf16PageUnitBytes(int head_dim) {
  return 2 * static_cast<int64_t>(kvformat::SegmentBytes(kvformat::SegmentKind::kBf16Rows,
                                                         kPageTokens, head_dim));
}
// Offsets inside an INT2 unit.
constexpr int64_t Int2PageKCodesOffset(int /*head_dim*/) { return 0; }
constexpr int64_t Int2PageKParamsOffset(int head_dim) { return kPageTokens * (head_dim / 4); }
constexpr int64_t Int2PageVCodesOffset(int head_dim) { return Int2PageUnitBytes(head_dim) / 2; }
constexpr int64_t Int2PageVParamsOffset(int head_dim) {
  return Int2PageVCodesOffset(head_dim) + Int2PageKParamsOffset(head_dim);
}
// Offsets inside a BF16 unit (bytes).
constexpr int64_t Bf16PageKOffset(int /*head_dim*/) { return 0; }
constexpr int64_t Bf16PageVOffset(int head_dim) { return Bf16PageUnitBytes(head_dim) / 2; }
static_assert(Int2PageUnitBytes(64) == 320 && Int2PageUnitBytes(128) == 576);
static_assert(Bf16PageUnitBytes(128) == 4096);

// Block table of one tier for a batch (CSR over sequences).
struct PagedTierTable {
  const int32_t* page_indptr = nullptr;   // [B+1] i32; pages of seq b: page_indices[indptr[b]..indptr[b+1])
  const int32_t* page_indices = nullptr;  // [page_indptr[B]] i32; physical page ids, in token order
  const int32_t* seq_tokens = nullptr;    // [B] i32; tokens of seq b in this tier (<= 8 * its pages);
                                          // nullptr = the tier is empty for every sequence
  const uint8_t* pool = nullptr;          // base of this layer's page units (bytes)
  int64_t page_stride_bytes = 0;          // bytes between physical pages p and p+1 (this layer)
  int64_t head_stride_bytes = 0;          // bytes between KV heads h and h+1 inside a page
};

// kInt2WithBf16: an INT2 split that also attends its share of the sequence's BF16 tier (plans
// made with DecodePlanConfig::fuse_bf16_into_int2): item k of the sequence's n items takes BF16
// tokens [16 * (k * nt / n), min(nb, 16 * ((k + 1) * nt / n))), nb the sequence's BF16 tokens and
// nt = ceil(nb / 16) (whole 16-token tiles, integer division); see FusedBf16Range. All items of
// such a sequence are kInt2WithBf16.
enum class Tier : int32_t { kBf16 = 0, kInt2 = 1, kInt2WithBf16 = 2 };

// One split: tokens [token_begin, token_end) of one tier of one sequence (tier-local positions;
// token_begin is a multiple of kPageTokens). Covers all KV heads. For kInt2WithBf16 the range is
// INT2 tokens, and the BF16 share follows from the item's place in its sequence (above).
struct DecodeWorkItem {
  int32_t seq;
  int32_t tier;  // Tier
  int32_t token_begin;
  int32_t token_end;
};

// The BF16 share of fused item k of n (Tier::kInt2WithBf16) of a sequence with bf16_tokens BF16
// tokens: [*begin, *end), possibly empty. Written for host and device code alike.
#ifdef __CUDACC__
__host__ __device__
#endif
inline void FusedBf16Range(int k, int n, int bf16_tokens, int* begin, int* end) {
  const int nt = (bf16_tokens + 15) / 16;
  const int b = 16 * (k * nt / n);
  const int e = 16 * ((k + 1) * nt / n);
  *begin = b < bf16_tokens ? b : bf16_tokens;
  *end = e < bf16_tokens ? e : bf16_tokens;
}

// How the planner splits the sequence (STYLE habit 7: plan once per batch shape).
struct DecodePlanConfig {
  // Upper bound on splits per sequence and tier. Default: 8 (SGLang's HP_MAX_SPLITS).
  int max_splits_per_tier = 8;
  // Smallest split, in tokens; rounded up to a multiple of kPageTokens. Default: 64.
  int min_tokens_per_split = 64;
  // When > 0, every split has exactly this many tokens (rounded up to a page; the last split of a
  // tier takes the rest) and max_splits_per_tier is ignored. For tests and benchmarks. Default: 0.
  int fixed_tokens_per_split = 0;
  // When true, a sequence with both INT2 and BF16 tokens gets no BF16 splits: its INT2 splits are
  // Tier::kInt2WithBf16 items that share out its BF16 tokens (the GPU kernel reads them while its
  // first INT2 tiles are in flight, and no short BF16 work items wait for a CTA slot). Sequences
  // without INT2 tokens keep BF16 splits. Default: false.
  bool fuse_bf16_into_int2 = false;
};

// The work split of one batch shape. Host value; the caller copies `work` and `seq_work_indptr`
// to the device for a GPU kernel and sizes the partial buffers from the counts below.
struct DecodePlan {
  int num_seqs = 0;
  std::vector<DecodeWorkItem> work;        // all splits, grouped by sequence
  std::vector<int32_t> seq_work_indptr;    // [B+1]; splits of seq b: work[indptr[b]..indptr[b+1])
  int num_work() const { return static_cast<int>(work.size()); }
  // True when every sequence has exactly one work item (DecodeAttentionParams::one_split_per_seq).
  bool OneSplitPerSequence() const {
    for (int b = 0; b < num_seqs; ++b) {
      if (seq_work_indptr[b + 1] - seq_work_indptr[b] != 1) return false;
    }
    return num_seqs > 0;
  }
  // Partial buffers for `num_q_heads` heads of dim `head_dim`.
  int64_t PartialOutFloats(int num_q_heads, int head_dim) const {
    return static_cast<int64_t>(work.size()) * num_q_heads * head_dim;
  }
  int64_t PartialLseFloats(int num_q_heads) const {
    return static_cast<int64_t>(work.size()) * num_q_heads;
  }
};

// Splits each sequence's tiers. bf16_tokens / int2_tokens: [num_seqs] tokens per tier (either may
// be nullptr = all zero). Sequences with no tokens get no work item (their output is zero).
DecodePlan PlanDecodeAttention(const DecodePlanConfig& config, int num_seqs,
                               const int32_t* bf16_tokens, const int32_t* int2_tokens);

// Everything one launch of decode attention (one layer) needs.
struct DecodeAttentionParams {
  int num_seqs = 0;       // B
  int num_q_heads = 0;    // Hq, a multiple of num_kv_heads
  int num_kv_heads = 0;   // Hkv
  int head_dim = 0;       // D: 64 or 128 (any multiple of 32 in the CPU reference)
  float sm_scale = 0.0f;  // score scale; 1/sqrt(D) normally

  const float* q = nullptr;   // [B, Hq, D] f32, already rotated by R_K
  int64_t q_seq_stride = 0;   // floats between sequences (Hq*D when packed)

  PagedTierTable bf16;        // BF16 tier (sink + recent)
  PagedTierTable int2;        // INT2 tier (per-token history)

  // Plan (PlanDecodeAttention), device-visible copies for a GPU kernel.
  const DecodeWorkItem* work = nullptr;      // [num_work]
  const int32_t* seq_work_indptr = nullptr;  // [B+1]
  int num_work = 0;

  // Scratch, sized by the plan: partial outputs and their log-sum-exp (natural log).
  float* partial_out = nullptr;  // [num_work, Hq, D] f32
  float* partial_lse = nullptr;  // [num_work, Hq] f32; -inf for an empty split

  float* out = nullptr;       // [B, Hq, D] f32, in the R_V-rotated basis
  int64_t out_seq_stride = 0; // floats between sequences (Hq*D when packed)
  float* out_lse = nullptr;   // [B, Hq] f32 or nullptr; lse of the whole row (-inf if empty)

  // Optional scratch: num_seqs * num_q_heads int32, all zero before the first call; every call
  // leaves them zero. With it, the GPU path may merge a sequence's splits in stage 1 (the last
  // stage-1 CTA of a (sequence, KV head) merges them) instead of launching the merge kernel: at
  // D = 128 with 2 or more but few sequences (H200: B=2 64k -4.4%, B=4 32k -5.1%;
  // bench/NOTES.md "Session 21"). Calls sharing one buffer must not run at the same time.
  // nullptr: the merge kernel. Same result up to the order of the merge's sums.
  int32_t* merge_counters = nullptr;

  // Every sequence has exactly one work item (DecodePlan::OneSplitPerSequence(), e.g. B=32 at 8k
  // on the GPU plan): the GPU path then writes out / out_lse from stage 1 and runs no merge
  // (H200, D=128 B=32 8k: bench/NOTES.md "v15 direct"). Same result either way.
  bool one_split_per_seq = false;

  // The GPU path may start while the kernel launched just before it on the stream still runs
  // (programmatic dependent launch; used with few sequences, B * Hq < SMs): stage 1 reads the
  // plan and the page tables before it waits for that kernel and asks L2 for the first pages of
  // both tiers (a prefetch: no tier data reaches the SM, and L2 stays coherent with that
  // kernel's writes); it reads q and the tiers only after the wait, and writes the scratch and
  // outputs only after. Set it only when that kernel writes none of the plan and tables (it may
  // write q, out, the scratch it may use and the tiers). Same result either way.
  bool overlap_prior_kernel = false;
};

// Checks sizes and pointers; nullptr when usable, else a static message.
const char* ValidateDecodeAttentionParams(const DecodeAttentionParams& params);

// CPU reference of the split (stage 1) and merge (stage 2) passes. Uses the plan in `params`.
// Returns nullptr on success, else a static message (nothing written).
const char* DecodeAttentionRef(const DecodeAttentionParams& params);

// Runs f(worker, workers) once on each of `workers` threads, the caller's included, and waits
// (model::RunOnCpuPool's shape); calling f(0, 1) alone is a valid implementation.
using RunOnThreads = std::function<void(const std::function<void(int worker, int workers)>&)>;

// DecodeAttentionRef with stage 1 shared out by `run` (work item i on worker i % workers). Each
// item is computed as on one thread and the merge is serial, so the result equals
// DecodeAttentionRef's bit for bit.
const char* DecodeAttentionRef(const DecodeAttentionParams& params, const RunOnThreads& run);

// Stage 2 alone (exposed for tests and for the GPU path's CPU check): merges the splits of each
// sequence from partial_out/partial_lse into out/out_lse.
void MergeDecodePartialsRef(const DecodeAttentionParams& params);

// ---- Contiguous float segments (dequantise-then-attend path; KIVI/OScaR; tests) ----

// Attention state of one query row over a segment: unnormalised accumulator, running max and sum.
// Merge two states with MergeAttentionState.
struct AttentionState {
  std::vector<float> acc;  // [D], sum_j exp(s_j - m) v_j
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;          // sum_j exp(s_j - m)
};

// Attends `num_heads` query rows (GQA group of one KV head) over T float rows:
//   q      [num_heads][D] (row stride D)
//   k, v   [T][D] rows with row stride `kv_row_stride` floats
//   score_scale [T] or nullptr: per-token multiplier of the score (OScaR omni-token norms),
//   score_j = sm_scale * score_scale_j * (q . k_j).
// Writes one state per head into states[0..num_heads) (resized to D). T = 0 gives empty states.
void AttendFloatRows(const float* q, int num_heads, int head_dim, const float* k, const float* v,
                     int64_t kv_row_stride, const float* score_scale, int num_tokens,
                     float sm_scale, AttentionState* states);

// state = merge(state, other), exact (log-sum-exp rescale).
void MergeAttentionState(AttentionState& state, const AttentionState& other);

// Normalised output (acc / l) of a state into out[head_dim]; zeros when the state is empty.
void FinalizeAttentionState(const AttentionState& state, int head_dim, float* out);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_ATTENTION_DECODE_ATTENTION_H_
