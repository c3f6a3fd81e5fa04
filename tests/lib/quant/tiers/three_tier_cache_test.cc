#include "lib/quant/three_tier_cache.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/kvformat/float16.h"
#include "kernels/quant/kv_quant_ref.h"
#include "lib/quant/codec.h"

namespace oscarkv::quant {
namespace {

using kvformat::CodecId;

// Random orthogonal [d][d] (Gram-Schmidt in float64), row-major.
std::vector<float> RandomOrthogonal(int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> m(static_cast<size_t>(d) * d);
  for (auto& x : m) x = n(rng);
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < i; ++j) {
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += m[i * d + c] * m[j * d + c];
      for (int c = 0; c < d; ++c) m[i * d + c] -= dot * m[j * d + c];
    }
    double norm = 0;
    for (int c = 0; c < d; ++c) norm += m[i * d + c] * m[i * d + c];
    for (int c = 0; c < d; ++c) m[i * d + c] /= std::sqrt(norm);
  }
  return std::vector<float>(m.begin(), m.end());
}

// K/V-like data: N(0,1) with a few large channels, [tokens][heads][d].
std::vector<float> RandomKv(int tokens, int heads, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens) * heads * d);
  for (size_t i = 0; i < x.size(); ++i) x[i] = n(rng) * ((i % d) % 13 == 3 ? 6.0f : 1.0f);
  return x;
}

std::unique_ptr<ThreeTierCache> MakeCache(CodecId codec, int d, int hkv, int layers = 1,
                                          bool rotate = true) {
  ThreeTierCacheConfig config;
  config.num_layers = layers;
  config.num_kv_heads = hkv;
  config.head_dim = d;
  config.codec = codec;
  if (rotate && GetCodecSpec(codec).rotation != RotationKind::kNone) {
    for (int l = 0; l < layers; ++l) {
      config.rotations.k.push_back(RandomOrthogonal(d, 100 + l));
      config.rotations.v.push_back(RandomOrthogonal(d, 200 + l));
    }
  }
  auto cache = ThreeTierCache::Create(std::move(config));
  EXPECT_TRUE(cache.ok()) << cache.status();
  return std::move(cache).value();
}

// The vectorised row-times-matrix (rotations of keys, values and queries, and o~ R_V^T) keeps
// the textbook loop's order of sums: the same bits, head_dim a multiple of 8 or not.
TEST(RowTimesMatrix, EqualsTheTextbookLoopBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int d : {8, 32, 64, 100, 128, 256, 300}) {
    std::vector<float> x(d), m(static_cast<size_t>(d) * d), y(d);
    for (float& v : x) v = normal(rng);
    for (float& v : m) v = normal(rng);
    RowTimesMatrix(x.data(), m.data(), d, y.data());
    for (int j = 0; j < d; ++j) {
      float acc = 0.0f;
      for (int i = 0; i < d; ++i) acc += x[i] * m[static_cast<size_t>(i) * d + j];
      ASSERT_EQ(y[j], acc) << "d " << d << " column " << j;
    }
  }
}

