// The single-pass emulation equals true token-by-token decode through ThreeTierCache, for every
// codec: identical K/V rows seen at each step, attention outputs equal up to float rounding.
#include "lib/quant/decode_emulation.h"

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "lib/quant/three_tier_cache.h"

namespace oscarkv::quant {
namespace {

using kvformat::CodecId;

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

// Outlier channels and a low-norm "sink" token every 50 positions (OScaR's TNI case).
std::vector<float> RandomKv(int tokens, int heads, int d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens) * heads * d);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t t = i / (static_cast<size_t>(heads) * d);
    x[i] = n(rng) * ((i % d) % 11 == 5 ? 5.0f : 1.0f) * (t % 50 == 0 ? 0.1f : 1.0f);
  }
  return x;
}

class DecodeEmulationTest : public ::testing::TestWithParam<std::tuple<CodecId, int>> {};

TEST_P(DecodeEmulationTest, EqualsTokenByTokenDecodeThroughThreeTierCache) {
  const auto [id, d] = GetParam();
  const CodecSpec& spec = GetCodecSpec(id);
  const int T = 700, hkv = 2, hq = 3 * hkv;
  const bool rotate = spec.rotation != RotationKind::kNone;
  const std::vector<float> rk = rotate ? RandomOrthogonal(d, 1) : std::vector<float>();
  const std::vector<float> rv = rotate ? RandomOrthogonal(d, 2) : std::vector<float>();
  const std::vector<float> k = RandomKv(T, hkv, d, 3), v = RandomKv(T, hkv, d, 4);
  const std::vector<float> q = RandomKv(T, hq, d, 5);

  auto kv = BuildEmulatedLayerKv(spec, rotate ? rk.data() : nullptr, rotate ? rv.data() : nullptr,
                                 T, hkv, d, k.data(), v.data());
  ASSERT_TRUE(kv.ok()) << kv.status();
  std::vector<float> emulated(static_cast<size_t>(T) * hq * d);
  ASSERT_TRUE(EmulateDecodeAttention(spec, *kv, rotate ? rk.data() : nullptr,
                                     rotate ? rv.data() : nullptr, q.data(), hq, emulated.data())
                  .ok());

  ThreeTierCacheConfig config;
  config.num_layers = 1;
  config.num_kv_heads = hkv;
  config.head_dim = d;
  config.codec = id;
  if (rotate) {
    config.rotations.k.push_back(rk);
    config.rotations.v.push_back(rv);
  }
  auto cache = ThreeTierCache::Create(config);
  ASSERT_TRUE(cache.ok()) << cache.status();
  std::vector<float> out(static_cast<size_t>(hq) * d);
  double max_err = 0, max_ref = 0;
  int steps_with_quantised = 0;
  for (int t = 0; t < T; ++t) {
    ASSERT_TRUE((*cache)->Append(0, &k[static_cast<size_t>(t) * hkv * d],
                                 &v[static_cast<size_t>(t) * hkv * d], 1).ok());
    ASSERT_TRUE((*cache)->Attend(0, &q[static_cast<size_t>(t) * hq * d], hq, out.data()).ok());
    for (int i = 0; i < hq * d; ++i) {
      const float ref = emulated[static_cast<size_t>(t) * hq * d + i];
      max_err = std::max(max_err, static_cast<double>(std::abs(out[i] - ref)));
      max_ref = std::max(max_ref, static_cast<double>(std::abs(ref)));
    }
    const TierWindows w = WindowsAt(spec, t + 1);
    steps_with_quantised += (w.k_quant_end > w.quant_begin) ? 1 : 0;
    // Identical rows at the boundary steps and a spread of others.
    const bool check_rows = t % 97 == 0 || t == 63 || t == 64 || t == 127 || t == 128 ||
                            t == 255 || t == 256 || t == 319 || t == 326 || t == 327 ||
                            t == 334 || t == 335 || t == T - 1;
    if (!check_rows) continue;
    for (int h = 0; h < hkv; ++h) {
      std::vector<float> ck, cv, cs, ek, ev, es;
      ASSERT_TRUE((*cache)->ReadSeen(0, h, &ck, &cv, &cs).ok());
      SeenRowsAt(spec, *kv, t, h, &ek, &ev, &es);
      ASSERT_EQ(ck, ek) << "K rows differ at step " << t << " head " << h;
      ASSERT_EQ(cv, ev) << "V rows differ at step " << t << " head " << h;
      ASSERT_EQ(cs, es) << "token scales differ at step " << t;
    }
  }
  EXPECT_LE(max_err / max_ref, 2e-5) << spec.name;
  if (id != CodecId::kBf16) {
    EXPECT_GT(steps_with_quantised, 300) << spec.name;
  }
}

