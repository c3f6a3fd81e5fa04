// Tests of the CPU references of the GPU forward's kernels (kernels/model/model_kernels_ref.h):
// against lib/model's production CPU functions (forward_cpu.h), which they must match, and against
// float64 references on fresh random inputs with fixed seeds.
#include "kernels/model/model_kernels_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention/decode_attention.h"
#include "lib/kvformat/float16.h"
#include "lib/model/forward_cpu.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::kernels {
namespace {

using kvformat::Bf16BitsToFloat;
using kvformat::FloatToBf16Bits;
using kvformat::RoundToBf16;

// Relative error budgets against float64: bf16 outputs carry half an ulp of 2^-8 relative error,
// so ||out - ref|| / ||ref|| stays below ~2^-9 for a random vector; f32 outputs ~1e-6.
constexpr double kMaxBf16RelErr = 3e-3;
constexpr double kMaxF32RelErr = 2e-6;

std::vector<float> Normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

double RelErr(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1.0));
}
std::vector<double> FromBf16(const std::vector<uint16_t>& b) {
  std::vector<double> out(b.size());
  for (size_t i = 0; i < b.size(); ++i) out[i] = Bf16BitsToFloat(b[i]);
  return out;
}
std::vector<double> ToDouble(const std::vector<float>& f) { return {f.begin(), f.end()}; }

TEST(ModelKernelsRef, EmbedRowsCopiesTableRows) {
  const int vocab = 37, dm = 24;
  std::vector<uint16_t> table(vocab * dm);
  for (size_t i = 0; i < table.size(); ++i) table[i] = FloatToBf16Bits(0.01f * i - 3.0f);
  const std::vector<int32_t> tokens = {5, 0, 36, 5};
  std::vector<float> x(tokens.size() * dm, NAN);
  EmbedRowsRef(table.data(), tokens.data(), tokens.size(), dm, x.data());
  for (size_t r = 0; r < tokens.size(); ++r) {
    for (int i = 0; i < dm; ++i) {
      EXPECT_EQ(x[r * dm + i], Bf16BitsToFloat(table[tokens[r] * dm + i]));
    }
  }
}

TEST(ModelKernelsRef, RmsNormMatchesLibModelAndFloat64) {
  const int rows = 7, n = 320;
  const float eps = 1e-6f;
  const auto x = Normal(rows * n, 11, 2.0f);
  const auto w = Normal(n, 12);
  std::vector<uint16_t> out(rows * n);
  RmsNormToBf16Ref(x.data(), w.data(), rows, n, eps, out.data());
  std::vector<float> lib(rows * n);
  model::RmsNormTo(x.data(), w.data(), rows, n, eps, lib.data());
  for (int i = 0; i < rows * n; ++i) ASSERT_EQ(out[i], FloatToBf16Bits(lib[i])) << i;
  std::vector<double> ref(rows * n);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    for (int i = 0; i < n; ++i) ref[r * n + i] = x[r * n + i] * inv * w[i];
  }
  EXPECT_LT(RelErr(FromBf16(out), ref), kMaxBf16RelErr);
}

struct QkvCase {
  int hq, hkv, d, rope_dim;
  bool bias, qk_norm, freq_div;
  RopePairing pairing;
};

class QkvPostTest : public ::testing::TestWithParam<QkvCase> {};

