// WorkerCompletionBackend in registry mode, end to end over loopback gRPC: a RouterServer (worker
// registry + prefix index + cost policy) built with CreateWithBackendFactory, fake prefill and
// decode workers (real gRPC servers) that register through rpc::WorkerRegistration.
//  - the request goes to the decode worker that reported the prompt's leading block keys;
//  - a prefix the kvstore holds as GPU-made blocks draws it to the GPU prefill worker;
//  - router-side load is held while the request runs and released after;
//  - the keys a prefill published land in the prefix index under the kvstore holder;
//  - no registered decode worker: kUnavailable from the backend, HTTP 503 from the router;
//  - a busy prefill worker (RESOURCE_EXHAUSTED) is retried until it takes the request, left out
//    while another prefill worker can take it, and given up on (429) after the wait or the
//    request's deadline.
// And, over a registry with a fake clock, the channel cache following the registry:
//  - a worker whose heartbeats expire loses its channel and gets no more requests (they go to a
//    live worker, or fail with kUnavailable when none is left);
//  - a worker that re-registers at a new address is reached there over a fresh channel, and a
//    deregistered one loses its channel.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "lib/rpc/server_runner.h"
#include "lib/rpc/worker_registration.h"
#include "oscarkv/decode/v1/decode.grpc.pb.h"
#include "oscarkv/prefill/v1/prefill.grpc.pb.h"
#include "services/router/placement_policy.h"
#include "services/router/prefix_index.h"
#include "services/router/router_metrics.h"
#include "services/router/router_server.h"
#include "services/router/worker_registry.h"
#include "services/router_backend/worker_completion_backend.h"

namespace oscarkv::router_backend {
namespace {

namespace pv1 = ::oscarkv::prefill::v1;
namespace dv1 = ::oscarkv::decode::v1;
namespace cv1 = ::oscarkv::common::v1;

constexpr int kBlockTokens = 4;  // small blocks: short prompts still have several keys
constexpr double kBusyWaitSeconds = 1;  // how long a request waits for a busy prefill worker

kvformat::KeyChainParams KeyParams() {
  kvformat::KeyChainParams p;
  p.model_fingerprint = 0x1234;
  p.block_tokens = kBlockTokens;
  return p;
}

// Prefill: answers first token 7 and "publishes" the prompt's chain keys.
class FakePrefill final : public pv1::PrefillService::Service {
 public:
  grpc::Status Prefill(grpc::ServerContext*, const pv1::PrefillRequest* req,
                       pv1::PrefillResponse* resp) override {
    calls.fetch_add(1);
    if (busy.load() != 0) {
      if (busy.load() > 0) busy.fetch_sub(1);
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "prefill worker busy");
    }
    std::vector<int32_t> ids(req->token_ids().begin(), req->token_ids().end());
    {
      std::lock_guard<std::mutex> lock(mu);
      last_ids = ids;
    }
    for (const auto& k : kvformat::ComputeBlockKeys(KeyParams(), std::span<const int32_t>(ids))) {
      auto* p = resp->add_published_keys();
      p->set_lo(k.lo);
      p->set_hi(k.hi);
    }
    resp->set_request_id(req->request_id());
    resp->set_first_token(7);
    offered.store(req->offer_packed_kv());
    publish.store(req->publish_to_kvstore());
    if (req->offer_packed_kv()) {
      cv1::PackedKvDescriptor* d = resp->mutable_packed_kv();
      d->set_tokens(static_cast<uint32_t>(ids.size()));
      d->set_bytes(4096);
      d->set_checksum(0xfeed);
      d->mutable_location()->set_remote_descriptor("gpu-outbox");
    } else {
      resp->add_published_blocks()->set_payload_bytes(100);
    }
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
  std::atomic<bool> offered{false};
  std::atomic<bool> publish{false};  // the last request's publish_to_kvstore
  std::atomic<int> busy{0};  // answers RESOURCE_EXHAUSTED this many more times; < 0: always
  std::mutex mu;
  std::vector<int32_t> last_ids;  // of the last prefill; guarded by mu
};

// Decode: streams tokens 8, 9, ... up to max_new_tokens; can hold Generate until released.
class FakeDecode final : public dv1::DecodeService::Service {
 public:
  grpc::Status StartSequence(grpc::ServerContext*, const dv1::StartSequenceRequest* req,
                             dv1::StartSequenceResponse* resp) override {
    starts.fetch_add(1);
    if (full.load() != 0) {
      if (full.load() > 0) full.fetch_sub(1);
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "decode KV pool full");
    }
    packed_checksum.store(req->has_packed_kv() ? req->packed_kv().checksum() : 0);
    prompt_blocks.store(req->prompt_blocks_size());
    if (req->has_packed_kv() && refuse_packed.load()) {
      return grpc::Status(grpc::StatusCode::DATA_LOSS, "packed KV checksum mismatch");
    }
    resp->set_sequence_id(41);
    return grpc::Status::OK;
  }
  grpc::Status Generate(grpc::ServerContext*, const dv1::GenerateRequest* req,
                        grpc::ServerWriter<dv1::GenerateResponse>* writer) override {
    if (hold != nullptr) {
      generating.Notify();
      hold->WaitForNotification();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      last_generate = *req;
    }
    dv1::GenerateResponse msg;
    if (cut_after.load() >= 0) {  // a worker that goes away mid-generation
      for (int i = 0; i < cut_after.load(); ++i) msg.add_token_ids(8 + i);
      writer->Write(msg);
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode worker shut down");
    }
    for (uint32_t i = 0; i < req->max_new_tokens(); ++i) msg.add_token_ids(8 + i);
    msg.set_finished(true);
    msg.set_finish_reason("length");
    writer->Write(msg);
    return grpc::Status::OK;
  }
  grpc::Status EndTurn(grpc::ServerContext*, const dv1::EndTurnRequest*,
                       dv1::EndTurnResponse*) override {
    end_turns.fetch_add(1);
    released.fetch_add(1);
    return grpc::Status::OK;
  }
  std::atomic<int> end_turns{0};
  std::atomic<int> released{0};
  std::atomic<int> starts{0};
  std::atomic<int> full{0};  // StartSequence answers "pool full" this many more times; -1: always
  std::atomic<uint64_t> packed_checksum{0};  // of the last StartSequence's packed_kv; 0 = none
  std::atomic<int> prompt_blocks{0};        // of the last StartSequence
  std::atomic<bool> refuse_packed{false};   // answer packed KV with DATA_LOSS
  absl::Notification* hold = nullptr;  // not owned
  absl::Notification generating;
  std::atomic<int> cut_after{-1};  // >= 0: Generate streams this many tokens, then UNAVAILABLE
  std::mutex mu;
  dv1::GenerateRequest last_generate;  // guarded by mu
};

// One fake worker: its gRPC server and its registration with the router.
struct Worker {
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<rpc::ServerRunner> server;
  std::unique_ptr<rpc::WorkerRegistration> registration;
};

// Tokenize as one token per byte (the backend's real tokenizer here is empty); the rest is the
// backend under test.
class ByteTokenized final : public router::CompletionBackend {
 public:
  explicit ByteTokenized(std::shared_ptr<router::CompletionBackend> inner) : inner_(inner) {}
  std::vector<router::ModelInfo> Models() const override { return inner_->Models(); }
  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string&,
                                                const router::PromptInput& p) override {
    std::vector<int32_t> ids;
    for (unsigned char c : p.text.value_or("")) ids.push_back(c);
    return ids;
  }
  absl::StatusOr<router::CompletionOutcome> Complete(const router::CompletionRequest& r,
                                                     const router::TokenCallback& cb) override {
    return inner_->Complete(r, cb);
  }
  bool Ready() const override { return inner_->Ready(); }

