// CPU reference (and production CPU path) of the KV INT2 codecs: rotate -> [token norms] -> clip ->
// quantize -> pack, and the inverse (unpack -> dequantize). Plain C++, no Abseil: it includes only
// lib/kvformat, so the GPU kernels (kernels/quant/*.cu, same KvQuantParams) are tested against it.
//
// Quantizer (quant.md A.5, asymmetric, 4 uniform levels), for one group x[0..n):
//   mn = min(x), mx = max(x), scale = max(mx - mn, 1e-8) / 3            (float32)
//   scale and mn are rounded to IEEE fp16 FIRST (they are stored as Int2Params); the codes are
//   computed against the rounded values s = fp16(scale), m = fp16(mn):
//   q = clamp(floor((x - m) / s + 0.5), 0, 3)      (q = 0 when s rounds to 0)
//   x_hat = q * s + m
// so a decoder that reads the stored fp16 params reproduces exactly what the encoder aimed at.
// Inputs must lie within the fp16 range (|x| < 65504); KV activations do.
//
// Clip (quant.md A.4), per row of d values after rotation:
//   idx = min(int(ratio * d), d - 1), tau = sort_asc(|x|)[idx], x <- clamp(x, -tau, tau).
// ratio >= 1 means no clip (tau = max |x|). We use nth_element, i.e. the exact sort path.
//
// Layouts are those of lib/kvformat/int2_block.h (segment kinds, quartered packing).
#ifndef OSCARKV_KERNELS_QUANT_KV_QUANT_REF_H_
#define OSCARKV_KERNELS_QUANT_KV_QUANT_REF_H_

#include <cstddef>
#include <cstdint>

#include "lib/kvformat/int2_block.h"

