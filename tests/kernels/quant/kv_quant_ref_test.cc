// Tests of the CPU reference codecs (kernels/quant/kv_quant_ref.h) against float64 references:
// quant.md E.2 "Codec unit tests" (i) threshold, (ii) quant/dequant within budget, (iii) packing.
#include "kernels/quant/kv_quant_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/kvformat/float16.h"
#include "lib/kvformat/int2_block.h"

namespace oscarkv::kernels {
namespace {

using kvformat::Int2Params;
using kvformat::SegmentBytes;
using kvformat::SegmentKind;

// Error budget of the INT2 quantizer against a float64 reference quantizer with exact (unrounded)
// scale and min (quant.md E.2 (ii), as in test_oscar_rotation_clip_int2.py): per element
// |x_hat - x_hat_ref| <= kAtol * range + kRtol * |x_hat_ref|, where range = max - min of the group,
// except where x sits within fp16 param-rounding distance of a decision boundary (a legitimate
// code flip); such flips must stay below kMaxFlipFraction of all elements.
constexpr double kAtol = 2e-2;
constexpr double kRtol = 5e-2;
constexpr double kMaxFlipFraction = 0.01;

// Heavy-tailed rows: Student-t(3)-like values plus a few large outlier channels, like post-RoPE K.
std::vector<float> HeavyTailed(int n, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> t3(3.0f);
  std::vector<float> out(static_cast<size_t>(n) * d);
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < d; ++i) {
      float v = t3(rng);
      if (i % 17 == 3) v = v * 6.0f + 4.0f;  // outlier channels with an offset
      out[static_cast<size_t>(r) * d + i] = v;
    }
  }
  return out;
}

struct RefGroup {
  double mn, scale;
};
RefGroup RefParams(const std::vector<double>& g) {
  const auto [lo, hi] = std::minmax_element(g.begin(), g.end());
  return {*lo, std::max(*hi - *lo, 1e-8) / 3.0};
}

// Checks one group of values: `x` original, `got` our dequantized values.
void CheckGroup(const std::vector<double>& x, const std::vector<double>& got, int* flips,
                int* total) {
  const RefGroup p = RefParams(x);
  const double range = 3.0 * p.scale;
  // Param rounding to fp16 moves every decision boundary by at most this much (in code units).
  const double margin = std::ldexp(1.0, -10) * (std::fabs(p.mn) / p.scale + 4.0);
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = (x[i] - p.mn) / p.scale;
    const double q = std::clamp(std::floor(u + 0.5), 0.0, 3.0);
    const double ref = q * p.scale + p.mn;
    ++*total;
    const double frac = u + 0.5 - std::floor(u + 0.5);  // distance past the boundary below
    const bool near_boundary = frac < margin || frac > 1.0 - margin;
    if (std::fabs(got[i] - ref) <= kAtol * range + kRtol * std::fabs(ref)) continue;
    ASSERT_TRUE(near_boundary) << "element " << i << " x=" << x[i] << " got=" << got[i]
                               << " ref=" << ref << " range=" << range;
    ++*flips;
  }
}

TEST(ClipThreshold, EqualsSortedAbsAtIndex) {
  for (int d : {64, 128}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      const std::vector<float> x = HeavyTailed(1, d, seed);
      std::vector<float> sorted(d);
      for (int i = 0; i < d; ++i) sorted[i] = std::fabs(x[i]);
      std::sort(sorted.begin(), sorted.end());
      std::vector<float> scratch(d);
      for (float r : {0.5f, 0.92f, 0.96f, 0.999f, 1.0f, 1.5f}) {
        const int idx = std::min(static_cast<int>(r * d), d - 1);
        EXPECT_EQ(ClipIndex(r, d), idx);
        EXPECT_EQ(ClipThreshold(x.data(), d, r, scratch.data()), sorted[idx]) << "r=" << r;
      }
    }
  }
  EXPECT_EQ(ClipIndex(0.96f, 128), 122);  // quant.md A.4: idx 122 for K, 117 for V at d = 128
  EXPECT_EQ(ClipIndex(0.92f, 128), 117);
}

