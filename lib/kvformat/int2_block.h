// The one definition of the oscarkv KV block: header, codec ids and payload layouts.
// Header-only, depends on nothing of ours, safe to include from .cu (kernels/ include it).
// Byte order: little-endian everywhere (FORMAT.md). Changing any layout bumps kFormatVersion.
//
// A block holds `token_count` consecutive tokens (default 64) for all layers and KV heads of one
// model in one codec. Payload order, for each layer l = 0..L-1:
//   [token norms: token_count x f32, only for codecs with token-norm scaling (M8), K only]
//   K segments for head 0..H-1, then V segments for head 0..H-1.
// Segment of one (layer, K|V, head), by storage kind:
//   kBf16Rows        values [T][D] bf16 (sink blocks and codec bf16; rotated as the codec says)
//   kInt2PerToken    codes [T][D/4] u8, then params [T] Int2Params            (2 + 32/D bits)
//   kInt2TokenGroup  codes [T][D/4] u8, then params [T][D/32] Int2Params       (3 bits)
//   kInt2ChannelGroup (K of KIVI/OScaR) for each 32-token group g:
//                    codes [D][8] u8, then params [D] Int2Params               (3 bits)
//
// Packing (the "quartered split", quant.md A.6): inside one packed run of n = 4*m codes, byte j
// holds elements j, j+m, j+2m, j+3m in bits [1:0], [3:2], [5:4], [7:6]. For per-token rows the
// run is one row of D channels (m = D/4); for channel groups it is one channel's 32 tokens (m = 8).
//
// Dequantisation (asymmetric, 4 uniform levels): x_hat = code * scale + min, code in {0,1,2,3},
// scale = max(max - min, 1e-8) / 3, with scale and min stored as IEEE fp16 (Int2Params).
#ifndef OSCARKV_LIB_KVFORMAT_INT2_BLOCK_H_
#define OSCARKV_LIB_KVFORMAT_INT2_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace oscarkv::kvformat {

inline constexpr uint32_t kBlockMagic = 0x42564b4fu;  // "OKVB" read as little-endian bytes
inline constexpr uint16_t kFormatVersion = 1;
inline constexpr int kDefaultBlockTokens = 64;
inline constexpr int kChannelGroupTokens = 32;  // per-channel K groups (KIVI, OScaR)
inline constexpr int kTokenGroupChannels = 32;  // per-token V groups of channels (KIVI, OScaR)

// Codec ids as stored in the header; the paper ids (quant.md E.1) are in the comments.
enum class CodecId : uint16_t {
  kBf16 = 0,              // M0  bf16
  kInt2Naive = 1,         // M1  int2-naive
  kInt2Hadamard = 2,      // M2  int2-hadamard (QuaRot-style)
  kOscarHadamardClip = 3, // M3  oscar-hadamard: H + clip + windows
  kOscarNoRotation = 4,   // M4  oscar-norot: clip + windows, no rotation
  kOscarGram = 5,         // M5  oscar-gram: U from K^T K / V^T V
  kOscar = 6,             // M6  oscar (default)
  kKivi2 = 7,             // M7  kivi2
  kOscarTns = 8,          // M8  oscar-tns (OScaR)
};
inline constexpr int kNumCodecs = 9;

// How one segment's values are stored (see the file comment).
enum class SegmentKind : uint8_t {
  kBf16Rows = 0,
  kInt2PerToken = 1,
  kInt2TokenGroup = 2,
  kInt2ChannelGroup = 3,
};

// Whether a block holds quantised history or BF16 rows (sink blocks of any codec are BF16).
enum class BlockKind : uint8_t { kBf16 = 0, kQuantized = 1 };

// Scale and minimum of one quantisation group, IEEE fp16 bit patterns.
struct Int2Params {
  uint16_t scale_fp16;
  uint16_t min_fp16;
};
static_assert(sizeof(Int2Params) == 4);
static_assert(std::is_trivially_copyable_v<Int2Params>);

// 128-bit block key: XXH3-128 hash chain over token ids (FORMAT.md "Block keys").
struct BlockKey {
  uint64_t lo;
  uint64_t hi;
  friend constexpr bool operator==(const BlockKey&, const BlockKey&) = default;
};
static_assert(sizeof(BlockKey) == 16);
static_assert(std::is_trivially_copyable_v<BlockKey>);

