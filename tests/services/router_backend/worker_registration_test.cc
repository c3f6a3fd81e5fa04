// rpc::WorkerRegistration against the real router: a RouterServer (WorkerRegistryService) on
// loopback gRPC. Registration, heartbeats with load and held keys (full, then deltas), retry until
// the router is up, re-registration after a router restart (new epoch), Deregister on Stop, and
// expiry of a worker that stops heartbeating.
#include "lib/rpc/worker_registration.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "services/router/router_server.h"
#include "tests/services/router/fake_completion_backend.h"

namespace oscarkv::rpc {
namespace {

using router::RouterConfig;
using router::RouterServer;
using router::WorkerHealth;
using router::WorkerRole;

constexpr double kInterval = 0.2;  // seconds; short so expiry tests stay short

// A TCP port that was free a moment ago (the router binds it later, to test "router not up yet").
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

std::unique_ptr<RouterServer> StartRouter(const std::string& grpc_address) {
  RouterConfig c;
  c.http_host = "127.0.0.1";
  c.http_port = 0;
  c.grpc_address = grpc_address;
  c.heartbeat_interval_s = kInterval;
  c.suspect_after_missed = 1;
  c.dead_after_missed = 3;
  c.drain_timeout_s = 0;
  auto s = RouterServer::Create(c, std::make_shared<router::testing::FakeCompletionBackend>());
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// What the fake worker reports; the test changes it between heartbeats.
struct Reported {
  absl::Mutex mu;
  WorkerReport report ABSL_GUARDED_BY(mu);
  WorkerRegistration::ReportFn Fn() {
    return [this] {
      absl::MutexLock lock(&mu);
      return report;
    };
  }
  void Set(int active, std::vector<kvformat::BlockKey> keys) {
    absl::MutexLock lock(&mu);
    report.load.set_active_requests(active);
    report.held_keys = std::move(keys);
  }
};

WorkerRegistrationOptions Options(const std::string& router, const std::string& id,
                                  oscarkv::common::v1::WorkerRole role) {
  WorkerRegistrationOptions o;
  o.router_address = router;
  o.worker.set_worker_id(id);
  o.worker.set_role(role);
  o.worker.set_grpc_address("127.0.0.1:1");  // never dialled here
  o.initial_backoff = absl::Milliseconds(50);
  o.max_backoff = absl::Milliseconds(200);
  o.call_timeout = absl::Seconds(1);
  return o;
}

std::vector<kvformat::BlockKey> Keys(uint64_t from, uint64_t to) {
  std::vector<kvformat::BlockKey> k;
  for (uint64_t i = from; i < to; ++i) k.push_back({i, ~i});
  return k;
}

TEST(WorkerRegistrationTest, RegistersHeartbeatsKeysAndDeregisters) {
  auto router = StartRouter("127.0.0.1:0");
  ASSERT_NE(router, nullptr);
  const std::string addr = "127.0.0.1:" + std::to_string(router->grpc_port());
  Reported rep;
  rep.Set(2, Keys(1, 5));
  WorkerRegistrationOptions options =
      Options(addr, "decode-7", oscarkv::common::v1::WORKER_ROLE_DECODE);
  options.worker.set_kv_numerics("cuda-sm90-132sm");
  options.worker.set_bypasses_kvstore(true);
  auto reg = WorkerRegistration::Start(options, rep.Fn());
  ASSERT_TRUE(reg.ok()) << reg.status();
  ASSERT_TRUE((*reg)->WaitUntilRegistered(absl::Seconds(5)));
  ASSERT_TRUE((*reg)->WaitForHeartbeats(1, absl::Seconds(5)));

  auto w = router->workers().Get("decode-7");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->spec.role, WorkerRole::kDecode);
  EXPECT_EQ(w->spec.address, "127.0.0.1:1");
  EXPECT_EQ(w->spec.kv_numerics, "cuda-sm90-132sm");
  EXPECT_TRUE(w->spec.bypasses_kvstore);
  EXPECT_EQ(w->health, WorkerHealth::kHealthy);
  EXPECT_EQ(w->reported.active_requests, 2);
  EXPECT_EQ(router->prefix_index().HolderSize("decode-7"), 4u);
  const std::vector<kvformat::BlockKey> chain = Keys(1, 5);
  EXPECT_EQ(router->prefix_index().MatchedBlocks("decode-7", chain), 4);

  // Keys 1..2 evicted, 5..6 added: the delta reaches the index.
  rep.Set(1, Keys(3, 7));
  const int64_t n = (*reg)->heartbeats();
  ASSERT_TRUE((*reg)->WaitForHeartbeats(n + 2, absl::Seconds(5)));
  EXPECT_EQ(router->prefix_index().HolderSize("decode-7"), 4u);
  EXPECT_EQ(router->prefix_index().MatchedBlocks("decode-7", chain), 0);
  const std::vector<kvformat::BlockKey> later = Keys(3, 7);
  EXPECT_EQ(router->prefix_index().MatchedBlocks("decode-7", later), 4);
  EXPECT_EQ(router->workers().Get("decode-7")->reported.active_requests, 1);

  // Drain: Deregister removes the worker at once.
  (*reg)->Stop(/*deregister=*/true);
  EXPECT_TRUE(absl::IsNotFound(router->workers().Get("decode-7").status()));
  EXPECT_EQ(router->prefix_index().HolderSize("decode-7"), 0u);
}

TEST(WorkerRegistrationTest, KvStoreKeysAreIndexedUnderTheStoreHolder) {
  auto router = StartRouter("127.0.0.1:0");
  ASSERT_NE(router, nullptr);
  Reported rep;
  rep.Set(0, Keys(10, 13));
  auto reg = WorkerRegistration::Start(
      Options("127.0.0.1:" + std::to_string(router->grpc_port()), "kvstore-0",
              oscarkv::common::v1::WORKER_ROLE_KVSTORE),
      rep.Fn());
  ASSERT_TRUE(reg.ok());
  ASSERT_TRUE((*reg)->WaitForHeartbeats(1, absl::Seconds(5)));
  EXPECT_EQ(router->prefix_index().HolderSize(router::kStoreHolder), 3u);
}

TEST(WorkerRegistrationTest, RetriesUntilTheRouterIsUpAndReRegistersAfterARestart) {
  const std::string addr = "127.0.0.1:" + std::to_string(FreePort());
  Reported rep;
  rep.Set(0, Keys(1, 3));
  auto reg = WorkerRegistration::Start(
      Options(addr, "prefill-3", oscarkv::common::v1::WORKER_ROLE_PREFILL), rep.Fn());
  ASSERT_TRUE(reg.ok());
  // No router yet: the worker keeps trying without blocking anyone.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE((*reg)->registered());

  auto router = StartRouter(addr);
  ASSERT_NE(router, nullptr);
  ASSERT_TRUE((*reg)->WaitUntilRegistered(absl::Seconds(5)));
  ASSERT_TRUE((*reg)->WaitForHeartbeats(1, absl::Seconds(5)));
  EXPECT_TRUE(router->workers().Get("prefill-3").ok());
  EXPECT_EQ((*reg)->registrations(), 1);

  // The router restarts (new epoch, empty registry): the worker registers again and its keys
  // come back in full.
  router.reset();
  router = StartRouter(addr);
  ASSERT_NE(router, nullptr);
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while ((*reg)->registrations() < 2 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ((*reg)->registrations(), 2);
  const int64_t n = (*reg)->heartbeats();
  ASSERT_TRUE((*reg)->WaitForHeartbeats(n + 1, absl::Seconds(5)));
  EXPECT_TRUE(router->workers().Get("prefill-3").ok());
  EXPECT_EQ(router->prefix_index().HolderSize("prefill-3"), 2u);
}

TEST(WorkerRegistrationTest, AWorkerThatStopsHeartbeatingExpires) {
  auto router = StartRouter("127.0.0.1:0");
  ASSERT_NE(router, nullptr);
  auto reg = WorkerRegistration::Start(
      Options("127.0.0.1:" + std::to_string(router->grpc_port()), "decode-9",
              oscarkv::common::v1::WORKER_ROLE_DECODE),
      nullptr);
  ASSERT_TRUE(reg.ok());
  ASSERT_TRUE((*reg)->WaitForHeartbeats(1, absl::Seconds(5)));
  EXPECT_EQ(router->workers().Placeable(WorkerRole::kDecode).size(), 1u);
  (*reg)->Stop(/*deregister=*/false);  // a crash: no Deregister
  // dead after 3 missed heartbeats of a 0.2 s interval (0.7 s).
  const absl::Time until = absl::Now() + absl::Seconds(5);
  WorkerHealth h = WorkerHealth::kHealthy;
  while (absl::Now() < until) {
    h = router->workers().Get("decode-9")->health;
    if (h == WorkerHealth::kDead) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(h, WorkerHealth::kDead);
  EXPECT_TRUE(router->workers().Placeable(WorkerRole::kDecode).empty());
}

TEST(WorkerRegistrationTest, RejectsMissingFields) {
  WorkerRegistrationOptions o = Options("", "x", oscarkv::common::v1::WORKER_ROLE_DECODE);
  EXPECT_TRUE(absl::IsInvalidArgument(WorkerRegistration::Start(o, nullptr).status()));
  o = Options("127.0.0.1:1", "", oscarkv::common::v1::WORKER_ROLE_DECODE);
  EXPECT_TRUE(absl::IsInvalidArgument(WorkerRegistration::Start(o, nullptr).status()));
  EXPECT_TRUE(ValidateRegistrationFlags("", "").ok());
  EXPECT_TRUE(ValidateRegistrationFlags("router:9000", "10.0.0.2:50071").ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateRegistrationFlags("router", "")));
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateRegistrationFlags("", ":1")));
}

}  // namespace
}  // namespace oscarkv::rpc