TEST(TierWindows, OscarDemotesEightAtATimeAfterSinkAndRecent) {
  const CodecSpec& spec = GetCodecSpec(CodecId::kOscar);
  EXPECT_EQ(WindowsAt(spec, 10).k_quant_end, 64);  // empty range [64, 64)
  EXPECT_EQ(WindowsAt(spec, 64 + 256).k_quant_end, 64);
  EXPECT_EQ(WindowsAt(spec, 64 + 263).k_quant_end, 64);
  EXPECT_EQ(WindowsAt(spec, 64 + 264).k_quant_end, 72);
  EXPECT_EQ(WindowsAt(spec, 64 + 271).k_quant_end, 72);
  EXPECT_EQ(WindowsAt(spec, 64 + 272).k_quant_end, 80);
  for (int n = 320; n < 1000; ++n) {
    const TierWindows w = WindowsAt(spec, n);
    EXPECT_EQ(w.quant_begin, 64);
    const int recent = n - w.k_quant_end;
    EXPECT_GE(recent, 256);
    EXPECT_LE(recent, 263);
    EXPECT_EQ(w.v_quant_end, w.k_quant_end);
  }
  const CodecSpec& kivi = GetCodecSpec(CodecId::kKivi2);
  EXPECT_EQ(WindowsAt(kivi, 127).k_quant_end, 0);
  EXPECT_EQ(WindowsAt(kivi, 128).k_quant_end, 128);
  EXPECT_EQ(WindowsAt(kivi, 300).k_quant_end, 256);
  EXPECT_EQ(WindowsAt(kivi, 300).v_quant_end, 172);
  const CodecSpec& tns = GetCodecSpec(CodecId::kOscarTns);
  EXPECT_EQ(WindowsAt(tns, 255).k_quant_end, 0);
  EXPECT_EQ(WindowsAt(tns, 256).v_quant_end, 256);
  EXPECT_EQ(WindowsAt(GetCodecSpec(CodecId::kInt2Naive), 5).k_quant_end, 5);
  EXPECT_EQ(WindowsAt(GetCodecSpec(CodecId::kBf16), 500).k_quant_end, 0);
}

// Rows outside the quantised window are the bf16-rounded rotated inputs exactly; rows inside are
// not, but are close (INT2 error bounded by the row range).
void CheckSeenAgainstInput(const ThreeTierCache& cache, const std::vector<float>& k,
                           const std::vector<float>& rot_k, int hkv, int d) {
  const int n = cache.tokens(0);
  const TierWindows w = WindowsAt(cache.spec(), n);
  for (int h = 0; h < hkv; ++h) {
    std::vector<float> ks, vs, scale;
    ASSERT_TRUE(cache.ReadSeen(0, h, &ks, &vs, &scale).ok());
    ASSERT_EQ(ks.size(), static_cast<size_t>(n) * d);
    for (int j = 0; j < n; ++j) {
      std::vector<float> expect(d);
      RotateRowToBf16(&k[(static_cast<size_t>(j) * hkv + h) * d],
                      rot_k.empty() ? nullptr : rot_k.data(), d, expect.data());
      bool equal = true;
      double err = 0, range = 0;
      for (int c = 0; c < d; ++c) {
        equal &= ks[j * d + c] == expect[c];
        err = std::max(err, std::abs(static_cast<double>(ks[j * d + c]) - expect[c]));
        range = std::max(range, std::abs(static_cast<double>(expect[c])));
      }
      const bool quantised = j >= w.quant_begin && j < w.k_quant_end;
      EXPECT_EQ(equal, !quantised) << "n=" << n << " j=" << j;
      EXPECT_LE(err, 2.0 * range) << j;
    }
  }
}

TEST(ThreeTierCache, OscarDemotionBoundariesSink64Ring256To263Demote8) {
  const int d = 64, hkv = 2;
  auto cache = MakeCache(CodecId::kOscar, d, hkv);
  const std::vector<float> rot_k = RandomOrthogonal(d, 100);
  const std::vector<float> k = RandomKv(400, hkv, d, 1), v = RandomKv(400, hkv, d, 2);
  const int64_t bf16_page = 2 * 8 * d * 2 * hkv;  // K+V, 8 tokens, bf16
  const int64_t int2_page = 2 * (8 * d / 4 + 8 * 4) * hkv;
  for (int n = 1; n <= 400; ++n) {
    ASSERT_TRUE(cache->Append(0, &k[(n - 1) * hkv * d], &v[(n - 1) * hkv * d], 1).ok());
    const TierWindows w = WindowsAt(cache->spec(), n);
    const int int2_tokens = w.k_quant_end - 64;
    const int bf16_tokens = n - int2_tokens;
    // Live pages: ceil(sink/8) + ceil(recent/8) BF16 pages, int2_tokens/8 INT2 pages.
    const int64_t sink = std::min(n, 64), recent = bf16_tokens - sink;
    EXPECT_EQ(cache->BytesInUse(),
              ((sink + 7) / 8 + (recent + 7) / 8) * bf16_page + int2_tokens / 8 * int2_page)
        << n;
    if (n == 63 || n == 64 || n == 65 || n == 320 || n == 327 || n == 328 || n == 335 ||
        n == 336 || n == 400) {
      CheckSeenAgainstInput(*cache, k, rot_k, hkv, d);
    }
  }
  EXPECT_GE(cache->BytesAllocated(), cache->BytesInUse());
}