 private:
  std::shared_ptr<router::CompletionBackend> inner_;
};

std::vector<int32_t> Prompt(int n, int32_t base = 100) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(base + i);
  return p;
}

class PlacedBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = model::Tokenizer::CreateEmpty();
    router::RouterConfig c;
    c.http_host = "127.0.0.1";
    c.http_port = 0;
    c.grpc_address = "127.0.0.1:0";
    c.heartbeat_interval_s = 0.2;
    c.block_tokens = kBlockTokens;
    c.drain_timeout_s = 0;
    auto r = router::RouterServer::CreateWithBackendFactory(
        c, [this](router::RouterServer& s)
               -> absl::StatusOr<std::shared_ptr<router::CompletionBackend>> {
          WorkerBackendOptions o;
          o.model_id = "fake-model";
          o.context_length = 4096;
          o.busy_wait_seconds = kBusyWaitSeconds;
          o.registry = RegistryPlacement{.workers = &s.workers(),
                                         .prefix_index = &s.prefix_index(),
                                         .policy = &s.placement(),
                                         .key_params = KeyParams(),
                                         .on_placement = [&m = s.metrics()](
                                                             bool ok, int matched, int requested) {
                                           m.OnPlacement(ok, matched, requested);
                                         },
                                         .on_resume = [&m = s.metrics()](bool ok) {
                                           m.OnResume(ok);
                                         }};
          auto b = WorkerCompletionBackend::Create(o, tokenizer_.get());
          if (!b.ok()) return b.status();
          backend_ = std::shared_ptr<WorkerCompletionBackend>(std::move(*b));
          return std::make_shared<ByteTokenized>(backend_);
        });
    ASSERT_TRUE(r.ok()) << r.status();
    router_ = *std::move(r);
    router_address_ = "127.0.0.1:" + std::to_string(router_->grpc_port());
  }

  void TearDown() override {
    for (auto& w : workers_) {
      if (w->registration) w->registration->Stop();
      w->server->Shutdown(std::chrono::milliseconds(0));
    }
    router_.reset();
  }

  template <typename Fake>
  Fake* AddWorker(const std::string& id, cv1::WorkerRole role,
                  std::vector<kvformat::BlockKey> held = {}, bool packed_kv_direct = false,
                  const std::string& kv_numerics = "") {
    auto w = std::make_unique<Worker>();
    auto fake = std::make_unique<Fake>();
    Fake* raw = fake.get();
    w->service = std::move(fake);
    auto server = rpc::ServerRunner::Start({.listen_address = "127.0.0.1:0"}, {w->service.get()});
    EXPECT_TRUE(server.ok()) << server.status();
    w->server = *std::move(server);
    rpc::WorkerRegistrationOptions o;
    o.router_address = router_address_;
    o.worker.set_worker_id(id);
    o.worker.set_role(role);
    o.worker.set_grpc_address(w->server->dial_address());
    o.worker.set_packed_kv_direct(packed_kv_direct);
    o.worker.set_kv_numerics(kv_numerics);
    o.initial_backoff = absl::Milliseconds(50);
    auto reg = rpc::WorkerRegistration::Start(o, [held] {
      rpc::WorkerReport r;
      r.held_keys = held;
      return r;
    });
    EXPECT_TRUE(reg.ok()) << reg.status();
    w->registration = *std::move(reg);
    EXPECT_TRUE(w->registration->WaitForHeartbeats(1, absl::Seconds(5)));
    workers_.push_back(std::move(w));
    return raw;
  }

  // The router's /metrics text.
  std::string Metrics() {
    httplib::Client c("127.0.0.1", router_->http_port());
    auto r = c.Get("/metrics");
    return r ? r->body : "";
  }

  // A completion through the router's HTTP API (its backend is the one under test).
  httplib::Result PostCompletion() {
    httplib::Client c("127.0.0.1", router_->http_port());
    return c.Post("/v1/completions",
                  R"({"model": "fake-model", "prompt": "hello there", "max_tokens": 4})",
                  "application/json");
  }

  // A request whose workers stay busy (or full) is retried with backoff (`tries` counts the
  // asks: several, not a busy loop) for the whole busy wait, then fails as ResourceExhausted with
  // `reason`; over HTTP that is a 429. Returns the 429's body.
  std::string ExpectGivenUpAfterTheBusyWait(const std::atomic<int>& tries,
                                            const std::string& reason) {
    const absl::Time t0 = absl::Now();
    auto out =
        backend_->Complete(Request(Prompt(5)), [](const router::TokenEvent&) { return true; });
    const absl::Duration waited = absl::Now() - t0;
    EXPECT_TRUE(absl::IsResourceExhausted(out.status())) << out.status();
    EXPECT_NE(out.status().message().find(reason), std::string::npos) << out.status();
    EXPECT_GE(waited, absl::Seconds(kBusyWaitSeconds) - absl::Milliseconds(150));
    EXPECT_GT(tries.load(), 5);
    EXPECT_LT(tries.load(), 100);
    auto r = PostCompletion();
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, 429) << r->body;
    return r->body;
  }

  router::CompletionRequest Request(const std::vector<int32_t>& prompt, int max_tokens = 3) {
    router::CompletionRequest r;
    r.request_id = "cmpl-test";
    r.model = "fake-model";
    r.prompt_token_ids = prompt;
    r.max_tokens = max_tokens;
    r.temperature = 0;
    r.codec = "oscar";
    r.deadline = absl::Now() + absl::Seconds(10);
    return r;
  }

  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::shared_ptr<WorkerCompletionBackend> backend_;
  std::unique_ptr<router::RouterServer> router_;
  std::string router_address_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