// Fixed 128-byte block header. All fields little-endian; reserved bytes must be zero.
struct BlockHeader {
  uint32_t magic;               // kBlockMagic
  uint16_t version;             // kFormatVersion
  uint16_t codec;               // CodecId
  uint64_t model_fingerprint;   // XXH3-64 of the model's identity (lib/model)
  uint64_t calib_fingerprint;   // XXH3-64 of the calibration file contents; 0 = none
  uint32_t first_position;      // position of the block's first token in the sequence
  uint16_t token_count;         // tokens in this block (T)
  uint16_t layer_count;         // L
  uint16_t kv_heads;            // H
  uint16_t head_dim;            // D
  uint8_t block_kind;           // BlockKind
  uint8_t reserved0[3];
  BlockKey key;                 // key of this block (chain over all tokens up to its end)
  BlockKey prev_key;            // key of the previous block; the chain seed for the first
  uint64_t payload_bytes;       // bytes after the header
  uint64_t payload_checksum;    // XXH3-64 of the payload
  uint8_t reserved1[32];        // zero; room for later fields without a size change
  uint64_t header_checksum;     // XXH3-64 of bytes [0, 120) of this header
};
static_assert(sizeof(BlockHeader) == 128);
static_assert(std::is_trivially_copyable_v<BlockHeader>);
static_assert(offsetof(BlockHeader, header_checksum) == 120);

// ---- Layout arithmetic (constexpr; usable on host and device) ----

// Bytes of one segment of `tokens` tokens with head_dim `head_dim`.
constexpr size_t SegmentBytes(SegmentKind kind, int tokens, int head_dim) {
  const size_t t = static_cast<size_t>(tokens);
  const size_t d = static_cast<size_t>(head_dim);
  switch (kind) {
    case SegmentKind::kBf16Rows:
      return t * d * 2;
    case SegmentKind::kInt2PerToken:
      return t * (d / 4) + t * sizeof(Int2Params);
    case SegmentKind::kInt2TokenGroup:
      return t * (d / 4) + t * (d / kTokenGroupChannels) * sizeof(Int2Params);
    case SegmentKind::kInt2ChannelGroup:
      return (t / kChannelGroupTokens) * (d * (kChannelGroupTokens / 4) + d * sizeof(Int2Params));
  }
  return 0;
}

// Storage kind of a codec's K and V segments in history (quantised) blocks.
constexpr SegmentKind KSegmentKind(CodecId codec) {
  switch (codec) {
    case CodecId::kBf16:
      return SegmentKind::kBf16Rows;
    case CodecId::kKivi2:
    case CodecId::kOscarTns:
      return SegmentKind::kInt2ChannelGroup;
    default:
      return SegmentKind::kInt2PerToken;
  }
}
constexpr SegmentKind VSegmentKind(CodecId codec) {
  switch (codec) {
    case CodecId::kBf16:
      return SegmentKind::kBf16Rows;
    case CodecId::kKivi2:
    case CodecId::kOscarTns:
      return SegmentKind::kInt2TokenGroup;
    default:
      return SegmentKind::kInt2PerToken;
  }
}
// OScaR's omni-token scaling stores one f32 K norm per token per layer (shared by all heads).
constexpr bool HasTokenNorms(CodecId codec) { return codec == CodecId::kOscarTns; }

// Payload bytes of one block. BF16 blocks (sink blocks, codec bf16) hold K and V as kBf16Rows.
constexpr size_t PayloadBytes(CodecId codec, BlockKind kind, int layers, int kv_heads,
                              int head_dim, int tokens) {
  const bool bf16 = kind == BlockKind::kBf16;
  const SegmentKind k = bf16 ? SegmentKind::kBf16Rows : KSegmentKind(codec);
  const SegmentKind v = bf16 ? SegmentKind::kBf16Rows : VSegmentKind(codec);
  const size_t norms = (!bf16 && HasTokenNorms(codec)) ? static_cast<size_t>(tokens) * 4 : 0;
  const size_t per_layer = norms + static_cast<size_t>(kv_heads) *
                                       (SegmentBytes(k, tokens, head_dim) +
                                        SegmentBytes(v, tokens, head_dim));
  return static_cast<size_t>(layers) * per_layer;
}

// Packs four 2-bit codes (each 0..3) into one byte: c0 in bits [1:0] ... c3 in bits [7:6].
constexpr uint8_t PackCrumbs(uint8_t c0, uint8_t c1, uint8_t c2, uint8_t c3) {
  return static_cast<uint8_t>((c0 & 3u) | ((c1 & 3u) << 2) | ((c2 & 3u) << 4) | ((c3 & 3u) << 6));
}
// Code of quarter q (0..3) in a packed byte.
constexpr uint8_t UnpackCrumb(uint8_t byte, int quarter) {
  return static_cast<uint8_t>((byte >> (2 * quarter)) & 3u);
}

}  // namespace oscarkv::kvformat

#endif  // OSCARKV_LIB_KVFORMAT_INT2_BLOCK_H_