TEST(ClipRow, ClampsToThresholdAndKeepsTheRest) {
  const int d = 128;
  std::vector<float> x = HeavyTailed(1, d, 7);
  const std::vector<float> orig = x;
  std::vector<float> scratch(d);
  const float tau = ClipThreshold(x.data(), d, 0.96f, scratch.data());
  ClipRow(x.data(), d, 0.96f, scratch.data());
  int clipped = 0;
  for (int i = 0; i < d; ++i) {
    EXPECT_LE(std::fabs(x[i]), tau);
    if (x[i] != orig[i]) {
      ++clipped;
      EXPECT_EQ(std::fabs(x[i]), tau);
    }
  }
  EXPECT_LE(clipped, d - 1 - 122);  // at most the 5 values above index 122
  std::vector<float> y = orig;
  ClipRow(y.data(), d, 1.0f, scratch.data());
  EXPECT_EQ(y, orig);
}

TEST(QuantizeInt2, QuantizesAgainstStoredFp16Params) {
  const float x[4] = {-1.3f, 0.1f, 0.7f, 2.2f};
  const Int2Params p = ComputeInt2Params(x, 4);
  EXPECT_EQ(p.min_fp16, kvformat::FloatToHalfBits(-1.3f));
  EXPECT_EQ(p.scale_fp16, kvformat::FloatToHalfBits((2.2f + 1.3f) / 3.0f));
  const float s = kvformat::HalfBitsToFloat(p.scale_fp16);
  const float m = kvformat::HalfBitsToFloat(p.min_fp16);
  for (float v : x) {
    const uint8_t q = QuantizeInt2(v, p);
    EXPECT_EQ(q, static_cast<uint8_t>(std::clamp(std::floor((v - m) / s + 0.5f), 0.0f, 3.0f)));
    EXPECT_EQ(DequantizeInt2(q, p), q * s + m);
  }
  // A constant group: scale rounds to 0 in fp16, every value decodes to the min.
  const float c[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  const Int2Params pc = ComputeInt2Params(c, 4);
  EXPECT_EQ(QuantizeInt2(0.5f, pc), 0);
  EXPECT_EQ(DequantizeInt2(0, pc), 0.5f);
}

class SegmentTest : public ::testing::TestWithParam<std::tuple<SegmentKind, int, uint32_t>> {};

TEST_P(SegmentTest, DequantizedWithinBudgetOfFloat64Reference) {
  const auto [kind, d, seed] = GetParam();
  const int tokens = 64;
  const std::vector<float> x = HeavyTailed(tokens, d, seed);
  std::vector<uint8_t> seg(SegmentBytes(kind, tokens, d), 0xAB);
  ASSERT_EQ(EncodeSegment(kind, x.data(), tokens, d, d, seg.data()), KvQuantStatus::kOk);
  std::vector<float> y(x.size(), NAN);
  ASSERT_EQ(DecodeSegment(kind, seg.data(), tokens, d, y.data(), d), KvQuantStatus::kOk);
  int flips = 0;
  int total = 0;
  auto at = [d = d](int t, int c) { return static_cast<size_t>(t) * d + c; };
  if (kind == SegmentKind::kInt2PerToken || kind == SegmentKind::kInt2TokenGroup) {
    const int g = kind == SegmentKind::kInt2PerToken ? d : 32;
    for (int t = 0; t < tokens; ++t) {
      for (int c0 = 0; c0 < d; c0 += g) {
        std::vector<double> xs, ys;
        for (int c = c0; c < c0 + g; ++c) {
          xs.push_back(x[at(t, c)]);
          ys.push_back(y[at(t, c)]);
        }
        CheckGroup(xs, ys, &flips, &total);
      }
    }
  } else {
    for (int t0 = 0; t0 < tokens; t0 += 32) {
      for (int c = 0; c < d; ++c) {
        std::vector<double> xs, ys;
        for (int t = t0; t < t0 + 32; ++t) {
          xs.push_back(x[at(t, c)]);
          ys.push_back(y[at(t, c)]);
        }
        CheckGroup(xs, ys, &flips, &total);
      }
    }
  }
  EXPECT_LE(flips, kMaxFlipFraction * total);
  EXPECT_EQ(total, tokens * d);
}

TEST_P(SegmentTest, ReconstructionErrorAtMostHalfStep) {
  const auto [kind, d, seed] = GetParam();
  const int tokens = 64;
  const std::vector<float> x = HeavyTailed(tokens, d, seed + 100);
  std::vector<uint8_t> seg(SegmentBytes(kind, tokens, d));
  ASSERT_EQ(EncodeSegment(kind, x.data(), tokens, d, d, seg.data()), KvQuantStatus::kOk);
  std::vector<float> y(x.size());
  ASSERT_EQ(DecodeSegment(kind, seg.data(), tokens, d, y.data(), d), KvQuantStatus::kOk);
  // Row (or channel) range bounds the step; fp16 params add at most ~2^-11 relative to |min|.
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < d; ++c) {
      const size_t i = static_cast<size_t>(t) * d + c;
      double lo = x[i], hi = x[i];
      if (kind == SegmentKind::kInt2ChannelGroup) {
        for (int u = t / 32 * 32; u < t / 32 * 32 + 32; ++u) {
          lo = std::min<double>(lo, x[static_cast<size_t>(u) * d + c]);
          hi = std::max<double>(hi, x[static_cast<size_t>(u) * d + c]);
        }
      } else {
        const int g = kind == SegmentKind::kInt2PerToken ? d : 32;
        for (int e = c / g * g; e < c / g * g + g; ++e) {
          lo = std::min<double>(lo, x[static_cast<size_t>(t) * d + e]);
          hi = std::max<double>(hi, x[static_cast<size_t>(t) * d + e]);
        }
      }
      const double step = (hi - lo) / 3.0;
      EXPECT_LE(std::fabs(y[i] - x[i]), 0.5 * step * 1.01 + std::ldexp(std::fabs(lo) + hi - lo, -10))
          << "t=" << t << " c=" << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllInt2Kinds, SegmentTest,
    ::testing::Combine(::testing::Values(SegmentKind::kInt2PerToken, SegmentKind::kInt2TokenGroup,
                                         SegmentKind::kInt2ChannelGroup),
                       ::testing::Values(64, 128), ::testing::Values(11u, 12u, 13u)));

TEST(PackQuartered, ByteJHoldsElementsJAndQuarterOffsets) {
  for (int n : {8, 32, 64, 128}) {
    std::mt19937 rng(n);
    std::vector<uint8_t> codes(n);
    for (auto& c : codes) c = static_cast<uint8_t>(rng() & 3u);
    std::vector<uint8_t> packed(n / 4);
    PackQuartered(codes.data(), n, packed.data());
    const int m = n / 4;
    for (int j = 0; j < m; ++j) {
      EXPECT_EQ(packed[j] & 3, codes[j]);
      EXPECT_EQ((packed[j] >> 2) & 3, codes[j + m]);
      EXPECT_EQ((packed[j] >> 4) & 3, codes[j + 2 * m]);
      EXPECT_EQ((packed[j] >> 6) & 3, codes[j + 3 * m]);
    }
    std::vector<uint8_t> back(n);
    UnpackQuartered(packed.data(), n, back.data());
    EXPECT_EQ(back, codes);
  }
}

// Rows whose values are exactly code * scale + min with fp16-exact scale/min and every group
// containing codes 0 and 3: the encoder must reproduce the planted codes and params bit-exactly.
TEST(EncodeSegment, PerTokenLayoutIsCodesThenParams) {
  for (int d : {64, 128}) {
    const int tokens = 8;
    std::mt19937 rng(d);
    std::vector<uint8_t> codes(tokens * d);
    std::vector<float> x(tokens * d);
    for (int t = 0; t < tokens; ++t) {
      const float scale = 0.25f * (t + 1);
      const float mn = -1.5f + t;
      for (int i = 0; i < d; ++i) {
        uint8_t c = static_cast<uint8_t>(rng() & 3u);
        if (i == 5) c = 0;
        if (i == 9) c = 3;
        codes[t * d + i] = c;
        x[t * d + i] = c * scale + mn;
      }
    }
    std::vector<uint8_t> seg(SegmentBytes(SegmentKind::kInt2PerToken, tokens, d));
    ASSERT_EQ(EncodeSegment(SegmentKind::kInt2PerToken, x.data(), tokens, d, d, seg.data()),
              KvQuantStatus::kOk);
    const int m = d / 4;
    for (int t = 0; t < tokens; ++t) {
      for (int j = 0; j < m; ++j) {
        const uint8_t* c = &codes[t * d];
        EXPECT_EQ(seg[t * m + j], kvformat::PackCrumbs(c[j], c[j + m], c[j + 2 * m], c[j + 3 * m]));
      }
      Int2Params p;
      std::memcpy(&p, &seg[tokens * m + 4 * t], 4);
      EXPECT_EQ(p.scale_fp16, kvformat::FloatToHalfBits(0.25f * (t + 1)));
      EXPECT_EQ(p.min_fp16, kvformat::FloatToHalfBits(-1.5f + t));
    }
    std::vector<float> y(x.size());
    ASSERT_EQ(DecodeSegment(SegmentKind::kInt2PerToken, seg.data(), tokens, d, y.data(), d),
              KvQuantStatus::kOk);
    EXPECT_EQ(y, x);  // exact levels round-trip exactly
  }
}

TEST(EncodeSegment, TokenGroupParamsPerThirtyTwoChannels) {
  const int d = 128;
  const int tokens = 4;
  std::mt19937 rng(5);
  std::vector<float> x(tokens * d);
  std::vector<uint8_t> codes(tokens * d);
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < d; ++i) {
      const int g = i / 32;
      uint8_t c = static_cast<uint8_t>(rng() & 3u);
      if (i % 32 == 0) c = 0;
      if (i % 32 == 1) c = 3;
      codes[t * d + i] = c;
      x[t * d + i] = c * (0.5f * (g + 1)) + (g - 2.0f);
    }
  }
  std::vector<uint8_t> seg(SegmentBytes(SegmentKind::kInt2TokenGroup, tokens, d));
  ASSERT_EQ(EncodeSegment(SegmentKind::kInt2TokenGroup, x.data(), tokens, d, d, seg.data()),
            KvQuantStatus::kOk);
  const int m = d / 4;
  for (int t = 0; t < tokens; ++t) {
    for (int j = 0; j < m; ++j) {
      const uint8_t* c = &codes[t * d];
      EXPECT_EQ(seg[t * m + j], kvformat::PackCrumbs(c[j], c[j + m], c[j + 2 * m], c[j + 3 * m]));
    }
    for (int g = 0; g < d / 32; ++g) {
      Int2Params p;
      std::memcpy(&p, &seg[tokens * m + 4 * (t * (d / 32) + g)], 4);
      EXPECT_EQ(p.scale_fp16, kvformat::FloatToHalfBits(0.5f * (g + 1)));
      EXPECT_EQ(p.min_fp16, kvformat::FloatToHalfBits(g - 2.0f));
    }
  }
}

