// A prefill worker (real model, in-process gRPC, local transfer) against a kvstore that fails:
//  - a store that hangs (a service that never answers, standing in for a stopped process): the
//    prefix lookup fails at its deadline, the prefill computes in full and the request succeeds,
//    and the worker does not then publish to that store (a second deadline before the answer);
//    once the store answers, the same request does publish, so the check is not vacuous;
//  - a real store whose copy of a block is damaged after its commit: the prefill refuses the
//    block, the store drops its copy on recheck, the prefill's publish stores it again, and the
//    next request reuses the whole prefix once more.
#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "httplib.h"
#include "lib/kvformat/block.h"
#include "lib/kvformat/block_key.h"
#include "lib/rpc/channel_factory.h"
#include "lib/rpc/server_runner.h"
#include "lib/transfer/local/local_backend.h"
#include "oscarkv/kvstore/v1/kvstore.grpc.pb.h"
#include "oscarkv/prefill/v1/prefill.grpc.pb.h"
#include "services/decode/decode_server.h"
#include "services/kvstore/kvstore_server.h"
#include "services/prefill/prefill_server.h"

namespace oscarkv::e2e {
namespace {

namespace kv = ::oscarkv::kvstore::v1;
namespace pv1 = ::oscarkv::prefill::v1;

// LookupPrefix hangs until the caller gives up while `hang` is set, else answers "nothing
// stored"; Reserve only counts (and refuses).
class FakeKvStore final : public kv::KvStoreService::Service {
 public:
  grpc::Status LookupPrefix(grpc::ServerContext* ctx, const kv::LookupPrefixRequest*,
                            kv::LookupPrefixResponse*) override {
    lookups.fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (hang.load() && !ctx->IsCancelled() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return grpc::Status::OK;
  }
  grpc::Status Reserve(grpc::ServerContext*, const kv::ReserveRequest*,
                       kv::ReserveResponse*) override {
    reserves.fetch_add(1);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "fake store takes nothing");
  }
  std::atomic<bool> hang{true};
  std::atomic<int> lookups{0};
  std::atomic<int> reserves{0};
};

class KvStoreFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!model::DefaultModelAvailable()) return;
    std::ifstream in(std::string(OSCARKV_SOURCE_DIR) + "/data/text/austen/persuasion.txt");
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().size() < 20000) return;
    auto m = model::Model::Load(*model::ResolveModelPath("default"));
    if (!m.ok()) return;
    model_ = m->release();
    auto engine = decode::LoadServingEngine(model_, "bf16", "", 256);
    if (!engine.ok()) return;
    engine_ = engine->release();
    prompt_ = new std::vector<int32_t>(
        model_->tokenizer().Encode(ss.str().substr(10000, 3500), true));
    prompt_->resize(300);  // several full blocks: the prefill looks them up and publishes them
  }
  void SetUp() override {
    if (engine_ == nullptr) GTEST_SKIP() << "default model or data/text/austen absent";
    auto backend = transfer::LocalBackend::Create();
    ASSERT_TRUE(backend.ok()) << backend.status();
    prefill_backend_ = *std::move(backend);
  }
  void TearDown() override {
    if (prefill_) prefill_->Shutdown();
  }

  // A prefill server over the kvstore at `store_address` (call deadline `timeout_s`).
  void StartPrefill(const std::string& store_address, double timeout_s) {
    prefill::PrefillConfig pc;
    pc.grpc_address = "127.0.0.1:0";
    pc.metrics_port = -1;
    pc.transfer_backend = "local";
    pc.codec = "bf16";
    pc.kvstore_address = store_address;
    pc.kvstore_timeout_seconds = timeout_s;
    auto pf =
        prefill::PrefillServer::Create(pc, {.backend = prefill_backend_.get(), .engine = engine_});
    ASSERT_TRUE(pf.ok()) << pf.status();
    prefill_ = *std::move(pf);
    stub_ = pv1::PrefillService::NewStub(rpc::MakeChannel(prefill_->grpc_dial_address()));
  }

  // One prefill of the prompt; @return its reused tokens.
  uint32_t Prefill() {
    pv1::PrefillRequest req;
    req.set_request_id("kvstore-faults");
    req.mutable_token_ids()->Add(prompt_->begin(), prompt_->end());
    req.set_codec("bf16");
    req.set_publish_to_kvstore(true);
    pv1::PrefillResponse resp;
    auto ctx = rpc::MakeContext(std::chrono::seconds(120));
    const grpc::Status s = stub_->Prefill(ctx.get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_GT(resp.published_blocks_size(), 0) << "the blocks still reach the outbox";
    return resp.reused_tokens();
  }

  static model::Model* model_;
  static engine::ServingEngine* engine_;
  static std::vector<int32_t>* prompt_;
  std::unique_ptr<transfer::TransferBackend> prefill_backend_;
  std::unique_ptr<prefill::PrefillServer> prefill_;
  std::unique_ptr<pv1::PrefillService::Stub> stub_;
};
model::Model* KvStoreFaults::model_ = nullptr;
engine::ServingEngine* KvStoreFaults::engine_ = nullptr;
std::vector<int32_t>* KvStoreFaults::prompt_ = nullptr;