TEST_F(PlacedBackendTest, AsksForPackedGpuKvOnlyWhenBothWorkersCanMoveIt) {
  FakePrefill* pf = AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL, {},
                                           /*packed_kv_direct=*/true);
  FakeDecode* dc = AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  ASSERT_TRUE(backend_->Ready());
  auto out = backend_->Complete(Request(Prompt(9)), [](const router::TokenEvent&) { return true; });
  ASSERT_TRUE(out.ok()) << out.status();
  // The decode worker did not say it takes packed KV: blocks as usual.
  EXPECT_FALSE(pf->offered.load());
  EXPECT_EQ(dc->packed_checksum.load(), 0u);
  EXPECT_EQ(dc->prompt_blocks.load(), 1);
  EXPECT_FALSE(backend_->last_trace().packed_kv);

  // A decode worker that does, placed alone: the prefill is asked, and its descriptor (not
  // blocks) reaches StartSequence unchanged.
  workers_[1]->registration->Stop();  // deregisters: placed on no more
  FakeDecode* gpu = AddWorker<FakeDecode>("decode-gpu", cv1::WORKER_ROLE_DECODE, {},
                                          /*packed_kv_direct=*/true);
  out = backend_->Complete(Request(Prompt(9)), [](const router::TokenEvent&) { return true; });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(pf->offered.load());
  EXPECT_EQ(gpu->packed_checksum.load(), 0xfeedu);
  EXPECT_EQ(gpu->prompt_blocks.load(), 0);
  EXPECT_TRUE(backend_->last_trace().packed_kv);
  EXPECT_EQ(backend_->last_trace().prompt_block_bytes, 4096u);

  // A handoff that fails on arrival: the router prefills again without the offer and the
  // request completes with blocks.
  gpu->refuse_packed.store(true);
  const int prefills = pf->calls.load();
  std::vector<int32_t> got;
  out = backend_->Complete(Request(Prompt(9)), [&](const router::TokenEvent& e) {
    got.push_back(e.token_id);
    return true;
  });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(got, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(pf->calls.load(), prefills + 2);
  EXPECT_FALSE(pf->offered.load());
  EXPECT_EQ(gpu->prompt_blocks.load(), 1);
  EXPECT_FALSE(backend_->last_trace().packed_kv);
}

