// A prefill worker whose kvstore hangs (a service that never answers, standing in for a stopped
// process): the prefix lookup fails at its deadline, the prefill computes in full and the request
// succeeds, and the worker does not then publish to that store (a second deadline before the
// answer). When the store answers, the same request does publish, so the check is not vacuous.
#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "lib/rpc/channel_factory.h"
#include "lib/rpc/server_runner.h"
#include "lib/transfer/local/local_backend.h"
#include "oscarkv/kvstore/v1/kvstore.grpc.pb.h"
#include "oscarkv/prefill/v1/prefill.grpc.pb.h"
#include "services/decode/decode_server.h"
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

TEST(HungKvStore, ALookupThatTimesOutSkipsThePublishOfThatRequest) {
  if (!model::DefaultModelAvailable()) GTEST_SKIP() << "default model not installed";
  std::ifstream in(std::string(OSCARKV_SOURCE_DIR) + "/data/text/austen/persuasion.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() < 20000) GTEST_SKIP() << "data/text/austen absent";
  auto m = model::Model::Load(*model::ResolveModelPath("default"));
  ASSERT_TRUE(m.ok()) << m.status();
  auto engine = decode::LoadServingEngine(m->get(), "bf16", "", 256);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<int32_t> prompt = (*m)->tokenizer().Encode(ss.str().substr(10000, 3500), true);
  prompt.resize(300);  // several full blocks: the prefill looks them up and would publish them

  FakeKvStore store;
  auto store_server = rpc::ServerRunner::Start({.listen_address = "127.0.0.1:0"}, {&store});
  ASSERT_TRUE(store_server.ok()) << store_server.status();
  auto backend = transfer::LocalBackend::Create();
  ASSERT_TRUE(backend.ok()) << backend.status();
  prefill::PrefillConfig pc;
  pc.grpc_address = "127.0.0.1:0";
  pc.metrics_port = -1;
  pc.transfer_backend = "local";
  pc.codec = "bf16";
  pc.kvstore_address = (*store_server)->dial_address();
  pc.kvstore_timeout_seconds = 1;
  auto pf = prefill::PrefillServer::Create(pc, {.backend = backend->get(), .engine = engine->get()});
  ASSERT_TRUE(pf.ok()) << pf.status();
  auto prefill = pv1::PrefillService::NewStub(rpc::MakeChannel((*pf)->grpc_dial_address()));

  pv1::PrefillRequest req;
  req.set_request_id("hung-store");
  req.mutable_token_ids()->Add(prompt.begin(), prompt.end());
  req.set_codec("bf16");
  req.set_publish_to_kvstore(true);
  auto run = [&] {
    pv1::PrefillResponse resp;
    auto ctx = rpc::MakeContext(std::chrono::seconds(120));
    const grpc::Status s = prefill->Prefill(ctx.get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_GT(resp.published_blocks_size(), 0) << "the blocks still reach the outbox";
  };

  run();  // the lookup hangs past its 1 s deadline
  EXPECT_EQ(store.lookups.load(), 1);
  EXPECT_EQ(store.reserves.load(), 0) << "published to a store that did not answer the lookup";

  store.hang.store(false);
  run();  // the store answers (nothing stored): the blocks are offered to it
  EXPECT_EQ(store.lookups.load(), 2);
  EXPECT_GE(store.reserves.load(), 1);
  (*pf)->Shutdown();
}

}  // namespace
}  // namespace oscarkv::e2e
