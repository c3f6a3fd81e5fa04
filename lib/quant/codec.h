// Host-side codec object: one codec (M0-M8) for one layer of one model, built from its CodecSpec,
// the calibration (for calibrated codecs) and the layer index. It owns that layer's R_K and R_V and
// does the per-head work of the KV cache around the CPU reference (kernels/quant/kv_quant_ref.h):
//
//   q~ = RotateQuery(q)       k~ = RotateKey(k)       v~ = RotateValue(v)      (x <- x * R)
//   bytes = EncodeSegment(kKey|kValue, rows of one head in the rotated basis, T tokens)
//   rows~ = DecodeSegment(...)            (still in the rotated basis; K multiplied back by norms)
//   o = UnrotateOutput(o~)                (o <- o~ * R_V^T)
// Attention in the rotated basis is exact for K (q~ . k~ = q . k) and V (softmax(.) V~ R_V^T).
// Codecs without rotation (bf16, int2-naive, oscar-norot, kivi2) use the identity everywhere.
//
// Clipping (per row, after rotation and token-norm division) uses the spec's ratios; a calibrated
// codec whose spec clips takes the calibration file's ratios instead (quant.md A.4: 0.96 for V on
// Qwen3-32B). oscar-tns (M8) also needs the per-token K norms over all KV heads of the layer:
// ComputeTokenNorms() over the rotated keys of all heads, then the same norms to Encode/Decode of
// every head's K segment (the block stores them once per layer; int2_block.h).
//
// Segment bytes follow lib/kvformat/int2_block.h for the codec's K/V kinds. Windows and residuals
// (sink/recent, KIVI/OScaR flush tiles) are the caller's policy (spec fields); this object only
// encodes what it is given. Thread-safe after Create (all methods const, no shared scratch).
#ifndef OSCARKV_LIB_QUANT_CODEC_H_
#define OSCARKV_LIB_QUANT_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/kvformat/int2_block.h"
#include "lib/quant/calibration.h"
#include "lib/quant/codec_spec.h"

namespace oscarkv::quant {

enum class KvSide { kKey, kValue };

class Codec {
 public:
  // `calibration` is required (non-null) iff spec.needs_calibration, is not retained, and must
  // have head_dim == `head_dim` and the spec's objectives (k_objective/v_objective); `layer`
  // indexes its layers. head_dim must be a multiple of 32 (a power of two for rotated codecs).
  // kInvalidArgument on any mismatch, kFailedPrecondition when a needed calibration is missing.
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const CodecSpec& spec, int head_dim,
                                                       const Calibration* calibration = nullptr,
                                                       int layer = 0);
  // Create by name (FindCodec's kNotFound on an unknown name).
  static absl::StatusOr<std::unique_ptr<Codec>> Create(std::string_view name, int head_dim,
                                                       const Calibration* calibration = nullptr,
                                                       int layer = 0);

  const CodecSpec& spec() const { return spec_; }
  int head_dim() const { return head_dim_; }
  // R_K / R_V, [D][D] f32 row-major (x * R), or nullptr for the identity. Owned by the codec;
  // what KvQuantParams.rotation takes.
  const float* key_rotation() const { return k_rot_.empty() ? nullptr : k_rot_.data(); }
  const float* value_rotation() const { return v_rot_.empty() ? nullptr : v_rot_.data(); }
  float clip_ratio(KvSide side) const { return side == KvSide::kKey ? k_clip_ : v_clip_; }
  kvformat::SegmentKind segment_kind(KvSide side) const {
    return side == KvSide::kKey ? spec_.k_segment : spec_.v_segment;
  }
  // Bytes of one head's segment of `tokens` tokens (kvformat::SegmentBytes).
  size_t SegmentBytes(KvSide side, int tokens) const;
  // Whether K segments need token norms (oscar-tns).
  bool uses_token_norms() const { return spec_.token_norms; }

  // In-place rotations of rows [n][D] (rows.size() a multiple of D; kInvalidArgument otherwise).
  absl::Status RotateQuery(std::span<float> rows) const;     // q * R_K
  absl::Status RotateKey(std::span<float> rows) const;       // k * R_K
  absl::Status RotateValue(std::span<float> rows) const;     // v * R_V
  absl::Status UnrotateOutput(std::span<float> rows) const;  // o * R_V^T
  absl::Status UnrotateKey(std::span<float> rows) const;     // k~ * R_K^T (error analysis)

  // OScaR norms: rotated_keys [tokens][kv_heads][D] -> norms [tokens], L2 over heads x D.
  absl::Status ComputeTokenNorms(std::span<const float> rotated_keys, int tokens, int kv_heads,
                                 std::span<float> norms) const;

  // Encodes `tokens` rows [tokens][D] of one head (rotated basis) into `out`
  // (SegmentBytes(side, tokens) bytes): [divide K by token norms] -> clip -> quantize -> pack.
  // `token_norms` ([tokens]) is required for K of oscar-tns and must be empty otherwise.
  // kInvalidArgument on size or shape errors (channel-group kinds need tokens % 32 == 0).
  absl::Status EncodeSegment(KvSide side, std::span<const float> rows, int tokens,
                             std::span<const float> token_norms, std::span<uint8_t> out) const;
  // Decodes a segment into rows [tokens][D] in the rotated basis (K multiplied back by its
  // token norms for oscar-tns). Same argument rules as EncodeSegment.
  absl::Status DecodeSegment(KvSide side, std::span<const uint8_t> segment, int tokens,
                             std::span<const float> token_norms, std::span<float> rows) const;

 private:
  Codec(const CodecSpec& spec, int head_dim) : spec_(spec), head_dim_(head_dim) {}
  absl::Status Apply(const std::vector<float>& r, bool transpose, std::span<float> rows) const;
  absl::Status CheckNorms(KvSide side, int tokens, std::span<const float> token_norms) const;

  const CodecSpec& spec_;
  int head_dim_;
  float k_clip_ = 1.0f;
  float v_clip_ = 1.0f;
  std::vector<float> k_rot_;  // empty = identity
  std::vector<float> v_rot_;
};

}  // namespace oscarkv::quant

#endif  // OSCARKV_LIB_QUANT_CODEC_H_