TEST_P(QkvPostTest, MatchesLibModelAndFloat64) {
  const QkvCase c = GetParam();
  const int rows = 5;
  const int qn = c.hq * c.d, kn = c.hkv * c.d;
  // One fused QKV row per token, as the GEMM writes it: [q | k | v], stride qn + 2 kn.
  const int64_t stride = qn + 2 * kn;
  auto qkv = Normal(rows * stride, 21);
  const auto bq = Normal(qn, 22, 0.3f), bk = Normal(kn, 23, 0.3f), bv = Normal(kn, 24, 0.3f);
  const auto qnw = Normal(c.d, 25), knw = Normal(c.d, 26);
  std::vector<float> fdiv(c.rope_dim / 2);
  for (size_t i = 0; i < fdiv.size(); ++i) fdiv[i] = 1.0f + 0.37f * i;
  const std::vector<int32_t> positions = {0, 1, 17, 4095, 32767};
  const double theta = 500000.0, scale = 2.0;
  const float eps = 1e-6f;

  // lib/model path, on separate q/k/v copies (as model.cc does).
  std::vector<float> q(rows * qn), k(rows * kn), v(rows * kn);
  for (int r = 0; r < rows; ++r) {
    std::copy_n(qkv.data() + r * stride, qn, q.data() + r * qn);
    std::copy_n(qkv.data() + r * stride + qn, kn, k.data() + r * kn);
    std::copy_n(qkv.data() + r * stride + qn + kn, kn, v.data() + r * kn);
    if (c.bias) {
      for (int i = 0; i < qn; ++i) q[r * qn + i] += bq[i];
      for (int i = 0; i < kn; ++i) k[r * kn + i] += bk[i];
      for (int i = 0; i < kn; ++i) v[r * kn + i] += bv[i];
    }
  }
  const std::vector<float> q_pre = q, k_pre = k;  // after bias, before norm/rope
  if (c.qk_norm) {
    model::RmsNorm(q.data(), qnw.data(), rows * c.hq, c.d, eps);
    model::RmsNorm(k.data(), knw.data(), rows * c.hkv, c.d, eps);
  }
  const model::RopeStyle style = c.pairing == RopePairing::kNeox ? model::RopeStyle::kNeox
                                                                 : model::RopeStyle::kAdjacentPairs;
  for (int r = 0; r < rows; ++r) {
    model::ApplyRope(q.data() + r * qn, c.hq, c.d, c.rope_dim, positions[r], theta, scale,
                     c.freq_div ? fdiv.data() : nullptr, style);
    model::ApplyRope(k.data() + r * kn, c.hkv, c.d, c.rope_dim, positions[r], theta, scale,
                     c.freq_div ? fdiv.data() : nullptr, style);
  }

  QkvPostParams p;
  p.q = qkv.data();
  p.k = qkv.data() + qn;
  p.v = qkv.data() + qn + kn;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = stride;
  p.rows = rows;
  p.num_q_heads = c.hq;
  p.num_kv_heads = c.hkv;
  p.head_dim = c.d;
  p.rope_dim = c.rope_dim;
  p.positions = positions.data();
  if (c.bias) {
    p.bq = bq.data();
    p.bk = bk.data();
    p.bv = bv.data();
  }
  if (c.qk_norm) {
    p.q_norm = qnw.data();
    p.k_norm = knw.data();
  }
  p.eps = eps;
  p.rope_theta = theta;
  p.rope_scale = scale;
  p.freq_div = c.freq_div ? fdiv.data() : nullptr;
  p.pairing = c.pairing;
  QkvPostRef(p);

  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < qn; ++i) ASSERT_EQ(qkv[r * stride + i], q[r * qn + i]) << r << " q " << i;
    for (int i = 0; i < kn; ++i) {
      ASSERT_EQ(qkv[r * stride + qn + i], k[r * kn + i]) << r << " k " << i;
      ASSERT_EQ(qkv[r * stride + qn + kn + i], v[r * kn + i]) << r << " v " << i;
    }
  }

  // Float64: norm and rotation in double from the same post-bias values.
  auto ref64 = [&](const std::vector<float>& pre, int heads, const std::vector<float>& w,
                   int r) {
    std::vector<double> out(heads * c.d);
    const int half = c.rope_dim / 2;
    for (int h = 0; h < heads; ++h) {
      std::vector<double> x(c.d);
      double ss = 0;
      for (int i = 0; i < c.d; ++i) {
        x[i] = pre[(r * heads + h) * c.d + i];
        ss += x[i] * x[i];
      }
      if (c.qk_norm) {
        const double inv = 1.0 / std::sqrt(ss / c.d + eps);
        for (int i = 0; i < c.d; ++i) x[i] = x[i] * inv * w[i];
      }
      for (int i = 0; i < half; ++i) {
        double freq = std::pow(theta, -2.0 * i / c.rope_dim);
        if (c.freq_div) freq /= fdiv[i];
        const double a = positions[r] / scale * freq;
        const int i0 = c.pairing == RopePairing::kAdjacentPairs ? 2 * i : i;
        const int i1 = c.pairing == RopePairing::kAdjacentPairs ? 2 * i + 1 : i + half;
        const double x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * std::cos(a) - x1 * std::sin(a);
        x[i1] = x0 * std::sin(a) + x1 * std::cos(a);
      }
      for (int i = 0; i < c.d; ++i) out[h * c.d + i] = x[i];
    }
    return out;
  };
  for (int r = 0; r < rows; ++r) {
    const auto rq = ref64(q_pre, c.hq, qnw, r), rk = ref64(k_pre, c.hkv, knw, r);
    const std::vector<double> gq(qkv.begin() + r * stride, qkv.begin() + r * stride + qn);
    const std::vector<double> gk(qkv.begin() + r * stride + qn,
                                 qkv.begin() + r * stride + qn + kn);
    EXPECT_LT(RelErr(gq, rq), 1e-6) << r;
    EXPECT_LT(RelErr(gk, rk), 1e-6) << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QkvPostTest,
    ::testing::Values(QkvCase{4, 2, 64, 64, false, false, false, RopePairing::kAdjacentPairs},
                      QkvCase{4, 2, 64, 64, true, false, false, RopePairing::kNeox},
                      QkvCase{6, 2, 128, 128, false, true, false, RopePairing::kNeox},
                      QkvCase{6, 3, 128, 64, true, true, true, RopePairing::kAdjacentPairs},
                      QkvCase{2, 1, 64, 32, false, true, true, RopePairing::kNeox}));

