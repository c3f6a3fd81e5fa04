// Logprobs: the log-softmax at the token and the top alternatives, against a direct float64
// softmax; sums to one, handles -inf and NaN logits, orders ties by id.
#include "lib/engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"

namespace oscarkv::engine {
namespace {

TEST(Logprobs, MatchTheSoftmaxAndTheTopAreTheMostLikely) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> l(5000);
  for (float& x : l) x = d(rng) + 40.0f;  // offset: the max-shift must keep it exact
  double z = 0;
  for (float x : l) z += std::exp(double{x} - 40.0);
  const TokenLogprobs lp = ComputeLogprobs(l, 123, 5);
  EXPECT_EQ(lp.token, 123);
  EXPECT_NEAR(lp.logprob, (double{l[123]} - 40.0) - std::log(z), 1e-5);
  ASSERT_EQ(lp.top.size(), 5u);
  std::vector<float> sorted = l;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(l[lp.top[i].first], sorted[i]);
    EXPECT_NEAR(lp.top[i].second, (double{sorted[i]} - 40.0) - std::log(z), 1e-5);
    if (i > 0) {
      EXPECT_GE(lp.top[i - 1].second, lp.top[i].second);
    }
  }
  // Every token's probability sums to one.
  double total = 0;
  const TokenLogprobs all = ComputeLogprobs(l, 0, static_cast<int>(l.size()));
  for (const auto& [id, p] : all.top) total += std::exp(double{p});
  EXPECT_NEAR(total, 1.0, 1e-4);
}

TEST(Logprobs, NonFiniteLogitsAreMinusInfinityAndTiesGoToTheLowerId) {
  const std::vector<float> l = {1.0f, NAN, 1.0f, -INFINITY, 0.0f};
  const TokenLogprobs lp = ComputeLogprobs(l, 1, 3);
  EXPECT_EQ(lp.logprob, -INFINITY);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 0);
  EXPECT_EQ(lp.top[1].first, 2);
  EXPECT_EQ(lp.top[2].first, 4);
  const double log_z = 1.0 + std::log(2.0 + std::exp(-1.0));
  EXPECT_NEAR(lp.top[0].second, 1.0 - log_z, 1e-6);
  EXPECT_NEAR(lp.top[2].second, -log_z, 1e-6);
  EXPECT_TRUE(ComputeLogprobs(l, 0, 0).top.empty());
  EXPECT_EQ(ComputeLogprobs(l, 0, 99).top.size(), l.size());  // capped at the vocabulary
}

// Many ties (logits rounded to a few values): the top list is a full sort's prefix, by logit
// then id; with some -inf logits (the scalar path) and with all finite (the blocked one, which
// skips blocks whose max cannot enter the list).
TEST(Logprobs, TopIsASortsPrefixEvenWithManyTies) {
  for (const bool with_inf : {true, false}) {
    SCOPED_TRACE(with_inf ? "with -inf" : "all finite");
    std::mt19937_64 rng(11);
    std::uniform_int_distribution<int> d(0, 6);
    std::vector<float> l(3000);
    for (float& x : l) x = with_inf && d(rng) == 6 ? -INFINITY : static_cast<float>(d(rng));
    std::vector<int32_t> ids(l.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    for (int n : {1, 7, 20, 3000}) {
      const TokenLogprobs lp = ComputeLogprobs(l, 0, n);
      ASSERT_EQ(lp.top.size(), static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(lp.top[i].first, ids[i]) << "n " << n << " rank " << i;
      }
    }
  }
}

// rank: 1 + the logits strictly above the token's (vLLM's), equal logits sharing a rank, on
// both paths (a NaN counts as -inf).
TEST(Logprobs, RankCountsTheMoreLikelyTokens) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  EXPECT_EQ(ComputeLogprobs(l, 1, 0).rank, 1);
  EXPECT_EQ(ComputeLogprobs(l, 3, 0).rank, 1);
  EXPECT_EQ(ComputeLogprobs(l, 2, 0).rank, 3);
  EXPECT_EQ(ComputeLogprobs(l, 4, 0).rank, 5);
  std::vector<float> with_nan = l;
  with_nan[0] = NAN;
  EXPECT_EQ(ComputeLogprobs(with_nan, 2, 0).rank, 3);
  EXPECT_EQ(ComputeLogprobs(with_nan, 0, 0).rank, 5);  // NaN as -inf: below the other four
}

// The vectorised path (all logits finite) against a float64 softmax on a vocabulary-sized row,
// and against the scalar path: the same row with one logit made NaN (which counts as -inf).
TEST(Logprobs, VectorisedPathMatchesFloat64AndTheScalarPath) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> d(0.0f, 4.0f);
  std::vector<float> l(49152);
  for (float& x : l) x = d(rng);
  l[77] = -1e30f;  // finite, far below: exp underflows to 0 in both
  double max = -INFINITY;
  for (float x : l) max = std::max(max, double{x});
  double z = 0;
  for (float x : l) z += std::exp(double{x} - max);
  const TokenLogprobs fast = ComputeLogprobs(l, 1234, 20);
  EXPECT_NEAR(fast.logprob, (double{l[1234]} - max) - std::log(z), 2e-5);
  std::vector<float> with_nan = l;
  with_nan[77] = NAN;
  const TokenLogprobs slow = ComputeLogprobs(with_nan, 1234, 20);
  EXPECT_NEAR(fast.logprob, slow.logprob, 2e-5);
  ASSERT_EQ(fast.top.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(fast.top[i].first, slow.top[i].first) << i;
    EXPECT_NEAR(fast.top[i].second, slow.top[i].second, 2e-5) << i;
  }
}

// A prompt's own tokens scored chunk by chunk: row r of a chunk starting at `first` scores the
// token after position first + r; the row after the last token scores nothing.
TEST(PromptLogprobs, EachRowScoresTheNextPromptTokenAndTheLastRowNothing) {
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  constexpr int64_t kVocab = 6;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> logits(prompt.size() * kVocab);
  for (float& x : logits) x = d(rng);
  std::vector<TokenLogprobs> out;
  const std::span<const float> all(logits);
  AppendPromptLogprobs(prompt, 0, all.first(3 * kVocab), kVocab, 2, &out);  // rows 0-2
  ASSERT_EQ(out.size(), 3u);
  AppendPromptLogprobs(prompt, 3, all.subspan(3 * kVocab), kVocab, 2, &out);  // rows 3-4
  ASSERT_EQ(out.size(), prompt.size() - 1);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const TokenLogprobs want = ComputeLogprobs(all.subspan(i * kVocab, kVocab), prompt[i + 1], 2);
    EXPECT_EQ(out[i].token, prompt[i + 1]) << i;
    EXPECT_EQ(out[i].logprob, want.logprob) << i;
    EXPECT_EQ(out[i].top, want.top) << i;
  }
  // A one-token prompt has nothing to score.
  out.clear();
  AppendPromptLogprobs(std::span(prompt).first(1), 0, all.first(kVocab), kVocab, 0, &out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace oscarkv::engine