TEST_F(PlacedBackendTest, PicksTheDecodeWorkerHoldingTheLongestPrefix) {
  const std::vector<int32_t> prompt = Prompt(6 * kBlockTokens + 1);
  const std::vector<kvformat::BlockKey> chain =
      kvformat::ComputeBlockKeys(KeyParams(), std::span<const int32_t>(prompt));
  ASSERT_EQ(chain.size(), 6u);
  FakePrefill* pf = AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  // decode-a sorts first and would win a tie; decode-b holds the first 5 blocks.
  FakeDecode* a = AddWorker<FakeDecode>("decode-a", cv1::WORKER_ROLE_DECODE);
  FakeDecode* b = AddWorker<FakeDecode>(
      "decode-b", cv1::WORKER_ROLE_DECODE,
      std::vector<kvformat::BlockKey>(chain.begin(), chain.begin() + 5));
  ASSERT_TRUE(backend_->Ready());

  std::vector<int32_t> got;
  auto out = backend_->Complete(Request(prompt), [&](const router::TokenEvent& e) {
    got.push_back(e.token_id);
    return true;
  });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(got, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(pf->calls.load(), 1);
  EXPECT_EQ(b->starts.load(), 1);
  EXPECT_EQ(a->starts.load(), 0);
  const RequestTrace t = backend_->last_trace();
  EXPECT_EQ(t.prefill_worker, "prefill-0");
  EXPECT_EQ(t.decode_worker, "decode-b");
  EXPECT_EQ(t.prefix_matched_blocks, 5);

  // A prompt neither holds goes to the tie winner, decode-a.
  ASSERT_TRUE(backend_->Complete(Request(Prompt(3 * kBlockTokens, 500)),
                                 [](const router::TokenEvent&) { return true; })
                  .ok());
  EXPECT_EQ(backend_->last_trace().decode_worker, "decode-a");
  EXPECT_EQ(a->starts.load(), 1);
}

// A prefix the kvstore holds as GPU-made blocks (keys under a GPU worker's numerics label)
// draws the request to the prefill worker that registered that label; the CPU worker, which
// would win the tie by id, cannot reuse those blocks.
TEST_F(PlacedBackendTest, StoredGpuPrefixDrawsTheRequestToTheGpuPrefillWorker) {
  const std::vector<int32_t> prompt = Prompt(6 * kBlockTokens + 1);
  kvformat::KeyChainParams gpu_params = KeyParams();
  gpu_params.numerics = "cuda-test";
  const std::vector<kvformat::BlockKey> gpu_chain =
      kvformat::ComputeBlockKeys(gpu_params, std::span<const int32_t>(prompt));
  ASSERT_EQ(gpu_chain.size(), 6u);
  FakePrefill* cpu = AddWorker<FakePrefill>("prefill-a-cpu", cv1::WORKER_ROLE_PREFILL);
  FakePrefill* gpu = AddWorker<FakePrefill>("prefill-b-gpu", cv1::WORKER_ROLE_PREFILL, {},
                                            /*packed_kv_direct=*/false, "cuda-test");
  AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  AddWorker<FakeDecode>("kvstore-0", cv1::WORKER_ROLE_KVSTORE,
                        std::vector<kvformat::BlockKey>(gpu_chain.begin(), gpu_chain.begin() + 5));
  ASSERT_EQ(router_->prefix_index().MatchedBlocks(router::kStoreHolder, gpu_chain), 5);
  ASSERT_EQ(router_->workers().Get("prefill-b-gpu")->spec.kv_numerics, "cuda-test");

  auto out = backend_->Complete(Request(prompt), [](const router::TokenEvent&) { return true; });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(backend_->last_trace().prefill_worker, "prefill-b-gpu");
  EXPECT_EQ(gpu->calls.load(), 1);
  EXPECT_EQ(cpu->calls.load(), 0);

  // A prompt whose blocks the store does not hold under any label goes by id, to the CPU worker.
  out = backend_->Complete(Request(Prompt(6 * kBlockTokens + 1, 700)),
                           [](const router::TokenEvent&) { return true; });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(backend_->last_trace().prefill_worker, "prefill-a-cpu");
  EXPECT_EQ(cpu->calls.load(), 1);
  // Two placements; of their 14 prompt blocks (7 each, the last partial) the kvstore held 5.
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("oscarkv_router_placements_total{result=\"ok\"} 2"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("oscarkv_router_prefix_blocks_matched_total 5"), std::string::npos);
  EXPECT_NE(metrics.find("oscarkv_router_prefix_blocks_requested_total 14"), std::string::npos);
}

TEST_F(PlacedBackendTest, HoldsRouterSideLoadWhileRunningAndRecordsStoredKeys) {
  AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  FakeDecode* d = AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  AddWorker<FakeDecode>("kvstore-0", cv1::WORKER_ROLE_KVSTORE);  // only its registration matters
  absl::Notification release;
  d->hold = &release;
  const std::vector<int32_t> prompt = Prompt(2 * kBlockTokens + 2);
  std::thread run([&] {
    auto out = backend_->Complete(Request(prompt), [](const router::TokenEvent&) { return true; });
    EXPECT_TRUE(out.ok()) << out.status();
  });
  ASSERT_TRUE(d->generating.WaitForNotificationWithTimeout(absl::Seconds(5)));
  // Prefill finished: its load is released; the decode worker's is held.
  EXPECT_EQ(router_->workers().Get("prefill-0")->router_active_requests, 0);
  EXPECT_EQ(router_->workers().Get("decode-0")->router_active_requests, 1);
  EXPECT_GT(router_->workers().Get("decode-0")->router_decode_blocks, 0);
  release.Notify();
  run.join();
  EXPECT_EQ(router_->workers().Get("decode-0")->router_active_requests, 0);
  EXPECT_EQ(router_->workers().Get("decode-0")->router_decode_blocks, 0);
  // The prefill's published keys are credited to the kvstore.
  const auto chain = kvformat::ComputeBlockKeys(KeyParams(), std::span<const int32_t>(prompt));
  EXPECT_EQ(router_->prefix_index().MatchedBlocks(router::kStoreHolder, chain), 2);
}

// The prefill publishes to the kvstore unless the registry has seen the registered kvstore go
// silent (a hung store would hold every prefill for its publish deadline). With no kvstore
// registered the router cannot tell, and the prefill's own configuration decides.
TEST_F(PlacedBackendTest, PublishesToTheKvstoreUnlessTheRegistryHasSeenItGoSilent) {
  FakePrefill* p = AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  auto run = [&] {
    auto out =
        backend_->Complete(Request(Prompt(5)), [](const router::TokenEvent&) { return true; });
    EXPECT_TRUE(out.ok()) << out.status();
    return p->publish.load();
  };
  EXPECT_TRUE(run()) << "no kvstore registered";
  AddWorker<FakeDecode>("kvstore-0", cv1::WORKER_ROLE_KVSTORE);
  EXPECT_TRUE(run()) << "healthy kvstore";
  workers_.back()->registration->Stop(/*deregister=*/false);  // heartbeats stop
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (router_->workers().Get("kvstore-0")->health == router::WorkerHealth::kHealthy &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_NE(router_->workers().Get("kvstore-0")->health, router::WorkerHealth::kHealthy);
  EXPECT_FALSE(run()) << "silent kvstore";
}

TEST_F(PlacedBackendTest, NoDecodeWorkerIsUnavailableAndHttp503) {
  AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  EXPECT_FALSE(backend_->Ready());
  auto out = backend_->Complete(Request(Prompt(5)), [](const router::TokenEvent&) { return true; });
  ASSERT_TRUE(absl::IsUnavailable(out.status())) << out.status();
  EXPECT_NE(out.status().message().find("no healthy decode worker"), std::string::npos)
      << out.status();

  auto r = PostCompletion();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_NE(r->body.find("no healthy decode worker"), std::string::npos) << r->body;
  httplib::Client c("127.0.0.1", router_->http_port());
  auto ready = c.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(Metrics().find("oscarkv_router_placements_total{result=\"failed\"} 2"),
            std::string::npos);
}

TEST_F(PlacedBackendTest, BusyPrefillWorkerIsRetriedUntilItTakesTheRequest) {
  FakePrefill* p = AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  p->busy.store(3);
  int tokens = 0;
  auto out = backend_->Complete(Request(Prompt(5)), [&](const router::TokenEvent&) {
    ++tokens;
    return true;
  });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->completion_tokens, 3);
  EXPECT_EQ(tokens, 3);
  EXPECT_EQ(p->calls.load(), 4);  // three busy answers, then the prefill
  EXPECT_NE(Metrics().find("oscarkv_router_placements_total{result=\"ok\"} 1"),
            std::string::npos)
      << "one placement however many tries";
  EXPECT_EQ(router_->workers().Get("prefill-0")->router_active_requests, 0);
  EXPECT_EQ(router_->workers().Get("decode-0")->router_active_requests, 0);
}

TEST_F(PlacedBackendTest, BusyWorkerIsLeftOutWhileAnotherPrefillWorkerCanTakeTheRequest) {
  FakePrefill* busy = AddWorker<FakePrefill>("prefill-busy", cv1::WORKER_ROLE_PREFILL);
  FakePrefill* free = AddWorker<FakePrefill>("prefill-free", cv1::WORKER_ROLE_PREFILL);
  AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  busy->busy.store(-1);
  for (int i = 0; i < 4; ++i) {
    auto out = backend_->Complete(Request(Prompt(5, 100 + 10 * i)),
                                  [](const router::TokenEvent&) { return true; });
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(backend_->last_trace().prefill_worker, "prefill-free");
  }
  EXPECT_EQ(free->calls.load(), 4);
  EXPECT_LE(busy->calls.load(), 4);  // asked at most once per request
}

TEST_F(PlacedBackendTest, PrefillBusyForLongerThanTheWaitIsResourceExhaustedAndHttp429) {
  FakePrefill* p = AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  FakeDecode* d = AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  p->busy.store(-1);
  const std::string body = ExpectGivenUpAfterTheBusyWait(p->calls, "no prefill slot in");
  EXPECT_NE(body.find("prefill worker busy"), std::string::npos) << body;
  EXPECT_EQ(d->starts.load(), 0);
}

// A decode worker whose KV pool is full (the sequences it holds may grow to its capacity) is
// asked again until generations there end and free room, instead of the request failing with
// 429 after its prefill; with another decode worker that has room, that one takes the sequence.
TEST_F(PlacedBackendTest, AFullDecodeWorkerIsWaitedForOrLeftOutForOneWithRoom) {
  AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  FakeDecode* d = AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  d->full.store(3);
  auto out = backend_->Complete(Request(Prompt(5)), [](const router::TokenEvent&) { return true; });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->completion_tokens, 3);
  EXPECT_EQ(d->starts.load(), 4);

  FakeDecode* roomy = AddWorker<FakeDecode>("decode-1", cv1::WORKER_ROLE_DECODE);
  d->full.store(-1);
  d->starts.store(0);
  for (int i = 0; i < 3; ++i) {
    out = backend_->Complete(Request(Prompt(5, 50 + 10 * i)),
                             [](const router::TokenEvent&) { return true; });
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(backend_->last_trace().decode_worker, "decode-1");
  }
  EXPECT_EQ(roomy->starts.load(), 3);
  EXPECT_LE(d->starts.load(), 3);  // asked at most once per request
}

