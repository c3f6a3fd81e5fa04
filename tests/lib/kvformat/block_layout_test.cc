// Static layout facts: offsets from block_layout.h tile the payload exactly as PayloadBytes says.
#include "lib/kvformat/block_layout.h"

#include <gtest/gtest.h>

#include <vector>

namespace oscarkv::kvformat {
namespace {

// Compile-time checks: the header stays usable in constant expressions (kernels rely on it).
constexpr BlockLayout kOscar128{CodecId::kOscar, BlockKind::kQuantized, 2, 8, 128, 64};
static_assert(kOscar128.payload_bytes() ==
              PayloadBytes(CodecId::kOscar, BlockKind::kQuantized, 2, 8, 128, 64));
static_assert(kOscar128.SegmentOffset(0, KvSide::kK, 0) == 0);
static_assert(kOscar128.SegmentOffset(0, KvSide::kV, 0) == 8 * (64 * 32 + 64 * 4));
static_assert(kOscar128.ParamsOffset(0, KvSide::kK, 1) == (64 * 32 + 64 * 4) + 64 * 32);
constexpr BlockLayout kTns{CodecId::kOscarTns, BlockKind::kQuantized, 2, 4, 64, 64};
static_assert(kTns.TokenNormsOffset(1) == kTns.layer_bytes());
static_assert(kTns.SegmentOffset(1, KvSide::kK, 0) == kTns.layer_bytes() + 64 * 4);
static_assert(ChannelGroupBytes(128) == 128 * 8 + 128 * 4);

const CodecId kAllCodecs[] = {CodecId::kBf16,          CodecId::kInt2Naive,
                              CodecId::kInt2Hadamard,  CodecId::kOscarHadamardClip,
                              CodecId::kOscarNoRotation, CodecId::kOscarGram,
                              CodecId::kOscar,         CodecId::kKivi2,
                              CodecId::kOscarTns};

// Checks that the pieces inside one segment cover [0, SegmentBytes) exactly once, in order.
void ExpectSegmentTiles(SegmentKind kind, int t, int d) {
  const size_t seg = SegmentBytes(kind, t, d);
  switch (kind) {
    case SegmentKind::kBf16Rows:
      EXPECT_EQ(SegmentCodesOffset(kind, t, d), 0u);
      EXPECT_EQ(SegmentParamsOffset(kind, t, d), seg);
      EXPECT_EQ(SegmentParamCount(kind, t, d), 0u);
      break;
    case SegmentKind::kInt2PerToken:
    case SegmentKind::kInt2TokenGroup: {
      EXPECT_EQ(SegmentCodesOffset(kind, t, d), 0u);
      const size_t codes = static_cast<size_t>(t) * d / 4;  // 2 bits per element
      EXPECT_EQ(SegmentParamsOffset(kind, t, d), codes);
      const size_t groups_per_token = kind == SegmentKind::kInt2PerToken ? 1 : d / 32;
      EXPECT_EQ(SegmentParamCount(kind, t, d), static_cast<size_t>(t) * groups_per_token);
      EXPECT_EQ(codes + SegmentParamCount(kind, t, d) * sizeof(Int2Params), seg);
      break;
    }
    case SegmentKind::kInt2ChannelGroup: {
      size_t cursor = 0;
      for (int g = 0; g < t / 32; ++g) {
        EXPECT_EQ(SegmentCodesOffset(kind, t, d, g), cursor);
        cursor += static_cast<size_t>(d) * 8;  // 32 tokens x 2 bits per channel
        EXPECT_EQ(SegmentParamsOffset(kind, t, d, g), cursor);
        cursor += static_cast<size_t>(d) * sizeof(Int2Params);
      }
      EXPECT_EQ(cursor, seg);
      EXPECT_EQ(SegmentParamCount(kind, t, d), static_cast<size_t>(t / 32) * d);
      break;
    }
  }
}

TEST(BlockLayout, SegmentsTileThePayloadForEveryCodecAndShape) {
  for (CodecId codec : kAllCodecs) {
    for (BlockKind kind : {BlockKind::kBf16, BlockKind::kQuantized}) {
      for (int d : {64, 128}) {
        for (int t : {32, 64, 128}) {
          for (int h : {1, 2, 8}) {
            for (int l : {1, 3}) {
              SCOPED_TRACE(testing::Message() << "codec " << static_cast<int>(codec) << " kind "
                                              << static_cast<int>(kind) << " D" << d << " T" << t
                                              << " H" << h << " L" << l);
              const BlockLayout lay{codec, kind, l, h, d, t};
              ASSERT_EQ(lay.payload_bytes(), PayloadBytes(codec, kind, l, h, d, t));
              size_t cursor = 0;
              for (int layer = 0; layer < l; ++layer) {
                EXPECT_EQ(lay.LayerOffset(layer), cursor);
                if (lay.has_token_norms()) {
                  EXPECT_EQ(lay.TokenNormsOffset(layer), cursor);
                  cursor += static_cast<size_t>(t) * 4;
                }
                for (KvSide side : {KvSide::kK, KvSide::kV}) {
                  for (int head = 0; head < h; ++head) {
                    EXPECT_EQ(lay.SegmentOffset(layer, side, head), cursor);
                    EXPECT_EQ(lay.CodesOffset(layer, side, head),
                              cursor + SegmentCodesOffset(lay.segment_kind(side), t, d));
                    EXPECT_EQ(lay.ParamsOffset(layer, side, head),
                              cursor + SegmentParamsOffset(lay.segment_kind(side), t, d));
                    cursor += lay.segment_bytes(side);
                  }
                }
              }
              EXPECT_EQ(cursor, lay.payload_bytes());
              ExpectSegmentTiles(lay.k_kind(), t, d);
              ExpectSegmentTiles(lay.v_kind(), t, d);
            }
          }
        }
      }
    }
  }
}

TEST(BlockLayout, Bf16BlocksHoldBf16RowsWhateverTheCodec) {
  for (CodecId codec : kAllCodecs) {
    EXPECT_EQ(SegmentKindOf(codec, BlockKind::kBf16, KvSide::kK), SegmentKind::kBf16Rows);
    EXPECT_EQ(SegmentKindOf(codec, BlockKind::kBf16, KvSide::kV), SegmentKind::kBf16Rows);
    EXPECT_FALSE(BlockHasTokenNorms(codec, BlockKind::kBf16));
    EXPECT_EQ(BlockHasTokenNorms(codec, BlockKind::kQuantized), codec == CodecId::kOscarTns);
  }
}

TEST(BlockLayout, EffectiveBitsPerElement) {
  // Per-token INT2: 2 bits + 32 bits of params per D elements.
  for (CodecId c : {CodecId::kInt2Naive, CodecId::kInt2Hadamard, CodecId::kOscarHadamardClip,
                    CodecId::kOscarNoRotation, CodecId::kOscarGram, CodecId::kOscar}) {
    EXPECT_DOUBLE_EQ(EffectiveBitsPerElement(c, BlockKind::kQuantized, 8, 64, 64), 2.5);
    EXPECT_DOUBLE_EQ(EffectiveBitsPerElement(c, BlockKind::kQuantized, 8, 128, 64), 2.25);
  }
  // Groups of 32 elements (channel groups for K, token groups for V): 2 + 32/32 bits.
  EXPECT_DOUBLE_EQ(EffectiveBitsPerElement(CodecId::kKivi2, BlockKind::kQuantized, 8, 64, 64), 3);
  EXPECT_DOUBLE_EQ(EffectiveBitsPerElement(CodecId::kKivi2, BlockKind::kQuantized, 8, 128, 64),
                   3);
  // OScaR adds one f32 norm per token per layer, shared by H heads x D x (K and V).
  for (int h : {1, 8}) {
    for (int d : {64, 128}) {
      EXPECT_DOUBLE_EQ(EffectiveBitsPerElement(CodecId::kOscarTns, BlockKind::kQuantized, h, d, 64),
                       3.0 + 32.0 / (2.0 * h * d));
    }
  }
  for (CodecId c : kAllCodecs) {
    EXPECT_DOUBLE_EQ(EffectiveBitsPerElement(c, BlockKind::kBf16, 8, 128, 64), 16);
  }
}

}  // namespace
}  // namespace oscarkv::kvformat
