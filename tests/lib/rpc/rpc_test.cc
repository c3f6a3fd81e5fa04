// Server runner, channel factory and status conversion over a real loopback socket.
#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "lib/rpc/channel_factory.h"
#include "lib/rpc/server_runner.h"
#include "lib/rpc/status_conversion.h"
#include "oscarkv/kvstore/v1/kvstore.grpc.pb.h"

namespace oscarkv::rpc {
namespace {

namespace kv = ::oscarkv::kvstore::v1;

// Answers Stats with a fixed block count, Commit with the status it is told to return, and
// Reserve after sleeping (to exercise deadlines and drain).
class TestService final : public kv::KvStoreService::Service {
 public:
  grpc::Status Stats(grpc::ServerContext*, const kv::StatsRequest*,
                     kv::StatsResponse* response) override {
    response->set_blocks(42);
    return grpc::Status::OK;
  }
  grpc::Status Commit(grpc::ServerContext*, const kv::CommitRequest*,
                      kv::CommitResponse*) override {
    return ToGrpcStatus(absl::FailedPreconditionError("not reserved"));
  }
  grpc::Status Reserve(grpc::ServerContext*, const kv::ReserveRequest*,
                       kv::ReserveResponse*) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms.load()));
    finished_sleeps.fetch_add(1);
    return grpc::Status::OK;
  }
  std::atomic<int> sleep_ms{300};
  std::atomic<int> finished_sleeps{0};
};

TEST(StatusConversion, RoundTripsEveryCode) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status original(static_cast<absl::StatusCode>(code), "msg" + std::to_string(code));
    const grpc::Status g = ToGrpcStatus(original);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(ToAbslStatus(g), original);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(ToAbslStatus(grpc::Status::OK).ok());
}

TEST(ServerRunner, PortZeroPicksAPortAndServesCalls) {
  TestService service;
  auto runner = ServerRunner::Start({.listen_address = "127.0.0.1:0"}, {&service});
  ASSERT_TRUE(runner.ok()) << runner.status();
  ASSERT_GT((*runner)->port(), 0);
  auto channel = Connect((*runner)->dial_address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = kv::KvStoreService::NewStub(*channel);

  auto context = MakeContext(std::chrono::seconds(5));
  kv::StatsResponse stats;
  ASSERT_TRUE(stub->Stats(context.get(), {}, &stats).ok());
  EXPECT_EQ(stats.blocks(), 42u);

  auto commit_context = MakeContext(std::chrono::seconds(5));
  kv::CommitResponse commit;
  const absl::Status status = ToAbslStatus(stub->Commit(commit_context.get(), {}, &commit));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), "not reserved");
}

TEST(ServerRunner, MalformedAddressIsInvalidArgument) {
  TestService service;
  auto runner = ServerRunner::Start({.listen_address = "no-port"}, {&service});
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChannelFactory, DeadlineExceededOnSlowCall) {
  TestService service;
  service.sleep_ms = 500;
  auto runner = ServerRunner::Start({.listen_address = "127.0.0.1:0"}, {&service});
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto stub = kv::KvStoreService::NewStub(MakeChannel((*runner)->dial_address()));
  auto context = MakeContext(std::chrono::milliseconds(50));
  kv::ReserveResponse response;
  const absl::Status status = ToAbslStatus(stub->Reserve(context.get(), {}, &response));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(ChannelFactory, ConnectToClosedPortIsUnavailable) {
  auto channel = Connect("127.0.0.1:1", {.connect_timeout = std::chrono::milliseconds(200)});
  EXPECT_EQ(channel.status().code(), absl::StatusCode::kUnavailable);
}

TEST(ServerRunner, ShutdownDrainsInFlightCalls) {
  TestService service;
  service.sleep_ms = 300;
  auto runner = ServerRunner::Start({.listen_address = "127.0.0.1:0"}, {&service});
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto channel = Connect((*runner)->dial_address());
  ASSERT_TRUE(channel.ok());
  auto stub = kv::KvStoreService::NewStub(*channel);
  grpc::Status call_status;
  std::thread caller([&] {
    auto context = MakeContext(std::chrono::seconds(5));
    kv::ReserveResponse response;
    call_status = stub->Reserve(context.get(), {}, &response);
  });
  // Wait until the call is inside the handler, then drain with a deadline longer than it.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  (*runner)->Shutdown(std::chrono::seconds(3));
  (*runner)->Wait();
  caller.join();
  EXPECT_TRUE(call_status.ok()) << call_status.error_message();
  EXPECT_EQ(service.finished_sleeps.load(), 1);
}

}  // namespace
}  // namespace oscarkv::rpc
