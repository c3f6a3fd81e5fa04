// WaitCancellable over a real loopback gRPC server: a call whose caller gives up is cancelled on
// the server (ServerContext::IsCancelled), one nobody cancels completes normally.
#include "lib/rpc/cancellable_call.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "lib/rpc/channel_factory.h"
#include "lib/rpc/server_runner.h"
#include "oscarkv/kvstore/v1/kvstore.grpc.pb.h"

namespace oscarkv::rpc {
namespace {

namespace kv = ::oscarkv::kvstore::v1;

// Reserve works for up to `work_ms` in 10 ms steps, stopping early when its call is cancelled.
class PatientService final : public kv::KvStoreService::Service {
 public:
  grpc::Status Reserve(grpc::ServerContext* ctx, const kv::ReserveRequest*,
                       kv::ReserveResponse*) override {
    for (int ms = 0; ms < work_ms.load(); ms += 10) {
      if (ctx->IsCancelled()) {
        saw_cancel.store(true);
        return grpc::Status(grpc::StatusCode::CANCELLED, "stopped");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    finished.fetch_add(1);
    return grpc::Status::OK;
  }
  std::atomic<int> work_ms{5000};
  std::atomic<bool> saw_cancel{false};
  std::atomic<int> finished{0};
};

class CancellableCallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto runner = ServerRunner::Start({.listen_address = "127.0.0.1:0"}, {&service_});
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = *std::move(runner);
    stub_ = kv::KvStoreService::NewStub(MakeChannel(runner_->dial_address()));
  }
  grpc::Status Reserve(const std::function<bool()>& cancelled) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    kv::ReserveRequest request;
    kv::ReserveResponse response;
    return WaitCancellable(
        &ctx,
        [&](std::function<void(grpc::Status)> done) {
          stub_->async()->Reserve(&ctx, &request, &response, std::move(done));
        },
        cancelled);
  }

  PatientService service_;
  std::unique_ptr<ServerRunner> runner_;
  std::unique_ptr<kv::KvStoreService::Stub> stub_;
};

TEST_F(CancellableCallTest, ACallerThatGivesUpCancelsTheServersWork) {
  const absl::Time t0 = absl::Now();
  const absl::Time give_up = t0 + absl::Milliseconds(200);
  const grpc::Status s = Reserve([&] { return absl::Now() >= give_up; });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3)) << "not after the server's 5 s of work";
  for (int i = 0; i < 300 && !service_.saw_cancel.load(); ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(service_.saw_cancel.load()) << "the server should have seen the cancellation";
  EXPECT_EQ(service_.finished.load(), 0);
}

TEST_F(CancellableCallTest, CallsNobodyCancelsCompleteNormally) {
  service_.work_ms = 150;
  int asked = 0;
  EXPECT_TRUE(Reserve([&] {
                ++asked;
                return false;
              }).ok());
  EXPECT_GE(asked, 1) << "asked while the call ran";
  EXPECT_TRUE(Reserve(nullptr).ok()) << "no check at all";
  EXPECT_EQ(service_.finished.load(), 2);
  EXPECT_FALSE(service_.saw_cancel.load());
}

}  // namespace
}  // namespace oscarkv::rpc
