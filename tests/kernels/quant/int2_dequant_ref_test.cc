// Tests of the per-token INT2 dequantisation reference (kernels/quant/int2_dequant.h): on segments
// written by KvQuantRef from random rows, every row equals quant::DecodePerTokenRow (the CPU
// cache's decode, the production CPU path) bit for bit, with heads' segments and output rows at
// padded strides whose padding must stay untouched.
#include "kernels/quant/int2_dequant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/kvformat/block_layout.h"
#include "lib/kvformat/int2_block.h"
#include "tests/kernels/int2_test_rows.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::kernels {
namespace {

using ::oscarkv::kernels::testing::Int2TestRows;

using kvformat::Int2Params;
using kvformat::SegmentKind;

constexpr uint32_t kPoisonBits = 0xffffffffu;  // a NaN: no dequantised value has these bits

struct DequantCase {
  int tokens, heads, head_dim;
  bool padded;  // segments and output rows with padding between them
};

class DequantInt2RefTest : public ::testing::TestWithParam<DequantCase> {};

TEST_P(DequantInt2RefTest, EqualsDecodePerTokenRow) {
  const DequantCase c = GetParam();
  const int d = c.head_dim;
  const size_t seg_bytes = kvformat::SegmentBytes(SegmentKind::kInt2PerToken, c.tokens, d);
  const int64_t seg_stride = static_cast<int64_t>(seg_bytes) + (c.padded ? 12 : 0);
  const int64_t out_stride = static_cast<int64_t>(c.heads) * d + (c.padded ? 5 : 0);
  const auto rows = Int2TestRows(c.tokens, c.heads, d, 100 + c.tokens * 7 + c.heads + d);

  KvQuantParams qp;
  qp.input_f32 = rows.data();
  qp.tokens = c.tokens;
  qp.heads = c.heads;
  qp.head_dim = d;
  qp.kind = SegmentKind::kInt2PerToken;
  qp.output_head_stride = seg_stride;
  std::vector<uint8_t> segments(static_cast<size_t>(seg_stride) * c.heads, 0xa5);
  qp.output = segments.data();
  ASSERT_EQ(KvQuantRef(qp), KvQuantStatus::kOk);

  DequantInt2Params p;
  p.segments = segments.data();
  p.segment_head_stride = seg_stride;
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = d;
  std::vector<float> out(static_cast<size_t>(out_stride) * c.tokens);
  for (float& v : out) std::memcpy(&v, &kPoisonBits, 4);
  p.out = out.data();
  p.out_row_stride = out_stride;
  DequantInt2PerTokenRef(p);

  const size_t params_at = kvformat::SegmentParamsOffset(SegmentKind::kInt2PerToken, c.tokens, d);
  std::vector<float> want(d);
  size_t zero_scales = 0;
  for (int t = 0; t < c.tokens; ++t) {
    for (int h = 0; h < c.heads; ++h) {
      const uint8_t* segment = segments.data() + h * seg_stride;
      Int2Params params;
      std::memcpy(&params, segment + params_at + t * sizeof(Int2Params), sizeof(params));
      zero_scales += params.scale_fp16 == 0;
      quant::DecodePerTokenRow(segment + static_cast<size_t>(t) * (d / 4), params, d, want.data());
      const float* got = out.data() + t * out_stride + static_cast<int64_t>(h) * d;
      ASSERT_EQ(std::memcmp(got, want.data(), sizeof(float) * d), 0) << "t=" << t << " h=" << h;
    }
    for (int64_t i = static_cast<int64_t>(c.heads) * d; i < out_stride; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &out[t * out_stride + i], 4);
      ASSERT_EQ(bits, kPoisonBits) << "row padding written at t=" << t << " i=" << i;
    }
  }
  // The constant row really exercised a zero scale (every code decodes to min).
  if (c.tokens * c.heads > 2) {
    EXPECT_GE(zero_scales, 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DequantInt2RefTest,
    ::testing::Values(DequantCase{1, 3, 64, false}, DequantCase{1, 8, 128, true},
                      DequantCase{7, 3, 128, true}, DequantCase{7, 8, 64, false},
                      DequantCase{64, 3, 64, true}, DequantCase{64, 8, 128, false},
                      DequantCase{256, 3, 128, false}, DequantCase{256, 8, 64, true}));

// The reference reads the layout KvQuantRef writes: a round trip lands within half a quantisation
// step (scale / 2, plus fp16 rounding of min) of the input for every element.
TEST(DequantInt2Ref, RoundTripIsWithinHalfAStep) {
  const int tokens = 9, heads = 2, d = 64;
  const auto rows = Int2TestRows(tokens, heads, d, 7);
  KvQuantParams qp;
  qp.input_f32 = rows.data();
  qp.tokens = tokens;
  qp.heads = heads;
  qp.head_dim = d;
  qp.kind = SegmentKind::kInt2PerToken;
  const size_t seg_bytes = kvformat::SegmentBytes(SegmentKind::kInt2PerToken, tokens, d);
  std::vector<uint8_t> segments(seg_bytes * heads);
  qp.output = segments.data();
  ASSERT_EQ(KvQuantRef(qp), KvQuantStatus::kOk);
  DequantInt2Params p;
  p.segments = segments.data();
  p.segment_head_stride = static_cast<int64_t>(seg_bytes);
  p.tokens = tokens;
  p.heads = heads;
  p.head_dim = d;
  std::vector<float> out(rows.size());
  p.out = out.data();
  p.out_row_stride = heads * d;
  DequantInt2PerTokenRef(p);
  for (int r = 0; r < tokens * heads; ++r) {
    const float* x = rows.data() + static_cast<size_t>(r) * d;
    float mn = x[0], mx = x[0];
    for (int i = 1; i < d; ++i) {
      mn = std::min(mn, x[i]);
      mx = std::max(mx, x[i]);
    }
    const float step = (mx - mn) / 3.0f;
    for (int i = 0; i < d; ++i) {
      const float tol = 0.5f * step * 1.01f + std::abs(mn) * 1e-3f + 1e-6f;
      ASSERT_NEAR(out[static_cast<size_t>(r) * d + i], x[i], tol) << "row " << r << " ch " << i;
    }
  }
}

}  // namespace
}  // namespace oscarkv::kernels