TEST(ModelKernelsRef, SiluMulMatchesLibModelAndFloat64) {
  const int rows = 3, dff = 200;
  const auto gu = Normal(rows * 2 * dff, 31, 3.0f);
  std::vector<uint16_t> out(rows * dff);
  SiluMulToBf16Ref(gu.data(), rows, dff, out.data());
  std::vector<double> ref(rows * dff);
  for (int r = 0; r < rows; ++r) {
    std::vector<float> gate(gu.begin() + r * 2 * dff, gu.begin() + r * 2 * dff + dff);
    model::SiluMul(gate.data(), gu.data() + r * 2 * dff + dff, dff);
    for (int i = 0; i < dff; ++i) {
      ASSERT_EQ(out[r * dff + i], FloatToBf16Bits(gate[i])) << r << " " << i;
      const double g = gu[r * 2 * dff + i], u = gu[r * 2 * dff + dff + i];
      ref[r * dff + i] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  EXPECT_LT(RelErr(FromBf16(out), ref), kMaxBf16RelErr);
}

TEST(ModelKernelsRef, F32ToBf16RoundsToNearestEven) {
  const std::vector<float> in = {1.0f, -2.5f, kvformat::BitsFloat(0x3f808000u),
                                 kvformat::BitsFloat(0x3f818000u), 0.0f, -0.0f, INFINITY};
  std::vector<uint16_t> out(in.size());
  F32ToBf16Ref(in.data(), in.size(), out.data());
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[1], 0xc020);
  EXPECT_EQ(out[2], 0x3f80);  // tie to even (down)
  EXPECT_EQ(out[3], 0x3f82);  // tie to even (up)
  EXPECT_EQ(out[4], 0x0000);
  EXPECT_EQ(out[5], 0x8000);
  EXPECT_EQ(out[6], 0x7f80);
}

TEST(ModelKernelsRef, ArgmaxTakesLowestIndexAmongTies) {
  const int vocab = 6;
  const std::vector<float> logits = {
      1, 3, 2, 3, 0, 3,                                    // ties -> 1
      -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,  // all -inf -> 0
      NAN, -1, -2, NAN, -1, -5,                            // NaN never wins -> 1
      0, 0, 0, 0, 0, 7,                                    // last -> 5
  };
  std::vector<int32_t> out(4, -7);
  ArgmaxRowsRef(logits.data(), 4, vocab, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 0, 1, 5}));
}

