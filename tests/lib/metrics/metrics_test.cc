// Registry and exposition format 0.0.4: exact text, escaping, histograms, naming, concurrency.
#include "lib/metrics/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <thread>
#include <vector>

namespace oscarkv::metrics {
namespace {

using ::testing::HasSubstr;

TEST(Metrics, CounterAndGaugeExpositionIsExact) {
  Registry r;
  auto& evicted = r.AddCounter("oscarkv_kvstore_blocks_evicted_total", "Blocks evicted.", {"tier"});
  evicted.WithLabels({"gpu"}).Increment();
  evicted.WithLabels({"gpu"}).Increment(2);
  evicted.WithLabels({"disk"}).Increment(0.5);
  auto& bytes = r.AddGauge("oscarkv_kvstore_pool_bytes", "Bytes held.\nPer tier \\ total.");
  bytes.Get().Set(1536);
  bytes.Get().Sub(512);
  EXPECT_EQ(r.Expose(),
            "# HELP oscarkv_kvstore_blocks_evicted_total Blocks evicted.\n"
            "# TYPE oscarkv_kvstore_blocks_evicted_total counter\n"
            "oscarkv_kvstore_blocks_evicted_total{tier=\"disk\"} 0.5\n"
            "oscarkv_kvstore_blocks_evicted_total{tier=\"gpu\"} 3\n"
            "# HELP oscarkv_kvstore_pool_bytes Bytes held.\\nPer tier \\\\ total.\n"
            "# TYPE oscarkv_kvstore_pool_bytes gauge\n"
            "oscarkv_kvstore_pool_bytes 1024\n");
}

TEST(Metrics, LabelValuesAreEscaped) {
  Registry r;
  r.AddGauge("oscarkv_test_value_ratio", "h", {"a", "b"})
      .WithLabels({"quote\"back\\slash", "new\nline"})
      .Set(-2.25);
  EXPECT_THAT(r.Expose(), HasSubstr("oscarkv_test_value_ratio{a=\"quote\\\"back\\\\slash\","
                                    "b=\"new\\nline\"} -2.25\n"));
}

TEST(Metrics, HistogramExpositionIsExact) {
  Registry r;
  auto& h = r.AddHistogram("oscarkv_decode_step_seconds", "Step latency.", {0.001, 0.01, 0.1},
                           {"codec"});
  Histogram& oscar = h.WithLabels({"oscar"});
  for (double v : {0.0005, 0.001, 0.002, 0.05, 0.5, 7.0}) oscar.Observe(v);
  // 0.001 is <= the 0.001 bound (le is inclusive).
  const double sum = 0.0005 + 0.001 + 0.002 + 0.05 + 0.5 + 7.0;
  EXPECT_EQ(r.Expose(),
            "# HELP oscarkv_decode_step_seconds Step latency.\n"
            "# TYPE oscarkv_decode_step_seconds histogram\n"
            "oscarkv_decode_step_seconds_bucket{codec=\"oscar\",le=\"0.001\"} 2\n"
            "oscarkv_decode_step_seconds_bucket{codec=\"oscar\",le=\"0.01\"} 3\n"
            "oscarkv_decode_step_seconds_bucket{codec=\"oscar\",le=\"0.1\"} 4\n"
            "oscarkv_decode_step_seconds_bucket{codec=\"oscar\",le=\"+Inf\"} 6\n"
            "oscarkv_decode_step_seconds_sum{codec=\"oscar\"} " + FormatValue(sum) + "\n"
            "oscarkv_decode_step_seconds_count{codec=\"oscar\"} 6\n");
  EXPECT_EQ(std::stod(FormatValue(sum)), sum) << "sum is printed round-trip exact";
}

TEST(Metrics, UnlabelledHistogramStartsAtZero) {
  Registry r;
  r.AddHistogram("oscarkv_test_size_bytes", "x", {1024});
  EXPECT_EQ(r.Expose(),
            "# HELP oscarkv_test_size_bytes x\n"
            "# TYPE oscarkv_test_size_bytes histogram\n"
            "oscarkv_test_size_bytes_bucket{le=\"1024\"} 0\n"
            "oscarkv_test_size_bytes_bucket{le=\"+Inf\"} 0\n"
            "oscarkv_test_size_bytes_sum 0\n"
            "oscarkv_test_size_bytes_count 0\n");
}

TEST(Metrics, HistogramBucketsMatchFloat64Reference) {
  Registry r;
  const std::vector<double> bounds = ExponentialBuckets(1e-4, 2, 16);
  Histogram& h = r.AddHistogram("oscarkv_test_latency_seconds", "x", bounds).Get();
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> dist(-5, 2);
  std::vector<double> values(5000);
  double sum = 0;
  for (double& v : values) {
    v = dist(rng);
    h.Observe(v);
    sum += v;
  }
  const Histogram::Snapshot s = h.Read();
  ASSERT_EQ(s.cumulative.size(), bounds.size() + 1);
  for (size_t i = 0; i < bounds.size(); ++i) {
    const auto expected = std::count_if(values.begin(), values.end(),
                                        [&](double v) { return v <= bounds[i]; });
    EXPECT_EQ(s.cumulative[i], static_cast<uint64_t>(expected)) << "le " << bounds[i];
  }
  EXPECT_EQ(s.cumulative.back(), values.size());
  EXPECT_EQ(s.count, values.size());
  EXPECT_NEAR(s.sum, sum, 1e-9 * sum);
}

TEST(Metrics, SpecialValues) {
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(123456789), "123456789");
  EXPECT_EQ(std::stod(FormatValue(0.1)), 0.1);
  EXPECT_EQ(std::stod(FormatValue(1e300)), 1e300);
  Registry r;
  Histogram& h = r.AddHistogram("oscarkv_test_nan_seconds", "x", {1}).Get();
  h.Observe(std::nan(""));
  h.Observe(std::numeric_limits<double>::infinity());
  const auto s = h.Read();
  EXPECT_EQ(s.cumulative[0], 0u);
  EXPECT_EQ(s.cumulative[1], 2u);
}

TEST(Metrics, FamiliesSortedAndRedeclarationReturnsTheSameFamily) {
  Registry r;
  r.AddGauge("oscarkv_zeta_bytes", "z");
  r.AddGauge("oscarkv_alpha_bytes", "a");
  auto& c1 = r.AddCounter("oscarkv_mid_requests_total", "m", {"svc"});
  auto& c2 = r.AddCounter("oscarkv_mid_requests_total", "m", {"svc"});
  EXPECT_EQ(&c1, &c2);
  EXPECT_EQ(&c1.WithLabels({"a"}), &c2.WithLabels({"a"}));
  const std::string text = r.Expose();
  EXPECT_LT(text.find("oscarkv_alpha_bytes"), text.find("oscarkv_mid_requests_total"));
  EXPECT_LT(text.find("oscarkv_mid_requests_total"), text.find("oscarkv_zeta_bytes"));
}

TEST(Metrics, CollectCallbackRunsBeforeEachExposition) {
  Registry r;
  Gauge& g = r.AddGauge("oscarkv_test_sampled_bytes", "x").Get();
  int calls = 0;
  r.AddCollectCallback([&] { g.Set(++calls * 10); });
  EXPECT_THAT(r.Expose(), HasSubstr("oscarkv_test_sampled_bytes 10\n"));
  EXPECT_THAT(r.Expose(), HasSubstr("oscarkv_test_sampled_bytes 20\n"));
}

TEST(Metrics, NameValidation) {
  EXPECT_TRUE(ValidateMetricName("oscarkv_kvstore_blocks_evicted_total", "counter").ok());
  EXPECT_TRUE(ValidateMetricName("oscarkv_decode_step_seconds", "histogram").ok());
  EXPECT_TRUE(ValidateMetricName("oscarkv_kvstore_pool_bytes", "gauge").ok());
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"kvstore_blocks_total", "counter"},          // no prefix
      {"oscarkv_", "gauge"},                        // nothing after the prefix
      {"oscarkv_Pool_bytes", "gauge"},              // upper case
      {"oscarkv_pool-bytes", "gauge"},              // dash
      {"oscarkv_pool__bytes", "gauge"},             // empty word
      {"oscarkv_pool_bytes_", "gauge"},             // trailing underscore
      {"oscarkv_requests", "counter"},              // counter without _total
      {"oscarkv_requests_total", "gauge"},          // _total on a gauge
      {"oscarkv_step_ms", "histogram"},             // non-base unit
      {"oscarkv_step_milliseconds", "histogram"},
      {"oscarkv_pool_mib", "gauge"},
      {"oscarkv_hit_percent", "gauge"},
      {"oscarkv_step_count", "gauge"},              // reserved suffix
      {"oscarkv_step_bucket", "gauge"},
      {"oscarkv_step_seconds", "summary"},          // unknown type
  };
  for (const auto& [name, type] : bad) {
    EXPECT_EQ(ValidateMetricName(name, type).code(), absl::StatusCode::kInvalidArgument)
        << name << " " << type;
  }
  EXPECT_TRUE(ValidateLabelName("tier", "counter").ok());
  EXPECT_TRUE(ValidateLabelName("_x9", "gauge").ok());
  EXPECT_TRUE(ValidateLabelName("le", "gauge").ok());
  EXPECT_FALSE(ValidateLabelName("le", "histogram").ok());
  EXPECT_FALSE(ValidateLabelName("__name", "gauge").ok());
  EXPECT_FALSE(ValidateLabelName("9x", "gauge").ok());
  EXPECT_FALSE(ValidateLabelName("a-b", "gauge").ok());
  EXPECT_FALSE(ValidateLabelName("", "gauge").ok());
}

