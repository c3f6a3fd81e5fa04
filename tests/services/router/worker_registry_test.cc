#include "services/router/worker_registry.h"

#include "gtest/gtest.h"

namespace oscarkv::router {
namespace {

// A clock the test moves by hand.
struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  std::function<absl::Time()> Fn() {
    return [this] { return now; };
  }
};

WorkerRegistryOptions Options(FakeClock& clock) {
  WorkerRegistryOptions o;
  o.heartbeat_interval = absl::Seconds(2);
  o.suspect_after_missed = 1;
  o.dead_after_missed = 3;
  o.now = clock.Fn();
  return o;
}

WorkerSpec Spec(const std::string& id, WorkerRole role, int capacity = 4) {
  return WorkerSpec{id, role, "127.0.0.1:" + std::to_string(9000 + id.size()), capacity};
}

TEST(WorkerRegistry, RegisterRejectsBadSpecs) {
  FakeClock clock;
  WorkerRegistry reg(Options(clock));
  EXPECT_TRUE(absl::IsInvalidArgument(reg.Register({"", WorkerRole::kPrefill, "a:1", 1})));
  EXPECT_TRUE(absl::IsInvalidArgument(reg.Register({"p", WorkerRole::kPrefill, "", 1})));
  EXPECT_TRUE(absl::IsInvalidArgument(reg.Register({"p", WorkerRole::kPrefill, "a:1", 0})));
  EXPECT_TRUE(reg.Snapshot().empty());
}

// Two workers started with one --worker_id: the second is refused while the first heartbeats,
// and taken once the first has missed a heartbeat (a worker restarted at a new address).
TEST(WorkerRegistry, AnIdHeldByALiveWorkerElsewhereIsRefused) {
  FakeClock clock;
  WorkerRegistry reg(Options(clock));
  WorkerSpec first = Spec("prefill-0", WorkerRole::kPrefill);
  WorkerSpec second = first;
  second.address = "127.0.0.1:9999";
  ASSERT_TRUE(reg.Register(first).ok());
  ASSERT_TRUE(reg.Register(first).ok()) << "the same worker registering again";
  const absl::Status s = reg.Register(second);
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_NE(s.message().find("--worker_id"), std::string::npos) << s;
  EXPECT_EQ(reg.Get("prefill-0")->spec.address, first.address);
  clock.now += absl::Milliseconds(2999);  // still alive (a heartbeat is missed at 1.5 intervals)
  EXPECT_TRUE(absl::IsAlreadyExists(reg.Register(second)));
  clock.now += absl::Milliseconds(1);
  ASSERT_TRUE(reg.Register(second).ok());
  EXPECT_EQ(reg.Get("prefill-0")->spec.address, second.address);
}

TEST(WorkerRegistry, HealthFollowsMissedHeartbeats) {
  FakeClock clock;
  WorkerRegistry reg(Options(clock));
  ASSERT_TRUE(reg.Register(Spec("decode-0", WorkerRole::kDecode)).ok());
  auto health = [&] { return reg.Get("decode-0")->health; };
  EXPECT_EQ(health(), WorkerHealth::kHealthy);

  clock.now += absl::Milliseconds(2100);  // the next heartbeat is due but still within grace
  EXPECT_EQ(health(), WorkerHealth::kHealthy);
  EXPECT_EQ(reg.Placeable(WorkerRole::kDecode).size(), 1u);
  clock.now += absl::Milliseconds(899);  // 1.4995 intervals
  EXPECT_EQ(health(), WorkerHealth::kHealthy);
  clock.now += absl::Milliseconds(1);  // half an interval late: one heartbeat missed
  EXPECT_EQ(health(), WorkerHealth::kSuspect);
  EXPECT_TRUE(reg.Placeable(WorkerRole::kDecode).empty()) << "suspect workers get no requests";

  clock.now += absl::Seconds(3.9);  // 3.45 intervals
  EXPECT_EQ(health(), WorkerHealth::kSuspect);
  clock.now += absl::Milliseconds(100);  // 3.5 intervals: three missed
  EXPECT_EQ(health(), WorkerHealth::kDead);

  // A heartbeat brings it back.
  ASSERT_TRUE(reg.Heartbeat("decode-0", {}).ok());
  EXPECT_EQ(health(), WorkerHealth::kHealthy);
  EXPECT_EQ(reg.Placeable(WorkerRole::kDecode).size(), 1u);
}

TEST(WorkerRegistry, UpdateHealthReportsEachTransitionOnce) {
  FakeClock clock;
  WorkerRegistry reg(Options(clock));
  ASSERT_TRUE(reg.Register(Spec("a", WorkerRole::kPrefill)).ok());
  ASSERT_TRUE(reg.Register(Spec("b", WorkerRole::kPrefill)).ok());
  clock.now += absl::Seconds(3);
  ASSERT_TRUE(reg.Heartbeat("b", {}).ok());
  EXPECT_EQ(reg.UpdateHealth(), std::vector<std::string>{"a"});
  EXPECT_TRUE(reg.UpdateHealth().empty());
  clock.now += absl::Seconds(4);  // a: 7 s, 3 missed → dead; b: 4 s, 1 missed → suspect
  EXPECT_EQ(reg.UpdateHealth(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(reg.Get("a")->health, WorkerHealth::kDead);
  EXPECT_EQ(reg.Get("b")->health, WorkerHealth::kSuspect);
}

TEST(WorkerRegistry, HeartbeatFromUnknownWorkerIsNotFound) {
  FakeClock clock;
  WorkerRegistry reg(Options(clock));
  EXPECT_TRUE(absl::IsNotFound(reg.Heartbeat("ghost", {})));
  EXPECT_TRUE(absl::IsNotFound(reg.Drain("ghost")));
  EXPECT_TRUE(absl::IsNotFound(reg.Deregister("ghost")));
}

TEST(WorkerRegistry, DrainingWorkerIsNotPlaceableButStaysRegistered) {
  FakeClock clock;
  WorkerRegistry reg(Options(clock));
  ASSERT_TRUE(reg.Register(Spec("p0", WorkerRole::kPrefill)).ok());
  ASSERT_TRUE(reg.Register(Spec("p1", WorkerRole::kPrefill)).ok());
  ASSERT_TRUE(reg.Drain("p0").ok());
  auto placeable = reg.Placeable(WorkerRole::kPrefill);
  ASSERT_EQ(placeable.size(), 1u);
  EXPECT_EQ(placeable[0].spec.id, "p1");
  EXPECT_EQ(reg.Snapshot().size(), 2u);
  // Re-registering (a restarted worker) clears draining.
  ASSERT_TRUE(reg.Register(Spec("p0", WorkerRole::kPrefill)).ok());
  EXPECT_EQ(reg.Placeable(WorkerRole::kPrefill).size(), 2u);
  ASSERT_TRUE(reg.Deregister("p1").ok());
  EXPECT_EQ(reg.Snapshot().size(), 1u);
}

TEST(WorkerRegistry, CapacityCountsRouterSideAndReportedLoad) {
  FakeClock clock;
  WorkerRegistry reg(Options(clock));
  ASSERT_TRUE(reg.Register(Spec("d", WorkerRole::kDecode, /*capacity=*/2)).ok());
  reg.AddPlaced("d", 100, 3);
  EXPECT_EQ(reg.Placeable(WorkerRole::kDecode).size(), 1u);
  reg.AddPlaced("d", 50, 2);
  EXPECT_TRUE(reg.Placeable(WorkerRole::kDecode).empty()) << "2 of 2 slots used";
  auto v = *reg.Get("d");
  EXPECT_EQ(v.router_prefill_tokens, 150);
  EXPECT_EQ(v.DecodeBlocks(), 5);
  reg.RemovePlaced("d", 100, 3);
  EXPECT_EQ(reg.Placeable(WorkerRole::kDecode).size(), 1u);
  // The worker reports more than the router knows of (requests from another router).
  ASSERT_TRUE(reg.Heartbeat("d", WorkerLoad{2, 0, 40}).ok());
  EXPECT_TRUE(reg.Placeable(WorkerRole::kDecode).empty());
  EXPECT_EQ(reg.Get("d")->DecodeBlocks(), 40);
  reg.RemovePlaced("unknown", 1, 1);  // ignored
}

TEST(WorkerRegistry, BothRoleServesBothPools) {
  FakeClock clock;
  WorkerRegistry reg(Options(clock));
  ASSERT_TRUE(reg.Register(Spec("agg", WorkerRole::kBoth)).ok());
  ASSERT_TRUE(reg.Register(Spec("store", WorkerRole::kKvStore)).ok());
  EXPECT_EQ(reg.Placeable(WorkerRole::kPrefill).size(), 1u);
  EXPECT_EQ(reg.Placeable(WorkerRole::kDecode).size(), 1u);
  EXPECT_EQ(reg.Placeable(WorkerRole::kPrefill)[0].spec.id, "agg");
}

TEST(WorkerRegistry, ParseRoleNames) {
  for (WorkerRole r : {WorkerRole::kPrefill, WorkerRole::kDecode, WorkerRole::kBoth,
                       WorkerRole::kKvStore}) {
    EXPECT_EQ(*ParseWorkerRole(WorkerRoleName(r)), r);
  }
  EXPECT_FALSE(ParseWorkerRole("router").ok());
}

}  // namespace
}  // namespace oscarkv::router
