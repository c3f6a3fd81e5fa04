// Sampling: greedy is argmax (lowest id on ties), seeds reproduce, and temperature / top-k /
// top-p sampling draw from the softmax of the filtered logits (float weights summed in float64),
// over small vocabularies and over a model-sized one whose candidates the sampler orders a band
// at a time; non-finite logits are never drawn; presence / frequency penalties lower the logits
// of generated tokens by OpenAI's formula.
#include "lib/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace oscarkv::engine {
namespace {

std::vector<float> RandomLogits(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  std::vector<float> l = RandomLogits(1000, 1);
  int best = 0;
  for (int i = 1; i < 1000; ++i) if (l[i] > l[best]) best = i;
  Sampler s({});
  EXPECT_EQ(s.Sample(l), best);
  l[7] = l[best];
  EXPECT_EQ(s.Sample(l), std::min(7, best));
  l[3] = NAN;
  EXPECT_NE(s.Sample(l), 3);
}

TEST(Sampler, SameSeedSameTokens) {
  const std::vector<float> l = RandomLogits(500, 2);
  Sampler a({.temperature = 1.0f, .seed = 42}), b({.temperature = 1.0f, .seed = 42});
  Sampler c({.temperature = 1.0f, .seed = 43});
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t x = a.Sample(l);
    EXPECT_EQ(x, b.Sample(l));
    differ += x != c.Sample(l);
  }
  EXPECT_GT(differ, 0);
}

// A token's draw depends only on the seed and its index: a sampler that observed the first k
// tokens (picked by another process, or before a resume) draws the rest as the one that sampled
// them all, with or without filters.
TEST(Sampler, DrawsAreKeyedBySeedAndTokenIndex) {
  for (const SamplingParams p : {SamplingParams{.temperature = 1.0f, .seed = 42},
                                 SamplingParams{.temperature = 0.7f, .top_p = 0.9f, .seed = 3},
                                 SamplingParams{.temperature = 1.3f, .top_k = 40, .seed = 8}}) {
    std::vector<std::vector<float>> steps;
    for (int i = 0; i < 60; ++i) steps.push_back(RandomLogits(500, 100 + i));
    Sampler whole(p);
    std::vector<int32_t> tokens;
    for (const auto& l : steps) tokens.push_back(whole.Sample(l));
    for (size_t k : {size_t{1}, size_t{17}, size_t{59}}) {
      Sampler resumed(p);
      for (size_t i = 0; i < k; ++i) resumed.Observe(tokens[i]);
      for (size_t i = k; i < steps.size(); ++i) {
        EXPECT_EQ(resumed.Sample(steps[i]), tokens[i]) << "token " << i << " after " << k;
      }
    }
    // Not one draw repeated: a sampler that observed nothing differs from the stream.
    Sampler fresh(p);
    int same = 0;
    for (size_t i = 1; i < steps.size(); ++i) same += fresh.Sample(steps[i]) == tokens[i];
    EXPECT_LT(same, 50);
  }
}

TEST(Sampler, TopKOneIsGreedy) {
  const std::vector<float> l = RandomLogits(300, 3);
  Sampler s({.temperature = 1.5f, .top_k = 1, .seed = 9});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.Sample(l), Argmax(l));
}

// Empirical frequencies match the float64 softmax over the nucleus within 5 sigma.
TEST(Sampler, FrequenciesMatchFilteredSoftmax) {
  const std::vector<float> l = RandomLogits(40, 4);
  const float temperature = 0.8f, top_p = 0.9f;
  const int top_k = 20;
  // float64 reference: sort, top-k, softmax, nucleus, renormalise.
  std::vector<int> ids(l.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return l[a] > l[b]; });
  ids.resize(top_k);
  std::vector<double> p;
  double z = 0;
  for (int id : ids) z += std::exp((double{l[id]} - l[ids[0]]) / temperature);
  double mass = 0;
  size_t n = 0;
  for (int id : ids) {
    p.push_back(std::exp((double{l[id]} - l[ids[0]]) / temperature) / z);
    mass += p.back();
    ++n;
    if (mass >= top_p) break;
  }
  std::map<int, double> expected;
  for (size_t i = 0; i < n; ++i) expected[ids[i]] = p[i] / mass;

  Sampler s({.temperature = temperature, .top_p = top_p, .top_k = top_k, .seed = 5});
  const int draws = 40000;
  std::map<int, int> count;
  for (int i = 0; i < draws; ++i) ++count[s.Sample(l)];
  for (const auto& [id, c] : count) EXPECT_TRUE(expected.count(id)) << "token outside nucleus";
  for (const auto& [id, q] : expected) {
    const double sigma = std::sqrt(draws * q * (1 - q));
    EXPECT_NEAR(count[id], draws * q, 5 * sigma + 1) << "token " << id;
  }
}

