// Single-pass decode-equivalent emulation (quant.md E.0 rule 2) for quality evaluation.
//
// Token-by-token decode through ThreeTierCache makes query t attend to the cache state after t+1
// appends. Because every quantiser here is stateless given its group (per-token rows; 32-token
// channel groups aligned at 0), the dequantised value of token j does not depend on when it was
// demoted. So: rotate and bf16-round K/V once, dequantise every token (or group) once, and for
// query t read token j dequantised iff it lies in WindowsAt(spec, t + 1) (three_tier_cache.h),
// else its BF16 row. This reproduces the real flush granularity exactly (recent 256..263 for the
// windowed codecs, 128-token K blocks and a sliding V window for kivi2, 256-token tiles for
// oscar-tns) and equals true decode up to float rounding (tested).
//
// The attention is blocked and uses BLAS (two score GEMMs, FP and dequantised keys, a per-entry
// select, then two output GEMMs), so a layer of T tokens costs about 4x a plain causal attention.
#ifndef OSCARKV_LIB_QUANT_DECODE_EMULATION_H_
#define OSCARKV_LIB_QUANT_DECODE_EMULATION_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/quant/codec_spec.h"

namespace oscarkv::quant {

// One layer's K/V in both versions, rotated basis. [T][Hkv][D] f32 each.
struct EmulatedLayerKv {
  int tokens = 0;
  int kv_heads = 0;
  int head_dim = 0;
  std::vector<float> k_fp, v_fp;    // bf16(x R); OScaR K also divided by its omni-token norm
  std::vector<float> k_deq, v_deq;  // dequantised; equal to the fp rows for tokens the codec
                                    // never quantises (bf16 codec, incomplete K channel groups)
  std::vector<float> token_scale;   // [T] OScaR norms multiplying the scores; empty otherwise
};

// Rotates, rounds, and quantises/dequantises a layer's K/V exactly as ThreeTierCache does.
// k, v: [T][Hkv][D] f32 post-RoPE, model basis. rot_k, rot_v: [D][D] row-major or nullptr.
// k_clip_ratio / v_clip_ratio override the spec's when > 0 (as ThreeTierCacheConfig's do).
// per_token_group > 0 (a multiple of 32 dividing head_dim) quantises per-token codecs'
// rows in groups of that many channels, each clipped and with its own scale/min: a lever of the
// evaluation only (the block format stores one group per row, so ThreeTierCache cannot hold it).
// kInvalidArgument on bad shapes.
absl::StatusOr<EmulatedLayerKv> BuildEmulatedLayerKv(const CodecSpec& spec, const float* rot_k,
                                                     const float* rot_v, int tokens, int kv_heads,
                                                     int head_dim, const float* k, const float* v,
                                                     float k_clip_ratio = -1.0f,
                                                     float v_clip_ratio = -1.0f,
                                                     int per_token_group = 0);

// The rows query t (position t, so t + 1 tokens) reads for KV head `head`: k, v [t+1][D],
// token_scale [t+1] or empty. Equals ThreeTierCache::ReadSeen after t + 1 appends, bit for bit.
void SeenRowsAt(const CodecSpec& spec, const EmulatedLayerKv& kv, int t, int head,
                std::vector<float>* k, std::vector<float>* v, std::vector<float>* token_scale);

// Decode-equivalent attention for every position: out[t] = attention of q[t] (rotated by R_K)
// over SeenRowsAt(t), scores scaled by sm_scale (<= 0: 1/sqrt(D)), rotated back by R_V^T.
// q: [T][Hq][D] f32 model basis, Hq a multiple of Hkv; out: [T][Hq][D] f32 model basis.
absl::Status EmulateDecodeAttention(const CodecSpec& spec, const EmulatedLayerKv& kv,
                                    const float* rot_k, const float* rot_v, const float* q,
                                    int num_q_heads, float* out, float sm_scale = 0.0f);

}  // namespace oscarkv::quant

#endif  // OSCARKV_LIB_QUANT_DECODE_EMULATION_H_