// BytesInUseAt (admission's bytes at a final length) equals what a cache appended token by token
// reports, for every codec it computes; the residual codecs say it is not computed.
TEST(ThreeTierCache, BytesInUseAtEqualsTheCacheAtEveryLength) {
  const int hkv = 2, layers = 2;
  for (int d : {64, 128}) {
    for (const CodecSpec& spec : AllCodecs()) {
      if (spec.residual_tokens > 0) {
        EXPECT_TRUE(absl::IsUnimplemented(BytesInUseAt(spec, layers, hkv, d, 10).status()))
            << spec.name;
        continue;
      }
      auto cache = MakeCache(spec.id, d, hkv, layers, /*rotate=*/false);
      const int n_max = 64 + 256 + 40;
      const std::vector<float> k = RandomKv(n_max, hkv, d, 5), v = RandomKv(n_max, hkv, d, 6);
      EXPECT_EQ(*BytesInUseAt(spec, layers, hkv, d, 0), 0) << spec.name;
      for (int n = 1; n <= n_max; ++n) {
        for (int l = 0; l < layers; ++l) {
          ASSERT_TRUE(cache->Append(l, &k[(n - 1) * hkv * d], &v[(n - 1) * hkv * d], 1).ok());
        }
        absl::StatusOr<int64_t> at = BytesInUseAt(spec, layers, hkv, d, n);
        ASSERT_TRUE(at.ok()) << at.status();
        ASSERT_EQ(*at, cache->BytesInUse()) << spec.name << " d=" << d << " n=" << n;
      }
    }
  }
  EXPECT_TRUE(
      absl::IsInvalidArgument(BytesInUseAt(GetCodecSpec(CodecId::kOscar), 1, 1, 64, -1).status()));
}

TEST(ThreeTierCache, NoWindowCodecsQuantiseEveryTokenAtOnce) {
  const int d = 64, hkv = 1;
  for (CodecId id : {CodecId::kInt2Naive, CodecId::kInt2Hadamard}) {
    auto cache = MakeCache(id, d, hkv);
    const std::vector<float> rot_k =
        GetCodecSpec(id).rotation == RotationKind::kNone ? std::vector<float>() : RandomOrthogonal(d, 100);
    const std::vector<float> k = RandomKv(21, hkv, d, 3), v = RandomKv(21, hkv, d, 4);
    ASSERT_TRUE(cache->Append(0, k.data(), v.data(), 1).ok());
    CheckSeenAgainstInput(*cache, k, rot_k, hkv, d);  // token 0 already quantised
    ASSERT_TRUE(cache->Append(0, k.data() + d, v.data() + d, 20).ok());
    CheckSeenAgainstInput(*cache, k, rot_k, hkv, d);
  }
}