TEST(EncodeSegment, ChannelGroupLayoutPerThirtyTwoTokens) {
  for (int d : {64, 128}) {
    const int tokens = 64;
    std::mt19937 rng(d + 1);
    std::vector<float> x(tokens * d);
    std::vector<uint8_t> codes(tokens * d);
    for (int t = 0; t < tokens; ++t) {
      for (int c = 0; c < d; ++c) {
        uint8_t q = static_cast<uint8_t>(rng() & 3u);
        if (t % 32 == 2) q = 0;
        if (t % 32 == 7) q = 3;
        codes[t * d + c] = q;
        const int g = t / 32;
        x[t * d + c] = q * (0.125f * (c % 5 + 1)) + (g - 0.5f * c / 8);
      }
    }
    std::vector<uint8_t> seg(SegmentBytes(SegmentKind::kInt2ChannelGroup, tokens, d));
    ASSERT_EQ(EncodeSegment(SegmentKind::kInt2ChannelGroup, x.data(), tokens, d, d, seg.data()),
              KvQuantStatus::kOk);
    const size_t group_bytes = d * 8 + d * 4;
    for (int g = 0; g < tokens / 32; ++g) {
      for (int c = 0; c < d; ++c) {
        for (int j = 0; j < 8; ++j) {
          auto code = [&](int k) { return codes[(g * 32 + j + 8 * k) * d + c]; };
          EXPECT_EQ(seg[g * group_bytes + c * 8 + j],
                    kvformat::PackCrumbs(code(0), code(1), code(2), code(3)));
        }
        Int2Params p;
        std::memcpy(&p, &seg[g * group_bytes + d * 8 + 4 * c], 4);
        EXPECT_EQ(p.scale_fp16, kvformat::FloatToHalfBits(0.125f * (c % 5 + 1)));
        EXPECT_EQ(p.min_fp16, kvformat::FloatToHalfBits(g - 0.5f * c / 8));
      }
    }
    std::vector<float> y(x.size());
    ASSERT_EQ(DecodeSegment(SegmentKind::kInt2ChannelGroup, seg.data(), tokens, d, y.data(), d),
              KvQuantStatus::kOk);
    EXPECT_EQ(y, x);
  }
}

