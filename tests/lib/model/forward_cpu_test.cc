// CPU building blocks against float64 references: RoPE properties, RMSNorm, Linear, prompt
// attention (causal) versus a naive loop, and FullKvCache attention versus prompt attention.
#include "lib/model/forward_cpu.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/model/kv_cache.h"

namespace oscarkv::model {
namespace {

std::vector<float> Rand(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double Dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return s;
}

TEST(Rope, PositionZeroIsIdentityAndNormIsPreserved) {
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kNeox}) {
    std::vector<float> x = Rand(3 * 64, 1), y = x;
    ApplyRope(y.data(), 3, 64, 64, 0, 10000.0, 1.0, nullptr, style);
    EXPECT_EQ(x, y);
    ApplyRope(y.data(), 3, 64, 64, 1234, 10000.0, 1.0, nullptr, style);
    for (int h = 0; h < 3; ++h) {
      EXPECT_NEAR(Dot(&x[h * 64], &x[h * 64], 64), Dot(&y[h * 64], &y[h * 64], 64), 1e-3);
    }
  }
}

// <R(p) q, R(s) k> depends only on p - s.
TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kNeox}) {
    const std::vector<float> q = Rand(64, 2), k = Rand(64, 3);
    auto rotated_dot = [&](int64_t p, int64_t s) {
      std::vector<float> a = q, b = k;
      ApplyRope(a.data(), 1, 64, 64, p, 100000.0, 1.0, nullptr, style);
      ApplyRope(b.data(), 1, 64, 64, s, 100000.0, 1.0, nullptr, style);
      return Dot(a.data(), b.data(), 64);
    };
    const double ref = rotated_dot(7, 3);
    EXPECT_NEAR(rotated_dot(107, 103), ref, 1e-3);
    EXPECT_NEAR(rotated_dot(5004, 5000), ref, 2e-3);
    EXPECT_GT(std::abs(rotated_dot(7, 3) - rotated_dot(7, 4)), 1e-4);
  }
}

// Adjacent-pair RoPE equals NeoX RoPE after the permutation llama.cpp applies to Q/K weights
// (pairs (2i, 2i+1) <-> (i, i + D/2)), and matches a float64 reference of the angle formula.
TEST(Rope, AdjacentPairsIsPermutedNeoxAndMatchesReference) {
  const int d = 64;
  const double theta = 10000.0;
  const int64_t pos = 321;
  std::vector<float> x = Rand(d, 4);
  std::vector<float> adj = x;
  ApplyRope(adj.data(), 1, d, d, pos, theta, 1.0, nullptr, RopeStyle::kAdjacentPairs);
  std::vector<float> perm(d);
  for (int i = 0; i < d / 2; ++i) {
    perm[i] = x[2 * i];
    perm[i + d / 2] = x[2 * i + 1];
  }
  ApplyRope(perm.data(), 1, d, d, pos, theta, 1.0, nullptr, RopeStyle::kNeox);
  for (int i = 0; i < d / 2; ++i) {
    const double ang = pos * std::pow(theta, -2.0 * i / d);
    const double r0 = x[2 * i] * std::cos(ang) - x[2 * i + 1] * std::sin(ang);
    const double r1 = x[2 * i] * std::sin(ang) + x[2 * i + 1] * std::cos(ang);
    EXPECT_NEAR(adj[2 * i], r0, 1e-5);
    EXPECT_NEAR(adj[2 * i + 1], r1, 1e-5);
    EXPECT_FLOAT_EQ(perm[i], adj[2 * i]);
    EXPECT_FLOAT_EQ(perm[i + d / 2], adj[2 * i + 1]);
  }
}

TEST(ForwardCpu, RmsNormAndLinearMatchFloat64) {
  const int rows = 3, n = 96, out = 40;
  std::vector<float> x = Rand(rows * n, 5), w = Rand(n, 6), m = Rand(out * n, 7), b = Rand(out, 8);
  std::vector<float> y(rows * n);
  RmsNormTo(x.data(), w.data(), rows, n, 1e-5f, y.data());
  for (int r = 0; r < rows; ++r) {
    const double rms = std::sqrt(Dot(&x[r * n], &x[r * n], n) / n + 1e-5);
    for (int i = 0; i < n; ++i) EXPECT_NEAR(y[r * n + i], x[r * n + i] / rms * w[i], 1e-5);
  }
  for (int t : {1, rows}) {
    std::vector<float> z(t * out);
    Linear(x.data(), m.data(), b.data(), t, n, out, z.data());
    for (int r = 0; r < t; ++r) {
      for (int j = 0; j < out; ++j) {
        EXPECT_NEAR(z[r * out + j], Dot(&x[r * n], &m[j * n], n) + b[j], 1e-4);
      }
    }
  }
}

TEST(ForwardCpu, PromptAttentionIsCausalGqaAndMatchesCache) {
  const int t = 11, hq = 6, hkv = 2, d = 16;
  const float scale = 0.25f;
  std::vector<float> q = Rand(t * hq * d, 9), k = Rand(t * hkv * d, 10), v = Rand(t * hkv * d, 11);
  std::vector<float> out(t * hq * d);
  PromptAttention(q.data(), k.data(), v.data(), t, hq, hkv, d, scale, out.data());
  FullKvCache cache(1, hkv, d, /*round_to_bf16=*/false);
  std::vector<float> step(hq * d);
  for (int i = 0; i < t; ++i) {
    ASSERT_TRUE(cache.AppendLayer(0, &k[i * hkv * d], &v[i * hkv * d], 1).ok());
    ASSERT_TRUE(cache.Attend(0, &q[i * hq * d], hq, scale, step.data()).ok());
    for (int h = 0; h < hq; ++h) {
      const int g = h / (hq / hkv);
      // float64 reference over positions 0..i only.
      std::vector<double> p(i + 1);
      double mx = -1e300, sum = 0;
      for (int j = 0; j <= i; ++j) {
        p[j] = scale * Dot(&q[(i * hq + h) * d], &k[(j * hkv + g) * d], d);
        mx = std::max(mx, p[j]);
      }
      for (double& e : p) sum += (e = std::exp(e - mx));
      for (int c = 0; c < d; ++c) {
        double o = 0;
        for (int j = 0; j <= i; ++j) o += p[j] / sum * v[(j * hkv + g) * d + c];
        EXPECT_NEAR(out[(i * hq + h) * d + c], o, 1e-5);
        EXPECT_NEAR(step[h * d + c], o, 1e-5);
      }
    }
  }
  EXPECT_EQ(cache.Length(0), t);
  EXPECT_FALSE(cache.AppendLayer(3, k.data(), v.data(), 1).ok());
}

}  // namespace
}  // namespace oscarkv::model
