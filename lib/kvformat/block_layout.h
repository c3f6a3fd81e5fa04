// Byte offsets inside a block payload (the layout described in int2_block.h and FORMAT.md).
// Header-only, constexpr, no Abseil: usable from host code and from .cu files (the CUDA targets
// compile with --expt-relaxed-constexpr). Every offset is relative to the first payload byte,
// i.e. to the byte right after the 128-byte BlockHeader.
//
// Payload, for each layer l = 0..L-1 (each layer is LayerBytes() long):
//   [token norms: T x f32]            only quantised blocks of codecs with HasTokenNorms (M8)
//   K segment, head 0..H-1            each SegmentBytes(k_kind, T, D)
//   V segment, head 0..H-1            each SegmentBytes(v_kind, T, D)
// Inside a segment, see SegmentCodesOffset() / SegmentParamsOffset().
//
// Arguments are not range-checked here (hot paths call these); ParseBlock() in block.h validates
// a header before anyone computes offsets from it.
#ifndef OSCARKV_LIB_KVFORMAT_BLOCK_LAYOUT_H_
#define OSCARKV_LIB_KVFORMAT_BLOCK_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "lib/kvformat/int2_block.h"

namespace oscarkv::kvformat {

// Which of the two tensors of a layer a segment holds.
enum class KvSide : uint8_t { kK = 0, kV = 1 };

// Storage kind of one side of a block: BF16 blocks hold kBf16Rows for K and V whatever the codec.
constexpr SegmentKind SegmentKindOf(CodecId codec, BlockKind kind, KvSide side) {
  if (kind == BlockKind::kBf16) return SegmentKind::kBf16Rows;
  return side == KvSide::kK ? KSegmentKind(codec) : VSegmentKind(codec);
}

// Whether a block of this codec and kind stores the per-layer token-norm array (M8 history only).
constexpr bool BlockHasTokenNorms(CodecId codec, BlockKind kind) {
  return kind == BlockKind::kQuantized && HasTokenNorms(codec);
}

// Bytes of one 32-token channel group of a kInt2ChannelGroup segment: codes [D][8] u8 then
// params [D] Int2Params.
constexpr size_t ChannelGroupBytes(int head_dim) {
  return static_cast<size_t>(head_dim) * (kChannelGroupTokens / 4 + sizeof(Int2Params));
}

// ---- Inside one segment (offsets relative to the segment's first byte) ----
//
//   kind               codes at                      params at
//   kBf16Rows          0: values [T][D] bf16         (none)
//   kInt2PerToken      0: [T][D/4] u8                T*D/4: [T] Int2Params
//   kInt2TokenGroup    0: [T][D/4] u8                T*D/4: [T][D/32] Int2Params
//   kInt2ChannelGroup  g*G: [D][8] u8                g*G + 8*D: [D] Int2Params
//                      (G = ChannelGroupBytes(D), g = 32-token group index 0..T/32-1)
// `group` is the 32-token channel group and must be 0 for the other kinds.

// Offset of the codes (or, for kBf16Rows, the bf16 values) of `group` inside a segment.
constexpr size_t SegmentCodesOffset(SegmentKind kind, int /*tokens*/, int head_dim,
                                    int group = 0) {
  return kind == SegmentKind::kInt2ChannelGroup
             ? static_cast<size_t>(group) * ChannelGroupBytes(head_dim)
             : 0;
}

// Offset of the Int2Params of `group` inside a segment. For kBf16Rows (no params) returns the
// segment size, i.e. an empty range at the end.
constexpr size_t SegmentParamsOffset(SegmentKind kind, int tokens, int head_dim, int group = 0) {
  const size_t t = static_cast<size_t>(tokens);
  const size_t d = static_cast<size_t>(head_dim);
  switch (kind) {
    case SegmentKind::kBf16Rows:
      return t * d * 2;
    case SegmentKind::kInt2PerToken:
    case SegmentKind::kInt2TokenGroup:
      return t * (d / 4);
    case SegmentKind::kInt2ChannelGroup:
      return static_cast<size_t>(group) * ChannelGroupBytes(head_dim) +
             d * (kChannelGroupTokens / 4);
  }
  return 0;
}

// Number of Int2Params in one segment (0 for kBf16Rows).
constexpr size_t SegmentParamCount(SegmentKind kind, int tokens, int head_dim) {
  const size_t t = static_cast<size_t>(tokens);
  const size_t d = static_cast<size_t>(head_dim);
  switch (kind) {
    case SegmentKind::kBf16Rows:
      return 0;
    case SegmentKind::kInt2PerToken:
      return t;
    case SegmentKind::kInt2TokenGroup:
      return t * (d / kTokenGroupChannels);
    case SegmentKind::kInt2ChannelGroup:
      return (t / kChannelGroupTokens) * d;
  }
  return 0;
}

// The shape of one block and the offsets of everything in its payload.
// Build it with BlockLayout::Of(header) or by filling the fields.
struct BlockLayout {
  CodecId codec = CodecId::kOscar;
  BlockKind kind = BlockKind::kQuantized;
  int layers = 0;    // L
  int kv_heads = 0;  // H
  int head_dim = 0;  // D
  int tokens = 0;    // T

