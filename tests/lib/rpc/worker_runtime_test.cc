// The pieces a worker server runs beside gRPC: the metrics endpoint (off for port -1; /readyz
// follows the ready flag with the given message; /metrics serves the registry) and
// PeriodicThread (runs repeatedly, Stop wakes it at once, nothing runs after Stop).
#include "lib/rpc/worker_runtime.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "httplib.h"

namespace oscarkv::rpc {
namespace {

TEST(StartMetricsEndpoint, NegativePortMeansNoEndpoint) {
  metrics::Registry registry;
  std::atomic<bool> ready{true};
  auto http = StartMetricsEndpoint(&registry, "127.0.0.1", -1, &ready, "draining");
  ASSERT_TRUE(http.ok()) << http.status();
  EXPECT_EQ(*http, nullptr);
}

TEST(StartMetricsEndpoint, ReadinessFollowsTheFlagAndMetricsAreServed) {
  metrics::Registry registry;
  registry.AddCounter("oscarkv_test_events_total", "Events.").Get().Increment(3);
  std::atomic<bool> ready{false};
  auto http = StartMetricsEndpoint(&registry, "127.0.0.1", 0, &ready, "kvstore is draining");
  ASSERT_TRUE(http.ok()) << http.status();
  ASSERT_NE(*http, nullptr);
  httplib::Client c("127.0.0.1", (*http)->port());
  auto r = c.Get("/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("kvstore is draining"), std::string::npos) << r->body;
  ready.store(true);
  r = c.Get("/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("oscarkv_test_events_total 3"), std::string::npos) << r->body;
  (*http)->Stop();
}

TEST(PeriodicThread, RunsEveryPeriodUntilStopped) {
  std::atomic<int> runs{0};
  PeriodicThread t(absl::Milliseconds(5), [&] { runs.fetch_add(1); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (runs.load() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(runs.load(), 3);
  t.Stop();
  const int after_stop = runs.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(runs.load(), after_stop);
  t.Stop();  // idempotent
}

TEST(PeriodicThread, StopWakesALongWaitAtOnceAndTheTaskNeverRan) {
  std::atomic<int> runs{0};
  const auto start = std::chrono::steady_clock::now();
  {
    PeriodicThread t(absl::Hours(1), [&] { runs.fetch_add(1); });
  }  // the destructor stops it
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(runs.load(), 0);
}

}  // namespace
}  // namespace oscarkv::rpc
