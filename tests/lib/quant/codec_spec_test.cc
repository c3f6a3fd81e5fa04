// Tests of the codec table (lib/quant/codec_spec.h): names, properties, bits per element
// (quant.md E.2 (vi): bits computed from bytes actually allocated vs the formula).
#include "lib/quant/codec_spec.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace oscarkv::quant {
namespace {

using kvformat::CodecId;
using kvformat::SegmentKind;
using ::testing::HasSubstr;

TEST(CodecSpec, EveryNameRoundTripsAndIdsAreDense) {
  std::set<std::string_view> names;
  ASSERT_EQ(AllCodecs().size(), static_cast<size_t>(kvformat::kNumCodecs));
  for (size_t i = 0; i < AllCodecs().size(); ++i) {
    const CodecSpec& s = AllCodecs()[i];
    EXPECT_EQ(static_cast<size_t>(s.id), i);
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    auto found = FindCodec(s.name);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(*found, &s);
    EXPECT_EQ(&GetCodecSpec(s.id), &s);
    EXPECT_EQ(*FindCodecById(static_cast<uint16_t>(i)), &s);
    EXPECT_EQ(s.paper_id, "M" + std::to_string(i));
    EXPECT_EQ(s.k_segment, kvformat::KSegmentKind(s.id));
    EXPECT_EQ(s.v_segment, kvformat::VSegmentKind(s.id));
  }
  EXPECT_EQ((*FindCodec(kDefaultCodecName))->id, CodecId::kOscar);
}

TEST(CodecSpec, UnknownNameListsValidNames) {
  auto r = FindCodec("oscar2");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("oscar2"));
  for (const CodecSpec& s : AllCodecs()) {
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(std::string(s.name)));
  }
  EXPECT_FALSE(FindCodecById(kvformat::kNumCodecs).ok());
}

// Serving needs BF16 windows around a per-token INT2 history (or no INT2 at all); the rest are
// evaluation-only.
TEST(CodecSpec, ServableCodecsAreBf16AndTheWindowedPerTokenOnes) {
  EXPECT_EQ(ServableCodecNames(), (std::vector<std::string>{"bf16", "oscar-hadamard",
                                                           "oscar-norot", "oscar-gram", "oscar"}));
  for (const char* name : {"int2-naive", "int2-hadamard", "kivi2", "oscar-tns"}) {
    EXPECT_FALSE(Servable(**FindCodec(name))) << name;
  }
}

TEST(CodecSpec, PropertiesFollowQuantMd) {
  const CodecSpec& oscar = GetCodecSpec(CodecId::kOscar);
  EXPECT_EQ(oscar.rotation, RotationKind::kCalibratedAttention);
  EXPECT_FLOAT_EQ(oscar.k_clip_ratio, 0.96f);
  EXPECT_FLOAT_EQ(oscar.v_clip_ratio, 0.92f);
  EXPECT_EQ(oscar.sink_tokens, 64);
  EXPECT_EQ(oscar.recent_tokens, 256);
  EXPECT_TRUE(oscar.needs_calibration);
  EXPECT_EQ(oscar.k_objective, "qqt");
  EXPECT_EQ(oscar.v_objective, "sst");
  EXPECT_EQ(GetCodecSpec(CodecId::kOscarGram).k_objective, "ktk");
  EXPECT_EQ(GetCodecSpec(CodecId::kOscarGram).rotation, RotationKind::kCalibratedGram);
  EXPECT_EQ(GetCodecSpec(CodecId::kOscarHadamardClip).rotation, RotationKind::kHadamard);
  EXPECT_EQ(GetCodecSpec(CodecId::kOscarNoRotation).rotation, RotationKind::kNone);
  EXPECT_FLOAT_EQ(GetCodecSpec(CodecId::kOscarNoRotation).k_clip_ratio, 0.96f);
  for (CodecId id : {CodecId::kInt2Naive, CodecId::kInt2Hadamard, CodecId::kKivi2,
                     CodecId::kOscarTns}) {
    EXPECT_EQ(GetCodecSpec(id).k_clip_ratio, 1.0f);
    EXPECT_EQ(GetCodecSpec(id).sink_tokens, 0);
    EXPECT_FALSE(GetCodecSpec(id).needs_calibration);
  }
  EXPECT_EQ(GetCodecSpec(CodecId::kKivi2).residual_tokens, 128);
  EXPECT_EQ(GetCodecSpec(CodecId::kOscarTns).residual_tokens, 256);
  EXPECT_TRUE(GetCodecSpec(CodecId::kOscarTns).token_norms);
  EXPECT_EQ(GetCodecSpec(CodecId::kOscarTns).rotation, RotationKind::kHadamard);
}

TEST(CodecSpec, BitsPerElementFromAllocatedBytesMatchFormula) {
  for (int d : {64, 128}) {
    for (int t : {32, 64, 128}) {
      // Per-token: 2 bits + one 32-bit (fp16 scale, fp16 min) pair per row of d.
      EXPECT_DOUBLE_EQ(SegmentBitsPerElement(SegmentKind::kInt2PerToken, t, d), 2.0 + 32.0 / d);
      // Groups of 32 (channels or tokens): 2 + 32/32 = 3 bits.
      EXPECT_DOUBLE_EQ(SegmentBitsPerElement(SegmentKind::kInt2TokenGroup, t, d), 3.0);
      EXPECT_DOUBLE_EQ(SegmentBitsPerElement(SegmentKind::kInt2ChannelGroup, t, d), 3.0);
      EXPECT_DOUBLE_EQ(SegmentBitsPerElement(SegmentKind::kBf16Rows, t, d), 16.0);
      for (int h : {1, 3, 8}) {
        EXPECT_DOUBLE_EQ(BlockBitsPerElement(GetCodecSpec(CodecId::kOscar), h, d, t),
                         2.0 + 32.0 / d);
        EXPECT_DOUBLE_EQ(BlockBitsPerElement(GetCodecSpec(CodecId::kBf16), h, d, t), 16.0);
        EXPECT_DOUBLE_EQ(BlockBitsPerElement(GetCodecSpec(CodecId::kKivi2), h, d, t), 3.0);
        // OScaR: 3 bits + one f32 norm per token shared by H heads' K and V (2*H*d elements).
        EXPECT_DOUBLE_EQ(BlockBitsPerElement(GetCodecSpec(CodecId::kOscarTns), h, d, t),
                         3.0 + 32.0 / (2.0 * h * d));
      }
    }
  }
  EXPECT_DOUBLE_EQ(SegmentBitsPerElement(SegmentKind::kInt2PerToken, 64, 128), 2.25);
}

}  // namespace
}  // namespace oscarkv::quant
