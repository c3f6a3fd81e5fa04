#include "lib/eval/metrics.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lib/eval/text_overlap.h"

namespace oscarkv::eval {
namespace {

std::vector<float> RandomLogits(std::mt19937_64& rng, int n, float spread) {
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> l(n);
  for (auto& x : l) x = d(rng);
  return l;
}

TEST(MetricsTest, LogSoftmaxNormalises) {
  std::mt19937_64 rng(1);
  auto l = RandomLogits(rng, 1000, 5.0f);
  std::vector<double> lp;
  LogSoftmax(l, &lp);
  double s = 0;
  for (double x : lp) s += std::exp(x);
  EXPECT_NEAR(s, 1.0, 1e-12);
  // Shift invariance.
  for (auto& x : l) x += 100.0f;
  std::vector<double> lp2;
  LogSoftmax(l, &lp2);
  for (size_t i = 0; i < lp.size(); ++i) EXPECT_NEAR(lp[i], lp2[i], 1e-4);
}

TEST(MetricsTest, KlMatchesFloat64ReferenceAndIsZeroOnIdentity) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 5; ++trial) {
    auto a = RandomLogits(rng, 512, 3.0f);
    auto b = a;
    std::normal_distribution<float> noise(0.0f, 0.3f);
    for (auto& x : b) x += noise(rng);
    std::vector<double> la, lb;
    LogSoftmax(a, &la);
    LogSoftmax(b, &lb);
    // Reference straight from the definition, in float64 with explicit softmax.
    double za = 0, zb = 0;
    for (int i = 0; i < 512; ++i) {
      za += std::exp(static_cast<double>(a[i]));
      zb += std::exp(static_cast<double>(b[i]));
    }
    double ref = 0;
    for (int i = 0; i < 512; ++i) {
      const double p = std::exp(static_cast<double>(a[i])) / za;
      const double q = std::exp(static_cast<double>(b[i])) / zb;
      ref += p * std::log(p / q);
    }
    EXPECT_NEAR(KlFromLogProbs(la, lb), ref, 1e-9 * std::max(1.0, ref));
    EXPECT_GT(KlFromLogProbs(la, lb), 0.0);
    EXPECT_EQ(KlFromLogProbs(la, la), 0.0);  // exactly
    PositionScore s = ScorePosition(a, a, 7);
    EXPECT_EQ(s.kl, 0.0);
    EXPECT_EQ(s.nll_ref, s.nll_codec);
    EXPECT_TRUE(s.top1_agree);
  }
}

TEST(MetricsTest, ScorePositionNllAndTop1) {
  std::vector<float> ref = {0.0f, 2.0f, 1.0f};
  std::vector<float> codec = {3.0f, 0.0f, 1.0f};
  PositionScore s = ScorePosition(ref, codec, 2);
  const double zr = 1 + std::exp(2.0) + std::exp(1.0), zc = std::exp(3.0) + 1 + std::exp(1.0);
  EXPECT_NEAR(s.nll_ref, -(1.0 - std::log(zr)), 1e-12);
  EXPECT_NEAR(s.nll_codec, -(1.0 - std::log(zc)), 1e-12);
  EXPECT_FALSE(s.top1_agree);
}

TEST(MetricsTest, BootstrapConstantAndDeterministic) {
  std::vector<double> c(20, 0.25);
  Estimate e = BootstrapMean(c);
  EXPECT_EQ(e.mean, 0.25);
  EXPECT_EQ(e.lo, 0.25);
  EXPECT_EQ(e.hi, 0.25);
  EXPECT_EQ(e.n, 20);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> d(1.0, 2.0);
  std::vector<double> x(400);
  for (auto& v : x) v = d(rng);
  Estimate a = BootstrapMean(x, 2000, 9), b = BootstrapMean(x, 2000, 9);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  EXPECT_LE(a.lo, a.mean);
  EXPECT_GE(a.hi, a.mean);
  // Normal theory: half-width ~ 1.96 * s / sqrt(n).
  double m = 0, s2 = 0;
  for (double v : x) m += v;
  m /= x.size();
  for (double v : x) s2 += (v - m) * (v - m);
  const double half = 1.96 * std::sqrt(s2 / (x.size() - 1)) / std::sqrt(double(x.size()));
  EXPECT_NEAR((a.hi - a.lo) / 2, half, 0.15 * half);
  EXPECT_NEAR(a.mean, m, 1e-12);
}

TEST(MetricsTest, BootstrapCoverage) {
  // Over many synthetic experiments the 95% interval covers the true mean most of the time.
  std::mt19937_64 rng(4);
  std::exponential_distribution<double> d(2.0);  // mean 0.5, skewed like KL
  int covered = 0;
  const int experiments = 200;
  for (int e = 0; e < experiments; ++e) {
    std::vector<double> x(30);
    for (auto& v : x) v = d(rng);
    Estimate est = BootstrapMean(x, 500, e);
    covered += est.lo <= 0.5 && 0.5 <= est.hi;
  }
  EXPECT_GT(covered, experiments * 0.88);
  EXPECT_LT(covered, experiments * 0.99);
}

TEST(TextOverlapTest, ShinglesDetectCopiesNotDisjointText) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int32_t> tok(0, 49151);
  std::vector<int32_t> a(5000), b(5000);
  for (auto& t : a) t = tok(rng);
  for (auto& t : b) t = tok(rng);
  auto set = ShingleSet(a);
  EXPECT_DOUBLE_EQ(OverlapFraction(a, set), 1.0);
  EXPECT_DOUBLE_EQ(OverlapFraction(b, set), 0.0);
  // Half of c copied from a.
  std::vector<int32_t> c(a.begin(), a.begin() + 2500);
  c.insert(c.end(), b.begin(), b.begin() + 2500);
  EXPECT_NEAR(OverlapFraction(c, set), 0.5, 0.01);
  EXPECT_EQ(ContentHash("abc"), ContentHash("abc"));
  EXPECT_NE(ContentHash("abc"), ContentHash("abd"));
}

}  // namespace
}  // namespace oscarkv::eval
