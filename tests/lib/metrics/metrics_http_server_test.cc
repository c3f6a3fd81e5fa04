// A real scrape over loopback with httplib's client.
#include "lib/metrics/metrics_http_server.h"

#include <httplib.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

namespace oscarkv::metrics {
namespace {

using ::testing::HasSubstr;

MetricsHttpServerOptions Loopback() {
  MetricsHttpServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  return o;
}

TEST(MetricsHttpServer, ServesMetricsHealthAndReadiness) {
  Registry registry;
  Counter& scrapes = registry.AddCounter("oscarkv_test_requests_total", "Requests.").Get();
  scrapes.Increment(41);
  std::atomic<bool> ready{false};
  MetricsHttpServerOptions o = Loopback();
  o.readiness = [&]() -> absl::Status {
    if (ready.load()) return absl::OkStatus();
    return absl::UnavailableError("model still loading");
  };
  o.extra_get_handlers.push_back(
      {"/status", [] { return HttpResponse{200, "text/html", "<h1>ok</h1>"}; }});
  auto server = MetricsHttpServer::Start(&registry, o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  scrapes.Increment();
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), kExpositionContentType);
  EXPECT_EQ(res->body, registry.Expose());
  EXPECT_THAT(res->body, HasSubstr("oscarkv_test_requests_total 42\n"));

  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");

  res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_THAT(res->body, HasSubstr("model still loading"));
  ready = true;
  res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);

  res = client.Get("/status");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "<h1>ok</h1>");
  res = client.Get("/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);

  (*server)->Stop();
  (*server)->Stop();  // idempotent
  httplib::Client after("127.0.0.1", (*server)->port());
  after.set_connection_timeout(1);
  EXPECT_FALSE(after.Get("/healthz")) << "server still answering after Stop()";
}

TEST(MetricsHttpServer, PortInUseIsUnavailable) {
  auto first = MetricsHttpServer::Start(nullptr, Loopback());
  ASSERT_TRUE(first.ok());
  MetricsHttpServerOptions o = Loopback();
  o.port = (*first)->port();
  auto second = MetricsHttpServer::Start(nullptr, o);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  o.port = 70000;
  EXPECT_EQ(MetricsHttpServer::Start(nullptr, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MetricsHttpServer, StartStopRepeatedly) {
  Registry registry;
  for (int i = 0; i < 20; ++i) {
    auto s = MetricsHttpServer::Start(&registry, Loopback());
    ASSERT_TRUE(s.ok()) << s.status();
    // Destructor stops; no hang even without a request.
  }
}

}  // namespace
}  // namespace oscarkv::metrics