TEST_F(KvStoreFaults, ALookupThatTimesOutSkipsThePublishOfThatRequest) {
  FakeKvStore store;
  auto store_server = rpc::ServerRunner::Start({.listen_address = "127.0.0.1:0"}, {&store});
  ASSERT_TRUE(store_server.ok()) << store_server.status();
  StartPrefill((*store_server)->dial_address(), /*timeout_s=*/1);

  Prefill();  // the lookup hangs past its 1 s deadline
  EXPECT_EQ(store.lookups.load(), 1);
  EXPECT_EQ(store.reserves.load(), 0) << "published to a store that did not answer the lookup";

  store.hang.store(false);
  Prefill();  // the store answers (nothing stored): the blocks are offered to it
  EXPECT_EQ(store.lookups.load(), 2);
  EXPECT_GE(store.reserves.load(), 1);
}

TEST_F(KvStoreFaults, ABlockDamagedInTheStoreIsDroppedAndStoredAgain) {
  auto store_backend = transfer::LocalBackend::Create();
  ASSERT_TRUE(store_backend.ok()) << store_backend.status();
  kvstore::KvStoreConfig kc;
  kc.grpc_address = "127.0.0.1:0";
  kc.metrics_host = "127.0.0.1";
  kc.metrics_port = 0;
  kc.transfer_backend = "local";
  kc.capacity_bytes = 256 << 20;
  kc.drain_seconds = 0;
  auto store = kvstore::KvStoreServer::Create(kc, {.backend = store_backend->get()});
  ASSERT_TRUE(store.ok()) << store.status();
  StartPrefill((*store)->grpc_dial_address(), /*timeout_s=*/10);

  EXPECT_EQ(Prefill(), 0u);  // computes and publishes
  const uint32_t whole = Prefill();
  ASSERT_GT(whole, 64u) << "the prompt's stored prefix spans at least two blocks";

  // Damage the store's copy of the second block: read it, flip a payload byte, write it back.
  const std::vector<kvformat::BlockKey> keys = engine_->ReusableKeys(*prompt_);
  ASSERT_GE(keys.size(), 2u);
  auto kv_stub = kv::KvStoreService::NewStub(rpc::MakeChannel((*store)->grpc_dial_address()));
  kv::GetLocationsRequest where;
  where.add_keys()->set_lo(keys[1].lo);
  where.mutable_keys(0)->set_hi(keys[1].hi);
  kv::GetLocationsResponse located;
  auto ctx = rpc::MakeContext(std::chrono::seconds(10));
  ASSERT_TRUE(kv_stub->GetLocations(ctx.get(), where, &located).ok());
  ASSERT_EQ(located.blocks_size(), 1);
  const auto& loc = located.blocks(0).location();
  std::vector<std::byte> bytes(kvformat::kBlockHeaderBytes + located.blocks(0).payload_bytes());
  auto client = transfer::LocalBackend::Create();
  ASSERT_TRUE(client.ok()) << client.status();
  auto local = (*client)->RegisterMemory(bytes);
  ASSERT_TRUE(local.ok()) << local.status();
  auto move = [&](transfer::Direction direction) {
    return transfer::TransferAndWait(**client, {loc.endpoint_address(),
                                                {{local->handle, 0, loc.remote_descriptor(),
                                                  loc.offset(), bytes.size(), direction}}});
  };
  ASSERT_TRUE(move(transfer::Direction::kGet).ok());
  bytes[kvformat::kBlockHeaderBytes + 17] ^= std::byte{0x40};
  ASSERT_TRUE(move(transfer::Direction::kPut).ok());

  // The damaged block ends the reused prefix; the store drops its copy and the publish of this
  // request stores it again, so the next request reuses all of it.
  const uint32_t after_damage = Prefill();
  EXPECT_LT(after_damage, whole);
  EXPECT_EQ(Prefill(), whole);
  httplib::Client http("127.0.0.1", (*store)->metrics_port());
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("oscarkv_kvstore_damaged_blocks_dropped_total 1"),
            std::string::npos)
      << metrics->body;
  (*store)->Shutdown();
}

}  // namespace
}  // namespace oscarkv::e2e
