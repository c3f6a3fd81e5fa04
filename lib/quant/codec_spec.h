// The codec table: every KV-cache method of quant.md E.1 (M0-M8) with its name, CodecId and the
// properties the rest of the system needs (rotation, clipping, windows, segment kinds). This is the
// one place where codec names are mapped (STYLE habit 5); the ids and segment kinds come from
// lib/kvformat/int2_block.h.
//
// Choices where the sources disagree (quant.md C, F) are recorded on the entries in codec_spec.cc.
// One of them applies to all of M1-M6: the block format has a single INT2 row format, so every
// per-token codec uses per-token ASYMMETRIC min-max (group = head_dim, fp16 scale + fp16 min),
// including M1, whose "symmetric" grid quant.md says is unstated.
#ifndef OSCARKV_LIB_QUANT_CODEC_SPEC_H_
#define OSCARKV_LIB_QUANT_CODEC_SPEC_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::quant {

// Which orthogonal R a codec applies to K/Q (R_K) and V (R_V), row-vector convention x * R.
enum class RotationKind {
  kNone,                  // identity
  kHadamard,              // normalized Sylvester H_D, data-free (the same H for K and V)
  kCalibratedAttention,   // R = U * H * P_br, U from C_Q (qqt) for K and C_V (sst) for V
  kCalibratedGram,        // R = U * H * P_br, U from K^T K (ktk) and V^T V (vtv)
};
std::string_view RotationKindName(RotationKind kind);

struct CodecSpec {
  kvformat::CodecId id;
  std::string_view name;        // CLI / config name, e.g. "oscar"
  std::string_view paper_id;    // "M0".."M8" (quant.md E.1)
  std::string_view description;
  RotationKind rotation;
  // Per-row clip ratios applied after rotation (quant.md A.4); 1 = no clip.
  float k_clip_ratio;
  float v_clip_ratio;
  // Three-tier windows (OSCAR-style): first `sink_tokens` and last `recent_tokens` stay BF16
  // (rotated). 0/0 = every token quantized (M1, M2) or residual-style codec.
  int sink_tokens;
  int recent_tokens;
  // KIVI/OScaR residual: full-precision tokens are flushed to INT2 in tiles of this many tokens
  // (quant.md B.4, C). 0 = not a residual codec.
  int residual_tokens;
  // Storage kinds of K and V history segments (must equal int2_block.h's KSegmentKind/VSegmentKind).
  kvformat::SegmentKind k_segment;
  kvformat::SegmentKind v_segment;
  bool token_norms;             // OScaR omni-token K scaling (one f32 per token per layer)
  bool needs_calibration;       // a calibration file (R_K, R_V per layer) is required
  std::string_view k_objective; // calibration objective of R_K ("qqt", "ktk"), empty if none
  std::string_view v_objective; // calibration objective of R_V ("sst", "vtv"), empty if none
};

// All codecs, in CodecId order (index == static_cast<int>(id)).
std::span<const CodecSpec> AllCodecs();
// The spec of a codec id (valid ids only; CHECK-fails otherwise).
const CodecSpec& GetCodecSpec(kvformat::CodecId id);
// Looks a codec up by name ("oscar", "kivi2", ...). kNotFound lists the valid names.
absl::StatusOr<const CodecSpec*> FindCodec(std::string_view name);
// Looks a codec up by the numeric id stored in a block header. kInvalidArgument if unknown.
absl::StatusOr<const CodecSpec*> FindCodecById(uint16_t id);
// "bf16, int2-naive, ..." in id order.
std::string CodecNames();
// Whether the serving path (lib/engine, every worker) can run the codec: bf16, and per-token
// INT2 with BF16 sink and recent windows (oscar and its ablations M3-M5). The codecs without
// windows (int2-naive, int2-hadamard) and the residual ones (kivi2, oscar-tns) are
// evaluation-only until their history can be imported from blocks.
bool Servable(const CodecSpec& spec);
// The servable codecs' names in id order.
std::vector<std::string> ServableCodecNames();
// The default codec (M6 "oscar").
inline constexpr std::string_view kDefaultCodecName = "oscar";

// Bits per element of one INT2 (or BF16) history segment of `tokens` tokens, from the bytes the
// segment occupies (kvformat::SegmentBytes), K or V.
double SegmentBitsPerElement(kvformat::SegmentKind kind, int tokens, int head_dim);
// Bits per element of a whole quantized block (K and V, norms included), from
// kvformat::PayloadBytes, for one layer with `kv_heads` heads of `head_dim`.
double BlockBitsPerElement(const CodecSpec& spec, int kv_heads, int head_dim, int tokens);

}  // namespace oscarkv::quant

#endif  // OSCARKV_LIB_QUANT_CODEC_SPEC_H_