std::string Name(const ::testing::TestParamInfo<std::tuple<CodecId, int>>& info) {
  std::string name(GetCodecSpec(std::get<0>(info.param)).name);
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name + "_d" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllCodecsD64, DecodeEmulationTest,
    ::testing::Combine(::testing::Values(CodecId::kBf16, CodecId::kInt2Naive,
                                         CodecId::kInt2Hadamard, CodecId::kOscarHadamardClip,
                                         CodecId::kOscarNoRotation, CodecId::kOscarGram,
                                         CodecId::kOscar, CodecId::kKivi2, CodecId::kOscarTns),
                       ::testing::Values(64)),
    Name);
INSTANTIATE_TEST_SUITE_P(SomeCodecsD128, DecodeEmulationTest,
                         ::testing::Combine(::testing::Values(CodecId::kInt2Naive, CodecId::kOscar,
                                                              CodecId::kKivi2, CodecId::kOscarTns),
                                            ::testing::Values(128)),
                         Name);

// Quantisation must reach the scored positions: the emulated output differs from BF16's once a
// history exists, and equals it before.
TEST(DecodeEmulation, OscarDiffersFromBf16OnlyAfterTheWindowsFill) {
  const int T = 400, hkv = 1, hq = 2, d = 64;
  const std::vector<float> k = RandomKv(T, hkv, d, 6), v = RandomKv(T, hkv, d, 7);
  const std::vector<float> q = RandomKv(T, hq, d, 8);
  std::vector<float> o_bf16(static_cast<size_t>(T) * hq * d), o_oscar(o_bf16.size());
  for (CodecId id : {CodecId::kBf16, CodecId::kOscar}) {
    const CodecSpec& spec = GetCodecSpec(id);
    auto kv = BuildEmulatedLayerKv(spec, nullptr, nullptr, T, hkv, d, k.data(), v.data());
    ASSERT_TRUE(kv.ok());
    ASSERT_TRUE(EmulateDecodeAttention(spec, *kv, nullptr, nullptr, q.data(), hq,
                                       (id == CodecId::kBf16 ? o_bf16 : o_oscar).data())
                    .ok());
  }
  for (int t = 0; t < T; ++t) {
    bool same = true;
    for (int i = 0; i < hq * d; ++i) same &= o_bf16[t * hq * d + i] == o_oscar[t * hq * d + i];
    EXPECT_EQ(same, t + 1 < 64 + 264) << t;
  }
}

// The per-token group lever: group = head_dim is the stored format itself; a 32-channel group
// keeps every row's own dequantisation error at most that of the whole-row encoding on average
// (more scales for the same codes); groups the INT2 encoder cannot take are refused.
TEST(DecodeEmulation, PerTokenGroupLever) {
  const int T = 300, hkv = 2, d = 64;
  const std::vector<float> k = RandomKv(T, hkv, d, 9), v = RandomKv(T, hkv, d, 10);
  const CodecSpec& spec = GetCodecSpec(CodecId::kOscar);
  auto whole = BuildEmulatedLayerKv(spec, nullptr, nullptr, T, hkv, d, k.data(), v.data());
  auto same = BuildEmulatedLayerKv(spec, nullptr, nullptr, T, hkv, d, k.data(), v.data(), -1.0f,
                                   -1.0f, /*per_token_group=*/d);
  auto g32 = BuildEmulatedLayerKv(spec, nullptr, nullptr, T, hkv, d, k.data(), v.data(), -1.0f,
                                  -1.0f, /*per_token_group=*/32);
  ASSERT_TRUE(whole.ok() && same.ok() && g32.ok());
  EXPECT_EQ(whole->k_deq, same->k_deq);
  EXPECT_EQ(whole->v_deq, same->v_deq);
  EXPECT_EQ(whole->k_fp, g32->k_fp);  // only the quantised rows change
  auto err = [](const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0;
    for (size_t i = 0; i < a.size(); ++i) e += (static_cast<double>(a[i]) - b[i]) * (a[i] - b[i]);
    return e;
  };
  EXPECT_LT(err(g32->k_deq, g32->k_fp), err(whole->k_deq, whole->k_fp));
  EXPECT_LT(err(g32->v_deq, g32->v_fp), err(whole->v_deq, whole->v_fp));
  EXPECT_FALSE(BuildEmulatedLayerKv(spec, nullptr, nullptr, T, hkv, d, k.data(), v.data(), -1.0f,
                                    -1.0f, /*per_token_group=*/48)
                   .ok());
}

}  // namespace
}  // namespace oscarkv::quant