TEST_F(PlacedBackendTest, DecodeFullForLongerThanTheWaitIsResourceExhaustedAndHttp429) {
  AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  FakeDecode* d = AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  d->full.store(-1);
  ExpectGivenUpAfterTheBusyWait(d->starts, "no decode worker had room in");
}

// A generation its decode worker cuts off resumes on another: the prompt and the tokens delivered
// but the last are prefilled, the last is fed as the first token with the earlier ones beside
// it, and the rest of max_tokens is generated there; the consumer sees one completion.
TEST_F(PlacedBackendTest, AGenerationCutOffResumesOnAnotherDecodeWorker) {
  FakePrefill* p = AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  FakeDecode* cut = AddWorker<FakeDecode>("decode-a", cv1::WORKER_ROLE_DECODE);
  FakeDecode* other = AddWorker<FakeDecode>("decode-b", cv1::WORKER_ROLE_DECODE);
  cut->cut_after.store(2);
  std::vector<int32_t> got;
  const std::vector<int32_t> prompt = Prompt(5);
  auto out =
      backend_->Complete(Request(prompt, /*max_tokens=*/6), [&](const router::TokenEvent& e) {
        got.push_back(e.token_id);
        return true;
      });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->completion_tokens, 6);
  EXPECT_EQ(got, (std::vector<int32_t>{7, 8, 9, 8, 9, 10}));  // 7 from the prefill
  EXPECT_EQ(backend_->last_trace().decode_worker, "decode-b");
  EXPECT_EQ(p->calls.load(), 2);
  std::vector<int32_t> resumed_prompt = prompt;
  resumed_prompt.insert(resumed_prompt.end(), {7, 8});
  {
    std::lock_guard<std::mutex> lock(p->mu);
    EXPECT_EQ(p->last_ids, resumed_prompt);
  }
  std::lock_guard<std::mutex> lock(other->mu);
  EXPECT_EQ(other->last_generate.first_token(), 9u);
  EXPECT_EQ(std::vector<uint32_t>(other->last_generate.earlier_output_token_ids().begin(),
                                  other->last_generate.earlier_output_token_ids().end()),
            (std::vector<uint32_t>{7, 8}));
  EXPECT_EQ(other->last_generate.max_new_tokens(), 3u);
  EXPECT_NE(Metrics().find("oscarkv_router_resumed_generations_total{result=\"ok\"} 1"),
            std::string::npos)
      << Metrics();
}

