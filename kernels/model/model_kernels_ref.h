// CPU references of the GPU forward's kernels (model_kernels_cuda.h): the same math in plain C++
// (no Abseil, no CUDA), over host pointers. The GPU tests compare each CUDA entry against these;
// lib/model's CPU forward (forward_cpu.h) is the production CPU path and matches them.
//
// bf16 values are uint16_t bit patterns, rounded to nearest even (kvformat::RoundToBf16).
#ifndef OSCARKV_KERNELS_MODEL_MODEL_KERNELS_REF_H_
#define OSCARKV_KERNELS_MODEL_MODEL_KERNELS_REF_H_

#include <cstdint>

namespace oscarkv::kernels {

// RoPE pairing, as lib/model's RopeStyle: adjacent pairs (2i, 2i+1) or NeoX (i, i + rope_dim/2).
enum class RopePairing : int32_t { kAdjacentPairs = 0, kNeox = 1 };

// Post-processing of the Q/K/V projections of `rows` tokens, in place, in this order:
//   1. bias add (qwen2): q += bq, k += bk, v += bv (each bias may be null);
//   2. per-head RMSNorm (qwen3): each D-row of q times q_norm, of k times k_norm (null = skip),
//      x / sqrt(mean(x^2) + eps) * w;
//   3. RoPE of q and k at positions[r]: pair i < rope_dim/2 of a head turns by angle
//      positions[r] / rope_scale * rope_theta^(-2i/rope_dim) / (freq_div ? freq_div[i] : 1),
//      angles computed in double then the rotation in float (as lib/model ApplyRope does).
struct QkvPostParams {
  float* q = nullptr;  // [rows][Hq][D] with q_row_stride floats between rows
  float* k = nullptr;  // [rows][Hkv][D] with k_row_stride
  float* v = nullptr;  // [rows][Hkv][D] with v_row_stride
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0;
  int64_t rows = 0;
  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  int rope_dim = 0;             // <= head_dim, even
  const int32_t* positions = nullptr;  // [rows]
  const float* bq = nullptr;    // [Hq*D] or null
  const float* bk = nullptr;    // [Hkv*D] or null
  const float* bv = nullptr;    // [Hkv*D] or null
  const float* q_norm = nullptr;  // [D] or null
  const float* k_norm = nullptr;  // [D] or null
  float eps = 1e-5f;
  double rope_theta = 10000.0;
  double rope_scale = 1.0;
  const float* freq_div = nullptr;  // [rope_dim/2] or null
  RopePairing pairing = RopePairing::kAdjacentPairs;
};

// Causal attention of T query tokens at positions q_offset .. q_offset + T - 1 over the keys of
// positions 0 .. q_offset + T - 1: query row t (head h) attends to key rows 0..q_offset + t of KV
// head h / (Hq / Hkv). q_offset = 0 is one whole prompt; q_offset > 0 is one chunk of a chunked
// prefill whose k/v hold the earlier tokens followed by the chunk's own rows. q, k and v are f32;
// k and v are rounded to bf16 before use (as the BF16 cache stores them), q is used as f32 by the
// reference (the GPU may round it to bf16 for its MMAs); softmax and accumulation in f32; out is
// rounded to bf16.
struct PrefillAttentionParams {
  const float* q = nullptr;  // [T][Hq][D], q_row_stride floats between tokens
  const float* k = nullptr;  // [q_offset + T][Hkv][D], k_row_stride
  const float* v = nullptr;  // [q_offset + T][Hkv][D], v_row_stride
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0;
  int64_t num_tokens = 0;  // T (query rows)
  // Absolute position of query row 0: query row r sees key rows [0, q_offset + r]; k/v hold
  // q_offset + num_tokens rows. Default: 0 (one whole prompt).
  int64_t q_offset = 0;
  int num_q_heads = 0, num_kv_heads = 0;
  int head_dim = 0;        // 64 or 128
  float sm_scale = 0.0f;   // 1/sqrt(D) normally
  uint16_t* out_bf16 = nullptr;  // [T][Hq*D] bf16, contiguous (the T query rows)
  // GPU only (the reference ignores them): scratch for the Hopper kernel, which
  // stages K and V in bf16 there; with at least PrefillAttentionWorkspaceBytes(params) bytes
  // (model_kernels_cuda.h) PrefillAttentionCuda runs that kernel, otherwise the mma.sync one.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
};

// Writes `tokens` rows of [heads][D] f32 (rounded to bf16) into BF16 page units
// (kernels/attention/decode_attention.h layout): head h of token t goes to
//   pool + page_ids[t] * page_stride_bytes + h * head_stride_bytes + segment_offset_bytes
//        + rows_in_page[t] * D * 2
// segment_offset_bytes = Bf16PageKOffset(D) for K, Bf16PageVOffset(D) for V.
struct PageRowsParams {
  const float* rows = nullptr;  // [tokens][heads][D], row_stride floats between tokens
  int64_t row_stride = 0;
  int64_t tokens = 0;
  int heads = 0, head_dim = 0;
  const int32_t* page_ids = nullptr;      // [tokens]
  const int32_t* rows_in_page = nullptr;  // [tokens], each in [0, 8)
  uint8_t* pool = nullptr;
  int64_t page_stride_bytes = 0, head_stride_bytes = 0, segment_offset_bytes = 0;
};

// Copies the 8 rows of each of `num_pages` BF16 page units (one segment: K or V) into a
// contiguous [num_pages * 8][heads][D] bf16 buffer: out row (i * 8 + j), head h comes from
//   pool + page_ids[i] * page_stride_bytes + h * head_stride_bytes + segment_offset_bytes
//        + j * D * 2.
// (Used before DemoteToPagesCuda, whose input is [tokens][heads][D].)
struct PageGatherParams {
  const uint8_t* pool = nullptr;
  const int32_t* page_ids = nullptr;  // [num_pages]
  int64_t num_pages = 0;
  int heads = 0, head_dim = 0;
  int64_t page_stride_bytes = 0, head_stride_bytes = 0, segment_offset_bytes = 0;
  uint16_t* out_bf16 = nullptr;
};

// Rotation of rows by a per-layer matrix (the three-tier cache's basis change, quant.md A.3):
// out[t][h][j] = sum_i in[t][h][i] * rotation[i][j], the sum taken in ascending i with a separate
// float multiply and add per term, exactly as lib/quant's RotateRowToBf16 (before its bf16
// rounding) and the CPU cache's query rotation do, so the GPU result is bit-identical.
struct RotateRowsParams {
  const float* in = nullptr;    // [tokens][heads][D], in_token_stride floats between tokens
  int64_t in_token_stride = 0;  // >= heads * D
  int64_t tokens = 0;
  int heads = 0, head_dim = 0;  // head_dim 64 or 128
  const float* rotation = nullptr;  // [D][D] f32 row-major
  float* out = nullptr;             // [tokens][heads][D], packed; or
  uint16_t* out_bf16 = nullptr;     // the same rounded to bf16 (exactly one of out, out_bf16)
};

// Packing a sequence's KV pages into one contiguous buffer, the form in which they cross between
// GPUs (prefill worker -> decode worker), and back. A pool is [layers][pool_pages][chunk_bytes]
// (one chunk = one page's bytes of one layer, all KV heads); the packed buffer is
// [layers][num_pages][chunk_bytes] with page i = pool page pages[i]. chunk_bytes must be a
// multiple of 16 and both buffers 16-byte aligned (the page units are).
struct PagePackParams {
  uint8_t* pool = nullptr;
  int64_t pool_pages = 0;
  int64_t chunk_bytes = 0;
  int layers = 0;
  const int32_t* pages = nullptr;  // [num_pages], each in [0, pool_pages)
  int64_t num_pages = 0;
  uint8_t* packed = nullptr;       // [layers][num_pages][chunk_bytes]
};

void EmbedRowsRef(const uint16_t* table_bf16, const int32_t* tokens, int64_t rows, int d_model,
                  float* x);
void RmsNormToBf16Ref(const float* x, const float* weight, int64_t rows, int n, float eps,
                      uint16_t* out_bf16);
void QkvPostRef(const QkvPostParams& params);
void SiluMulToBf16Ref(const float* gate_up, int64_t rows, int d_ff, uint16_t* out_bf16);
void F32ToBf16Ref(const float* in, int64_t n, uint16_t* out_bf16);
void ArgmaxRowsRef(const float* logits, int rows, int vocab, int32_t* out);
void PrefillAttentionRef(const PrefillAttentionParams& params);
void WriteBf16PageRowsRef(const PageRowsParams& params);
void GatherBf16PageRowsRef(const PageGatherParams& params);
void RotateRowsRef(const RotateRowsParams& params);
void PackPagesRef(const PagePackParams& params);    // packed <- pool
void UnpackPagesRef(const PagePackParams& params);  // pool <- packed

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_MODEL_MODEL_KERNELS_REF_H_