// The float64 softmax of `l` at `temperature`, filtered by top-k (0 = off), then top-p, as the
// OpenAI API defines them: candidates by logit descending, then id.
std::map<int, double> FilteredSoftmax(const std::vector<float>& l, float temperature, float top_p,
                                      int top_k) {
  std::vector<int> ids(l.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  std::sort(ids.begin(), ids.end(),
            [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  if (top_k > 0 && static_cast<size_t>(top_k) < ids.size()) ids.resize(top_k);
  double z = 0;
  for (int id : ids) z += std::exp((double{l[id]} - l[ids[0]]) / temperature);
  std::map<int, double> p;
  double mass = 0;
  for (int id : ids) {
    p[id] = std::exp((double{l[id]} - l[ids[0]]) / temperature) / z;
    mass += p[id];
    if (mass >= top_p) break;
  }
  for (auto& [id, q] : p) q /= mass;
  return p;
}

// A larger vocabulary (8,192 logits, flatter than a model's so that draws reach deep into the
// order: several bands and chunks): per token of the 30 likeliest, and per tenth of the
// remaining mass, the frequencies match the float64 reference within 5 sigma, unfiltered (drawn
// by id) and with top-k and top-p (drawn from the ordered candidates).
TEST(Sampler, LargeVocabularyFrequenciesMatchFilteredSoftmax) {
  const std::vector<float> l = RandomLogits(8192, 11);
  struct Case {
    float temperature, top_p;
    int top_k;
  };
  for (const Case& c : {Case{1.0f, 1.0f, 0}, Case{0.7f, 0.9f, 0}, Case{1.3f, 1.0f, 300},
                        Case{1.0f, 0.95f, 1000}}) {
    SCOPED_TRACE(testing::Message() << "temperature " << c.temperature << " top_p " << c.top_p
                                    << " top_k " << c.top_k);
    const std::map<int, double> expected = FilteredSoftmax(l, c.temperature, c.top_p, c.top_k);
    // Buckets: the 30 likeliest tokens alone, then the rest by tenths of their mass.
    std::vector<std::pair<double, int>> by_p;
    for (const auto& [id, q] : expected) by_p.emplace_back(-q, id);
    std::sort(by_p.begin(), by_p.end());
    std::map<int, int> bucket_of;
    std::vector<double> bucket_p;
    double rest = 0;
    for (size_t i = 30; i < by_p.size(); ++i) rest -= by_p[i].first;
    double seen = 0;
    for (size_t i = 0; i < by_p.size(); ++i) {
      const double q = -by_p[i].first;
      const size_t b = i < 30 ? i : 30 + std::min<size_t>(9, static_cast<size_t>(10 * seen / rest));
      if (i >= 30) seen += q;
      if (bucket_p.size() <= b) bucket_p.resize(b + 1, 0.0);
      bucket_p[b] += q;
      bucket_of[by_p[i].second] = static_cast<int>(b);
    }
    Sampler s({.temperature = c.temperature, .top_p = c.top_p, .top_k = c.top_k, .seed = 21});
    const int draws = 10000;
    std::vector<int> count(bucket_p.size(), 0);
    for (int i = 0; i < draws; ++i) {
      const int32_t token = s.Sample(l);
      auto it = bucket_of.find(token);
      ASSERT_NE(it, bucket_of.end()) << "token " << token << " outside the filtered set";
      ++count[it->second];
    }
    for (size_t b = 0; b < bucket_p.size(); ++b) {
      const double q = bucket_p[b];
      EXPECT_NEAR(count[b], draws * q, 5 * std::sqrt(draws * q * (1 - q)) + 1) << "bucket " << b;
    }
  }
}

// Top-k's cut and top-p's nucleus go by logit, then lowest id: tied logits straddling the cut
// keep the lower ids.
TEST(Sampler, FiltersBreakTiesByLowerId) {
  std::vector<float> l(5000, -5.0f);
  for (int id : {4000, 17, 2500, 999}) l[id] = 3.0f;  // four tied best
  Sampler top2({.temperature = 1.0f, .top_k = 2, .seed = 4});
  std::map<int, int> seen;
  for (int i = 0; i < 400; ++i) ++seen[top2.Sample(l)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[17], 0);
  EXPECT_GT(seen[999], 0);
  Sampler nucleus({.temperature = 1.0f, .top_p = 1e-6f, .seed = 4});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(nucleus.Sample(l), 17);
}

// NaN and +inf count as -inf: never drawn, in every mode; nothing finite left gives token 0;
// a subnormal temperature is greedy.
TEST(Sampler, NonFiniteLogitsAreNeverDrawn) {
  std::vector<float> l = RandomLogits(3000, 12);
  for (int i = 0; i < 3000; i += 7) l[i] = NAN;
  for (int i = 3; i < 3000; i += 11) l[i] = INFINITY;
  for (int i = 5; i < 3000; i += 13) l[i] = -INFINITY;
  auto finite = [&](int32_t t) { return std::isfinite(l[t]); };
  for (const SamplingParams& p :
       {SamplingParams{.temperature = 1.0f, .seed = 1},
        SamplingParams{.temperature = 50.0f, .seed = 2},
        SamplingParams{.temperature = 0.8f, .top_p = 0.9f, .seed = 3},
        SamplingParams{.temperature = 100.0f, .top_k = 2900, .seed = 4}}) {
    Sampler s(p);
    for (int i = 0; i < 500; ++i) {
      const int32_t t = s.Sample(l);
      ASSERT_TRUE(finite(t)) << "token " << t << " (" << l[t] << ") at temperature "
                             << p.temperature;
    }
  }
  EXPECT_EQ(Sampler({.temperature = 1e-40f}).Sample(l), Argmax(l));
  const std::vector<float> none = {NAN, -INFINITY, INFINITY};
  EXPECT_EQ(Sampler({.temperature = 1.0f}).Sample(none), 0);
  EXPECT_EQ(Sampler({}).Sample(none), 0);
}

TEST(Sampler, PresencePenaltyLowersEachGeneratedTokenOnce) {
  const std::vector<float> l = {2.0f, 1.5f, 0.0f};
  Sampler plain({});
  Sampler s({.presence_penalty = 1.0f});
  std::vector<int32_t> got, unpenalized;
  for (int i = 0; i < 4; ++i) {
    got.push_back(s.Sample(l));
    unpenalized.push_back(plain.Sample(l));
  }
  // 2.0 | 1.0 vs 1.5 | 1.0 vs 0.5 | 1.0 vs 0.5 (ties go to the lower id).
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 0, 0}));
  EXPECT_EQ(unpenalized, (std::vector<int32_t>{0, 0, 0, 0}));
}