TEST(EncodeSegment, Bf16RowsRoundTripBf16Values) {
  const int d = 64, tokens = 3;
  std::vector<float> x = HeavyTailed(tokens, d, 9);
  for (float& v : x) v = kvformat::RoundToBf16(v);
  std::vector<uint8_t> seg(SegmentBytes(SegmentKind::kBf16Rows, tokens, d));
  ASSERT_EQ(EncodeSegment(SegmentKind::kBf16Rows, x.data(), tokens, d, d, seg.data()),
            KvQuantStatus::kOk);
  std::vector<float> y(x.size());
  ASSERT_EQ(DecodeSegment(SegmentKind::kBf16Rows, seg.data(), tokens, d, y.data(), d),
            KvQuantStatus::kOk);
  EXPECT_EQ(y, x);
}

TEST(EncodeSegment, RejectsBadShapes) {
  std::vector<float> x(64 * 128);
  std::vector<uint8_t> out(1 << 16);
  EXPECT_EQ(EncodeSegment(SegmentKind::kInt2ChannelGroup, x.data(), 40, 128, 128, out.data()),
            KvQuantStatus::kBadShape);
  EXPECT_EQ(EncodeSegment(SegmentKind::kInt2PerToken, x.data(), 8, 48, 48, out.data()),
            KvQuantStatus::kBadShape);
  EXPECT_EQ(EncodeSegment(SegmentKind::kInt2PerToken, nullptr, 8, 64, 64, out.data()),
            KvQuantStatus::kNullPointer);
  EXPECT_EQ(EncodeSegment(static_cast<SegmentKind>(9), x.data(), 8, 64, 64, out.data()),
            KvQuantStatus::kBadSegmentKind);
}

