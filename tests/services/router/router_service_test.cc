// The worker registry over real gRPC: a RouterServer on loopback, workers as gRPC clients.
#include "services/router/router_service.h"

#include "gtest/gtest.h"
#include "lib/rpc/channel_factory.h"
#include "services/router/router_server.h"
#include "tests/services/router/fake_completion_backend.h"

namespace oscarkv::router {
namespace {

namespace pb = oscarkv::router::v1;
namespace cpb = oscarkv::common::v1;

class RouterServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RouterConfig config;
    config.http_host = "127.0.0.1";
    config.http_port = 0;
    config.grpc_address = "127.0.0.1:0";
    config.heartbeat_interval_s = 0.5;
    auto server = RouterServer::Create(config, std::make_shared<testing::FakeCompletionBackend>());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->grpc_port(), 0);
    auto channel = rpc::Connect("127.0.0.1:" + std::to_string(server_->grpc_port()));
    ASSERT_TRUE(channel.ok()) << channel.status();
    stub_ = pb::WorkerRegistryService::NewStub(*channel);
  }

  grpc::Status Register(const std::string& id, cpb::WorkerRole role, pb::RegisterResponse* out) {
    pb::RegisterRequest req;
    req.mutable_worker()->set_worker_id(id);
    req.mutable_worker()->set_role(role);
    req.mutable_worker()->set_grpc_address("127.0.0.1:7" + std::to_string(id.size()));
    auto ctx = rpc::MakeContext(std::chrono::seconds(5));
    return stub_->Register(ctx.get(), req, out);
  }

  grpc::Status Heartbeat(const std::string& id, uint64_t epoch,
                         const std::vector<kvformat::BlockKey>& keys, bool delta,
                         pb::HeartbeatResponse* out,
                         const std::vector<kvformat::BlockKey>& evicted = {}) {
    pb::HeartbeatRequest req;
    req.set_worker_id(id);
    req.set_epoch(epoch);
    req.mutable_load()->set_active_requests(3);
    req.mutable_load()->set_pending_prefill_tokens(640);
    for (const auto& k : keys) {
      auto* p = req.add_held_keys();
      p->set_lo(k.lo);
      p->set_hi(k.hi);
    }
    for (const auto& k : evicted) {
      auto* p = req.add_evicted_keys();
      p->set_lo(k.lo);
      p->set_hi(k.hi);
    }
    req.set_keys_are_delta(delta);
    auto ctx = rpc::MakeContext(std::chrono::seconds(5));
    return stub_->Heartbeat(ctx.get(), req, out);
  }

  std::unique_ptr<RouterServer> server_;
  std::unique_ptr<pb::WorkerRegistryService::Stub> stub_;
};

TEST_F(RouterServiceTest, RegisterHeartbeatKeysAndDeregister) {
  pb::RegisterResponse reg;
  ASSERT_TRUE(Register("prefill-0", cpb::WORKER_ROLE_PREFILL, &reg).ok());
  EXPECT_EQ(reg.heartbeat_interval_seconds(), 0.5);
  EXPECT_NE(reg.epoch(), 0u);
  auto w = server_->workers().Get("prefill-0");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->spec.role, WorkerRole::kPrefill);
  EXPECT_EQ(w->spec.address, "127.0.0.1:79");

  const std::vector<kvformat::BlockKey> chain = {{1, 11}, {2, 22}, {3, 33}, {4, 44}};
  pb::HeartbeatResponse hb;
  ASSERT_TRUE(Heartbeat("prefill-0", reg.epoch(), {chain[0], chain[1]}, false, &hb).ok());
  EXPECT_FALSE(hb.drain());
  EXPECT_EQ(server_->prefix_index().MatchedBlocks("prefill-0", chain), 2);
  EXPECT_EQ(server_->workers().Get("prefill-0")->reported.active_requests, 3);
  EXPECT_EQ(server_->workers().Get("prefill-0")->reported.queued_prefill_tokens, 640);
  // Delta: add two, evict the first → the usable prefix is gone.
  ASSERT_TRUE(Heartbeat("prefill-0", reg.epoch(), {chain[2], chain[3]}, true, &hb, {chain[0]}).ok());
  EXPECT_EQ(server_->prefix_index().MatchedBlocks("prefill-0", chain), 0);
  EXPECT_EQ(server_->prefix_index().HolderSize("prefill-0"), 3u);
  // Full report replaces.
  ASSERT_TRUE(Heartbeat("prefill-0", reg.epoch(), chain, false, &hb).ok());
  EXPECT_EQ(server_->prefix_index().MatchedBlocks("prefill-0", chain), 4);

  // A kvstore's keys are indexed under the shared store holder.
  ASSERT_TRUE(Register("kvstore-0", cpb::WORKER_ROLE_KVSTORE, &reg).ok());
  ASSERT_TRUE(Heartbeat("kvstore-0", reg.epoch(), {chain[0]}, false, &hb).ok());
  EXPECT_EQ(server_->prefix_index().MatchedBlocks(kStoreHolder, chain), 1);

  // Drain is signalled in the heartbeat answer.
  ASSERT_TRUE(server_->workers().Drain("prefill-0").ok());
  ASSERT_TRUE(Heartbeat("prefill-0", reg.epoch(), {}, true, &hb).ok());
  EXPECT_TRUE(hb.drain());

  pb::DeregisterRequest dreq;
  dreq.set_worker_id("prefill-0");
  pb::DeregisterResponse dres;
  auto ctx = rpc::MakeContext(std::chrono::seconds(5));
  ASSERT_TRUE(stub_->Deregister(ctx.get(), dreq, &dres).ok());
  EXPECT_FALSE(server_->workers().Get("prefill-0").ok());
  EXPECT_EQ(server_->prefix_index().HolderSize("prefill-0"), 0u);
}

TEST_F(RouterServiceTest, StaleEpochUnknownWorkerAndBadRoleAreRejected) {
  pb::RegisterResponse reg;
  ASSERT_TRUE(Register("decode-0", cpb::WORKER_ROLE_DECODE, &reg).ok());
  pb::HeartbeatResponse hb;
  EXPECT_EQ(Heartbeat("decode-0", reg.epoch() + 1, {}, false, &hb).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Heartbeat("ghost", reg.epoch(), {}, false, &hb).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Register("x", cpb::WORKER_ROLE_UNSPECIFIED, &reg).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Register("", cpb::WORKER_ROLE_DECODE, &reg).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace oscarkv::router