namespace oscarkv::kernels {

// Result of a reference entry. Callers on the host turn it into absl::Status.
enum class KvQuantStatus : int {
  kOk = 0,
  kNullPointer = 1,      // a required pointer is null
  kBadShape = 2,         // tokens/heads/head_dim out of range or not a supported multiple
  kBadSegmentKind = 3,   // kind not valid for this entry
  kBadClipRatio = 4,     // clip ratio not in (0, +inf)
};
// Static message for a status ("ok", "null pointer", ...).
const char* KvQuantStatusString(KvQuantStatus status);

// ---- Building blocks (exposed for tests and for lib/quant) ----

// Index of the clip threshold in the ascending |x| order: min(int(ratio * d), d - 1).
int ClipIndex(float ratio, int d);
// tau = sort_asc(|x|)[ClipIndex(ratio, d)]. `scratch` holds d floats (may alias nothing in x).
float ClipThreshold(const float* x, int d, float ratio, float* scratch);
// Clamps x[0..d) to [-tau, tau] in place with tau = ClipThreshold(...). No-op when ratio >= 1.
void ClipRow(float* x, int d, float ratio, float* scratch);

// Min-max parameters of one group of n values, rounded to fp16 as stored.
kvformat::Int2Params ComputeInt2Params(const float* x, int n, ptrdiff_t stride = 1);
// Code of x against stored params (see the file comment).
uint8_t QuantizeInt2(float x, kvformat::Int2Params params);
// x_hat = code * scale + min with the fp16 params widened to float.
float DequantizeInt2(uint8_t code, kvformat::Int2Params params);

// Quartered packing of n codes (n % 4 == 0, m = n / 4): out byte j holds codes j, j+m, j+2m, j+3m
// in bits [1:0], [3:2], [5:4], [7:6]. `out` holds n / 4 bytes.
void PackQuartered(const uint8_t* codes, int n, uint8_t* out);
// Inverse of PackQuartered: n codes from n / 4 bytes.
void UnpackQuartered(const uint8_t* packed, int n, uint8_t* codes);

// ---- Segments of one (layer, K|V, head): `tokens` rows of `head_dim` floats ----
// `rows` is [tokens][head_dim] f32 with `row_stride` floats between rows (>= head_dim).
// `out` must hold kvformat::SegmentBytes(kind, tokens, head_dim) bytes.
// Encoders quantize the values as given: rotation, clipping and token-norm division happen first
// (EncodeRowsFused below, or lib/quant's Codec). Shape rules: head_dim % 32 == 0 (so every kind's
// grouping divides it; 64 and 128 are the served sizes); kInt2ChannelGroup needs tokens % 32 == 0.
KvQuantStatus EncodeSegment(kvformat::SegmentKind kind, const float* rows, int tokens,
                            int head_dim, ptrdiff_t row_stride, uint8_t* out);
// Dequantizes (or widens, for kBf16Rows) a segment into `rows` ([tokens][head_dim] f32, stride
// `row_stride`). The inverse of EncodeSegment up to the quantization error.
KvQuantStatus DecodeSegment(kvformat::SegmentKind kind, const uint8_t* segment, int tokens,
                            int head_dim, float* rows, ptrdiff_t row_stride);

// OScaR omni-token L2 norms (quant.md B.3): norms[t] = || keys[t, :, :] ||_2 over all heads and
// head_dim. `keys` is [tokens][heads][head_dim] f32 with `token_stride` floats between tokens.
void ComputeTokenNorms(const float* keys, int tokens, int heads, int head_dim,
                       ptrdiff_t token_stride, float* norms);

// ---- Fused entry: rotate -> [token norms] -> clip -> quantize -> pack ----
// The GPU kernel helper implements the same struct on device (kernels/quant/*.cu); every pointer
// is then a device pointer. One call handles all heads of one (layer, K|V) for `tokens` tokens.
struct KvQuantParams {
  // Input rows: exactly one of the two is non-null.
  const uint16_t* input_bf16 = nullptr;  // [tokens, heads, head_dim] bf16 bits, token stride below
  const float* input_f32 = nullptr;      // [tokens, heads, head_dim] f32, token stride below
  // Elements between consecutive tokens of the input (>= heads * head_dim); heads are contiguous
  // rows of head_dim inside a token. 0 means heads * head_dim.
  ptrdiff_t input_token_stride = 0;
  // Rotation applied to every row as a row vector, x <- x * R. [head_dim, head_dim] f32 row-major
  // (R[i][j] at rotation[i * head_dim + j]). nullptr = identity.
  const float* rotation = nullptr;
  // OScaR omni-token scaling (K of oscar-tns): when non-null, after rotation each token's rows
  // (all heads) are scaled to unit joint L2 norm (multiplied by 1.0f / n_t, n_t = 0 gives 0) and
  // n_t is written here. Decoders multiply dequantized K by n_t. [tokens] f32.
  float* token_norms_out = nullptr;
  // Output segments, one per head: segment h starts at output + h * output_head_stride and holds
  // SegmentBytes(kind, tokens, head_dim) bytes (the layout of int2_block.h). [heads][segment] u8.
  uint8_t* output = nullptr;
  // Bytes between consecutive heads' segments. 0 means SegmentBytes(kind, tokens, head_dim), i.e.
  // the packed order of a block's K (or V) segments.
  ptrdiff_t output_head_stride = 0;
  int tokens = 0;    // T, > 0; a multiple of 32 for kInt2ChannelGroup
  int heads = 0;     // H_kv, > 0
  int head_dim = 0;  // D, a multiple of 32 (64 and 128 served)
  kvformat::SegmentKind kind = kvformat::SegmentKind::kInt2PerToken;
  // Per-row clip ratio (see file comment); >= 1 disables clipping. Default: 1 (no clip).
  float clip_ratio = 1.0f;
};

// Runs the fused path on the CPU. Returns kOk or the first argument error (nothing written then).
KvQuantStatus KvQuantRef(const KvQuantParams& params);

}  // namespace oscarkv::kernels

#endif  // OSCARKV_KERNELS_QUANT_KV_QUANT_REF_H_