// Random orthogonal matrix (QR-free: Gram-Schmidt in double) for the fused-path tests.
std::vector<float> RandomOrthogonal(int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n01;
  std::vector<double> m(static_cast<size_t>(d) * d);
  for (auto& v : m) v = n01(rng);
  for (int j = 0; j < d; ++j) {  // columns
    for (int k = 0; k < j; ++k) {
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += m[i * d + j] * m[i * d + k];
      for (int i = 0; i < d; ++i) m[i * d + j] -= dot * m[i * d + k];
    }
    double nrm = 0;
    for (int i = 0; i < d; ++i) nrm += m[i * d + j] * m[i * d + j];
    nrm = std::sqrt(nrm);
    for (int i = 0; i < d; ++i) m[i * d + j] /= nrm;
  }
  return std::vector<float>(m.begin(), m.end());
}

TEST(KvQuantRef, FusedEqualsStepByStepPipeline) {
  for (int d : {64, 128}) {
    for (SegmentKind kind : {SegmentKind::kInt2PerToken, SegmentKind::kInt2TokenGroup,
                             SegmentKind::kInt2ChannelGroup}) {
      const int tokens = 64, heads = 3;
      const std::vector<float> r = RandomOrthogonal(d, 21);
      std::vector<float> x = HeavyTailed(tokens * heads, d, 22);
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        xb[i] = kvformat::FloatToBf16Bits(x[i]);
        x[i] = kvformat::Bf16BitsToFloat(xb[i]);
      }
      const size_t seg = SegmentBytes(kind, tokens, d);
      std::vector<uint8_t> fused(seg * heads), fused_f32(seg * heads), manual(seg * heads);
      std::vector<float> norms(tokens);
      KvQuantParams p;
      p.input_bf16 = xb.data();
      p.rotation = r.data();
      p.output = fused.data();
      p.tokens = tokens;
      p.heads = heads;
      p.head_dim = d;
      p.kind = kind;
      p.clip_ratio = 0.92f;
      p.token_norms_out = norms.data();
      ASSERT_EQ(KvQuantRef(p), KvQuantStatus::kOk);
      p.input_bf16 = nullptr;
      p.input_f32 = x.data();
      p.output = fused_f32.data();
      ASSERT_EQ(KvQuantRef(p), KvQuantStatus::kOk);
      EXPECT_EQ(fused, fused_f32);

      // Step by step: rotate (double accumulation), norm over heads, clip, encode per head.
      std::vector<float> y(x.size());
      for (int row = 0; row < tokens * heads; ++row) {
        for (int j = 0; j < d; ++j) {
          double acc = 0;
          for (int i = 0; i < d; ++i) acc += static_cast<double>(x[row * d + i]) * r[i * d + j];
          y[row * d + j] = static_cast<float>(acc);
        }
      }
      std::vector<float> scratch(d);
      for (int t = 0; t < tokens; ++t) {
        double ss = 0;
        for (int i = 0; i < heads * d; ++i) ss += static_cast<double>(y[t * heads * d + i]) * y[t * heads * d + i];
        const float n = static_cast<float>(std::sqrt(ss));
        EXPECT_EQ(norms[t], n);
        // The rotation is orthogonal: the norm equals that of the unrotated token (to float eps).
        double ss0 = 0;
        for (int i = 0; i < heads * d; ++i) ss0 += static_cast<double>(x[t * heads * d + i]) * x[t * heads * d + i];
        EXPECT_NEAR(n, std::sqrt(ss0), 1e-4 * n);
        for (int i = 0; i < heads * d; ++i) y[t * heads * d + i] *= 1.0f / n;
        for (int h = 0; h < heads; ++h) ClipRow(&y[(t * heads + h) * d], d, 0.92f, scratch.data());
      }
      for (int h = 0; h < heads; ++h) {
        ASSERT_EQ(EncodeSegment(kind, &y[h * d], tokens, d, heads * d, &manual[h * seg]),
                  KvQuantStatus::kOk);
      }
      EXPECT_EQ(fused, manual) << "d=" << d << " kind=" << static_cast<int>(kind);
    }
  }
}