TEST(ThreeTierCache, ResidualCodecsFlushByTheirRules) {
  const int d = 64, hkv = 2;
  for (CodecId id : {CodecId::kKivi2, CodecId::kOscarTns}) {
    auto cache = MakeCache(id, d, hkv);
    const std::vector<float> k = RandomKv(600, hkv, d, 5), v = RandomKv(600, hkv, d, 6);
    for (int n = 1; n <= 600; ++n) {
      ASSERT_TRUE(cache->Append(0, &k[(n - 1) * hkv * d], &v[(n - 1) * hkv * d], 1).ok());
      if (n % 64 != 0 && n != 127 && n != 129 && n != 255 && n != 257) continue;
      const TierWindows w = WindowsAt(cache->spec(), n);
      std::vector<float> kfp, vfp, ks, vs, scale;
      ASSERT_TRUE(cache->ReadSeen(0, 1, &ks, &vs, &scale).ok());
      EXPECT_EQ(scale.size(), id == CodecId::kOscarTns ? static_cast<size_t>(n) : 0u);
      // V rows: bf16(v R_V) outside the quantised range.
      const std::vector<float> rot_v = id == CodecId::kOscarTns ? RandomOrthogonal(d, 200) : std::vector<float>();
      for (int j = 0; j < n; ++j) {
        std::vector<float> expect(d);
        RotateRowToBf16(&v[(static_cast<size_t>(j) * hkv + 1) * d], rot_v.empty() ? nullptr : rot_v.data(), d,
                        expect.data());
        bool equal = true;
        for (int c = 0; c < d; ++c) equal &= vs[j * d + c] == expect[c];
        EXPECT_EQ(equal, j >= w.v_quant_end) << n << " " << j;
      }
    }
  }
}

TEST(ThreeTierCache, PrefillChunkEqualsTokenByToken) {
  const int d = 128, hkv = 2;
  for (CodecId id : {CodecId::kOscar, CodecId::kKivi2, CodecId::kOscarTns, CodecId::kInt2Naive}) {
    auto a = MakeCache(id, d, hkv), b = MakeCache(id, d, hkv);
    const int n = 450;
    const std::vector<float> k = RandomKv(n, hkv, d, 7), v = RandomKv(n, hkv, d, 8);
    ASSERT_TRUE(a->Append(0, k.data(), v.data(), 300).ok());
    ASSERT_TRUE(a->Append(0, k.data() + 300 * hkv * d, v.data() + 300 * hkv * d, n - 300).ok());
    for (int t = 0; t < n; ++t) ASSERT_TRUE(b->Append(0, &k[t * hkv * d], &v[t * hkv * d], 1).ok());
    for (int h = 0; h < hkv; ++h) {
      std::vector<float> ka, va, sa, kb, vb, sb;
      ASSERT_TRUE(a->ReadSeen(0, h, &ka, &va, &sa).ok());
      ASSERT_TRUE(b->ReadSeen(0, h, &kb, &vb, &sb).ok());
      EXPECT_EQ(ka, kb);
      EXPECT_EQ(va, vb);
      EXPECT_EQ(sa, sb);
    }
    EXPECT_EQ(a->BytesInUse(), b->BytesInUse());
  }
}

// Attend == float64 softmax over ReadSeen rows with q rotated by R_K and the output by R_V^T.
TEST(ThreeTierCache, AttendMatchesFloat64AttentionOverSeenRows) {
  for (int d : {64, 128}) {
    const int hkv = 2, g = 3, n = 500;
    for (CodecId id : {CodecId::kOscar, CodecId::kBf16, CodecId::kKivi2, CodecId::kOscarTns}) {
      auto cache = MakeCache(id, d, hkv);
      const std::vector<float> k = RandomKv(n, hkv, d, 9), v = RandomKv(n, hkv, d, 10);
      const std::vector<float> q = RandomKv(1, hkv * g, d, 11);
      ASSERT_TRUE(cache->Append(0, k.data(), v.data(), n).ok());
      std::vector<float> out(hkv * g * d);
      const absl::Status st = cache->Attend(0, q.data(), hkv * g, out.data());
      ASSERT_TRUE(st.ok()) << st;
      const bool rot = GetCodecSpec(id).rotation != RotationKind::kNone;
      const std::vector<float> rk = rot ? RandomOrthogonal(d, 100) : std::vector<float>();
      const std::vector<float> rv = rot ? RandomOrthogonal(d, 200) : std::vector<float>();
      double err = 0, scale = 0;
      for (int qh = 0; qh < hkv * g; ++qh) {
        std::vector<float> ks, vs, ts;
        ASSERT_TRUE(cache->ReadSeen(0, qh / g, &ks, &vs, &ts).ok());
        std::vector<double> qr(d, 0.0), o(d, 0.0), s(n);
        for (int j = 0; j < d; ++j) {
          for (int i = 0; i < d; ++i) qr[j] += q[qh * d + i] * (rot ? rk[i * d + j] : (i == j));
        }
        double mx = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int t = 0; t < n; ++t) {
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += qr[c] * ks[t * d + c];
          s[t] = dot / std::sqrt(static_cast<double>(d)) * (ts.empty() ? 1.0 : ts[t]);
          mx = std::max(mx, s[t]);
        }
        for (int t = 0; t < n; ++t) sum += std::exp(s[t] - mx);
        for (int t = 0; t < n; ++t) {
          for (int c = 0; c < d; ++c) o[c] += std::exp(s[t] - mx) / sum * vs[t * d + c];
        }
        for (int c = 0; c < d; ++c) {
          double r = 0;
          for (int j = 0; j < d; ++j) r += o[j] * (rot ? rv[c * d + j] : (c == j));
          err = std::max(err, std::abs(r - out[qh * d + c]));
          scale = std::max(scale, std::abs(r));
        }
      }
      EXPECT_LE(err / scale, 2e-5) << "codec " << static_cast<int>(id) << " d " << d;
    }
  }
}