TEST(MetricsDeathTest, BadDeclarationsCheckFail) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(Registry().AddCounter("oscarkv_requests", "x"), "_total");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddGauge("oscarkv_x_seconds", "x");
        r.AddHistogram("oscarkv_x_seconds", "x", {1});
      },
      "already declared");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddGauge("oscarkv_x_bytes", "x");
        r.AddGauge("oscarkv_x_bytes", "other help");
      },
      "already declared");
  EXPECT_DEATH(Registry().AddGauge("oscarkv_x_bytes", "x", {"a"}).WithLabels({"1", "2"}),
               "label values");
  EXPECT_DEATH(Registry().AddHistogram("oscarkv_x_seconds", "x", {1, 1}), "increasing");
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  Registry r;
  auto& fam = r.AddCounter("oscarkv_test_ops_total", "x", {"t"});
  Counter& shared = fam.WithLabels({"shared"});
  Gauge& gauge = r.AddGauge("oscarkv_test_inflight_requests", "x").Get();
  Histogram& hist = r.AddHistogram("oscarkv_test_op_seconds", "x", {0.5}).Get();
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Children created concurrently while others update and scrape.
      Counter& own = fam.WithLabels({std::to_string(t)});
      for (int i = 0; i < kPerThread; ++i) {
        shared.Increment();
        own.Increment(2);
        gauge.Add(1);
        gauge.Sub(1);
        hist.Observe(i % 2 ? 0.25 : 1.0);
        if (i % 20000 == 0) (void)r.Expose();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(shared.Value(), double{kThreads} * kPerThread);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(fam.WithLabels({std::to_string(t)}).Value(), 2.0 * kPerThread);
  }
  EXPECT_EQ(gauge.Value(), 0.0);
  const auto s = hist.Read();
  EXPECT_EQ(s.count, uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(s.cumulative[0], uint64_t{kThreads} * kPerThread / 2);
  EXPECT_EQ(s.sum, kThreads * (kPerThread / 2) * (0.25 + 1.0));
}

}  // namespace
}  // namespace oscarkv::metrics