// Every completion ends its turn on the decode worker, releasing the sequence.
TEST_F(PlacedBackendTest, EveryCompletionReleasesItsSequence) {
  AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  FakeDecode* d = AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  auto out = backend_->Complete(Request(Prompt(5)), [](const router::TokenEvent&) { return true; });
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(d->end_turns.load(), 1);
  EXPECT_EQ(d->released.load(), 1);
}

// A consumer that leaves while its request waits for a prefill slot ends the wait: the request
// is not sent later, when a slot frees, to compute for nobody.
TEST_F(PlacedBackendTest, AConsumerThatLeavesEndsTheWaitForABusyPrefillWorker) {
  FakePrefill* p = AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  FakeDecode* d = AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  p->busy.store(-1);
  router::CompletionRequest r = Request(Prompt(5));
  const absl::Time t0 = absl::Now();
  const absl::Time gone = t0 + absl::Milliseconds(150);
  r.cancelled = [gone] { return absl::Now() >= gone; };
  auto out = backend_->Complete(r, [](const router::TokenEvent&) { return true; });
  EXPECT_TRUE(absl::IsCancelled(out.status())) << out.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(kBusyWaitSeconds) / 2) << "not the whole wait";
  const int calls = p->calls.load();
  p->busy.store(0);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(p->calls.load(), calls) << "no try after the consumer left";
  EXPECT_EQ(d->starts.load(), 0);
}