TEST(ThreeTierCache, BitsPerElementFromBytesInUse) {
  const int hkv = 2, layers = 2;
  for (int d : {64, 128}) {
    const int n = 64 + 256 + 8 * 100;  // windows exactly full, history page-aligned
    const std::vector<float> k = RandomKv(n, hkv, d, 12), v = RandomKv(n, hkv, d, 13);
    auto bits_of = [&](CodecId id) {
      auto cache = MakeCache(id, d, hkv, layers);
      for (int l = 0; l < layers; ++l) EXPECT_TRUE(cache->Append(l, k.data(), v.data(), n).ok());
      return cache->BitsPerElement();
    };
    const double per_token = 2.0 + 32.0 / d;
    // OSCAR: BPE(L) = [(L - S - W)(2 + 32/D) + (S + W) 16] / L (quant.md A.5).
    EXPECT_DOUBLE_EQ(bits_of(CodecId::kOscar), ((n - 320) * per_token + 320 * 16.0) / n);
    EXPECT_DOUBLE_EQ(bits_of(CodecId::kInt2Naive), per_token);
    EXPECT_DOUBLE_EQ(bits_of(CodecId::kBf16), 16.0);
    // KIVI-2: K 3 bits for 128-blocks, V 3 bits for all but the last 128, 16 for the rest.
    const int kq = n / 128 * 128, vq = n - 128;
    EXPECT_DOUBLE_EQ(bits_of(CodecId::kKivi2),
                     (kq * 3.0 + (n - kq) * 16.0 + vq * 3.0 + (n - vq) * 16.0) / (2.0 * n));
    // OScaR: 256-tiles for K and V, plus one f32 norm per token per layer.
    const int tq = n / 256 * 256;
    EXPECT_DOUBLE_EQ(bits_of(CodecId::kOscarTns),
                     (2.0 * (tq * 3.0 + (n - tq) * 16.0) + 32.0 / hkv / d * n) / (2.0 * n));
  }
}

TEST(ThreeTierCache, ConfigFromCodecsUsesTheirRotations) {
  const int d = 64;
  auto c0 = Codec::Create("oscar-tns", d);
  auto c1 = Codec::Create("oscar-tns", d);
  ASSERT_TRUE(c0.ok() && c1.ok());
  const Codec* codecs[] = {c0->get(), c1->get()};
  auto config = ThreeTierCacheConfigFromCodecs(codecs, 2);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->codec, CodecId::kOscarTns);
  ASSERT_EQ(config->rotations.k.size(), 2u);
  ASSERT_EQ(config->rotations.k[1].size(), static_cast<size_t>(d * d));
  EXPECT_EQ(config->rotations.k[1][0], (*c1)->key_rotation()[0]);
  EXPECT_TRUE(ThreeTierCache::Create(*config).ok());
}