TEST(KvQuantRef, HonoursStridesAndRejectsBadArguments) {
  const int d = 64, tokens = 32, heads = 2, stride = heads * d + 16;
  std::vector<float> x = HeavyTailed(tokens, stride, 4);
  const size_t seg = SegmentBytes(SegmentKind::kInt2PerToken, tokens, d);
  std::vector<uint8_t> out(3 * seg, 0x5A);
  KvQuantParams p;
  p.input_f32 = x.data();
  p.input_token_stride = stride;
  p.output = out.data();
  p.output_head_stride = static_cast<ptrdiff_t>(seg + seg / 2);
  p.tokens = tokens;
  p.heads = heads;
  p.head_dim = d;
  ASSERT_EQ(KvQuantRef(p), KvQuantStatus::kOk);
  for (int h = 0; h < heads; ++h) {
    std::vector<uint8_t> want(seg);
    ASSERT_EQ(EncodeSegment(SegmentKind::kInt2PerToken, &x[h * d], tokens, d, stride, want.data()),
              KvQuantStatus::kOk);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), out.begin() + h * (seg + seg / 2)));
  }
  EXPECT_EQ(out[seg + 1], 0x5A);  // gap between the strided segments untouched
  p.clip_ratio = 0.0f;
  EXPECT_EQ(KvQuantRef(p), KvQuantStatus::kBadClipRatio);
  p.clip_ratio = 1.0f;
  p.input_token_stride = d;  // < heads * head_dim
  EXPECT_EQ(KvQuantRef(p), KvQuantStatus::kBadShape);
  p.input_token_stride = 0;
  p.input_bf16 = reinterpret_cast<const uint16_t*>(x.data());  // both inputs set
  EXPECT_EQ(KvQuantRef(p), KvQuantStatus::kNullPointer);
}

}  // namespace
}  // namespace oscarkv::kernels