  static constexpr BlockLayout Of(const BlockHeader& h) {
    return BlockLayout{static_cast<CodecId>(h.codec), static_cast<BlockKind>(h.block_kind),
                       h.layer_count, h.kv_heads, h.head_dim, h.token_count};
  }

  constexpr SegmentKind k_kind() const { return SegmentKindOf(codec, kind, KvSide::kK); }
  constexpr SegmentKind v_kind() const { return SegmentKindOf(codec, kind, KvSide::kV); }
  constexpr SegmentKind segment_kind(KvSide side) const {
    return SegmentKindOf(codec, kind, side);
  }
  constexpr bool has_token_norms() const { return BlockHasTokenNorms(codec, kind); }

  // Bytes of the token-norm array of one layer (T x f32, or 0).
  constexpr size_t token_norm_bytes() const {
    return has_token_norms() ? static_cast<size_t>(tokens) * sizeof(float) : 0;
  }
  constexpr size_t segment_bytes(KvSide side) const {
    return SegmentBytes(segment_kind(side), tokens, head_dim);
  }
  constexpr size_t layer_bytes() const {
    return token_norm_bytes() + static_cast<size_t>(kv_heads) *
                                    (segment_bytes(KvSide::kK) + segment_bytes(KvSide::kV));
  }
  // Equals PayloadBytes(codec, kind, L, H, D, T).
  constexpr size_t payload_bytes() const { return static_cast<size_t>(layers) * layer_bytes(); }

  // Offset of layer l's first byte (its token norms when present, else K segment of head 0).
  constexpr size_t LayerOffset(int layer) const {
    return static_cast<size_t>(layer) * layer_bytes();
  }
  // Offset of layer l's token-norm array: T f32 values (M8 only; meaningless otherwise).
  constexpr size_t TokenNormsOffset(int layer) const { return LayerOffset(layer); }

  // Offset of the segment (layer, side, head).
  constexpr size_t SegmentOffset(int layer, KvSide side, int head) const {
    const size_t base = LayerOffset(layer) + token_norm_bytes();
    const size_t k_all = static_cast<size_t>(kv_heads) * segment_bytes(KvSide::kK);
    return side == KvSide::kK ? base + static_cast<size_t>(head) * segment_bytes(KvSide::kK)
                              : base + k_all + static_cast<size_t>(head) * segment_bytes(KvSide::kV);
  }
  // Payload offset of the codes (bf16 values for kBf16Rows) of a segment's `group`.
  constexpr size_t CodesOffset(int layer, KvSide side, int head, int group = 0) const {
    return SegmentOffset(layer, side, head) +
           SegmentCodesOffset(segment_kind(side), tokens, head_dim, group);
  }
  // Payload offset of the Int2Params of a segment's `group`.
  constexpr size_t ParamsOffset(int layer, KvSide side, int head, int group = 0) const {
    return SegmentOffset(layer, side, head) +
           SegmentParamsOffset(segment_kind(side), tokens, head_dim, group);
  }
};

// Effective storage bits per K/V element of a block (payload bits / (2*L*H*T*D) elements), token
// norms included. Independent of L; depends on H only for codecs with token norms.
constexpr double EffectiveBitsPerElement(CodecId codec, BlockKind kind, int kv_heads, int head_dim,
                                         int tokens) {
  const BlockLayout layout{codec, kind, 1, kv_heads, head_dim, tokens};
  return static_cast<double>(layout.layer_bytes()) * 8.0 /
         (2.0 * kv_heads * static_cast<double>(head_dim) * tokens);
}

}  // namespace oscarkv::kvformat

#endif  // OSCARKV_LIB_KVFORMAT_BLOCK_LAYOUT_H_