TEST(Sampler, FrequencyPenaltyGrowsWithEachRepeat) {
  const std::vector<float> l = {3.0f, 0.0f};
  Sampler s({.frequency_penalty = 1.0f});
  std::vector<int32_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(s.Sample(l));
  // Token 0 at 3, 2, 1, 0 (tie: lower id), then -1 < 0; then token 1 at -1 ties token 0's -1.
  EXPECT_EQ(got, (std::vector<int32_t>{0, 0, 0, 0, 1, 0}));
}

TEST(Sampler, ObservedTokensArePenalizedAndNegativePenaltiesFavourThem) {
  const std::vector<float> l = {1.0f, 0.9f};
  Sampler s({.presence_penalty = 0.5f});
  s.Observe(0);  // e.g. the first token, sampled by the prefill worker
  EXPECT_EQ(s.Sample(l), 1);
  Sampler favour({.frequency_penalty = -0.5f});
  favour.Observe(1);
  EXPECT_EQ(favour.Sample(l), 1);
  Sampler off({});
  off.Observe(0);
  EXPECT_EQ(off.Sample(l), 0);
}

// With a temperature, the draw follows the softmax of the penalized logits: token 0 generated
// twice with frequency 0.5 and presence 0.25 sits 1.25 below its logit.
TEST(Sampler, PenalizedFrequenciesMatchSoftmaxOfPenalizedLogits) {
  const std::vector<float> l = {1.0f, 0.5f, 0.0f};
  const float temperature = 0.7f;
  std::vector<double> shifted = {1.0 - 2 * 0.5 - 0.25, 0.5, 0.0};
  double z = 0;
  for (double x : shifted) z += std::exp(x / temperature);
  const int draws = 20000;
  std::vector<int> count(3, 0);
  for (int i = 0; i < draws; ++i) {
    Sampler s({.temperature = temperature, .seed = static_cast<uint64_t>(i),
               .presence_penalty = 0.25f, .frequency_penalty = 0.5f});
    s.Observe(0);
    s.Observe(0);
    ++count[s.Sample(l)];
  }
  for (int id = 0; id < 3; ++id) {
    const double q = std::exp(shifted[id] / temperature) / z;
    const double sigma = std::sqrt(draws * q * (1 - q));
    EXPECT_NEAR(count[id], draws * q, 5 * sigma + 1) << "token " << id;
  }
}