TEST_F(PlacedBackendTest, TheDeadlineCapsTheWaitForABusyPrefillWorker) {
  FakePrefill* p = AddWorker<FakePrefill>("prefill-0", cv1::WORKER_ROLE_PREFILL);
  AddWorker<FakeDecode>("decode-0", cv1::WORKER_ROLE_DECODE);
  p->busy.store(-1);
  router::CompletionRequest r = Request(Prompt(5));
  r.deadline = absl::Now() + absl::Milliseconds(200);
  const absl::Time t0 = absl::Now();
  auto out = backend_->Complete(r, [](const router::TokenEvent&) { return true; });
  // Busy to the end (429), or, on a loaded machine, the deadline lands inside an attempt's RPC
  // (504): either way the wait stopped at the deadline.
  ASSERT_TRUE(absl::IsResourceExhausted(out.status()) || absl::IsDeadlineExceeded(out.status()))
      << out.status();
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(700));
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// The backend over a WorkerRegistry whose clock the test moves; workers are real gRPC servers
// that the test registers and heartbeats directly (no registration client, so nothing but the
// test decides when a heartbeat arrives).
class RegistryChannelsTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kInterval = absl::Seconds(1);

  RegistryChannelsTest()
      : registry_(router::WorkerRegistryOptions{.heartbeat_interval = kInterval,
                                                .suspect_after_missed = 1,
                                                .dead_after_missed = 3,
                                                .now = [this] { return now_; }}),
        policy_(router::CostPlacementOptions{.block_tokens = kBlockTokens}) {}

  void SetUp() override {
    tokenizer_ = model::Tokenizer::CreateEmpty();
    WorkerBackendOptions o;
    o.model_id = "fake-model";
    o.registry = RegistryPlacement{.workers = &registry_,
                                   .prefix_index = &index_,
                                   .policy = &policy_,
                                   .key_params = KeyParams()};
    auto b = WorkerCompletionBackend::Create(o, tokenizer_.get());
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = *std::move(b);
  }

  void TearDown() override {
    for (auto& s : servers_) s->Shutdown(std::chrono::milliseconds(0));
  }

  // Starts a fake worker's gRPC server and registers it under `id`; returns its address.
  template <typename Fake>
  std::string Serve(const std::string& id, router::WorkerRole role, Fake** fake_out) {
    auto fake = std::make_unique<Fake>();
    *fake_out = fake.get();
    auto server = rpc::ServerRunner::Start({.listen_address = "127.0.0.1:0"}, {fake.get()});
    EXPECT_TRUE(server.ok()) << server.status();
    const std::string address = (*server)->dial_address();
    services_.push_back(std::move(fake));
    servers_.push_back(*std::move(server));
    EXPECT_TRUE(
        registry_.Register({.id = id, .role = role, .address = address, .capacity = 4}).ok());
    return address;
  }

  // Moves the clock by `d`; the workers in `alive` heartbeat at the new time.
  void Advance(absl::Duration d, const std::vector<std::string>& alive) {
    now_ += d;
    for (const std::string& id : alive) EXPECT_TRUE(registry_.Heartbeat(id, {}).ok()) << id;
  }

  absl::StatusOr<router::CompletionOutcome> Run() {
    router::CompletionRequest r;
    r.request_id = "cmpl-channels";
    r.model = "fake-model";
    r.prompt_token_ids = Prompt(2 * kBlockTokens);
    r.max_tokens = 3;
    r.codec = "oscar";
    r.deadline = absl::Now() + absl::Seconds(10);
    return backend_->Complete(r, [](const router::TokenEvent&) { return true; });
  }

  absl::Time now_ = absl::UnixEpoch() + absl::Hours(1);
  router::WorkerRegistry registry_;
  router::PrefixIndex index_;
  router::CostPlacementPolicy policy_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<WorkerCompletionBackend> backend_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::vector<std::unique_ptr<rpc::ServerRunner>> servers_;
};