// Exported segments decode (with the kvformat reference decoder) to exactly the rows attention
// reads, in every tier and for every codec; a range spanning two tiers is refused.
TEST(ThreeTierCache, ExportSegmentRoundTripsThroughKvformatDecoder) {
  const int d = 64, hkv = 2, n = 700;
  const std::vector<float> k = RandomKv(n, hkv, d, 14), v = RandomKv(n, hkv, d, 15);
  for (const CodecSpec& spec : AllCodecs()) {
    auto cache = MakeCache(spec.id, d, hkv);
    ASSERT_TRUE(cache->Append(0, k.data(), v.data(), n).ok());
    const TierWindows w = WindowsAt(spec, n);
    std::vector<float> seen_k, seen_v, scale;
    ASSERT_TRUE(cache->ReadSeen(0, 1, &seen_k, &seen_v, &scale).ok());
    for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
      const int q_end = side == KvSide::kKey ? w.k_quant_end : w.v_quant_end;
      std::vector<std::pair<int, int>> ranges;  // {first, tokens}
      if (w.quant_begin > 0) ranges.push_back({0, w.quant_begin});
      if (q_end - w.quant_begin >= 64) ranges.push_back({w.quant_begin, 64});
      if (q_end < n) ranges.push_back({q_end, n - q_end});
      ASSERT_FALSE(ranges.empty());
      for (auto [first, tokens] : ranges) {
        auto seg = cache->ExportSegment(0, side, 1, first, tokens);
        ASSERT_TRUE(seg.ok()) << spec.name << " " << first << " " << seg.status();
        const bool quantised = first >= w.quant_begin && first < q_end;
        EXPECT_EQ(seg->kind == kvformat::SegmentKind::kBf16Rows, !quantised) << spec.name;
        ASSERT_EQ(seg->bytes.size(), kvformat::SegmentBytes(seg->kind, tokens, d));
        std::vector<float> rows(static_cast<size_t>(tokens) * d);
        ASSERT_EQ(kernels::DecodeSegment(seg->kind, seg->bytes.data(), tokens, d, rows.data(), d),
                  kernels::KvQuantStatus::kOk);
        const std::vector<float>& seen = side == KvSide::kKey ? seen_k : seen_v;
        for (size_t i = 0; i < rows.size(); ++i) {
          ASSERT_EQ(rows[i], seen[static_cast<size_t>(first) * d + i])
              << spec.name << " side " << static_cast<int>(side) << " first " << first;
        }
      }
      if (q_end - w.quant_begin >= 8 && n - q_end >= 8) {
        EXPECT_FALSE(cache->ExportSegment(0, side, 1, q_end - 8, 16).ok()) << spec.name;
      }
    }
    EXPECT_EQ(cache->TokenNorms(0, 0, 5).size(), spec.token_norms ? 5u : 0u);
  }
}

TEST(ThreeTierCache, CreateRejectsBadConfig) {
  ThreeTierCacheConfig config;
  config.num_layers = 1;
  config.num_kv_heads = 1;
  config.head_dim = 48;
  EXPECT_FALSE(ThreeTierCache::Create(config).ok());
  config.head_dim = 64;
  config.rotations.k.push_back(std::vector<float>(10));
  EXPECT_FALSE(ThreeTierCache::Create(config).ok());
  config.rotations.k.clear();
  auto cache = ThreeTierCache::Create(config);
  ASSERT_TRUE(cache.ok());
  std::vector<float> q(5 * 64), out(5 * 64);
  EXPECT_FALSE((*cache)->Attend(1, q.data(), 1, out.data()).ok());
  EXPECT_FALSE((*cache)->Append(0, nullptr, nullptr, 1).ok());
}

}  // namespace
}  // namespace oscarkv::quant