TEST(Sampler, LogitBiasBansAndForcesTokens) {
  const std::vector<float> l = {2.0f, 1.5f, 0.0f};
  Sampler ban({.logit_bias = {{0, -100.0f}}});
  EXPECT_EQ(ban.Sample(l), 1);
  EXPECT_EQ(ban.Sample(l), 1);  // every step, not only the first
  Sampler force({.temperature = 1.0f, .seed = 3, .logit_bias = {{2, 100.0f}}});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(force.Sample(l), 2);
  Sampler outside({.logit_bias = {{7, 100.0f}}});  // past the vocabulary: ignored
  EXPECT_EQ(outside.Sample(l), 0);
  // Bias and penalties add: biased {1.0, 1.1, 0}; then 1 drops to 0.35; then 0 to 0.25.
  Sampler both({.presence_penalty = 0.75f, .logit_bias = {{0, -1.0f}, {1, -0.4f}}});
  EXPECT_EQ(both.Sample(l), 1);
  EXPECT_EQ(both.Sample(l), 0);
  EXPECT_EQ(both.Sample(l), 1);
}

TEST(Sampler, MinTokensBansTheStopIdsUntilEnoughAreGenerated) {
  const std::vector<float> l = {0.0f, 5.0f, 1.0f};  // 1 plays the end-of-generation token
  Sampler s({.min_tokens = 3, .min_tokens_banned = {1}});
  s.Observe(2);  // the first token, from the prefill: counts towards min_tokens
  EXPECT_EQ(s.Sample(l), 2);
  EXPECT_EQ(s.Sample(l), 2);
  EXPECT_EQ(s.Sample(l), 1);  // 3 generated before it: allowed now
  Sampler none({.min_tokens = 2});  // nothing to ban
  EXPECT_EQ(none.Sample(l), 1);
  EXPECT_FALSE(SamplingParams{.min_tokens = -1}.Validate().ok());
}

TEST(SamplingParams, ValidateRejectsBadValues) {
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
  EXPECT_FALSE(SamplingParams{.temperature = -1}.Validate().ok());
  EXPECT_FALSE(SamplingParams{.top_p = 0}.Validate().ok());
  EXPECT_FALSE(SamplingParams{.top_p = 1.5f}.Validate().ok());
  EXPECT_FALSE(SamplingParams{.top_k = -2}.Validate().ok());
  EXPECT_TRUE((SamplingParams{.presence_penalty = -2, .frequency_penalty = 2}.Validate().ok()));
  EXPECT_FALSE(SamplingParams{.presence_penalty = 2.5f}.Validate().ok());
  EXPECT_FALSE(SamplingParams{.frequency_penalty = -2.1f}.Validate().ok());
  EXPECT_FALSE(SamplingParams{.frequency_penalty = NAN}.Validate().ok());
  EXPECT_TRUE((SamplingParams{.logit_bias = {{5, -100}, {9, 100}}}.Validate(10).ok()));
  EXPECT_FALSE((SamplingParams{.logit_bias = {{10, 1}}}.Validate(10).ok()));
  EXPECT_TRUE((SamplingParams{.logit_bias = {{10, 1}}}.Validate().ok()));  // vocabulary unknown
  EXPECT_FALSE((SamplingParams{.logit_bias = {{-1, 1}}}.Validate().ok()));
  EXPECT_FALSE((SamplingParams{.logit_bias = {{1, 100.5f}}}.Validate().ok()));
}

}  // namespace
}  // namespace oscarkv::engine