TEST_F(RegistryChannelsTest, ExpiredWorkerLosesItsChannelAndRequestsFailOver) {
  FakePrefill* pf = nullptr;
  FakeDecode* a = nullptr;
  FakeDecode* b = nullptr;
  const std::string pf_addr = Serve("prefill-0", router::WorkerRole::kPrefill, &pf);
  const std::string a_addr = Serve("decode-a", router::WorkerRole::kDecode, &a);
  const std::string b_addr = Serve("decode-b", router::WorkerRole::kDecode, &b);

  // decode-a wins the tie and serves; the backend now holds its channel.
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(backend_->last_trace().decode_worker, "decode-a");
  EXPECT_EQ(a->starts.load(), 1);
  EXPECT_EQ(backend_->cached_channel_addresses(), Sorted({pf_addr, a_addr})) << "a=" << a_addr;

  // One and a half intervals without its heartbeat (one missed): decode-a is suspect, not placed
  // on, channel kept.
  Advance(kInterval * 3 / 2, {"prefill-0", "decode-b"});
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(backend_->last_trace().decode_worker, "decode-b");
  EXPECT_EQ(backend_->cached_channel_addresses().size(), 3u);

  // Three and a half intervals (three missed): decode-a is dead; the next placement drops its
  // channel and uses decode-b.
  Advance(2 * kInterval, {"prefill-0", "decode-b"});
  ASSERT_EQ(registry_.Get("decode-a")->health, router::WorkerHealth::kDead);
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(backend_->last_trace().decode_worker, "decode-b");
  EXPECT_EQ(backend_->cached_channel_addresses(), Sorted({pf_addr, b_addr})) << "b=" << b_addr;
  EXPECT_EQ(a->starts.load(), 1);
  EXPECT_EQ(b->starts.load(), 2);

  // decode-b expires too: no decode worker is left, a clear kUnavailable, and its channel goes.
  Advance(kInterval * 7 / 2, {"prefill-0"});
  auto out = Run();
  ASSERT_TRUE(absl::IsUnavailable(out.status())) << out.status();
  EXPECT_NE(out.status().message().find("no healthy decode worker"), std::string::npos)
      << out.status();
  EXPECT_EQ(backend_->cached_channel_addresses(), Sorted({pf_addr}));
  EXPECT_EQ(b->starts.load(), 2);
  EXPECT_EQ(pf->calls.load(), 3);
}

TEST_F(RegistryChannelsTest, ReRegisteredWorkerIsReachedOverAFreshChannel) {
  FakePrefill* pf = nullptr;
  FakeDecode* old_decode = nullptr;
  FakeDecode* new_decode = nullptr;
  const std::string pf_addr = Serve("prefill-0", router::WorkerRole::kPrefill, &pf);
  const std::string old_addr = Serve("decode-0", router::WorkerRole::kDecode, &old_decode);
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(old_decode->starts.load(), 1);

  // The worker restarts on another port and registers again under the same id, once the old
  // entry has missed a heartbeat (before that, the id belongs to a live worker).
  Advance(kInterval * 3 / 2, {"prefill-0"});
  const std::string new_addr = Serve("decode-0", router::WorkerRole::kDecode, &new_decode);
  ASSERT_NE(new_addr, old_addr);
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(backend_->last_trace().decode_worker, "decode-0");
  EXPECT_EQ(new_decode->starts.load(), 1);
  EXPECT_EQ(old_decode->starts.load(), 1);
  EXPECT_EQ(backend_->cached_channel_addresses(), Sorted({pf_addr, new_addr}));

  // Deregistered: the next placement fails with kUnavailable and drops the channel.
  ASSERT_TRUE(registry_.Deregister("decode-0").ok());
  EXPECT_TRUE(absl::IsUnavailable(Run().status()));
  EXPECT_EQ(backend_->cached_channel_addresses(), Sorted({pf_addr}));
}

}  // namespace
}  // namespace oscarkv::router_backend
