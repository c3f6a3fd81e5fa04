#include "lib/quant/codec_spec.h"

#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

namespace oscarkv::quant {
namespace {

using kvformat::CodecId;
using kvformat::SegmentKind;

constexpr float kNoClip = 1.0f;
constexpr float kOscarKClip = 0.96f;  // quant.md A.4: K 0.96, V 0.92 (all released models but 32B)
constexpr float kOscarVClip = 0.92f;
constexpr int kSink = 64;             // quant.md A.7 / D.2: SGLANG_MIXED_KV_PREFIX_TOKENS=64
constexpr int kRecent = 256;          // SGLANG_MIXED_KV_RECENT_TOKENS=256

constexpr std::array<CodecSpec, kvformat::kNumCodecs> kCodecs = {{
    {CodecId::kBf16, "bf16", "M0", "BF16 reference: no quantization", RotationKind::kNone,
     kNoClip, kNoClip, 0, 0, 0, SegmentKind::kBf16Rows, SegmentKind::kBf16Rows, false, false, "",
     ""},
    // quant.md C says OSCAR's naive baseline is "per-token symmetric" with an unstated grid; the
    // block format has one INT2 row format, so we use per-token asymmetric min-max (2.25 bits at
    // D=128 either way), no rotation, no clip, no windows.
    {CodecId::kInt2Naive, "int2-naive", "M1",
     "naive per-token asymmetric INT2, no rotation, no clip, no windows", RotationKind::kNone,
     kNoClip, kNoClip, 0, 0, 0, SegmentKind::kInt2PerToken, SegmentKind::kInt2PerToken, false,
     false, "", ""},
    // QuaRot-style: full (non-segmented) normalized Hadamard per head on Q/K, and on V (folded
    // into W_v/W_o in QuaRot; applied to V rows and undone on the output here).
    {CodecId::kInt2Hadamard, "int2-hadamard", "M2",
     "QuaRot-style Hadamard on Q/K/V + per-token INT2, no clip, no windows",
     RotationKind::kHadamard, kNoClip, kNoClip, 0, 0, 0, SegmentKind::kInt2PerToken,
     SegmentKind::kInt2PerToken, false, false, "", ""},
    // Site ablation "H+P only": data-free H (P_br is a no-op at group = head_dim, quant.md A.3).
    {CodecId::kOscarHadamardClip, "oscar-hadamard", "M3",
     "Hadamard + clip 0.96/0.92 + sink 64 / recent 256", RotationKind::kHadamard, kOscarKClip,
     kOscarVClip, kSink, kRecent, 0, SegmentKind::kInt2PerToken, SegmentKind::kInt2PerToken,
     false, false, "", ""},
    {CodecId::kOscarNoRotation, "oscar-norot", "M4",
     "no rotation + clip 0.96/0.92 + sink 64 / recent 256", RotationKind::kNone, kOscarKClip,
     kOscarVClip, kSink, kRecent, 0, SegmentKind::kInt2PerToken, SegmentKind::kInt2PerToken,
     false, false, "", ""},
    {CodecId::kOscarGram, "oscar-gram", "M5",
     "OSCAR with U from K^T K / V^T V (tensor reconstruction) + clip + windows",
     RotationKind::kCalibratedGram, kOscarKClip, kOscarVClip, kSink, kRecent, 0,
     SegmentKind::kInt2PerToken, SegmentKind::kInt2PerToken, false, true, "ktk", "vtv"},
    // The default. V target follows the code (diag-weighted sst), not the paper's V^T S^T S V
    // (quant.md A.2 / F.1), for parity with published rotations.
    {CodecId::kOscar, "oscar", "M6",
     "OSCAR: R = U*H*P_br from qqt/sst covariances, clip 0.96/0.92, sink 64 / recent 256",
     RotationKind::kCalibratedAttention, kOscarKClip, kOscarVClip, kSink, kRecent, 0,
     SegmentKind::kInt2PerToken, SegmentKind::kInt2PerToken, false, true, "qqt", "sst"},
    // KIVI-2: K per-channel over 32-token groups, V per-token over 32-channel groups, residual
    // R = 128 full-precision tokens, no rotation (quant.md C).
    {CodecId::kKivi2, "kivi2", "M7",
     "KIVI-2: K per-channel g32, V per-token g32, residual 128, no rotation",
     RotationKind::kNone, kNoClip, kNoClip, 0, 0, 128, SegmentKind::kInt2ChannelGroup,
     SegmentKind::kInt2TokenGroup, false, false, "", ""},
    // OScaR: Hadamard on Q/K/V (V's folded into W_v/W_o in the paper), omni-token L2 scaling of K
    // over all KV heads x head_dim, KIVI-style grouping, residual flush tiles of 256 (B.2-B.4).
    {CodecId::kOscarTns, "oscar-tns", "M8",
     "OScaR: Hadamard + omni-token K norm scaling, K per-channel g32, V per-token g32, "
     "residual 256",
     RotationKind::kHadamard, kNoClip, kNoClip, 0, 0, 256, SegmentKind::kInt2ChannelGroup,
     SegmentKind::kInt2TokenGroup, true, false, "", ""},
}};

constexpr bool TableConsistent() {
  for (size_t i = 0; i < kCodecs.size(); ++i) {
    const CodecSpec& s = kCodecs[i];
    if (static_cast<size_t>(s.id) != i) return false;
    if (s.k_segment != kvformat::KSegmentKind(s.id)) return false;
    if (s.v_segment != kvformat::VSegmentKind(s.id)) return false;
    if (s.token_norms != kvformat::HasTokenNorms(s.id)) return false;
  }
  return true;
}
static_assert(TableConsistent(), "codec table disagrees with lib/kvformat/int2_block.h");

}  // namespace

std::string_view RotationKindName(RotationKind kind) {
  switch (kind) {
    case RotationKind::kNone:
      return "none";
    case RotationKind::kHadamard:
      return "hadamard";
    case RotationKind::kCalibratedAttention:
      return "calibrated-qqt-sst";
    case RotationKind::kCalibratedGram:
      return "calibrated-gram";
  }
  return "unknown";
}

std::span<const CodecSpec> AllCodecs() { return kCodecs; }

const CodecSpec& GetCodecSpec(kvformat::CodecId id) {
  const auto i = static_cast<size_t>(id);
  CHECK(i < kCodecs.size()) << "unknown codec id " << i;
  return kCodecs[i];
}

std::string CodecNames() {
  std::string out;
  for (const CodecSpec& s : kCodecs) {
    if (!out.empty()) out += ", ";
    out += s.name;
  }
  return out;
}

bool Servable(const CodecSpec& spec) {
  if (spec.id == kvformat::CodecId::kBf16) return true;
  return spec.k_segment == kvformat::SegmentKind::kInt2PerToken && spec.sink_tokens > 0 &&
         spec.recent_tokens > 0;
}

std::vector<std::string> ServableCodecNames() {
  std::vector<std::string> out;
  for (const CodecSpec& s : kCodecs) {
    if (Servable(s)) out.emplace_back(s.name);
  }
  return out;
}

absl::StatusOr<const CodecSpec*> FindCodec(std::string_view name) {
  for (const CodecSpec& s : kCodecs) {
    if (s.name == name) return &s;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown codec \"", std::string(name), "\"; valid codecs: ", CodecNames()));
}

absl::StatusOr<const CodecSpec*> FindCodecById(uint16_t id) {
  if (id >= kCodecs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown codec id ", id));
  }
  return &kCodecs[id];
}

double SegmentBitsPerElement(kvformat::SegmentKind kind, int tokens, int head_dim) {
  return 8.0 * static_cast<double>(kvformat::SegmentBytes(kind, tokens, head_dim)) /
         (static_cast<double>(tokens) * head_dim);
}

double BlockBitsPerElement(const CodecSpec& spec, int kv_heads, int head_dim, int tokens) {
  const size_t bytes = kvformat::PayloadBytes(spec.id, kvformat::BlockKind::kQuantized, 1,
                                              kv_heads, head_dim, tokens);
  return 8.0 * static_cast<double>(bytes) / (2.0 * kv_heads * head_dim * tokens);
}

}  // namespace oscarkv::quant