struct AttnCase {
  int t, hq, hkv, d;
};
class PrefillAttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(PrefillAttentionTest, MatchesLibModelAndFloat64) {
  const AttnCase c = GetParam();
  const int64_t qs = c.hq * c.d + 8, ks = c.hkv * c.d + 4, vs = c.hkv * c.d;  // strided rows
  const auto q = Normal(c.t * qs, 41, 1.5f);
  const auto k = Normal(c.t * ks, 42, 1.5f);
  const auto v = Normal(c.t * vs, 43);
  PrefillAttentionParams p;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.q_row_stride = qs;
  p.k_row_stride = ks;
  p.v_row_stride = vs;
  p.num_tokens = c.t;
  p.num_q_heads = c.hq;
  p.num_kv_heads = c.hkv;
  p.head_dim = c.d;
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  std::vector<uint16_t> out(static_cast<size_t>(c.t) * c.hq * c.d, 0xffff);
  p.out_bf16 = out.data();
  PrefillAttentionRef(p);

  // lib/model: contiguous q, bf16-rounded k/v.
  const int qn = c.hq * c.d, kn = c.hkv * c.d;
  std::vector<float> qc(c.t * qn), kc(c.t * kn), vc(c.t * kn), lib(c.t * qn);
  for (int t = 0; t < c.t; ++t) {
    for (int i = 0; i < qn; ++i) qc[t * qn + i] = q[t * qs + i];
    for (int i = 0; i < kn; ++i) {
      kc[t * kn + i] = RoundToBf16(k[t * ks + i]);
      vc[t * kn + i] = RoundToBf16(v[t * vs + i]);
    }
  }
  model::PromptAttention(qc.data(), kc.data(), vc.data(), c.t, c.hq, c.hkv, c.d, p.sm_scale,
                         lib.data());
  // Float64 over the same (bf16-rounded) k/v.
  std::vector<double> ref(c.t * qn);
  const int g = c.hq / c.hkv;
  for (int h = 0; h < c.hq; ++h) {
    for (int t = 0; t < c.t; ++t) {
      std::vector<double> s(t + 1);
      double mx = -INFINITY;
      for (int j = 0; j <= t; ++j) {
        double dot = 0;
        for (int i = 0; i < c.d; ++i) {
          dot += double(qc[t * qn + h * c.d + i]) * kc[j * kn + (h / g) * c.d + i];
        }
        s[j] = dot * p.sm_scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int i = 0; i < c.d; ++i) {
        double acc = 0;
        for (int j = 0; j <= t; ++j) acc += s[j] * vc[j * kn + (h / g) * c.d + i];
        ref[t * qn + h * c.d + i] = acc / sum;
      }
    }
  }
  const auto got = FromBf16(out);
  EXPECT_LT(RelErr(got, ref), kMaxBf16RelErr);
  EXPECT_LT(RelErr(ToDouble(lib), ref), kMaxF32RelErr * 10);
  // Against lib/model: the same value up to float summation order, so within one bf16 ulp.
  for (size_t i = 0; i < out.size(); ++i) {
    const float a = Bf16BitsToFloat(out[i]);
    ASSERT_LE(std::abs(a - lib[i]), std::abs(lib[i]) * (1.0f / 128) + 1e-6f) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillAttentionTest,
                         ::testing::Values(AttnCase{1, 2, 1, 64}, AttnCase{37, 9, 3, 64},
                                           AttnCase{70, 8, 2, 128}));

// A chunk of a chunked prefill is the tail of the whole prompt: PrefillAttentionRef with q_offset
// on the last T query rows (k/v over all q_offset + T rows) gives, bit for bit, the last T output
// rows of PrefillAttentionRef over the whole prompt, and writes nothing past its T rows.
struct OffsetCase {
  int q_offset, t, hq, hkv, d;
};
class PrefillAttentionOffsetTest : public ::testing::TestWithParam<OffsetCase> {};

TEST_P(PrefillAttentionOffsetTest, ChunkEqualsTailOfWholePrompt) {
  const OffsetCase c = GetParam();
  const int64_t n = c.q_offset + c.t;
  const int qn = c.hq * c.d, kn = c.hkv * c.d;
  const int64_t stride = qn + 2 * kn;  // fused [q | k | v] rows, as GpuModel passes them
  const auto qkv = Normal(n * stride, 1000 + c.q_offset + c.t, 1.5f);
  PrefillAttentionParams whole;
  whole.q = qkv.data();
  whole.k = qkv.data() + qn;
  whole.v = qkv.data() + qn + kn;
  whole.q_row_stride = whole.k_row_stride = whole.v_row_stride = stride;
  whole.num_tokens = n;
  whole.num_q_heads = c.hq;
  whole.num_kv_heads = c.hkv;
  whole.head_dim = c.d;
  whole.sm_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  std::vector<uint16_t> whole_out(static_cast<size_t>(n) * qn, 0xffff);
  whole.out_bf16 = whole_out.data();
  PrefillAttentionRef(whole);

  PrefillAttentionParams chunk = whole;
  chunk.q = qkv.data() + c.q_offset * stride;
  chunk.num_tokens = c.t;
  chunk.q_offset = c.q_offset;
  std::vector<uint16_t> chunk_out(static_cast<size_t>(c.t + 1) * qn, 0xffff);  // + guard row
  chunk.out_bf16 = chunk_out.data();
  PrefillAttentionRef(chunk);

  for (size_t i = 0; i < static_cast<size_t>(c.t) * qn; ++i) {
    ASSERT_EQ(chunk_out[i], whole_out[static_cast<size_t>(c.q_offset) * qn + i]) << i;
  }
  for (size_t i = static_cast<size_t>(c.t) * qn; i < chunk_out.size(); ++i) {
    ASSERT_EQ(chunk_out[i], 0xffff) << "guard row written at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Chunks, PrefillAttentionOffsetTest,
                         ::testing::Values(OffsetCase{0, 17, 3, 1, 64}, OffsetCase{1, 1, 3, 1, 64},
                                           OffsetCase{63, 17, 8, 2, 128},
                                           OffsetCase{64, 64, 3, 1, 64},
                                           OffsetCase{200, 1, 8, 2, 128},
                                           OffsetCase{256, 130, 3, 1, 64},
                                           OffsetCase{1000, 37, 8, 2, 64}));

// The GPU's rotation must store exactly the rows the CPU cache stores: RotateRowsRef rounded to
// bf16 equals lib/quant's RotateRowToBf16 bit for bit, and matches a float64 product closely.
TEST(ModelKernelsRef, RotateRowsIsTheCpuCacheRotation) {
  for (int d : {64, 128}) {
    std::mt19937 rng(31 + d);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int tokens = 5, heads = 3;
    const int64_t stride = int64_t{heads} * d + 7;
    std::vector<float> in(tokens * stride), rot(d * d), out(tokens * heads * d);
    for (auto& x : in) x = dist(rng);
    for (auto& x : rot) x = 0.1f * dist(rng);
    RotateRowsParams p;
    p.in = in.data();
    p.in_token_stride = stride;
    p.tokens = tokens;
    p.heads = heads;
    p.head_dim = d;
    p.rotation = rot.data();
    p.out = out.data();
    RotateRowsRef(p);
    std::vector<float> cpu(d);
    for (int t = 0; t < tokens; ++t) {
      for (int h = 0; h < heads; ++h) {
        const float* x = in.data() + t * stride + h * d;
        quant::RotateRowToBf16(x, rot.data(), d, cpu.data());
        for (int j = 0; j < d; ++j) {
          const float got = out[(t * heads + h) * d + j];
          ASSERT_EQ(kvformat::RoundToBf16(got), cpu[j]) << "d=" << d << " t=" << t << " j=" << j;
          double exact = 0;
          for (int i = 0; i < d; ++i) exact += double(x[i]) * rot[i * d + j];
          EXPECT_NEAR(got, exact, 1e-5 * (1 + std::abs(exact)));
        }
      }
    }
  }
}

TEST(ModelKernelsRef, PageWriteGatherRoundTrip) {
  const int heads = 3, d = 64, tokens = 21, num_pages = 5;
  const int64_t unit = Bf16PageUnitBytes(d);
  const int64_t head_stride = unit, page_stride = heads * unit + 32;  // padded pages
  std::vector<uint8_t> pool(num_pages * page_stride, 0xab);
  const std::vector<int32_t> page_order = {3, 0, 4};  // tokens t -> page page_order[t / 8]
  const int64_t row_stride = heads * d + 16;
  const auto rows = Normal(tokens * row_stride, 51);
  std::vector<int32_t> page_ids(tokens), rows_in_page(tokens);
  for (int t = 0; t < tokens; ++t) {
    page_ids[t] = page_order[t / 8];
    rows_in_page[t] = t % 8;
  }
  for (int seg = 0; seg < 2; ++seg) {
    PageRowsParams w;
    w.rows = rows.data();
    w.row_stride = row_stride;
    w.tokens = tokens;
    w.heads = heads;
    w.head_dim = d;
    w.page_ids = page_ids.data();
    w.rows_in_page = rows_in_page.data();
    w.pool = pool.data();
    w.page_stride_bytes = page_stride;
    w.head_stride_bytes = head_stride;
    w.segment_offset_bytes = seg == 0 ? Bf16PageKOffset(d) : Bf16PageVOffset(d);
    WriteBf16PageRowsRef(w);
  }
  // Untouched: pages 1 and 2, the padding, and rows 5..7 of the last page.
  for (int pg : {1, 2}) {
    for (int64_t b = 0; b < page_stride; ++b) ASSERT_EQ(pool[pg * page_stride + b], 0xab);
  }
  for (int64_t b = heads * unit; b < page_stride; ++b) ASSERT_EQ(pool[3 * page_stride + b], 0xab);
  for (int seg = 0; seg < 2; ++seg) {
    PageGatherParams gp;
    gp.pool = pool.data();
    gp.page_ids = page_order.data();
    gp.num_pages = 3;
    gp.heads = heads;
    gp.head_dim = d;
    gp.page_stride_bytes = page_stride;
    gp.head_stride_bytes = head_stride;
    gp.segment_offset_bytes = seg == 0 ? Bf16PageKOffset(d) : Bf16PageVOffset(d);
    std::vector<uint16_t> out(3 * 8 * heads * d);
    gp.out_bf16 = out.data();
    GatherBf16PageRowsRef(gp);
    for (int t = 0; t < 24; ++t) {
      for (int h = 0; h < heads; ++h) {
        for (int i = 0; i < d; ++i) {
          const uint16_t got = out[(t * heads + h) * d + i];
          if (t < tokens) {
            ASSERT_EQ(got, FloatToBf16Bits(rows[t * row_stride + h * d + i])) << t << " " << h;
          } else {
            ASSERT_EQ(got, 0xabab) << t;
          }
        }
      }
    }
  }
}

TEST(ModelKernelsRef, PagePackingPlacesChunksAndRoundTrips) {
  const int layers = 3;
  const int64_t pool_pages = 6, chunk = 32;
  std::vector<uint8_t> pool(layers * pool_pages * chunk);
  for (size_t b = 0; b < pool.size(); ++b) pool[b] = static_cast<uint8_t>(b * 7 + 1);
  const std::vector<int32_t> pages = {4, 1, 5};
  std::vector<uint8_t> packed(layers * pages.size() * chunk);
  PagePackParams p;
  p.pool = pool.data();
  p.pool_pages = pool_pages;
  p.chunk_bytes = chunk;
  p.layers = layers;
  p.pages = pages.data();
  p.num_pages = 3;
  p.packed = packed.data();
  PackPagesRef(p);
  // Layer 2, packed page 1 is pool page 1 of layer 2.
  EXPECT_EQ(0, std::memcmp(packed.data() + (2 * 3 + 1) * chunk,
                           pool.data() + (2 * pool_pages + 1) * chunk, chunk));
  std::vector<uint8_t> pool2(pool.size(), 0xee);
  p.pool = pool2.data();
  UnpackPagesRef(p);
  for (int l = 0; l < layers; ++l) {
    for (int64_t pg = 0; pg < pool_pages; ++pg) {
      const bool listed = pg == 4 || pg == 1 || pg == 5;
      const size_t at = (l * pool_pages + pg) * chunk;
      for (int64_t b = 0; b < chunk; ++b) {
        ASSERT_EQ(pool2[at + b], listed ? pool[at + b] : 0xee) << "layer " << l << " page " << pg;
      }
    }
  }
}

}  // namespace
}  // namespace oscarkv::kernels
